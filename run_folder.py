"""
run_folder.py: the run folder's machinery, which a reader of train.py does not need to see.

  - run.json, log.csv (its first columns, LOG_COLUMNS, are a contract fit_law.py reads) and ckpt.pt, every write
    atomic; truncating the log on resume; one trainer per folder (RunLock)
  - how a run starts (open_run, one call: scratch, resume, auto, a branch from a kept step, the lock, --overwrite),
    and its claim on the folder once every check has passed (Start.claim)
  - every random generator's state, for an exact resume; the git commit; on a CPU, the thread count that other
    busy processes leave (`CPUThreads`, train.py's --threads=0)
  - a run's plan from its config alone (model_config, sizes: FLOP matching, the budget; the fixed validation windows),
    which sweep.py and routing_plot.py read too: no script imports train.py
  - train.py's keys (train_defaults: its settings and GPTConfig's fields), its input checks (check_config), the merge
    of a checkpoint's config with a resume's command line (resume_config), and finding (or preparing) a dataset
"""
import contextlib
import csv
import dataclasses
import difflib
import fcntl
import glob
import io
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import torch

import xmod
from configurator import UserError, check_dtype, configure, defaults_of, one_line, read_settings

ROOT = os.path.dirname(os.path.abspath(__file__))

RUN_FILES = ('run.json', 'log.csv', 'ckpt.pt')
# The first columns of log.csv, in this order; the model's statistics follow them. fit_law.py (law/load.py) reads these.
LOG_COLUMNS = ('step', 'tokens', 'flops', 'lr', 'elapsed_s', 'tokens_per_s', 'train_loss', 'val_loss',
               'val_loss_causal')
CKPT_KEYS = ('model', 'optimizer', 'config', 'model_args', 'step', 'rng', 'meta')


# ----------------------------------------------------------------------------------------------------------------------
# The run folder: every write is atomic

