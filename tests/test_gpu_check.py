"""tools/gpu_check.sh in its CPU smoke mode, and what bench.py gives it: rows that survive a time limit, a --help
that shows its continuation lines as written."""
import json
import os
import subprocess
import sys
import tarfile

from conftest import ENV, ROOT, run

STEPS = ['preflight', 'precision', 'compile', 'graphs', 'xmod', 'sample', 'downstream', 'dense', 'ddp', 'per_gpu',
         'bench', 'bench_768']


def gpu_check(corpus, tmp_path, timeout, **env):
    """Run the script's smoke mode: (OUT, summary.txt's text, its step lines split), every step named in order."""
    out = tmp_path / 'gpu_check'
    env = dict(ENV, GPU_CHECK_SMOKE='1', SMOKE_DATA=f'--data_dir={corpus}', PYTHON=sys.executable, **env)
    r = subprocess.run(['bash', os.path.join(ROOT, 'tools', 'gpu_check.sh'), str(out)], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=timeout)
    assert r.returncode == 0, r.stderr
    summary = (out / 'summary.txt').read_text()
    steps = [line.split() for line in summary.splitlines() if ' rc=' in line]
    assert [s[0] for s in steps] == STEPS, summary
    return out, summary, steps


def test_gpu_check_script_runs_its_steps(corpus, tmp_path):
    """tools/gpu_check.sh, the one prepared GPU script, run in its smoke mode (the CPU, toy sizes): every step
    passes within its limit and prints its figure, the bench steps' rows come from their JSON, and OUT holds
    summary.txt and one tarball (a machine that returns few files brings it back whole) with what docs/gpu.md says
    comes back, and no checkpoint."""
    out, summary, steps = gpu_check(corpus, tmp_path, timeout=900)
    assert all(s[1] == 'rc=0' for s in steps), summary
    assert all(s[3] == 'of' and int(s[2][:-1]) <= int(s[4][:-1]) for s in steps), summary
    figures = [line.strip() for line in summary.splitlines() if line.startswith('    figure: ')]
    assert len(figures) == len(STEPS) and 'figure: none' not in figures, summary
    assert figures[0] == 'figure: preflight: 0 missing', summary
    assert len([line for line in summary.splitlines() if line.startswith('    row: xmod eager')]) == 3, summary
    speeds = [line for line in summary.splitlines() if 'tokens/s of the last training row' in line]
    assert len(speeds) == 1 and 'no training row' not in speeds[0] and 'graphs/compile' in speeds[0], summary
    assert sorted(os.listdir(out)) == ['gpu_check.tar.gz', 'summary.txt']
    with tarfile.open(out / 'gpu_check.tar.gz') as tar:
        names = {n.removeprefix('./') for n in tar.getnames()}
        sample = tar.extractfile('./sample.txt').read().decode()
        xmod_log = tar.extractfile('./run_xmod/log.csv').read().decode().splitlines()
    for name in ('run_xmod/log.csv', 'run_compile/log.csv', 'run_graphs/log.csv', 'run_dense/log.csv',
                 'run_xmod/run.json', 'bench.json', 'bench_768.json', 'run_xmod/downstream.json',
                 *[f'{step}.txt' for step in STEPS]):
        assert name in names, name
    assert [row.split(',')[0] for row in xmod_log[1:]] == ['0', '3', '6']     # a training row after the first
    assert 'greedy: cached == uncached' in sample
    assert len([n for n in names if n.startswith('per_gpu/') and n.endswith('/log.csv')]) == 4
    assert not [n for n in names if n.endswith('.pt') or n.startswith('sum/')]   # checkpoints stay behind


def test_gpu_check_deadline_skips_what_does_not_fit(corpus, tmp_path):
    """One deadline for the whole script: with a budget that the preflight alone uses up, every later step is
    skipped (said in the summary) instead of running past it, and the script still ends with its two files."""
    # x8 on the CPU: 16 s, less the 15 s kept for kills and the last pack
    out, summary, steps = gpu_check(corpus, tmp_path, timeout=120, GPU_CHECK_BUDGET='2')
    assert all(s[1] == 'rc=skip' for s in steps), summary
    assert all('deadline' in ' '.join(s) for s in steps if s[0] not in ('sample', 'downstream')), summary
    assert sorted(os.listdir(out)) == ['gpu_check.tar.gz', 'summary.txt']


def test_bench_writes_each_row_as_it_is_measured(tmp_path):
    """bench.py rewrites its JSON after every measurement: stopped in a group's second round, the JSON already
    holds that group's rows (their first round), not only the groups before it."""
    out = tmp_path / 'bench.json'
    code = (f"import sys, bench\nn = [0]\nwrite = bench.write_json\n"
            f"def stop_after_third(path, rows):\n    write(path, rows)\n    n[0] += 1\n"
            f"    if n[0] == 3:\n        raise SystemExit(7)\n"
            f"bench.write_json = stop_after_third\n"
            f"bench.bench(['--contexts=40', '--n_embd=32', '--n_head=2', '--steps=1', '--rounds=3', "
            f"'--extras=False', '--phases=train', '--json={out}'])\n")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert r.returncode == 7, r.stderr
    rows = json.load(open(out))
    assert [(x['model'], x['rounds']) for x in rows] == [('dense', 2), ('xmod', 1)]
    assert rows[1]['ratio_vs_dense'] > 0 and rows[1]['tokens_per_s'] > 0


def test_bench_help_shows_a_continuation_line_as_written():
    """The docstring's shell continuation reaches --help as a backslash and a new line (issue 43), not as one line
    with the next line's indentation run into it."""
    r = run(os.path.join(ROOT, 'bench.py'), '--help')
    assert r.returncode == 0, r.stderr
    assert '--n_head=12 \\\n' in r.stdout
    assert not [line for line in r.stdout.splitlines() if '--n_head=12   ' in line]
