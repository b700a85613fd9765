"""
Run a sweep: a list of train.py runs defined in a small Python file under sweeps/. Resumable: a finished run is
skipped, an interrupted one resumes from its checkpoint (train.py --init_from=auto).

    python sweeps/cpu_small.py              # all runs, --jobs at a time
    python sweeps/cpu_small.py --dry_run    # list the runs and their state, run nothing
    python sweeps/cpu_small.py --only=dense # only runs whose name contains 'dense'
    python sweeps/cpu_small.py --out=DIR    # run folders under DIR instead of results/<name>/runs
    python sweeps/gpu_small.py --gpus=0,1,2,3 --per_gpu=2   # 8 at a time, 2 on each of 4 GPUs
    python sweeps/gpu_small.py --commands   # one train.py command a line (Slurm arrays, GNU parallel)
    python sweeps/gpu_small.py --dry_run --flops_per_s=2e14  # and how long what is left would take

Runs are started in the file's order as slots free up, and the file is read again before each start, so a run that
it lists only once another has finished (a branch of a kept step, seeds at a rate found best) joins the same call.
A sweep file defines `name` (the results folder: results/<name>/runs/<run>), `jobs` (runs at a time), `common`
(train.py overrides shared by all runs) and `runs` (a list of dicts: a 'name' plus train.py overrides). A run with
its own init_from=PATH/ckpt_S.pt is a branch of a kept step of another run (train.py, WSD budgets).
On a CPU, `jobs` runs share the cores one thread each (OMP_NUM_THREADS = cores // jobs): two 1-thread runs get
more done than one 2-thread run on a 2-core machine (docs/speed.md), and never more threads than cores.
On GPUs, --gpus=0,1,2,3 gives each running job one of them (CUDA_VISIBLE_DEVICES, so a run's device 'cuda' is that
GPU) and --per_gpu=N puts N runs on each at once: a small model leaves most of a large GPU idle. jobs follows.

--dry_run also gives each run's training FLOPs as run.json counts them (3 x forward FLOPs/token x tokens; the
evaluations are not counted) and the total left to train: an unfinished run less the steps its log already holds,
a branch less the steps it inherits. With --flops_per_s (what all the sweep's jobs together sustain) it turns that
into hours. A run that another trainer holds (its folder's lock, train.py) is shown as `running` and is left to it.

--commands prints the train.py command of every unfinished run, one a line and nothing else, runnable from this
folder and resumable (--init_from=auto): `sed -n "${SLURM_ARRAY_TASK_ID}p"` picks one in a Slurm array
(sweeps/slurm_array.sh), `parallel` runs them over ssh. A sweep file that adds runs as others finish (the
branches of cpu_wsd, the seeds of cpu_lr) gives those on a later call, once what they wait for is finished.
"""
import contextlib
import os
import pickle
import runpy
import shlex
import subprocess
import sys
import threading
import time

from tqdm import tqdm

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository root: train.py, results/
sys.path.insert(0, HERE)
from recipe import train_defaults  # noqa: E402

from configurator import UserError, configure, defaults_of, run_main  # noqa: E402
from run_folder import log_rows, run_state, running_elsewhere, sizes  # noqa: E402
from xmod import GPTConfig  # noqa: E402

# -----------------------------------------------------------------------------------------------------------------
jobs = 0              # runs at a time (0 = the sweep file's `jobs`)
dry_run = False       # list the runs and their state, run nothing
only = ''             # only runs whose name contains this
out = ''              # run folders under this folder instead of results/<name>/runs
gpus = ''             # comma-separated GPU ids: each running job gets one (CUDA_VISIBLE_DEVICES); '' = no choice
per_gpu = 0           # runs sharing each GPU of --gpus at once (0 = 1); jobs = GPUs x per_gpu
commands = False      # print one resumable train.py command per unfinished run, one a line, nothing else
flops_per_s = 0.0     # --dry_run: the FLOP/s all jobs together sustain, for an estimate of the time left (0 = none)
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())
TRAIN_DEFAULTS = train_defaults()   # train.py's keys and defaults, from its config block


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


