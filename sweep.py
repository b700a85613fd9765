"""
Run a sweep: a list of train.py runs defined in a small Python file under sweeps/. Resumable: a finished run is
skipped, an interrupted one resumes from its checkpoint (train.py --init_from=auto).

    python sweep.py sweeps/cpu_small.py              # all runs, --jobs at a time
    python sweep.py sweeps/cpu_small.py --dry_run    # list the runs and their state, run nothing
    python sweep.py sweeps/cpu_small.py --only=dense # only runs whose name contains 'dense'
    python sweep.py sweeps/cpu_small.py --out=DIR    # run folders under DIR instead of results/<name>/runs

A sweep file defines `name` (the results folder: results/<name>/runs/<run>), `jobs` (runs at a time), `common`
(train.py overrides shared by all runs) and `runs` (a list of dicts: a 'name' plus train.py overrides).
On a CPU, `jobs` runs share the cores one thread each (OMP_NUM_THREADS = cores // jobs): two 1-thread runs get
1.3-1.7x the throughput of one 2-thread run on a 2-core machine, and never more threads than cores.
"""
import os
import runpy
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import UserError, configure, defaults_of, run_main, run_state  # noqa: E402

# -----------------------------------------------------------------------------------------------------------------
jobs = 0              # runs at a time (0 = the sweep file's `jobs`)
dry_run = False       # list the runs and their state, run nothing
only = ''             # only runs whose name contains this
out = ''              # run folders under this folder instead of results/<name>/runs
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())


def load_sweep(path):
    spec = runpy.run_path(path)
    for key in ('name', 'runs'):
        if key not in spec:
            raise UserError(f"{path} does not define `{key}`")
    names = [r['name'] for r in spec['runs']]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"{path} has duplicate run names: {', '.join(dupes)}")
    return spec


def command(run, common, out_dir):
    if out_dir.startswith(HERE + os.sep):
        out_dir = os.path.relpath(out_dir, HERE)     # train.py runs in HERE; no machine paths in run.json
    args = {**common, **{k: v for k, v in run.items() if k != 'name'}, 'out_dir': out_dir, 'init_from': 'auto'}
    return [sys.executable, os.path.join(HERE, 'train.py')] + [f'--{k}={v}' for k, v in args.items()]


def sweep(argv):
    paths = []
    opts, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=paths)
    if len(paths) != 1 or not os.path.isfile(paths[0]):
        raise UserError(f"expected one sweep file (got {' '.join(paths) or 'none'}); usage: python sweep.py "
                        f"sweeps/NAME.py [--jobs=N] [--dry_run] [--only=SUBSTR] [--out=DIR]")
    opts = vars(opts)
    spec = load_sweep(paths[0])
    jobs = opts['jobs'] or spec.get('jobs', 1)
    root = os.path.abspath(opts['out']) if opts['out'] else os.path.join(HERE, 'results', spec['name'], 'runs')
    runs = [r for r in spec['runs'] if opts['only'] in r['name']]
    todo = []
    for r in runs:
        out_dir = os.path.join(root, r['name'])
        state = run_state(out_dir)
        if opts['dry_run']:
            print(f"{state:9s} {r['name']:32s} {' '.join(command(r, spec.get('common', {}), out_dir)[2:-2])}")
        if state != 'finished':
            todo.append((r, out_dir))
    print(f"sweep {spec['name']}: {len(runs)} runs, {len(runs) - len(todo)} finished, {len(todo)} to run, "
          f"{jobs} at a time")
    if opts['dry_run'] or not todo:
        return 0
    env = dict(os.environ, PYTHONUNBUFFERED='1')     # each run's train.log gets every line as it is printed
    if 'OMP_NUM_THREADS' not in os.environ:
        env['OMP_NUM_THREADS'] = str(max(1, (os.cpu_count() or 1) // jobs))
    t0 = time.time()
    bar = tqdm(total=len(todo), desc=spec['name'], unit='run')
    failed = []

    def launch(item):
        r, out_dir = item
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, 'train.log'), 'a') as log:
            rc = subprocess.run(command(r, spec.get('common', {}), out_dir), stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=HERE).returncode
        if rc != 0:
            failed.append((r['name'], rc))
        bar.set_postfix_str(f"last: {r['name']}")
        bar.update(1)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(launch, todo))
    bar.close()
    print(f"sweep {spec['name']}: done in {(time.time() - t0) / 60:.1f} min; {len(failed)} failed")
    for name, rc in failed:
        print(f"  {name}: exit code {rc}, see {os.path.join(root, name, 'train.log')}")
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(run_main('sweep.py', sweep))
