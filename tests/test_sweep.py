"""A tiny sweep end to end: sweeps/sweep.py runs train.py several times (two at a time), skips what is finished, and
fit_law.py turns the run folders into fit.json, summary.md and the plots. At scale: --commands and the Slurm array
script, --gpus and --per_gpu (through the environment each child gets), a run another trainer holds."""
import concurrent.futures
import glob
import json
import os
import shlex
import subprocess
import sys
import threading
import time

import pytest

import fit_law
import sweep
from conftest import in_process
from data.shakespeare import prepare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONUNBUFFERED='1')
ENV.pop('OMP_NUM_THREADS', None)      # let sweeps/sweep.py choose: cores // jobs


def in_this_process(main, *args):
    """The runner (and prepare.py, fit_law.py) in this process, OMP_NUM_THREADS unset as in ENV."""
    return in_process(main, *args, omp=None)


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
    assert in_this_process(prepare.main, f'--input={path}', f'--out_dir={data}').returncode == 0
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
    cmd = [sys.executable, os.path.join(ROOT, 'sweeps/sweep.py'), str(sweep_file), f'--out={runs}']
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    names = sorted(os.listdir(runs))
    assert names == ['dense_L2', 'dense_L2_seed1', 'dense_L3', 'xmod_s4_L4', 'xmod_s4_L4_seed1']
    for name in names:
        with open(runs / name / 'run.json') as f:
            assert json.load(f)['finished'] is True
    # a second call finds everything finished and runs nothing (this one, and the fit, in this process)
    mtime = os.stat(runs / 'dense_L2' / 'log.csv').st_mtime_ns
    p = in_this_process(sweep.main, *cmd[2:])
    assert p.returncode == 0 and '5 finished, 0 to run' in p.stdout
    assert os.stat(runs / 'dense_L2' / 'log.csv').st_mtime_ns == mtime
    # the fit goes end to end
    out = tmp_path / 'law'
    p = in_this_process(fit_law.main, str(runs), f'--out={out}', '--bootstrap=20')
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out / 'fit.json') as f:
        fit = json.load(f)
    assert {'dense', 'relative', 'metrics'} <= set(fit)
    assert (out / 'summary.md').exists()
    pngs = {'loss_vs_params', 'pred_vs_obs', 'delta_vs_logrho'}
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
    args = [str(sweep_file), f'--out={runs}']
    p = in_this_process(sweep.main, *args)           # the runner in this process, the runs its subprocesses
    assert p.returncode == 0, p.stdout + p.stderr
    info = {n: json.load(open(runs / n / 'run.json')) for n in ('branch10', 'alone10')}
    assert info['branch10']['branch_of']['step'] == 8 and info['branch10']['final'] == info['alone10']['final']
    p = in_this_process(sweep.main, *args)
    assert p.returncode == 0 and '3 finished, 0 to run' in p.stdout


CLUSTER_SWEEP = '''
name = 'cluster'
jobs = 1
common = dict(data_dir={data!r}, n_embd=32, n_head=2, block_size=32, batch_size=4, max_iters=4, eval_interval=2,
              eval_tokens=512, warmup_iters=2, device='cpu')
runs = [dict(name=f'dense_seed{{s}}', model='dense', n_layer=2, seed=s) for s in range(6)]
'''


