"""A tiny sweep end to end: sweep.py runs train.py several times (two at a time), skips what is finished, and
fit_law.py turns the run folders into fit.json, summary.md and the plots."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONUNBUFFERED='1')
ENV.pop('OMP_NUM_THREADS', None)      # let sweep.py choose: cores // jobs


def tiny_corpus(folder):
    lines = []
    for i in range(1500):
        lines.append(f"line {i % 37}: the quick brown fox {'jumps' if i % 3 else 'sleeps'} over dog {i % 11}.")
        if i % 50 == 49:
            lines.append('')
    path = os.path.join(folder, 'corpus.txt')
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    data = os.path.join(folder, 'data')
    subprocess.run([sys.executable, os.path.join(ROOT, 'data', 'shakespeare', 'prepare.py'), f'--input={path}',
                    f'--out_dir={data}'], check=True, capture_output=True, cwd=ROOT)
    return data


SWEEP = '''
name = 'tiny'
jobs = 2
common = dict(data_dir={data!r}, n_embd=32, n_head=2, block_size=32, batch_size=4, max_iters=6, eval_interval=3,
              eval_tokens=512, warmup_iters=2, device='cpu', learning_rate=3e-3)
runs = [dict(name='dense_L2', model='dense', n_layer=2),
        dict(name='dense_L3', model='dense', n_layer=3),
        dict(name='xmod_s4_L4', model='xmod', stride=4, n_layer=4, dense_layers=2),
        dict(name='dense_L2_seed1', model='dense', n_layer=2, seed=1),
        dict(name='xmod_s4_L4_seed1', model='xmod', stride=4, n_layer=4, dense_layers=2, seed=1)]
'''


def test_tiny_sweep_runs_resumes_and_fits(tmp_path):
    data = tiny_corpus(str(tmp_path))
    sweep_file = tmp_path / 'tiny.py'
    sweep_file.write_text(SWEEP.format(data=data))
    runs = tmp_path / 'runs'
    cmd = [sys.executable, os.path.join(ROOT, 'sweep.py'), str(sweep_file), f'--out={runs}']
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    names = sorted(os.listdir(runs))
    assert names == ['dense_L2', 'dense_L2_seed1', 'dense_L3', 'xmod_s4_L4', 'xmod_s4_L4_seed1']
    for name in names:
        with open(runs / name / 'run.json') as f:
            assert json.load(f)['finished'] is True
    # a second call finds everything finished and runs nothing
    mtime = os.stat(runs / 'dense_L2' / 'log.csv').st_mtime_ns
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
    assert p.returncode == 0 and '5 finished, 0 to run' in p.stdout
    assert os.stat(runs / 'dense_L2' / 'log.csv').st_mtime_ns == mtime
    # the fit goes end to end
    out = tmp_path / 'law'
    p = subprocess.run([sys.executable, os.path.join(ROOT, 'fit_law.py'), str(runs), f'--out={out}',
                        '--bootstrap=20', '--skip_joint'], capture_output=True, text=True, cwd=ROOT, env=ENV,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out / 'fit.json') as f:
        fit = json.load(f)
    assert {'dense', 'relative', 'metrics'} <= set(fit)
    assert (out / 'summary.md').exists()
    pngs = {'loss_vs_flops', 'loss_vs_params', 'pred_vs_obs', 'delta_vs_logrho', 'ablations', 'training_curves'}
    assert {f[:-4] for f in os.listdir(out) if f.endswith('.png')} >= pngs


WSD_SWEEP = '''
name = 'wsd'
jobs = 2
common = dict(data_dir={data!r}, n_embd=32, n_head=2, block_size=32, batch_size=4, eval_interval=4, eval_tokens=512,
              warmup_iters=2, device='cpu', learning_rate=3e-3, lr_schedule='wsd', model='xmod', dense_layers=2,
              stride=4, n_layer=4)
import os
runs = [dict(name='stable', max_iters=20, save_steps='8'), dict(name='alone10', max_iters=10)]
if os.path.exists({runs!r} + '/stable/ckpt_8.pt'):             # the branch joins once its step is kept
    runs.append(dict(name='branch10', max_iters=10, init_from={runs!r} + '/stable/ckpt_8.pt'))
'''


def test_sweep_runs_a_wsd_branch(tmp_path):
    """A run with its own init_from (a kept step of another run) keeps it, and a run the sweep file lists only once
    another has kept its step joins the same call (the file is read again before each start): the branch of the
    stable run at step 8, the cooldown start of a 10-step budget, logs the separate 10-step run's final losses. A
    second call runs nothing."""
    data = tiny_corpus(str(tmp_path))
    runs = tmp_path / 'runs'
    sweep_file = tmp_path / 'wsd.py'
    sweep_file.write_text(WSD_SWEEP.format(data=data, runs=str(runs)))
    cmd = [sys.executable, os.path.join(ROOT, 'sweep.py'), str(sweep_file), f'--out={runs}']
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    info = {n: json.load(open(runs / n / 'run.json')) for n in ('branch10', 'alone10')}
    assert info['branch10']['branch_of']['step'] == 8 and info['branch10']['final'] == info['alone10']['final']
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
    assert p.returncode == 0 and '3 finished, 0 to run' in p.stdout
