"""
Run a sweep: a list of train.py runs defined in a small Python file under sweeps/. Resumable: a finished run is
skipped, an interrupted one resumes from its checkpoint (train.py --init_from=auto).

    python sweep.py sweeps/cpu_small.py              # all runs, --jobs at a time
    python sweep.py sweeps/cpu_small.py --dry_run    # list the runs and their state, run nothing
    python sweep.py sweeps/cpu_small.py --only=dense # only runs whose name contains 'dense'
    python sweep.py sweeps/cpu_small.py --out=DIR    # run folders under DIR instead of results/<name>/runs

Runs are started in the file's order as slots free up, and the file is read again before each start, so a run that
it lists only once another has finished (a branch of a kept step, seeds at a rate found best) joins the same call.
A sweep file defines `name` (the results folder: results/<name>/runs/<run>), `jobs` (runs at a time), `common`
(train.py overrides shared by all runs) and `runs` (a list of dicts: a 'name' plus train.py overrides). A run with
its own init_from=PATH/ckpt_S.pt is a branch of a kept step of another run (train.py, WSD budgets).
On a CPU, `jobs` runs share the cores one thread each (OMP_NUM_THREADS = cores // jobs): two 1-thread runs get
more done than one 2-thread run on a 2-core machine (docs/speed.md), and never more threads than cores.
"""
import os
import runpy
import subprocess
import sys
import threading
import time

from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from configurator import UserError, configure, defaults_of, run_main  # noqa: E402
from run_folder import run_state  # noqa: E402

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
    # auto: a finished run is left, an interrupted one resumed; a branch (init_from=PATH/ckpt_S.pt) does the same
    args = {**common, **{k: v for k, v in run.items() if k != 'name'}, 'out_dir': out_dir,
            'init_from': run.get('init_from', 'auto')}
    return [sys.executable, os.path.join(HERE, 'train.py')] + [f'--{k}={v}' for k, v in args.items()]


def sweep(argv):
    paths = []
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=paths)
    if len(paths) != 1 or not os.path.isfile(paths[0]):
        raise UserError(f"expected one sweep file (got {' '.join(paths) or 'none'}); usage: python sweep.py "
                        f"sweeps/NAME.py [--jobs=N] [--dry_run] [--only=SUBSTR] [--out=DIR]")
    spec = load_sweep(paths[0])
    jobs = cfg.jobs or spec.get('jobs', 1)
    root = os.path.abspath(cfg.out) if cfg.out else os.path.join(HERE, 'results', spec['name'], 'runs')
    runs = [r for r in spec['runs'] if cfg.only in r['name']]
    todo = []
    for r in runs:
        out_dir = os.path.join(root, r['name'])
        state = run_state(out_dir)
        if cfg.dry_run:
            print(f"{state:9s} {r['name']:32s} {' '.join(command(r, spec.get('common', {}), out_dir)[2:-2])}")
        if state != 'finished':
            todo.append((r, out_dir))
    print(f"sweep {spec['name']}: {len(runs)} runs, {len(runs) - len(todo)} finished, {len(todo)} to run, "
          f"{jobs} at a time")
    if cfg.dry_run or not todo:
        return 0
    env = dict(os.environ, PYTHONUNBUFFERED='1')     # each run's train.log gets every line as it is printed
    if 'OMP_NUM_THREADS' not in os.environ:
        env['OMP_NUM_THREADS'] = str(max(1, (os.cpu_count() or 1) // jobs))
    t0 = time.time()
    bar = tqdm(total=len(todo), desc=spec['name'], unit='run')
    failed, started, running = [], set(), [0]
    free = threading.Condition()

    def next_run():
        """The first run not finished and not started yet. The sweep file is read again each time: a run it lists
        only once another has finished (a branch of a kept step, a seed at the best rate) joins the queue then."""
        current = load_sweep(paths[0])
        for r in current['runs']:
            out_dir = os.path.join(root, r['name'])
            if cfg.only in r['name'] and r['name'] not in started and run_state(out_dir) != 'finished':
                return r, out_dir, current.get('common', {})
        return None

    def worker():
        while True:
            with free:
                item = next_run()
                while item is None and running[0]:     # what is still running may add runs when it ends
                    free.wait()
                    item = next_run()
                if item is None:
                    return
                r, out_dir, common = item
                started.add(r['name'])
                running[0] += 1
                bar.total = max(bar.total, len(started))
                bar.refresh()
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, 'train.log'), 'a') as log:
                rc = subprocess.run(command(r, common, out_dir), stdout=log, stderr=subprocess.STDOUT,
                                    env=env, cwd=HERE).returncode
            with free:
                running[0] -= 1
                if rc != 0:
                    failed.append((r['name'], rc))
                bar.set_postfix_str(f"last: {r['name']}")
                bar.update(1)
                free.notify_all()

    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bar.close()
    print(f"sweep {spec['name']}: done in {(time.time() - t0) / 60:.1f} min; {len(failed)} failed")
    for name, rc in failed:
        print(f"  {name}: exit code {rc}, see {os.path.join(root, name, 'train.log')}")
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(run_main('sweep.py', sweep))