def test_commands_and_the_slurm_array_script(tmp_path):
    """--commands prints one resumable train.py line per unfinished run and nothing else; sweeps/slurm_array.sh runs
    the line of its array task from the repository root (python on PATH, as on a cluster node); that run is then
    finished, so the next --commands has one line fewer; --dry_run counts each run's FLOPs as run.json does. The
    runner goes in this process, the Slurm script in its own."""
    data = tiny_corpus(str(tmp_path))
    sweep_file = tmp_path / 'cluster.py'
    sweep_file.write_text(CLUSTER_SWEEP.format(data=data))
    runs = tmp_path / 'runs'
    cmd = [str(sweep_file), f'--out={runs}', '--commands']
    p = in_this_process(sweep.main, *cmd)
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and len(lines) == 6, p.stdout + p.stderr
    assert all(line.startswith('python train.py ') and line.endswith('--init_from=auto') and
               f"--out_dir={runs / f'dense_seed{s}'}" in line for s, line in enumerate(lines))
    (tmp_path / 'cmds.txt').write_text(p.stdout)
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    # a script that execs this interpreter, not a symlink to it: a venv's python started through a link in another
    # folder does not find the venv's pyvenv.cfg and runs the base interpreter, without the venv's packages
    (bindir / 'python').write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (bindir / 'python').chmod(0o755)
    here = subprocess.run(['python', '-c', 'import sys; print(sys.prefix)'], capture_output=True, text=True,
                          env=dict(ENV, PATH=f"{bindir}:{ENV['PATH']}"), check=True).stdout.strip()
    assert here == sys.prefix          # the same environment (a venv's, where the tests run in one), with torch
    env = dict(ENV, SLURM_ARRAY_TASK_ID='2', SLURM_SUBMIT_DIR=ROOT, PATH=f"{bindir}:{ENV['PATH']}")
    p = subprocess.run(['bash', os.path.join(ROOT, 'sweeps', 'slurm_array.sh'), str(tmp_path / 'cmds.txt')],
                       capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(runs / 'dense_seed1' / 'run.json') as f:
        info = json.load(f)
    assert info['finished'] is True and sorted(os.listdir(runs)) == ['dense_seed1']
    p = in_this_process(sweep.main, *cmd)
    assert len(p.stdout.splitlines()) == 5 and 'dense_seed1 ' not in p.stdout + ' '
    p = in_this_process(sweep.main, *cmd[:-1], '--dry_run', '--flops_per_s=1e9')
    rows = {line.split()[1]: line.split() for line in p.stdout.splitlines() if line.startswith(('new', 'finished'))}
    per_run = 3 * info['flops_per_token'] * info['tokens_per_iter'] * info['n_iters']
    assert rows['dense_seed1'][:4] == ['finished', 'dense_seed1', f'{per_run:.3g}', 'FLOPs']
    assert f"FLOPs: {6 * per_run:.3g} in all, {5 * per_run:.3g} left" in p.stdout
    assert f"at 1e+09 FLOP/s, {5 * per_run / 1e9:.0f} s" in p.stdout       # seconds of work, said in seconds


def test_dry_run_needs_no_data_and_commands_print_floats_minimally(tmp_path, capsys):
    """The FLOPs follow from the config alone: without the dataset prepared, the vocabulary is GPTConfig's; the time
    is said in the unit that fits it; a computed float is printed as its shortest spelling (7.5e-05)."""
    sys.path.insert(0, ROOT)
    import sweep
    import xmod
    sweep_file = tmp_path / 'nodata.py'
    sweep_file.write_text("name = 'nodata'\ncommon = dict(dataset='no_such_data', max_iters=10, min_lr=0.001 * 0.075)"
                          "\nruns = [dict(name='a', model='dense')]\n")
    assert sweep.sweep([str(sweep_file), f'--out={tmp_path / "runs"}', '--dry_run', '--flops_per_s=1e9']) == 0
    out = capsys.readouterr().out
    fpt = xmod.flops_per_token(xmod.GPTConfig(model='dense', n_layer=4), 128, 16)
    total = 3 * fpt * 10 * 16 * 128
    assert f"FLOPs: {total:.3g} in all" in out and f"at 1e+09 FLOP/s, {total / 1e9 / 60:.0f} min" in out, out
    assert '--min_lr=7.5e-05 ' in out
    assert sweep.duration(14) == '14 s' and sweep.duration(3 * 3600) == '3.0 h'


def test_gpus_give_each_job_its_own_device(tmp_path, monkeypatch, capsys):
    """--gpus=3,5 --per_gpu=2: four jobs at a time, each child sees one GPU through CUDA_VISIBLE_DEVICES, never
    more than two children at once on a GPU; checked on the environment each child receives (the children are
    stand-ins that write a finished run.json), so no GPU is needed. A run another trainer holds is not started."""
    import run_folder
    import sweep
    sweep_file = tmp_path / 'g.py'
    sweep_file.write_text("name = 'g'\njobs = 1\ncommon = dict(device='cuda')\n"
                          "runs = [dict(name=f'r{i}', model='dense') for i in range(10)]\n")
    runs = tmp_path / 'runs'
    os.makedirs(runs / 'r7')
    held = run_folder.lock(str(runs / 'r7'), create=True)          # as a trainer elsewhere would hold it
    seen, lock, now = [], threading.Lock(), {'3': 0, '5': 0}
    most = {'3': 0, '5': 0}

    def child(cmd, env, **kw):
        gpu = env['CUDA_VISIBLE_DEVICES']
        with lock:
            now[gpu] += 1
            most[gpu] = max(most[gpu], now[gpu])
            seen.append(gpu)
        time.sleep(0.2)
        out = next(a for a in cmd if a.startswith('--out_dir='))[len('--out_dir='):]
        with open(os.path.join(out, 'run.json'), 'w') as f:
            json.dump({'finished': True}, f)
        with lock:
            now[gpu] -= 1
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(sweep.subprocess, 'run', child)
    try:
        assert sweep.sweep([str(sweep_file), f'--out={runs}', '--gpus=3,5', '--per_gpu=2']) == 0
    finally:
        os.close(held)
    out = capsys.readouterr().out
    assert '4 at a time on GPUs 3,5' in out
    assert sorted(seen) == ['3'] * 5 + ['5'] * 4 or sorted(seen) == ['3'] * 4 + ['5'] * 5
    assert most == {'3': 2, '5': 2}
    assert "r7: not started, another trainer is writing" in out
    assert not os.path.exists(runs / 'r7' / 'run.json')
    with pytest.raises(sweep.UserError, match='jobs follows'):
        sweep.sweep([str(sweep_file), '--gpus=0,1', '--jobs=3'])
    with pytest.raises(sweep.UserError, match='--per_gpu needs --gpus'):
        sweep.sweep([str(sweep_file), '--per_gpu=2'])


def test_regime_sweep_files():
    """The sweeps of the regimes (sweeps/study/cpu_code.py, cpu_context.py, cpu_tokens.py) as sweeps/sweep.py reads them: each
    lists every arm's seed-0 rate grid on its corpus, context and width (more runs once some finish: seeds, edges,
    pycode WSD runs, branches), names unique; the WSD runs go to 16M tokens and keep the steps where the 2, 4 and 8M
    cooldowns start (iteration 7812 of 2048 tokens is 16M; a cooldown is a budget's last 20%)."""
    import sweep
    load = lambda name: sweep.load_sweep(os.path.join(ROOT, 'sweeps', 'study', f'{name}.py'))
    code, context, tokens = load('cpu_code'), load('cpu_context'), load('cpu_tokens')
    grid = ('0.002', '0.004', '0.008')
    assert {f'{arm}_2M_pycode_lr{lr}' for arm in ('dense_L4_d128', 'xmod_s4_L12_D4') for lr in grid} <= {
        r['name'] for r in code['runs']}
    assert all((r['dataset'], r['block_size'], r['n_embd']) == ('pycode', 128, 128) for r in code['runs'])
    assert {f'{arm}_2M_T512_pycode_lr{lr}' for arm in ('dense_L4_d128', 'xmod_s4_Lauto_D4', 'xmod_s5_Lauto_D4')
            for lr in grid} <= {r['name'] for r in context['runs']}
    assert all((r['dataset'], r['block_size'], r['batch_size']) == ('pycode', 512, 4) for r in context['runs'])
    assert all(r['capacity'] == 0.125 and r['n_layer'] == 0 for r in context['runs'] if r['model'] == 'xmod')
    tune = {f'{arm}_pycode_lr{lr}' for arm in ('dense_L4_d64_2M', 'xmod_s4_Lauto_D4_2M_d64')
            for lr in ('0.004', '0.008', '0.016')}
    assert tune <= {r['name'] for r in tokens['runs']}
    stable = [r for r in tokens['runs'] if r.get('save_steps')]
    shakespeare = {r['name'] for r in stable if r['dataset'] == 'shakespeare'}
    assert shakespeare == {f'{arm}_16M{tag}_wsd_shakespeare_lr0.016{seed}' for arm, tag in
                           (('dense_L4_d64', ''), ('xmod_s4_Lauto_D4', '_d64')) for seed in ('', '_seed1', '_seed2')}
    assert all((r['max_tokens'], r['lr_schedule'], r['n_embd'], r['save_steps']) == (16_000_000, 'wsd', 64,
                                                                                     '782,1562,3125') for r in stable)



# every sweep file: what users run at sweeps/' top level, the study's in sweeps/study/ (not the runner, not the recipe)
SWEEP_FILES = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, 'sweeps', '*.py'))
                     + glob.glob(os.path.join(ROOT, 'sweeps', 'study', '*.py'))
                     if os.path.basename(p) not in ('sweep.py', 'recipe.py'))