def command(run, common, out_dir, python=sys.executable, script=os.path.join(HERE, 'train.py')):
    if out_dir.startswith(HERE + os.sep):
        out_dir = os.path.relpath(out_dir, HERE)     # train.py runs in HERE; no machine paths in run.json
    # auto: a finished run is left, an interrupted one resumed; a branch (init_from=PATH/ckpt_S.pt) does the same
    args = {**common, **{k: v for k, v in run.items() if k != 'name'}, 'out_dir': out_dir,
            'init_from': run.get('init_from', 'auto')}
    # a float as its shortest spelling to 12 digits: --min_lr=7.5e-05, not 7.500000000000001e-05
    return [python, script] + [f'--{k}={v:.12g}' if type(v) is float else f'--{k}={v}' for k, v in args.items()]


def run_flops(run, common, out_dir):
    """(training FLOPs of the run's whole budget, FLOPs still to train) as train.py counts them, from the config
    alone (run_folder.sizes): the vocabulary from the dataset's meta.pkl, or GPTConfig's when it is not prepared."""
    args = command(run, common, out_dir)[2:]
    cfg, _ = configure([a for a in args if not a.startswith('--init_from=')], TRAIN_DEFAULTS, model=GPTConfig)
    folder = cfg.data_dir or os.path.join(HERE, 'data', cfg.dataset)
    meta = None
    with contextlib.suppress(OSError):
        with open(os.path.join(folder, 'meta.pkl'), 'rb') as f:
            meta = pickle.load(f)
    _, tokens_per_iter, fpt, n_iters = sizes(cfg, meta)
    _, rows = log_rows(os.path.join(out_dir, 'log.csv'))
    done = int(rows[-1][0]) if rows else 0                      # the last logged step: where a resume starts
    branch = run.get('init_from', '')
    if not rows and branch.endswith('.pt') and os.path.basename(branch)[5:-3].isdigit():
        done = int(os.path.basename(branch)[5:-3])              # a branch starts at its kept step (ckpt_S.pt)
    per_step = 3 * fpt * tokens_per_iter
    left = 0 if run_state(out_dir) == 'finished' else per_step * max(0, n_iters - done)
    return per_step * n_iters, left


def slots(cfg, spec):
    """The running jobs' GPUs: None each (no --gpus, every run on the device it picks), or per_gpu slots per GPU."""
    if not cfg.gpus:
        if cfg.per_gpu:
            raise UserError("--per_gpu needs --gpus: --gpus=0 --per_gpu=4 puts 4 runs at once on GPU 0")
        return [None] * (cfg.jobs or spec.get('jobs', 1))
    ids = [g.strip() for g in cfg.gpus.split(',')]
    if not all(g.isdigit() for g in ids) or len(set(ids)) != len(ids):
        raise UserError(f"--gpus={cfg.gpus}: expected distinct GPU ids, comma-separated (e.g. --gpus=0,1,2,3)")
    per = cfg.per_gpu or 1
    if cfg.jobs and cfg.jobs != per * len(ids):
        raise UserError(f"--jobs={cfg.jobs} with --gpus: jobs follows from them ({len(ids)} GPUs x --per_gpu="
                        f"{per} = {per * len(ids)}); leave --jobs out")
    return [ids[k % len(ids)] for k in range(per * len(ids))]    # a job per slot; the GPUs fill evenly