def atomic_write(path, write):
    """write(f) into a temporary file in path's folder, flush it to disk, then os.replace it onto path: a crash or
    a kill at any moment leaves the old file or the new one, never a half-written file under the real name."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix='.' + os.path.basename(path) + '.', suffix='.tmp')
    try:
        umask = os.umask(0o22)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)          # mkstemp makes it private; give it a normal file's permissions
        with os.fdopen(fd, 'wb') as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def save_checkpoint(ckpt, path):
    atomic_write(path, lambda f: torch.save(ckpt, f))


def write_json(path, obj):
    atomic_write(path, lambda f: f.write((json.dumps(obj, indent=2) + '\n').encode()))


def load_checkpoint(path, map_location='cpu', missing='nothing to resume (start a run with --init_from=scratch)'):
    """The checkpoint dict; UserError (never a deletion) when it is missing, corrupt or truncated. Our checkpoints
    hold only tensors and plain Python values, so they load with weights_only=True (no arbitrary unpickling)."""
    if not os.path.isfile(path):
        raise UserError(f"no checkpoint at {path}: {missing}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        raise UserError(f"cannot read checkpoint {path} (corrupt or truncated? it is left as is): "
                        f"{type(e).__name__}: {one_line(e)}") from None
    missing = [k for k in CKPT_KEYS if not isinstance(ckpt, dict) or k not in ckpt]
    if missing:
        raise UserError(f"{path} is not a train.py checkpoint (no {', '.join(missing)}; it is left as is)")
    for k in ('config', 'model_args'):             # an older checkpoint's keys by today's names (RENAMED)
        ckpt[k] = upgrade_keys(ckpt[k])
    return ckpt


def load_model(out_dir, dev):
    """(the run's model on dev, in eval mode: causal thresholds frozen, dropout off; its checkpoint), for the scripts
    that use a trained model (sample.py, downstream.py). UserError when the checkpoint is missing or does not
    rebuild."""
    # to the CPU first: only the weights are used, and the optimizer state (twice the weights) stays off the GPU
    ckpt = load_checkpoint(os.path.join(out_dir, 'ckpt.pt'), map_location='cpu',
                           missing=f"train a model into it first: python train.py --out_dir={out_dir}")
    try:
        model = xmod.GPT(xmod.GPTConfig(**ckpt['model_args']))
        model.load_state_dict(clean_state_dict(ckpt['model']))
    except (TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"{out_dir}/ckpt.pt: cannot rebuild the model: {one_line(e)}") from None
    return model.eval().to(dev), ckpt


def run_state(out_dir):
    """'finished', 'partial' (run.json says finished: false) or 'new' (no readable run.json)."""
    try:
        with open(os.path.join(out_dir, 'run.json')) as f:
            return 'finished' if json.load(f).get('finished') else 'partial'
    except (OSError, ValueError, AttributeError):
        return 'new'


def never_checkpointed(out_dir):
    """True for an unfinished run that has no checkpoint to resume from (killed before its first evaluation)."""
    return run_state(out_dir) == 'partial' and not os.path.exists(os.path.join(out_dir, 'ckpt.pt'))


def check_new_run(out_dir, overwrite, say=True):
    """A new run into out_dir: refused when the folder holds a run, unless --overwrite or that run never reached its
    first checkpoint (nothing to resume and nothing to keep: it is replaced, saying so unless say=False)."""
    held = [f for f in RUN_FILES if os.path.exists(os.path.join(out_dir, f))]
    if held and not overwrite and never_checkpointed(out_dir):
        if say:
            print(f"{out_dir} holds a run that never reached its first checkpoint: replacing it")
    elif held and not overwrite:
        raise UserError(f"{out_dir} already holds a run ({', '.join(held)}): resume it with "
                        f"--init_from=resume, pick another --out_dir, or replace it with --overwrite=True")


def clear_run(out_dir):
    """Remove the run that check_new_run let a new one replace: its files and its kept steps (ckpt_S.pt)."""
    for f in RUN_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out_dir, f))
    for f in glob.glob(os.path.join(glob.escape(out_dir), 'ckpt_*.pt')):
        os.remove(f)


LOCK_FILE = 'train.lock'      # in out_dir: flock'ed by the trainer writing the folder, its PID inside


class RunLock:
    """One trainer per run folder: an exclusive flock on out_dir/train.lock, held while the process lives. The kernel
    releases it when the process dies, kill -9 included, so no lock is ever stale; the PID written into the file only
    names the holder in the message of a trainer that is refused. An flock belongs to the open file, so a process
    that takes it twice (in-process tests) is refused too: release() closes the file.

    take(out_dir, create=False) locks an existing lock file and changes nothing on disk: a trainer does that before
    it reads the folder, since a refused trainer, or one that then meets bad input, must leave the folder as it was.
    take(out_dir, create=True) makes the file, when a run is about to be written. Both raise UserError when another
    process holds the lock; take returns whether this process now holds it."""

    def __init__(self):
        self.fd = None

    def take(self, out_dir, create):
        if self.fd is not None:
            return True
        path = os.path.join(out_dir, LOCK_FILE)
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except FileNotFoundError:
            return False                        # no trainer ever wrote here (create=False): nothing to lock yet
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(f"{out_dir} is being written by another trainer ({holder(path)}): one trainer per run "
                            f"folder; wait for it to end or stop it, then run again") from None
        self.fd = fd
        return True

    def write_pid(self):
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self):
        if self.fd is not None:
            os.close(self.fd)                   # closing the file releases the flock
            self.fd = None


def holder(lock_path):
    """'PID N' of the process a held lock file names, or what it is when the file names none that runs: a trainer
    still starting has not written its PID yet (the file may still name its predecessor, which no longer runs)."""
    try:
        with open(lock_path) as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)                         # signal 0: only asks whether the process exists
    except PermissionError:
        pass                                    # it exists, as another user
    except (OSError, ValueError):
        return "a process that is still starting"
    return f"PID {pid}"


def running_elsewhere(out_dir):
    """The holder ('PID N') when a trainer holds out_dir's lock, else None. It probes by taking the lock for an
    instant, so it never waits and never creates the file."""
    lock = RunLock()
    try:
        lock.take(out_dir, create=False)
    except UserError:
        return holder(os.path.join(out_dir, LOCK_FILE))
    finally:
        lock.release()
    return None


def clean_state_dict(state):
    """Checkpoints hold the raw model's weights. Files saved from a compiled or DDP-wrapped model (nanoGPT's bug)
    carry an '_orig_mod.' or 'module.' prefix on every key: strip them so those load too."""
    for _ in range(2):
        for prefix in ('_orig_mod.', 'module.'):
            if state and all(k.startswith(prefix) for k in state):
                state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def rng_state():
    """Every random generator's state, as plain values and tensors (so the checkpoint loads with weights_only)."""
    name, key, pos, has_gauss, cached = np.random.get_state()
    return {'python': random.getstate(), 'numpy': [name, key.tolist(), pos, has_gauss, cached],
            'torch': torch.get_rng_state(),
            'cuda': torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(s):
    random.setstate((s['python'][0], tuple(s['python'][1]), s['python'][2]))
    name, key, pos, has_gauss, cached = s['numpy']
    np.random.set_state((name, np.array(key, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(s['torch'])
    if s['cuda'] and torch.cuda.is_available() and len(s['cuda']) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(s['cuda'])


def log_rows(path):
    """(header, rows) of a log.csv as strings; (None, []) when there is none yet."""
    if not os.path.isfile(path):
        return None, []
    with open(path, newline='') as f:
        rows = list(csv.reader(f))
    return (rows[0], rows[1:]) if rows else (None, [])


def truncate_log(path, last_step):
    """On resume: drop the rows after the checkpoint's step (written after it, before the kill) and a torn last
    line, so the resumed run appends without duplicates. Returns the torn line's text, or None: a row cut mid-line
    (the run was killed while writing it) is dropped too, and the caller says so."""
    header, rows = log_rows(path)
    if header is None:
        return None
    with open(path, 'rb') as f:
        ends_in_newline = f.read().endswith(b'\n')       # a row is written whole, newline last: without it, cut
    n = len(header)
    torn = rows.pop() if rows and not ends_in_newline else None

    def keep(r):
        try:
            return len(r) == n and int(r[0]) <= last_step
        except ValueError:
            return False
    kept = [header] + [r for r in rows if keep(r)]

    def write(f):
        buf = io.StringIO()
        csv.writer(buf, lineterminator='\n').writerows(kept)
        f.write(buf.getvalue().encode())
    atomic_write(path, write)
    return None if torn is None else ','.join(torn)


def append_log(path, row):
    """Append one row; the header is written by the first row (LOG_COLUMNS, then the row's other keys, the
    statistics, in the model's order), and later rows follow the file's own header."""
    header, _ = log_rows(path)
    new = header is None
    header = header or list(LOG_COLUMNS) + [k for k in row if k not in LOG_COLUMNS]
    with open(path, 'a', newline='') as f:
        w = csv.writer(f, lineterminator='\n')
        if new:
            w.writerow(header)
        w.writerow([fmt(row.get(k, '')) for k in header])
        f.flush()
        os.fsync(f.fileno())


def fmt(v):
    return repr(v) if isinstance(v, float) else str(v)   # repr: the shortest exact float


def git_commit():
    try:
        r = subprocess.run(['git', '-C', ROOT, 'rev-parse', 'HEAD'], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ''
    except (OSError, subprocess.SubprocessError):
        return ''


# ----------------------------------------------------------------------------------------------------------------------
# A run's plan, from its config alone: the model (FLOP matching), the budget, the fixed validation windows. train.py
# trains it; sweep.py adds up its FLOPs (--dry_run) and routing_plot.py reads its windows without starting a run

def model_keys(cfg):
    """{field: value} of the train config's keys that are GPTConfig's fields (all but vocab_size, the data's)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(xmod.GPTConfig) if f.name != 'vocab_size'}


def model_config(cfg, vocab_size):
    """The run's GPTConfig from the train config: dense/moe at n_layer (0 = dense_layers); mod/xmod FLOP-matched to
    the dense baseline of depth dense_layers (xmod.match_flops), or as given with match_flops=False. A mod/xmod
    config that routes every token is a dense model in disguise: refused when FLOP matching led there."""
    args = model_keys(cfg)
    del args['model'], args['n_layer']
    # the family's defaults (None) are resolved once the family is known: after FLOP matching, which works on the
    # dense partner (a dense model's defaults)
    family = {f.name: args.pop(f.name) for f in dataclasses.fields(xmod.GPTConfig) if f.default is None}
    try:
        if cfg.model in ('mod', 'xmod') and cfg.match_flops:
            dense = xmod.GPTConfig(model='dense', n_layer=cfg.dense_layers, vocab_size=vocab_size, **args)
            mcfg = dataclasses.replace(xmod.match_flops(dense, cfg.model, stride=cfg.stride,
                                                        n_layer=cfg.n_layer or None, capacity=cfg.capacity), **family)
        else:
            mcfg = xmod.GPTConfig(model=cfg.model, n_layer=cfg.n_layer or cfg.dense_layers, vocab_size=vocab_size,
                                  **args, **family)
    except ValueError as e:
        raise UserError(one_line(e)) from None
    routes_all = ('routed' in xmod.layer_kinds(mcfg) and
                  xmod.routed_k(mcfg.capacity, cfg.block_size) == cfg.block_size)
    if routes_all and cfg.match_flops:
        raise UserError(f"--model={cfg.model} with n_layer={mcfg.n_layer} FLOP-matches to capacity 1.0: every "
                        f"routed layer would take every token (rho = 1), which is not a sparse model. n_layer is "
                        f"the sparse model's total depth; leave it at 0 (--n_layer=0) to let FLOP matching choose "
                        f"it, or set the dense partner's depth with --dense_layers")
    if routes_all:
        print(f"train.py: WARNING: capacity {mcfg.capacity} routes every token: the routed layers are dense ones "
              f"with a gate, not a sparse model", file=sys.stderr)
    return mcfg


def explain_n_layer(cfg):
    """A config file's n_layer, written for a dense model, means another thing to a FLOP-matched sparse run: say so."""
    if cfg.model in ('mod', 'xmod') and cfg.match_flops and cfg.n_layer:
        print(f"note: n_layer={cfg.n_layer} (from the config file) is the {cfg.model} model's own depth, FLOP-matched "
              f"to a dense model of dense_layers={cfg.dense_layers} layers; to match a {cfg.n_layer}-layer dense "
              f"model, run with --dense_layers={cfg.n_layer} --n_layer=0 (FLOP matching then picks the depth)")


def sizes(cfg, meta):
    """(model config, tokens per iteration, forward FLOPs per token, iterations) of a run's config on a dataset
    with this meta.pkl: what run.json records, and what sweep.py --dry_run adds up without starting a run."""
    vocab_size = meta['vocab_size']
    if meta.get('tokenizer') == 'gpt2':
        vocab_size = -(-vocab_size // 64) * 64     # 50257 -> 50304: a multiple of 64 is faster, the rest unused
    mcfg = model_config(cfg, vocab_size)
    tokens_per_iter = cfg.batch_size * cfg.gradient_accumulation_steps * cfg.block_size
    fpt = xmod.flops_per_token(mcfg, cfg.block_size, cfg.batch_size)
    return mcfg, tokens_per_iter, fpt, resolve_iters(cfg, fpt, tokens_per_iter)


def resolve_iters(cfg, fpt, tokens_per_iter):
    """The budget as a number of iterations: max_flops, else max_tokens, else max_iters (the closest count).
    A FLOP-matched pair should use max_tokens: both then see the same tokens (max_flops gives each its own)."""
    if cfg.max_flops > 0:
        return max(1, round(cfg.max_flops / (3 * fpt * tokens_per_iter)))
    if cfg.max_tokens > 0:
        return max(1, round(cfg.max_tokens / tokens_per_iter))
    return cfg.max_iters


def cooldown_start(cfg, schedule_iters):
    """wsd: the step where the linear decay to min_lr begins, the last cooldown_frac of the budget (rounded)."""
    return schedule_iters - round(cfg.cooldown_frac * schedule_iters)


def open_split(folder, split):
    # a fresh memmap per use, as nanoGPT does: a long-lived one keeps pages resident and grows memory
    return np.memmap(os.path.join(folder, f'{split}.bin'), dtype=np.uint16, mode='r')


def read_windows(data, starts, T, device):
    """x, y (len(starts), T) int64: windows of T+1 tokens, y shifted by one."""
    w = torch.from_numpy(np.stack([data[i:i + T + 1].astype(np.int64) for i in starts]))
    x, y = w[:, :-1], w[:, 1:]
    if device.startswith('cuda'):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def eval_starts(n_tokens, T, tokens, batch_size=1):
    """The fixed validation set: evenly spaced windows of T+1 tokens over the split, from its start to its end.
    tokens=0: the whole split (as many non-overlapping windows as fit). The same for every run and every eval, so
    two runs' losses differ only by the models, not by which batches an evaluation happened to draw. The count is
    rounded down to whole batches of batch_size (the remainder dropped; one smaller batch when fewer windows than
    that fit): a smaller last batch would recompile a compiled model, under DDP while the other ranks wait."""
    last = n_tokens - T - 1                       # the last valid start
    count = last // T + 1
    if tokens:
        count = max(1, min(count, tokens // T))
    if count >= batch_size:
        count -= count % batch_size
    if count == 1:
        return [0]
    return [round(i * last / (count - 1)) for i in range(count)]


# ----------------------------------------------------------------------------------------------------------------------
# On a CPU: the threads that other processes leave

def threads_left(cpus, others, most):
    """The thread count for a CPU run: the CPUs that other processes leave free (others: how many CPUs' worth of
    time they used lately), at least 1, at most `most`."""
    return max(1, min(most, round(cpus - others)))


class CPUThreads:
    """train.py's --threads=0 on a CPU: give torch the cores that other processes leave free, looked at every
    `every` seconds. OpenMP's threads spin-wait for each other at every barrier (libgomp: 300,000 spins); with
    another busy process on one of the cores that spinning becomes most of the time (docs/speed.md). The others'
    use is the CPU time of this process's CPUs (/proc/stat) minus this process's own (os.times). Linux only;
    elsewhere it never changes anything."""

    def __init__(self, every=2.0):
        self.most = torch.get_num_threads()           # torch's default, or OMP_NUM_THREADS: never more
        self.cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else []
        self.every = every
        self.seen = self.sample()

    def sample(self):
        """(wall s, CPU s used on our CPUs by every process, CPU s used by this one), or None where unknown."""
        try:
            with open('/proc/stat') as f:
                rows = {r[0]: r[1:] for r in (line.split() for line in f) if r and r[0][3:].isdigit()}
            ticks = [[int(v) for v in rows[f'cpu{c}']] for c in self.cpus]
        except (OSError, ValueError, KeyError):
            return None
        busy = sum(sum(t) - t[3] - t[4] for t in ticks)           # everything but idle and iowait
        own = os.times()
        return time.time(), busy / os.sysconf('SC_CLK_TCK'), own.user + own.system

    def __call__(self):
        """Look again if `every` seconds have passed; the new thread count when it changed, else None."""
        if not self.cpus or self.seen is None or time.time() - self.seen[0] < self.every:
            return None
        now = self.sample()
        if now is None:
            return None
        wall, all_cpu, own_cpu = (a - b for a, b in zip(now, self.seen))
        self.seen = now
        threads = threads_left(len(self.cpus), (all_cpu - own_cpu) / wall, self.most)
        if threads == torch.get_num_threads():
            return None
        torch.set_num_threads(threads)
        return threads


THREAD_NOTE_HOLD_S = 10.0      # how long a thread count must hold before train.py prints it


class ThreadNote:
    """When train.py prints the thread count that --threads=0 chose. Under a load that changes by the second the
    count flips at every look (every 2 s), and a line per flip would bury the evaluation lines: a count is printed
    once it has held `hold` seconds and differs from the count printed last (at the start, the run's own count),
    and only when the caller allows it (train.py: once per evaluation interval; a count held back is printed at
    the next chance if it still stands). Called with the count now and the time; returns the count to print, or
    None."""

    def __init__(self, count, now, hold=None):
        self.said, self.count, self.since = count, count, now
        self.hold = THREAD_NOTE_HOLD_S if hold is None else hold

    def __call__(self, count, now, may_say=True):
        if count != self.count:
            self.count, self.since = count, now
        if may_say and count != self.said and now - self.since >= self.hold:
            self.said = count
            return count
        return None


def cpu_threads(device_type, threads):
    """train.py's --threads: N > 0 fixes torch's thread count; 0 returns a CPUThreads that adapts it when called.
    Off a CPU nothing changes. Returns a callable: the new thread count when it just changed, else None."""
    if device_type != 'cpu':
        return lambda: None
    if threads:
        torch.set_num_threads(threads)
        return lambda: None
    return CPUThreads()


# ----------------------------------------------------------------------------------------------------------------------
# train.py's checks, resume merge and dataset discovery

TRAIN_PY = os.path.join(ROOT, 'train.py')


def train_defaults(settings=None):
    """train.py's keys and their defaults: its module-level settings (read from its text when not given, so that
    sweep.py and the sweeps' files import no script), then every field of GPTConfig but vocab_size (the data's)."""
    return defaults_of(read_settings(TRAIN_PY) if settings is None else settings, xmod.GPTConfig, skip=('vocab_size',))


def train_config(argv):
    """(cfg, explicit keys) of a train.py command line (config files and --key=value), as train.py reads it."""
    return configure(argv, train_defaults(), model=xmod.GPTConfig, renamed=new_key)


# Keys that describe this invocation, not the run: a resume takes them from the command line (or their defaults),
# and every other key from the checkpoint unless the command line sets it.
SESSION_KEYS = ('out_dir', 'init_from', 'overwrite', 'stop_iter', 'log_interval', 'device', 'dtype', 'compile',
                'cuda_graphs', 'peak_tflops', 'backend', 'threads')
INIT_MODES = ('scratch', 'resume', 'auto')       # or a path to a kept checkpoint (ckpt_S.pt): a branch
LR_SCHEDULES = ('cosine', 'wsd', 'constant')


def check_config(cfg, world_size, explicit):
    """Ranges and combinations that no later step would report clearly. The model's keys (GPTConfig's fields) are
    checked by GPTConfig itself, here and again when model_config builds the run's model."""
    def need(ok, msg):
        if not ok:
            raise UserError(msg)
    need(cfg.init_from in INIT_MODES or cfg.init_from.endswith('.pt'),
         f"--init_from={cfg.init_from!r}: expected scratch | resume | auto | PATH/ckpt_S.pt (a kept step to branch "
         f"from)")
    need(cfg.lr_schedule in LR_SCHEDULES, f"--lr_schedule={cfg.lr_schedule!r}: expected {' | '.join(LR_SCHEDULES)}")
    need(0 <= cfg.cooldown_frac <= 1, f"--cooldown_frac={cfg.cooldown_frac}: expected a fraction in [0, 1]")
    need(all(x.strip().isdigit() for x in cfg.save_steps.split(',')) if cfg.save_steps.strip() else True,
         f"--save_steps={cfg.save_steps!r}: expected comma-separated step numbers, e.g. --save_steps=400,800")
    for k in ('batch_size', 'gradient_accumulation_steps', 'eval_interval', 'log_interval', 'dense_layers'):
        need(getattr(cfg, k) >= 1, f"--{k}={getattr(cfg, k)}: expected an integer >= 1")
    for k in ('n_layer', 'eval_tokens', 'eval_iters', 'stop_iter', 'max_iters', 'max_tokens', 'max_flops',
              'warmup_iters', 'min_lr', 'weight_decay', 'grad_clip', 'seed'):
        need(getattr(cfg, k) >= 0, f"--{k}={getattr(cfg, k)}: expected a number >= 0")
    need(cfg.max_iters > 0 or cfg.max_tokens > 0 or cfg.max_flops > 0,
         "no budget: set one of --max_iters, --max_tokens or --max_flops to a number > 0")
    need(cfg.learning_rate > 0, f"--learning_rate={cfg.learning_rate}: expected a number > 0")
    need(cfg.min_lr <= cfg.learning_rate or not cfg.decay_lr or cfg.lr_schedule == 'constant',
         f"--learning_rate={cfg.learning_rate:g} is below --min_lr={cfg.min_lr:g}: the decay would rise "
         f"{cfg.min_lr / cfg.learning_rate:.3g}x; set --min_lr too (about learning_rate/10)")
    need(0 <= cfg.beta1 < 1 and 0 <= cfg.beta2 < 1, "--beta1 and --beta2: expected numbers in [0, 1)")
    try:       # the model's keys, as GPTConfig checks them, before the data is looked for (or prepared)
        xmod.GPTConfig(**dict(model_keys(cfg), n_layer=cfg.n_layer or cfg.dense_layers))
    except ValueError as e:
        raise UserError(one_line(e)) from None
    need(cfg.threads >= 0, f"--threads={cfg.threads}: expected 0 (auto) or a number of CPU threads >= 1")
    check_dtype(cfg.dtype)
    need(cfg.gradient_accumulation_steps % world_size == 0,
         f"--gradient_accumulation_steps={cfg.gradient_accumulation_steps} is not a multiple of the world size "
         f"{world_size}: it counts micro-batches over all ranks, each rank runs an equal share")
    need(not (cfg.model == 'mod' and 'stride' in explicit and cfg.stride != 2),
         f"--stride={cfg.stride} does nothing for --model=mod: MoD alternates dense and routed layers (stride 2); "
         f"for an anchor every {cfg.stride} layers use --model=xmod --stride={cfg.stride}")


# What fixes a run's evaluation set (eval_starts): the data, the window length, and how many windows
# (eval_tokens, or eval_iters batches of batch_size rows). A resume keeps them: log.csv's losses are comparable
# from row to row only over one set.
EVAL_SET_KEYS = ('dataset', 'data_dir', 'block_size', 'eval_tokens', 'eval_iters', 'batch_size')


def eval_set(c):
    """The settings that decide the evaluation set, as comparable values (dataset counts only without data_dir,
    eval_tokens only without eval_iters, batch_size only with it)."""
    windows = ('eval_iters', c['eval_iters'], c['batch_size']) if c['eval_iters'] else ('eval_tokens',
                                                                                          c['eval_tokens'])
    return c['data_dir'] or ('dataset', c['dataset']), c['block_size'], windows


def check_eval_set(saved, cfg, defaults):
    """A resume that would evaluate on another set than the run's own is refused: log.csv would mix two sets."""
    was = {k: saved.get(k, defaults[k]) for k in EVAL_SET_KEYS}
    now = {k: getattr(cfg, k) for k in EVAL_SET_KEYS}
    if eval_set(was) == eval_set(now):
        return
    changed = ', '.join(f"--{k}={now[k]!r} (the run's: {was[k]!r})" for k in EVAL_SET_KEYS if now[k] != was[k])
    raise UserError(f"{changed} would change the evaluation set of the run in {cfg.out_dir}, and log.csv would mix "
                    f"losses over two sets: resume with the run's own settings, or start a new run in another "
                    f"--out_dir")


# How train.py said "the family's default" before it took the model's keys from GPTConfig (whose None says it):
# a command line or a checkpoint's config that still says so means None (the keys by today's names: RENAMED).
OLD_FAMILY_DEFAULTS = {'gate': '', 'bce_logits': '', 'expert_hidden': 0, 'depth_balance': -1.0}

# Keys renamed so that each loss coefficient has its loss's name (log.csv's column), {old: new}: the old spelling on a
# command line, in a config file, a checkpoint or run.json means the new key (new_key, upgrade_keys). router_bce was
# the mode of the router BCE's logits, a string, before it became the BCE's coefficient, a number.
RENAMED = {'router_aux': 'router_bce', 'balance': 'depth_balance', 'moe_aux': 'moe_balance'}
OLD_BCE_MODE = ('router_bce', 'bce_logits')       # router_bce with a value that is not a number: the old mode


def new_key(key, value):
    """The key that `key` set to `value` (a command line's string, or a Python value) means today: RENAMED's new name
    for an old one, bce_logits for router_bce with a value that is not a number (the old mode: 'centred', 'raw', ''
    or None for the family's), else key itself."""
    if key == OLD_BCE_MODE[0] and (value is None or isinstance(value, str) and not is_number(value)):
        return OLD_BCE_MODE[1]
    return RENAMED.get(key, key)


def is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def upgrade_keys(values):
    """A dict of keys written by older code (a checkpoint's config or model_args, run.json's config or model_config)
    with today's names (new_key); one already in today's names is returned as it is, in a new dict."""
    return {new_key(k, v): v for k, v in values.items()}


def old_key_names(values):
    """upgrade_keys backwards: a dict of today's keys by their names of before RENAMED (law.load.config_key orders
    runs by them, as it always has; the tests write an older run with them)."""
    old = {new: old for old, new in RENAMED.items()}
    return {(OLD_BCE_MODE[0] if k == OLD_BCE_MODE[1] else old.get(k, k)): v for k, v in values.items()}


def family_defaults(values):
    """{key: None} for each key of the dict values that holds its OLD_FAMILY_DEFAULTS value."""
    return {k: None for k, old in OLD_FAMILY_DEFAULTS.items() if k in values and values[k] == old}


def resume_config(saved, cfg, explicit, defaults):
    """The config of a resumed run: the checkpoint's, with this invocation's session keys and explicit overrides."""
    merged = dict(defaults)
    saved = upgrade_keys(saved)                     # an older checkpoint's keys by today's names
    merged.update({k: v for k, v in saved.items() if k in defaults})
    merged.update(family_defaults(saved))
    for k in set(SESSION_KEYS) | explicit:
        merged[k] = getattr(cfg, k)
    return types.SimpleNamespace(**merged)


# ----------------------------------------------------------------------------------------------------------------------
# Starting a run: from scratch, resuming, or branching from a kept step; the folder's lock; --overwrite

@dataclasses.dataclass
class Start:
    """How a run starts in cfg.out_dir (open_run decides it; nothing is written until claim)."""
    cfg: types.SimpleNamespace      # the run's config: the command line's, or its checkpoint's (resume, branch)
    resume: bool = False            # continue the checkpoint in out_dir
    checkpoint: dict = None         # what it continues or branches from; None: from scratch
    branch: dict = None             # a branch's {'checkpoint': PATH/ckpt_S.pt, 'step': S}, in its resumes too
    lock: RunLock = None            # rank 0's lock on out_dir; None on the other ranks (they write nothing)

    @property
    def ckpt_path(self):
        return os.path.join(self.cfg.out_dir, 'ckpt.pt')

    @property
    def log_path(self):
        return os.path.join(self.cfg.out_dir, 'log.csv')

    @property
    def run_path(self):
        return os.path.join(self.cfg.out_dir, 'run.json')

    def schedule_iters(self, mcfg, n_iters):
        """The length of the learning-rate schedule (the budget a run started with), once the model and the budget
        are known: a resume keeps its checkpoint's and must build the checkpoint's model; a branch is a new run with
        its own, and must have steps left to train."""
        ckpt = self.checkpoint
        if ckpt is not None and dataclasses.asdict(mcfg) != ckpt['model_args']:
            diff = [f"{k}={ckpt['model_args'].get(k)!r} (now {v!r})" for k, v in dataclasses.asdict(mcfg).items()
                    if ckpt['model_args'].get(k) != v]
            raise UserError(f"the checkpoint's model differs from this config: {', '.join(diff)}; resume with the "
                            f"run's own settings")
        if self.branch is not None and not self.resume and self.branch['step'] >= n_iters:
            raise UserError(f"--init_from={self.cfg.init_from} is step {self.branch['step']:,}, and this run's budget "
                            f"is {n_iters:,} steps: nothing left to train (give a larger --max_tokens or --max_iters)")
        return n_iters if not self.resume else ckpt.get('schedule_iters', ckpt['n_iters'])

    def claim(self, info, step):
        """Rank 0, once every check has passed: take the folder and write run.json (info). A resume cuts log.csv back
        to its checkpoint's step; a new run clears the run it replaces (--overwrite, or one never checkpointed)."""
        out_dir = self.cfg.out_dir
        os.makedirs(out_dir, exist_ok=True)
        if self.lock.fd is None:     # no trainer had written here: the lock file is made now, before the first write
            self.lock.take(out_dir, create=True)
            if not self.resume:      # a trainer that took it in between has written a run by now: look again
                check_new_run(out_dir, self.cfg.overwrite, say=False)
        self.lock.write_pid()
        if self.resume:
            torn = truncate_log(self.log_path, step)
            if torn is not None:
                print(f"note: dropped the last row of {self.log_path}, cut mid-line when the run stopped (it began "
                      f"{torn[:30]!r}); training resumes at step {step} and logs the steps after it again")
        else:
            clear_run(out_dir)
        write_json(self.run_path, info)


def open_run(cfg, explicit, defaults, world_size, lock=None):
    """How the run of this config starts, decided before anything is written (bad input raises UserError with the
    folder as it was). lock: rank 0's RunLock, taken here when a trainer has written in out_dir before (it is made
    by claim otherwise); None for the other ranks, and for a caller that only wants the decision.
      scratch  a new run; refused when out_dir holds one, unless --overwrite or it never reached a checkpoint
      resume   the checkpoint in out_dir, with its config (this command line's session keys and overrides on top)
      auto     resume when out_dir has a checkpoint, else scratch
      PATH/ckpt_S.pt  a branch: a new run in its own out_dir from that kept step, with its own budget; a branch whose
               out_dir already holds its checkpoint continues it, like auto (sweep.py reruns its commands)"""
    vars(cfg).update(family_defaults(vars(cfg)))
    check_config(cfg, world_size, explicit)
    if lock is not None:
        lock.take(cfg.out_dir, create=False)
    ckpt_path = os.path.join(cfg.out_dir, 'ckpt.pt')
    branch_from = cfg.init_from if cfg.init_from.endswith('.pt') else None
    own = load_checkpoint(ckpt_path) if branch_from and os.path.exists(ckpt_path) else None
    resume = (cfg.init_from == 'resume' or (cfg.init_from == 'auto' and os.path.exists(ckpt_path)) or
              (own is not None and (own.get('branch_of') or {}).get('checkpoint') == branch_from and
               not cfg.overwrite))
    if resume:
        checkpoint = own or load_checkpoint(ckpt_path)
        cfg = resume_config(checkpoint['config'], cfg, explicit, defaults)
        check_config(cfg, world_size, explicit)         # again: a resumed config comes from the checkpoint
        check_eval_set(checkpoint['config'], cfg, defaults)
        return Start(cfg, True, checkpoint, checkpoint.get('branch_of'), lock)
    checkpoint, branch = None, None
    if branch_from:
        if os.path.realpath(os.path.dirname(branch_from) or '.') == os.path.realpath(cfg.out_dir):
            raise UserError(f"--init_from={branch_from}: a branch needs its own --out_dir (this one holds the run it "
                            f"branches from)")
        checkpoint = load_checkpoint(branch_from, missing='keep that step with --save_steps in the run it comes from')
        cfg = resume_config(checkpoint['config'], cfg, explicit, defaults)
        if 'save_steps' not in explicit:
            cfg.save_steps = ''                          # the parent's branch points are not the branch's
        check_config(cfg, world_size, explicit)
        branch = {'checkpoint': branch_from, 'step': checkpoint['step']}
    check_new_run(cfg.out_dir, cfg.overwrite)
    return Start(cfg, False, checkpoint, branch, lock)


def find_data(cfg, ddp):
    """(folder, meta) of the dataset; prepares the default one when it is missing."""
    folder = cfg.data_dir or os.path.join(ROOT, 'data', cfg.dataset)
    missing = [f for f in ('train.bin', 'val.bin', 'meta.pkl') if not os.path.isfile(os.path.join(folder, f))]
    if missing and not cfg.data_dir and cfg.dataset == 'shakespeare' and not ddp:
        print(f"{folder} is not prepared yet: preparing the char-level Shakespeare dataset now (once) ...")
        from data.shakespeare.prepare import prepare
        from data.tokenizers import DataError
        try:
            prepare('char')
        except (DataError, OSError) as e:
            raise UserError(f"could not prepare the default dataset: {one_line(e)}") from None
        missing = []
    if missing and not cfg.data_dir and not os.path.isdir(folder):
        known = sorted(d for d in os.listdir(os.path.join(ROOT, 'data'))
                       if os.path.isdir(os.path.join(ROOT, 'data', d)) and not d.startswith(('_', '.')))
        best = difflib.get_close_matches(cfg.dataset, known, n=1)
        if best:
            raise UserError(f"no dataset {cfg.dataset!r} (no folder data/{cfg.dataset}/); did you mean "
                            f"--dataset={best[0]}?")
    if missing:
        script = os.path.join('data', cfg.dataset, 'prepare.py')
        if cfg.data_dir:
            how = f"python data/shakespeare/prepare.py --input=FILE --out_dir={cfg.data_dir}"
        elif os.path.isfile(os.path.join(ROOT, script)):
            how = f"python {script}"
        else:
            how = f"write train.bin and val.bin (uint16 token ids) and meta.pkl into data/{cfg.dataset}/"
        raise UserError(f"dataset not ready: {folder} has no {', '.join(missing)}; prepare it with: {how}")
    try:
        with open(os.path.join(folder, 'meta.pkl'), 'rb') as f:
            meta = pickle.load(f)
        meta['vocab_size']
    except Exception as e:
        raise UserError(f"cannot read {os.path.join(folder, 'meta.pkl')}: {type(e).__name__}: {one_line(e)}") from None
    return folder, meta