# Runs each sweep file, or the runner on one, as `python FILE ARGS` does, in one interpreter (one torch import for
# them all): each starts with the interpreter's own sys.path, the file's folder first, and none of the repository's
# modules imported, so a file that relies on another's imports or on pytest's path fails here as it would alone.
# argv: a JSON list of [key, cwd, [file, *args]]; prints {key: [exit code, stdout, stderr tail]} as JSON.
AS_SCRIPTS = r'''
import contextlib, io, json, os, runpy, sys
base = [p for p in sys.path if p and os.path.abspath(p) != os.getcwd()]
jobs, root = json.loads(sys.argv[1]), os.path.abspath(sys.argv[2]) + os.sep
for key, cwd, (script, *args) in jobs:
    os.chdir(cwd)
    for m in [m for m, mod in sys.modules.items()
              if os.path.abspath(getattr(mod, '__file__', None) or os.sep).startswith(root)]:
        del sys.modules[m]
    sys.path[:] = [os.path.dirname(os.path.abspath(script))] + base
    sys.argv = [script, *args]
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name='__main__')
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception as e:
            code, _ = 1, err.write(f'{type(e).__name__}: {e}')
    print(json.dumps({key: [code, out.getvalue(), err.getvalue()[-500:]]}))
'''


def test_every_sweep_file_runs_itself(tmp_path):
    """`python sweeps/NAME.py --dry_run` hands the file and its arguments to the runner, sweeps/sweep.py (a dry run
    needs no data; --out keeps the committed results folder out of it), from any folder; for two files, one at each
    level, the same lines as the runner's. Those two run as their own processes from another folder; every file
    (those two again) and the runner on those two run as scripts one after another in one more process (AS_SCRIPTS:
    each mostly a Python start otherwise)."""
    args = ['--dry_run', f'--out={tmp_path}']
    alone = ('sweeps/gpu_small.py', 'sweeps/study/cpu_code.py')        # two of the quick ones
    jobs = [(path, str(tmp_path), [os.path.join(ROOT, path), *args]) for path in SWEEP_FILES]
    jobs += [(path + ' (runner)', ROOT, [os.path.join('sweeps', 'sweep.py'), path, *args]) for path in alone]
    cmds = [[sys.executable, os.path.join(ROOT, path), *args] for path in alone]
    cmds.append([sys.executable, '-c', AS_SCRIPTS, json.dumps(jobs), ROOT])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda cmd: subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path),
                                                         env=ENV, timeout=300), cmds))
    assert procs[-1].returncode == 0, procs[-1].stderr[-2000:]
    out = {k: v for line in procs[-1].stdout.splitlines() for k, v in json.loads(line).items()}
    assert sorted(out) == sorted(j[0] for j in jobs)
    for path in SWEEP_FILES:
        code, stdout, stderr = out[path]
        assert code == 0 and 'FLOPs:' in stdout, (path, code, stderr)
    for path, p in zip(alone, procs):
        assert p.returncode == 0 and 'FLOPs:' in p.stdout, (path, p.stderr[-500:])
        assert p.stdout == out[path][1] == out[path + ' (runner)'][1], path