def sweep(argv):
    paths = []
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=paths)
    if len(paths) != 1 or not os.path.isfile(paths[0]):
        raise UserError(f"expected one sweep file (got {' '.join(paths) or 'none'}); usage: python sweeps/sweep.py "
                        f"sweeps/NAME.py [--jobs=N] [--dry_run] [--only=SUBSTR] [--out=DIR]")
    if cfg.commands and cfg.dry_run:
        raise UserError("--commands and --dry_run: pick one (--commands prints nothing but the commands)")
    spec = load_sweep(paths[0])
    gpu_of_job = slots(cfg, spec)
    jobs = len(gpu_of_job)
    root = os.path.abspath(cfg.out) if cfg.out else os.path.join(HERE, 'results', spec['name'], 'runs')
    runs = [r for r in spec['runs'] if cfg.only in r['name']]
    common = spec.get('common', {})
    if cfg.commands:
        try:
            for r in runs:
                out_dir = os.path.join(root, r['name'])
                if run_state(out_dir) != 'finished':
                    print(shlex.join(command(r, common, out_dir, python='python', script='train.py')), flush=True)
        except BrokenPipeError:            # `--commands | head`: the reader has what it wanted
            sys.stdout = open(os.devnull, 'w')
        return 0
    todo, total, left = [], 0.0, 0.0
    for r in runs:
        out_dir = os.path.join(root, r['name'])
        state = run_state(out_dir)
        if cfg.dry_run:
            flops = run_flops(r, common, out_dir)
            total, left = total + flops[0], left + flops[1]
            state = 'running' if state != 'finished' and running_elsewhere(out_dir) else state
            print(f"{state:9s} {r['name']:32s} {f'{flops[0]:.3g}':>8s} FLOPs "
                  f"{' '.join(command(r, common, out_dir)[2:-2])}")
        if state != 'finished':
            todo.append((r, out_dir))
    print(f"sweep {spec['name']}: {len(runs)} runs, {len(runs) - len(todo)} finished, {len(todo)} to run, "
          f"{jobs} at a time" + (f" on GPUs {cfg.gpus}" if cfg.gpus else ''))
    if cfg.dry_run:
        print(flops_line(total, left, cfg.flops_per_s))
    if cfg.dry_run or not todo:
        return 0
    env = dict(os.environ, PYTHONUNBUFFERED='1')     # each run's train.log gets every line as it is printed
    if 'OMP_NUM_THREADS' not in os.environ:
        env['OMP_NUM_THREADS'] = str(max(1, (os.cpu_count() or 1) // jobs))
    t0 = time.time()
    bar = tqdm(total=len(todo), desc=spec['name'], unit='run')
    failed, started, running, elsewhere = [], set(), [0], []
    free = threading.Condition()

    def next_run():
        """The first run not finished and not started yet. The sweep file is read again each time: a run it lists
        only once another has finished (a branch of a kept step, a seed at the best rate) joins the queue then."""
        current = load_sweep(paths[0])
        for r in current['runs']:
            out_dir = os.path.join(root, r['name'])
            if cfg.only in r['name'] and r['name'] not in started and run_state(out_dir) != 'finished':
                if running_elsewhere(out_dir):    # another sweep or trainer writes it: leave it to that one
                    started.add(r['name'])
                    elsewhere.append(r['name'])
                    continue
                return r, out_dir, current.get('common', {})
        return None

    def worker(gpu):
        job_env = env if gpu is None else dict(env, CUDA_VISIBLE_DEVICES=gpu)
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
                                    env=job_env, cwd=HERE).returncode
            with free:
                running[0] -= 1
                if rc != 0:
                    failed.append((r['name'], rc))
                bar.set_postfix_str(f"last: {r['name']}")
                bar.update(1)
                free.notify_all()

    threads = [threading.Thread(target=worker, args=(gpu,)) for gpu in gpu_of_job]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bar.close()
    print(f"sweep {spec['name']}: done in {(time.time() - t0) / 60:.1f} min; {len(failed)} failed")
    for name, rc in failed:
        print(f"  {name}: exit code {rc}, see {os.path.join(root, name, 'train.log')}")
    for name in elsewhere:
        print(f"  {name}: not started, another trainer is writing {os.path.join(root, name)}")
    return 1 if failed else 0


def duration(seconds):
    """A time in the unit a reader wants: 14 s, 12 min, 3.5 h."""
    return (f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else
            f"{seconds / 3600:.1f} h")


def flops_line(total, left, flops_per_s):
    when = (f"; at {flops_per_s:.3g} FLOP/s, {duration(left / flops_per_s)}" if flops_per_s else
            "; --flops_per_s=X (what all jobs together sustain) turns it into hours")
    return (f"FLOPs: {total:.3g} in all, {left:.3g} left to train (3 x FLOPs/token x tokens, as run.json counts "
            f"them; evaluations not counted){when}")


def main(argv=None):
    return run_main('sweeps/sweep.py', sweep, argv)


if __name__ == '__main__':
    sys.exit(main())
