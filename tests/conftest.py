"""
What more than one test file uses: pytest reads this file before the tests, so its fixtures (corpus) reach every
test file without an import, and a test file imports its helpers by name (`from conftest import TINY, run`). No
sys.path edits anywhere: pytest.ini's pythonpath puts the repository's root (and tutorial/) on the path.
"""
import contextlib
import csv
import io
import json
import os
import subprocess
import sys

import pytest
import torch

from xmod import GPTConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# -----------------------------------------------------------------------------------------------------------------
# train.py and sample.py as subprocesses (test_train.py, test_precision.py, test_routing_plot.py)

TRAIN, SAMPLE = os.path.join(ROOT, 'train.py'), os.path.join(ROOT, 'sample.py')
ENV = dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1')
# a tiny model and run: 10 iterations, an eval (and a checkpoint) every 5
TINY = ['--n_embd=32', '--n_head=2', '--block_size=32', '--batch_size=4', '--max_iters=10', '--eval_interval=5',
        '--eval_tokens=512', '--warmup_iters=2', '--log_interval=2']


def needs_devices(n):
    """A test of n training processes: where there are GPUs, train.py gives each process its own (cuda:LOCAL_RANK),
    so a machine with fewer GPUs than processes skips it. On a CPU-only machine it always runs (gloo)."""
    return pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < n,
                              reason=f'{n} processes need {n} GPUs here, this machine has fewer')


def run(script, *args, env=ENV, timeout=300):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)


def in_process(main, *args, omp='1'):
    """A script's command line run in this process, main(args) (train.main, sample.main, ...), as run() runs it in a
    subprocess: OMP_NUM_THREADS=omp (one thread, train.py's count whatever the load; None: unset, as test_sweep.py's
    ENV leaves it to sweeps/sweep.py), torch's thread count restored afterwards, stdout and stderr captured; a
    CompletedProcess. For the tests where the process itself (its start, a lock, a signal, torchrun) is not tested:
    it saves the interpreter and torch start of each call."""
    n, out, err = torch.get_num_threads(), io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if omp is None:
            mp.delenv('OMP_NUM_THREADS', raising=False)
        else:
            mp.setenv('OMP_NUM_THREADS', omp)
        try:
            rc = main(list(args))
        finally:
            torch.set_num_threads(n)
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def bench_main(argv):
    """bench.py's command line, for in_process (bench.py has no main of its own: run_main around bench.bench)."""
    import bench
    from configurator import run_main
    return run_main('bench.py', bench.bench, argv)


def read_log(out):
    with open(os.path.join(out, 'log.csv'), newline='') as f:
        return list(csv.DictReader(f))


def read_json(out):
    with open(os.path.join(out, 'run.json')) as f:
        return json.load(f)


def assert_bad_input(rc, err, *needles):
    """Exit code 2, exactly one line on stderr, no traceback, and the line says what is wrong."""
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and 'Traceback' not in err, err
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
    """train.bin, val.bin, meta.pkl of a tiny char corpus (~47k characters, 10% val), made by prepare.py."""
    from data.shakespeare.prepare import prepare
    folder = tmp_path_factory.mktemp('corpus')
    words = 'to be or not that is the question whether tis nobler in mind suffer slings arrows'.split()
    lines = [' '.join(words[(7 * i + 3 * j) % len(words)] for j in range(10)) for i in range(900)]
    text = '\n'.join(lines) + '\n'
    (folder / 'input.txt').write_text(text)
    prepare('char', input=str(folder / 'input.txt'), out_dir=str(folder / 'data'))
    return str(folder / 'data')


def assert_same_losses(one, two, keys, tol):
    rows1, rows2 = read_log(one), read_log(two)
    assert [x['step'] for x in rows1] == [x['step'] for x in rows2]
    for x, y in zip(rows1, rows2):
        for k in keys:
            if x[k]:
                assert abs(float(x[k]) - float(y[k])) < tol, (x['step'], k, x[k], y[k])


# -----------------------------------------------------------------------------------------------------------------
# tiny models of xmod.py (test_xmod.py, test_precision.py)

V = 48


def tiny(model, **kw):
    args = dict(model=model, n_layer=4, n_head=2, n_embd=32, block_size=32, vocab_size=V, stride=2, capacity=0.25)
    args.update(kw)
    return GPTConfig(**args)


def batch(B, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


# the (model, B, T, capacity, stride) cases of naive == fast, in float32 (test_xmod.py) and under autocast
CASES = [('mod', 2, 32, 0.25, 2), ('xmod', 3, 32, 0.125, 4), ('xmod', 2, 17, 0.5, 3), ('xmod', 1, 8, 1.0, 2),
         ('moe', 3, 16, 0.25, 2), ('moe', 2, 32, 0.25, 2)]