def test_sweeps_take_train_defaults_from_its_config_block():
    """The runner and the studies check a run's overrides and count its FLOPs against train.py's defaults read from
    its config block (recipe.train_defaults), not by importing the training script: the same keys, order and
    values as train.DEFAULTS, and no sweep file imports train."""
    import recipe

    import train
    assert list(recipe.train_defaults().items()) == list(train.DEFAULTS.items())
    for path in SWEEP_FILES + ['sweeps/sweep.py', 'sweeps/recipe.py']:
        with open(os.path.join(ROOT, path)) as f:
            assert not any(line.split()[:2] in (['import', 'train'], ['from', 'train']) for line in f), path


@pytest.mark.parametrize('path', SWEEP_FILES)
def test_no_sweep_file_runs_another(path):
    """A sweep file takes what it shares with others from sweeps/recipe.py (or a study from the study beside it) by
    import: none runs another sweep file through runpy, which made the studies each other's libraries."""
    with open(os.path.join(ROOT, path)) as f:
        assert 'runpy' not in f.read()


def test_the_sweeps_readme_names_every_sweep_file():
    """sweeps/README.md says which sweep to run for what: every file at sweeps/' top level and every study is in it,
    and at most 8 script files sit at the top level, the recipe they share among them (what users run; the study's
    record is in study/; the GPU checklist is a tool, tools/gpu_check.sh)."""
    with open(os.path.join(ROOT, 'sweeps', 'README.md')) as f:
        readme = f.read()
    top = [n for n in os.listdir(os.path.join(ROOT, 'sweeps')) if n.endswith(('.py', '.sh'))]
    missing = [n for n in top + os.listdir(os.path.join(ROOT, 'sweeps', 'study')) if n.endswith(('.py', '.sh'))
               and n not in readme]
    assert not missing, missing
    assert len(top) <= 8, top
