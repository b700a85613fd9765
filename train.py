"""
train.py: train one model of any family (dense, mod, xmod, moe) on a CPU, a GPU, or several (DDP).

    python train.py --model=xmod --stride=4             # the default: Shakespeare chars, out-xmod
    python train.py --model=dense                       # its FLOP-matched dense baseline, out-dense
    python train.py config/shakespeare_char_nanogpt.py  # a config file, then any --key=value on top
    torchrun --standalone --nproc_per_node=8 train.py config/openwebtext_xmod.py

As in nanoGPT: the defaults below, then a config file (a path, or a name under config/), then
--key=value, each checked against its default's type; `--help` lists every key. mod/xmod runs are
FLOP-matched to a dense model of dense_layers layers (xmod.match_flops). A run folder holds log.csv,
run.json, ckpt.pt and kept steps ckpt_S.pt; --init_from=resume continues exactly, and
--init_from=PATH/ckpt_S.pt branches a new run from a kept step (one long warmup-stable-decay run
gives every shorter budget, branched at its cooldown). Read `train` top to bottom: the settings, the
data, the model and optimizer, how the run starts, the loop; what scripts share is in run_folder.py.
Exit codes: 0 done (or stopped by stop_iter); 2 bad input (one line on stderr, nothing on disk
touched); 3 the loss became NaN or inf (the last good checkpoint is kept); 130 interrupted.
"""
import contextlib
import csv
import dataclasses
import difflib
import glob
import inspect
import io
import math
import os
import pickle
import random
import signal
import sys
import threading
import time
import types
import warnings
from contextlib import nullcontext

import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # xmod.py, configurator.py, data/
import run_folder  # checkpoints, log.csv, run.json, the run's plan
import xmod
from configurator import LossDiverged, UserError, configure, defaults_of, one_line, run_main
from run_folder import eval_starts, open_split, read_windows, sizes
from xmod import GPT, GPTConfig

ROOT = os.path.dirname(os.path.abspath(__file__))

# --------------------------------------------------------------------------------------------------
# default config values: char-level Shakespeare, sized to finish in a few minutes on a laptop CPU
# I/O
out_dir = ''                # the run folder: log.csv, run.json, ckpt.pt ('' = out-<model>)
eval_interval = 250         # evaluate, log a row and checkpoint every this many steps, and last
eval_tokens = 65536         # the fixed validation set's size (0 = the whole val split)
eval_iters = 0              # nanoGPT's knob: > 0: the val set is eval_iters batches of batch_size
log_interval = 10           # progress bar and NaN check every this many iterations
init_from = 'scratch'       # 'scratch' | 'resume' | 'auto' (resume when out_dir has a checkpoint,
                            # else scratch) | PATH/ckpt_S.pt: a new run in out_dir branched from
                            # that kept step (weights, optimizer, RNG, data position); its schedule
                            # follows its own budget (WSD cooldowns)
save_steps = ''             # steps also kept as out_dir/ckpt_S.pt, comma-separated (branch points)
overwrite = False           # scratch into an out_dir that holds a run replaces it only with this
stop_iter = 0               # stop after this step as if killed (0 = off): resume tests, drills
wandb_log = False           # also log every log.csv row to Weights & Biases (pip install wandb;
                            # WANDB_MODE=offline works)
wandb_project = 'xmod'      # its project
wandb_run_name = ''         # its run name ('' = out_dir's last folder name)
# data
dataset = 'shakespeare'     # reads data/<dataset>/{train.bin, val.bin, meta.pkl}
data_dir = ''               # a folder with those three files instead (tests, custom corpora)
gradient_accumulation_steps = 1   # global: each of world_size DDP ranks runs an equal share
batch_size = 16             # micro-batch size (rows per forward)
block_size = 128            # context length T
# model: every field of xmod.GPTConfig is a key too (--n_head, --stride, --capacity, --gate, ...),
# with its default and comment (--help lists them after n_layer); None = the family's default.
# train.py's own:
model = 'xmod'              # 'dense' | 'mod' | 'xmod' | 'moe'
dense_layers = 4            # depth of the dense baseline a sparse run is FLOP-matched to
match_flops = True          # mod/xmod: capacity (and depth, if n_layer=0) FLOP-matched to it
n_layer = 0                 # 0 = auto: dense/moe use dense_layers, mod/xmod FLOP matching's
# budget: the first one set wins, in the order max_flops, max_tokens, max_iters
max_iters = 2000            # optimizer steps
max_tokens = 0              # training tokens (the way to give a FLOP-matched pair the same data)
max_flops = 0.0             # training FLOPs, counted as 3 x forward FLOPs/token x tokens
# optimizer: AdamW, linear warmup, then the schedule: cosine decay to min_lr, or warmup-stable-decay
learning_rate = 1e-3        # peak learning rate
lr_schedule = 'cosine'      # 'cosine' | 'wsd' (constant, then linear to min_lr over the last
                            # cooldown_frac) | 'constant'
cooldown_frac = 0.2         # wsd: the fraction of the budget that decays to min_lr
weight_decay = 0.1          # AdamW's, on matrices only
beta1 = 0.9                 # AdamW's first-moment decay
beta2 = 0.99                # small batches: a shorter second-moment memory (nanoGPT's char model)
grad_clip = 1.0             # clip the gradient norm to this (0 = off)
decay_lr = True             # False: constant learning_rate after warmup, whatever lr_schedule says
warmup_iters = 100          # linear warmup steps
min_lr = 1e-4               # ~ learning_rate/10 (Chinchilla); set it together with learning_rate
# system
device = ''                 # '' = auto: cuda, then mps, then cpu
dtype = ''                  # '' = bfloat16 autocast on CUDA (float16 without), float32 elsewhere
compile = False             # torch.compile: on a GPU; on a CPU, only long runs gain (docs/speed.md)
cuda_graphs = False         # with compile: the training step replayed from CUDA graphs; CUDA only
peak_tflops = 0.0           # the GPU's peak TFLOP/s for mfu (0 = by its name: bench.PEAK_TFLOPS)
backend = ''                # DDP backend, '' = nccl on GPU, gloo on CPU
threads = 0                 # CPU threads of the whole run (0 = torch's count less the cores other
                            # processes keep busy at the start; sweeps/sweep.py sets each job's)
seed = 1337                 # initial weights, data order and dropout
# --------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals(), GPTConfig, skip=('vocab_size',))   # then GPTConfig's fields
# Keys of this invocation, not the run: a resume takes the rest from the checkpoint
SESSION_KEYS = ('out_dir', 'init_from', 'overwrite', 'stop_iter', 'log_interval', 'device', 'dtype',
                'compile', 'cuda_graphs', 'peak_tflops', 'backend', 'threads')
# stdout not a terminal (a log file, a sweep's train.log): a progress line between evaluations at least this often
PROGRESS_S = 30
# What fixes a run's evaluation set (eval_starts): a resume keeps it, log.csv's losses share a set
EVAL_SET_KEYS = ('dataset', 'data_dir', 'block_size', 'eval_tokens', 'eval_iters', 'batch_size')


# --------------------------------------------------------------------------------------------------
# how a run starts: the device, the checks of a config, resume and branch, the data

def pick_device(name, local_rank=None):
    """--device: '' picks cuda, then mps, then cpu; under DDP each rank takes cuda:local_rank."""
    name = name or ('cuda' if torch.cuda.is_available() else
                    'mps' if torch.backends.mps.is_available() else 'cpu')
    kind, _, index = name.partition(':')
    if kind == 'cuda' and local_rank is not None:
        name, index = f'cuda:{local_rank}', str(local_rank)        # DDP: one GPU per rank
    if kind not in ('cpu', 'cuda', 'mps') or kind == 'cuda' and not (index or '0').isdigit():
        raise UserError(f"--device={name!r}: expected '' (auto) | cpu | cuda | cuda:N | mps")
    if kind != 'cpu' and not (torch.cuda if kind == 'cuda' else torch.backends.mps).is_available():
        raise UserError(f"--device={name}: no {kind} device is available (leave --device empty)")
    n = torch.cuda.device_count()
    if kind == 'cuda' and int(index or 0) >= n:
        raise UserError(f"device {name}: this machine has {n} CUDA device(s)" + (
            " (torchrun: --nproc_per_node at most that)" if local_rank is not None else ''))
    return name


def cpu_threads(threads):
    """(the run's CPU thread count, how it was chosen): --threads=N; else OMP_NUM_THREADS when set; else torch's
    count less the cores other processes keep busy now, at least 1. OpenMP's threads spin-wait for each other at
    every op, so one that shares a core with a busy process stalls the rest (docs/speed.md: 8x slower)."""
    if threads:
        return threads, '--threads'
    if os.environ.get('OMP_NUM_THREADS'):
        return torch.get_num_threads(), 'OMP_NUM_THREADS'
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else range(os.cpu_count() or 1)
    busy = busy_cores(cores)
    return max(1, min(torch.get_num_threads(), len(cores) - round(busy))), f'{busy:.2f} of {len(cores)} cores busy with other processes'


def busy_cores(cores, seconds=0.25):
    """How many of these cores other processes use: their busy share over a quarter second while this process
    sleeps (Linux's /proc/stat), else the 1-minute load average (macOS), else 0."""
    def ticks():       # {cpu: (idle + iowait, all)} in clock ticks
        with open('/proc/stat') as f:
            rows = [line.split() for line in f if line.startswith('cpu') and line[3].isdigit()]
        return {int(r[0][3:]): (int(r[4]) + int(r[5]), sum(map(int, r[1:9]))) for r in rows}
    try:
        a = ticks()
        time.sleep(seconds)
        b = ticks()
        return sum(1 - (b[c][0] - a[c][0]) / max(1, b[c][1] - a[c][1]) for c in cores)
    except (OSError, ValueError, IndexError, KeyError):
        return os.getloadavg()[0] if hasattr(os, 'getloadavg') else 0.0


def cpu_lacks_matrix_instructions(dtype):
    """Whether this CPU lacks oneDNN's instructions for dtype's matmuls (AVX512-BF16/FP16, AMX):
    torch then takes 6-70x float32's time (docs/gpu.md). None where torch does not say."""
    if dtype == 'float32':
        return False
    try:
        short = {'bfloat16': 'bf16', 'float16': 'fp16'}[dtype]
        return not getattr(torch.ops.mkldnn, f'_is_mkldnn_{short}_supported')()
    except (AttributeError, RuntimeError):
        return None


def check_config(cfg, world_size):
    """What no later step would report clearly; the model's keys are GPTConfig's to check."""
    def need(ok, msg):
        if not ok:
            raise UserError(msg)
    need(cfg.init_from in ('scratch', 'resume', 'auto') or cfg.init_from.endswith('.pt'),
         f"--init_from={cfg.init_from!r}: expected scratch | resume | auto | PATH/ckpt_S.pt")
    need(cfg.lr_schedule in ('cosine', 'wsd', 'constant'),
         f"--lr_schedule={cfg.lr_schedule!r}: expected cosine | wsd | constant")
    need(cfg.dtype in ('', 'float32', 'bfloat16', 'float16'),
         f"--dtype={cfg.dtype!r}: expected '' (auto) | float32 | bfloat16 | float16")
    need(0 <= cfg.cooldown_frac <= 1, f"--cooldown_frac={cfg.cooldown_frac}: expected [0, 1]")
    need(all(x.strip().isdigit() for x in cfg.save_steps.split(',')) or not cfg.save_steps.strip(),
         f"--save_steps={cfg.save_steps!r}: expected comma-separated step numbers, e.g. 400,800")
    for k in ('batch_size', 'gradient_accumulation_steps', 'eval_interval', 'log_interval',
              'dense_layers'):
        need(getattr(cfg, k) >= 1, f"--{k}={getattr(cfg, k)}: expected an integer >= 1")
    for k in ('n_layer', 'eval_tokens', 'eval_iters', 'stop_iter', 'max_iters', 'max_tokens',
              'max_flops', 'warmup_iters', 'min_lr', 'weight_decay', 'grad_clip', 'seed',
              'threads'):
        need(getattr(cfg, k) >= 0, f"--{k}={getattr(cfg, k)}: expected a number >= 0")
    need(cfg.max_iters > 0 or cfg.max_tokens > 0 or cfg.max_flops > 0,
         "no budget: set one of --max_iters, --max_tokens or --max_flops to a number > 0")
    need(cfg.learning_rate > 0, f"--learning_rate={cfg.learning_rate}: expected a number > 0")
    need(cfg.min_lr <= cfg.learning_rate or not cfg.decay_lr or cfg.lr_schedule == 'constant',
         f"--learning_rate={cfg.learning_rate:g} is below --min_lr={cfg.min_lr:g}: the decay would "
         f"rise {cfg.min_lr / cfg.learning_rate:.3g}x; set --min_lr too (about learning_rate/10)")
    need(0 <= cfg.beta1 < 1 and 0 <= cfg.beta2 < 1, "--beta1 and --beta2: expected [0, 1)")
    need(not cfg.cuda_graphs or cfg.gradient_accumulation_steps // world_size == 1,
         f"--cuda_graphs=True with --gradient_accumulation_steps={cfg.gradient_accumulation_steps} "
         f"({cfg.gradient_accumulation_steps // world_size} micro-batches per step): gradients summed "
         f"across CUDA-graph replays are not sound; raise --batch_size instead, or leave cuda_graphs off")
    need(cfg.gradient_accumulation_steps % world_size == 0,
         f"--gradient_accumulation_steps={cfg.gradient_accumulation_steps} is not a multiple of "
         f"the world size {world_size}: it counts micro-batches over all ranks, each runs a share")
    try:
        GPTConfig(**dict(run_folder.model_keys(cfg), n_layer=cfg.n_layer or cfg.dense_layers))
    except ValueError as e:
        raise UserError(one_line(e)) from None


def resume_config(saved, cfg, explicit):
    """A resume's or branch's config: the checkpoint's, the session keys and overrides on top."""
    merged = dict(DEFAULTS)
    merged.update({k: v for k, v in saved.items() if k in DEFAULTS})
    for k in set(SESSION_KEYS) | explicit:
        merged[k] = getattr(cfg, k)
    return types.SimpleNamespace(**merged)


def check_eval_set(saved, cfg):
    """A resume must evaluate on the run's own set: log.csv would mix two sets."""
    def eval_set(c):
        n = ('iters', c['eval_iters'], c['batch_size']) if c['eval_iters'] else c['eval_tokens']
        return c['data_dir'] or ('dataset', c['dataset']), c['block_size'], n
    was = {k: saved.get(k, DEFAULTS[k]) for k in EVAL_SET_KEYS}
    now = {k: getattr(cfg, k) for k in EVAL_SET_KEYS}
    if eval_set(was) != eval_set(now):
        changed = [f"--{k}={now[k]!r} (the run's: {was[k]!r})" for k in EVAL_SET_KEYS if now[k] != was[k]]
        raise UserError(f"{', '.join(changed)} would change the evaluation set of the run in "
                        f"{cfg.out_dir} (log.csv would mix two sets): resume with the run's own "
                        f"settings, or use another --out_dir")


def check_new_run(out_dir, overwrite, say=True):
    """A new run replaces one in out_dir only with --overwrite, or if it has no checkpoint."""
    present = [f for f in run_folder.RUN_FILES if os.path.exists(os.path.join(out_dir, f))]
    if not present or overwrite:
        return
    if run_folder.run_state(out_dir) != 'partial' or 'ckpt.pt' in present:
        raise UserError(f"{out_dir} already holds a run ({', '.join(present)}): resume it with "
                        f"--init_from=resume, pick another --out_dir, or replace it with --overwrite=True")
    if say:
        print(f"{out_dir} holds a run that never reached its first checkpoint: replacing it")


def open_run(cfg, explicit, world_size, locks=None):
    """(cfg, resume, checkpoint, branch), decided before anything is written (bad input: UserError,
    the folder as it was). locks: rank 0's list for the folder's lock, taken here when a trainer
    wrote in out_dir before. A branch whose out_dir holds its checkpoint continues it, like auto."""
    check_config(cfg, world_size)
    fd = run_folder.lock(cfg.out_dir, create=False) if locks is not None else None
    if fd is not None:
        locks.append(fd)
    ckpt_path = os.path.join(cfg.out_dir, 'ckpt.pt')
    branch_from = cfg.init_from if cfg.init_from.endswith('.pt') else None
    own = None
    if branch_from and os.path.exists(ckpt_path):
        own = run_folder.load_checkpoint(ckpt_path)
    continues = own is not None and (own.get('branch_of') or {}).get('checkpoint') == branch_from
    if cfg.init_from == 'resume' or (cfg.init_from == 'auto' and os.path.exists(ckpt_path)) or (
            continues and not cfg.overwrite):
        checkpoint = own or run_folder.load_checkpoint(ckpt_path)
        cfg = resume_config(checkpoint['config'], cfg, explicit)
        check_config(cfg, world_size)         # again: a resumed config comes from the checkpoint
        check_eval_set(checkpoint['config'], cfg)
        return cfg, True, checkpoint, checkpoint.get('branch_of')
    checkpoint, branch = None, None
    if branch_from:
        if os.path.realpath(os.path.dirname(branch_from) or '.') == os.path.realpath(cfg.out_dir):
            raise UserError(f"--init_from={branch_from}: a branch needs its own --out_dir (this "
                            f"one holds the run it branches from)")
        checkpoint = run_folder.load_checkpoint(
            branch_from, missing='keep that step with --save_steps in the run it comes from')
        cfg = resume_config(checkpoint['config'], cfg, explicit)
        if 'save_steps' not in explicit:
            cfg.save_steps = ''                  # the parent's branch points are not the branch's
        check_config(cfg, world_size)
        branch = {'checkpoint': branch_from, 'step': checkpoint['step']}
    check_new_run(cfg.out_dir, cfg.overwrite)
    return cfg, False, checkpoint, branch


def truncate_log(path, last_step):
    """On resume: drop the rows after the checkpoint's step and a last line cut mid-line (rows
    are written whole, newline last). Returns the torn line's text, or None."""
    header, rows = run_folder.log_rows(path)
    if header is None:
        return None
    with open(path, 'rb') as f:
        torn = rows.pop() if rows and not f.read().endswith(b'\n') else None
    kept = [r for r in rows if len(r) == len(header) and r[0].isdigit() and int(r[0]) <= last_step]
    buf = io.StringIO()
    csv.writer(buf, lineterminator='\n').writerows([header] + kept)
    run_folder.atomic_write(path, lambda f: f.write(buf.getvalue().encode()))
    return None if torn is None else ','.join(torn)


def find_data(cfg, ddp):
    """(folder, meta) of the dataset; prepares the default one when it is missing."""
    folder = cfg.data_dir or os.path.join(ROOT, 'data', cfg.dataset)
    missing = [f for f in ('train.bin', 'val.bin', 'meta.pkl') if not os.path.isfile(os.path.join(folder, f))]
    if missing and not cfg.data_dir and cfg.dataset == 'shakespeare' and not ddp:
        print(f"{folder} is not prepared yet: preparing char-level Shakespeare now (once) ...")
        from data.shakespeare.prepare import prepare
        from data.tokenizers import DataError
        try:
            prepare('char')
        except (DataError, OSError) as e:
            raise UserError(f"could not prepare the default dataset: {one_line(e)}") from None
        missing = []
    if missing and not cfg.data_dir and not os.path.isdir(folder):
        known = [d for d in os.listdir(os.path.join(ROOT, 'data')) if not d.startswith(('_', '.'))
                 and os.path.isdir(os.path.join(ROOT, 'data', d))]
        best = difflib.get_close_matches(cfg.dataset, sorted(known), n=1)
        if best:
            raise UserError(f"no dataset {cfg.dataset!r} (no folder data/{cfg.dataset}/); did you "
                            f"mean --dataset={best[0]}?")
    if missing:
        script = os.path.join('data', cfg.dataset, 'prepare.py')
        how = (f"python data/shakespeare/prepare.py --input=FILE --out_dir={cfg.data_dir}"
               if cfg.data_dir else f"python {script}" if os.path.isfile(os.path.join(ROOT, script))
               else f"write train.bin, val.bin (uint16 tokens), meta.pkl into data/{cfg.dataset}/")
        raise UserError(f"dataset not ready: {folder} has no {', '.join(missing)}; prepare it with: {how}")
    path = os.path.join(folder, 'meta.pkl')
    try:
        with open(path, 'rb') as f:
            meta = pickle.load(f)
        meta['vocab_size']
    except Exception as e:
        raise UserError(f"cannot read {path}: {type(e).__name__}: {one_line(e)}") from None
    return folder, meta


def rng_state():
    """Every generator's state, as plain values and tensors (the checkpoint loads weights_only)."""
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


# --------------------------------------------------------------------------------------------------
# data, schedule, evaluation

def batch_starts(seed, step, n_rows, n_tokens, T):
    """The global batch's start positions: a pure function of (seed, step), so every family sees
    the same data, a resume the batches it would have seen, DDP ranks one process's batch."""
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, n_tokens - T, size=n_rows)


def get_lr(cfg, it, schedule_iters):
    """Linear warmup, then over the iterations the run started with (schedule_iters):
      cosine    decay from learning_rate to min_lr; beyond them (a run extended on resume), min_lr;
      wsd       warmup-stable-decay (Hagele et al. 2024): learning_rate until cooldown_start, then
                linearly to min_lr. Until then a run does not depend on its budget: one long run,
                branched at each budget's cooldown_start, replaces a run per budget;
      constant  learning_rate (also decay_lr=False)."""
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if not cfg.decay_lr or cfg.lr_schedule == 'constant':
        return cfg.learning_rate
    if cfg.lr_schedule == 'wsd':
        start = run_folder.cooldown_start(cfg, schedule_iters)
        if it < start:
            return cfg.learning_rate
        ratio = min(1.0, (it - start) / max(1, schedule_iters - start))
        return cfg.learning_rate + ratio * (cfg.min_lr - cfg.learning_rate)
    ratio = min(1.0, (it - cfg.warmup_iters) / max(1, schedule_iters - cfg.warmup_iters))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.learning_rate - cfg.min_lr)


@torch.no_grad()
def evaluate(model, raw_model, routing, data, starts, B, T, dev, ctx, rank=0, world_size=1):
    """Mean losses and routing statistics over the fixed validation windows. Batches are dealt out
    to DDP ranks, weighted by their rows; a rank without one runs batch 0 with weight 0."""
    raw_model.eval()                       # causal thresholds frozen, dropout off
    batches = [(i, starts[i:i + B]) for i in range(0, len(starts), B)]
    mine = [(i, b, len(b)) for i, b in batches[rank::world_size]] or [(*batches[0], 0)]
    keys, total = None, None
    for i, b, weight in mine:
        x, y = read_windows(data, b, T, dev)         # (B, T) each
        raw_model.set_draw(row0=i)         # random routing: a window's draw is fixed by its place
        with ctx:
            _, _, aux = model(x, y, routing=routing, return_aux=True)
        values = {**aux['losses'], **xmod.routing_stats(raw_model, aux['layers'], routing)}
        keys = keys or list(values)
        vec = torch.stack([values[k].float() for k in keys]) * weight
        total = vec if total is None else total + vec
    if world_size > 1:
        torch.distributed.all_reduce(total)
    raw_model.train()
    return dict(zip(keys, (total / len(starts)).tolist()))

# --------------------------------------------------------------------------------------------------
# the run, top to bottom

def train(argv, locks):
    # ---- settings: defaults, config file, --key=value; processes; device
    from_file = set()
    cfg, explicit = configure(argv, DEFAULTS, doc=__doc__, source=__file__, from_file=from_file, model=GPTConfig)
    cfg.out_dir = cfg.out_dir or f'out-{cfg.model}'   # each family its own folder: xmod, then dense
    ddp = int(os.environ.get('RANK', -1)) != -1
    rank, local_rank, world_size = 0, 0, 1
    if ddp:
        rank, local_rank, world_size = (int(os.environ[k]) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE'))
    master = rank == 0                             # rank 0 writes the run folder and prints
    # Under torchrun without the key, each rank runs one micro-batch (the batch grows with them)
    follows_world = world_size > 1 and 'gradient_accumulation_steps' not in explicit
    if follows_world:
        cfg.gradient_accumulation_steps = world_size
    # how the run starts: scratch, resume, auto or a branch (decided here; nothing is written yet)
    cfg, resume, ckpt, branch = open_run(cfg, explicit, world_size, locks if master else None)
    dev = pick_device(cfg.device, local_rank if ddp else None)
    device_type = dev.split(':')[0]
    torch_threads = torch.get_num_threads()
    threads, threads_from = torch_threads, f'torch (device {device_type})'
    if device_type == 'cpu':
        threads, threads_from = cpu_threads(cfg.threads)
        torch.set_num_threads(threads)             # from the start: step 0's evaluation too
    if cfg.cuda_graphs and (device_type != 'cuda' or not cfg.compile):
        raise UserError(f"--cuda_graphs=True captures the compiled training step in CUDA graphs: it "
                        f"needs --compile=True and a CUDA device (here {dev}"
                        f"{'' if cfg.compile else ', compile=False'})")
    if cfg.wandb_log and master:     # the package and, unless WANDB_MODE keeps it local, a login
        try:
            import wandb
        except ImportError:
            raise UserError("--wandb_log=True needs the wandb package: pip install wandb") from None
        local = os.environ.get('WANDB_MODE', '') in ('offline', 'dryrun', 'disabled')
        key = os.environ.get('WANDB_API_KEY') or getattr(getattr(wandb, 'api', None), 'api_key', None)
        if not (local or key):
            raise UserError("--wandb_log=True: wandb is not logged in: run `wandb login`, or set "
                            "WANDB_MODE=offline to keep the run local (`wandb sync` uploads it later)")
    # --dtype '' = bfloat16 on a CUDA device that has it, float16 on one that lacks it (its grad
    # scaler keeps it trainable, nanoGPT's choice), float32 elsewhere
    dtype = cfg.dtype or ('float32' if device_type != 'cuda' else
                          'bfloat16' if torch.cuda.is_bf16_supported() else 'float16')
    ctx = nullcontext() if dtype == 'float32' else torch.autocast(device_type, dtype=getattr(torch, dtype))
    if dtype == 'float16' and device_type not in ('cuda', 'cpu'):
        raise UserError(f"--dtype=float16 needs a CUDA device or the CPU (its grad scaler), not "
                        f"{device_type} (use float32 or bfloat16)")

    # ---- data: the model's plan and budget; batches are a pure function of (seed, step)
    folder, meta = find_data(cfg, ddp)
    T, B = cfg.block_size, cfg.batch_size
    n_train, n_val = len(open_split(folder, 'train')), len(open_split(folder, 'val'))
    for split, n in (('validation', n_val), ('training', n_train)):
        if n < T + 1:
            raise UserError(f"block_size={T} is larger than the {split} split ({n} tokens in "
                            f"{folder}): lower --block_size")
    mcfg, tokens_per_iter, fpt, n_iters = sizes(cfg, meta)
    if ckpt is not None and dataclasses.asdict(mcfg) != ckpt['model_args']:
        diff = [f"{k}={ckpt['model_args'].get(k)!r} (now {v!r})"
                for k, v in dataclasses.asdict(mcfg).items() if ckpt['model_args'].get(k) != v]
        raise UserError(f"the checkpoint's model differs from this config: {', '.join(diff)}; "
                        f"resume with the run's own settings")
    if branch is not None and not resume and branch['step'] >= n_iters:
        raise UserError(f"--init_from={cfg.init_from} is step {branch['step']:,}, and this run's "
                        f"budget is {n_iters:,} steps: nothing left to train (give a larger "
                        f"--max_tokens or --max_iters)")
    # the schedule's length is fixed when a run starts: a resume with a larger budget goes on at
    # min_lr; a branch is a new run, its schedule follows its own budget
    schedule_iters = ckpt.get('schedule_iters', ckpt['n_iters']) if resume else n_iters
    starts = eval_starts(n_val, T, cfg.eval_iters * B * T if cfg.eval_iters else cfg.eval_tokens, B)
    save_steps = {int(x) for x in cfg.save_steps.split(',') if x.strip()}
    gas_local = cfg.gradient_accumulation_steps // world_size     # this rank's micro-batches

    # ---- the model and its optimizer; DDP joins the ranks here, once all of them passed the checks
    if ddp:
        backend = cfg.backend or ('nccl' if device_type == 'cuda' else 'gloo')
        if device_type == 'cuda':
            torch.cuda.set_device(dev)          # before the process group: nccl binds this GPU
        bound = {'device_id': torch.device(dev)} if backend == 'nccl' else {}
        torch.distributed.init_process_group(backend=backend, **bound)
    if device_type == 'cuda':
        torch.set_float32_matmul_precision('high')    # TF32 for what autocast leaves in float32
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)                    # the initial weights: a function of the seed
    raw_model = GPT(mcfg)
    with warnings.catch_warnings():     # step 0's causal eval runs before any calibration, by
        warnings.simplefilter('ignore')   # design: the model's one warning is spent here
        raw_model.warn_if_uncalibrated()
    torch.manual_seed(cfg.seed + rank)             # dropout: its own stream per rank
    if ckpt is not None:
        try:
            raw_model.load_state_dict(run_folder.clean_state_dict(ckpt['model']))
        except RuntimeError as e:
            raise UserError(f"{cfg.out_dir}/ckpt.pt: the weights do not fit the model: {one_line(e)}") from None
    raw_model.to(dev)
    scaler = torch.amp.GradScaler(device_type, enabled=dtype == 'float16')
    optimizer = raw_model.configure_optimizers(cfg.weight_decay, cfg.learning_rate,
                                               (cfg.beta1, cfg.beta2), device_type)
    if ckpt is not None:
        optimizer.load_state_dict(ckpt['optimizer'])
        if ckpt.get('scaler'):
            scaler.load_state_dict(ckpt['scaler'])
        set_rng_state(ckpt['rng'][rank] if rank < len(ckpt['rng']) else ckpt['rng'][0])
    if cfg.compile:   # causal routing reads its padded count k_max from the data: in the graph
        torch._dynamo.config.capture_scalar_outputs = True
    model = torch.compile(raw_model) if cfg.compile else raw_model      # what evaluation calls
    # --cuda_graphs: the training step (top-k routing, static shapes) replayed from CUDA graphs;
    # evaluation keeps the default mode (causal routing's sizes come from the data)
    train_model = torch.compile(raw_model, mode='reduce-overhead') if cfg.cuda_graphs else model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # MoD's plain gate leaves Router.gain out of the graph. No buffer syncing: the RoPE tables
        # and thresholds agree by construction (calibrate gathers every rank's scores), random
        # routing's draw is each rank's own; torch < 2.13 knows only broadcast_buffers
        unused = mcfg.gate == 'plain' and bool(raw_model.routed_layers())
        new = 'forward_sync_buffers' in inspect.signature(DDP).parameters
        no_sync = {'forward_sync_buffers' if new else 'broadcast_buffers': False}
        train_model = DDP(train_model, device_ids=[local_rank] if device_type == 'cuda' else None,
                          find_unused_parameters=unused, **no_sync)

    # ---- the run's start: run.json written (the folder is this run's now), what happens said
    iter_num = ckpt['step'] if ckpt else 0
    run_path, log_path, ckpt_path = (os.path.join(cfg.out_dir, f) for f in ('run.json', 'log.csv', 'ckpt.pt'))
    params_total, params_active = raw_model.num_params(), raw_model.num_active_params()
    layout = xmod.layout_string(mcfg)
    info = {'config': {k: getattr(mcfg, k, v) for k, v in vars(cfg).items()},  # model's: resolved
            'model_config': dataclasses.asdict(mcfg), 'layout': layout,
            'params_total': params_total, 'params_active': params_active, 'flops_per_token': fpt,
            'tokens_per_iter': tokens_per_iter, 'n_iters': n_iters, 'world_size': world_size,
            'seed': cfg.seed, **run_folder.git_state(ROOT), 'torch_version': torch.__version__,
            'device': dev, 'dtype': dtype, 'threads': threads, 'threads_from': threads_from,
            'finished': False, 'final': None}
    if branch:
        info['branch_of'] = branch
    last_row = ckpt.get('last_row') if resume else None    # the checkpoint's log.csv row
    if master:
        os.makedirs(cfg.out_dir, exist_ok=True)
        if not locks:     # no trainer had written here: the lock file is made before the first write
            locks.append(run_folder.lock(cfg.out_dir, create=True))
            if not resume:    # a trainer that took it in between has written a run: look again
                check_new_run(cfg.out_dir, cfg.overwrite, say=False)
        if resume:            # log.csv cut back to the checkpoint's step; a row lost in a cut, again
            torn = truncate_log(log_path, iter_num)
            _, rows = run_folder.log_rows(log_path)
            relog = last_row is not None and (not rows or int(rows[-1][0]) < last_row['step'])
            if relog:
                run_folder.append_log(log_path, last_row)
            if torn is not None:
                print(f"note: dropped the last row of {log_path}, cut mid-line when the run stopped "
                      f"(it began {torn[:30]!r}); " + (
                          f"wrote step {iter_num}'s row again from the checkpoint" if relog else
                          f"training resumes at step {iter_num} and logs the steps after it"))
        else:                 # a new run clears the run it replaces (--overwrite, or no checkpoint)
            kept = glob.glob(os.path.join(glob.escape(cfg.out_dir), 'ckpt_*.pt'))
            for f in run_folder.RUN_FILES + tuple(kept):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(cfg.out_dir, f))
        run_folder.write_json(run_path, info)
        if follows_world and ckpt is None:
            print(f"note: --gradient_accumulation_steps follows the world size: "
                  f"{cfg.gradient_accumulation_steps}, one micro-batch of {B} rows per rank; pass "
                  f"--gradient_accumulation_steps=N, a multiple of {world_size}, to set it")
        sparse = cfg.model in ('mod', 'xmod')
        if 'n_layer' in from_file and ckpt is None and sparse and cfg.match_flops:
            print(f"note: n_layer={cfg.n_layer} (from the config file) is the {cfg.model} model's "
                  f"own depth, FLOP-matched to a dense model of dense_layers={cfg.dense_layers} "
                  f"layers; to match a {cfg.n_layer}-layer dense model, run with "
                  f"--dense_layers={cfg.n_layer} --n_layer=0")
        routed = (f", capacity {mcfg.capacity:.4f} ({xmod.routed_k(mcfg.capacity, T)}/{T} tokens)"
                  if 'routed' in xmod.layer_kinds(mcfg) else
                  ', no routed layer: the dense model' if sparse else '')
        matched = f", FLOP-matched to dense {cfg.dense_layers} layers" if sparse and cfg.match_flops else ''
        print(f"model {mcfg.model}: layout {layout} ({mcfg.n_layer} layers{routed}){matched}")
        print(f"params {params_total:,} total, {params_active:,.0f} active (non-embedding), rho "
              f"{params_total / params_active:.2f}; {fpt / 1e6:.3f}M FLOPs/token forward")
        shown = folder if os.path.relpath(folder).startswith('..') else os.path.relpath(folder)
        print(f"data {shown}: {n_train:,} train / {n_val:,} val tokens, {meta.get('tokenizer')} "
              f"vocab {meta['vocab_size']:,}; eval set {len(starts)} windows x {T} = {len(starts) * T:,} tokens")
        print(f"budget {n_iters:,} iters x {tokens_per_iter:,} tokens = "
              f"{n_iters * tokens_per_iter / 1e6:.2f}M tokens, "
              f"{3 * fpt * n_iters * tokens_per_iter:.3g} FLOPs; device {dev} {dtype}"
              f"{f' x {world_size} ranks' if ddp else ''}; out_dir {cfg.out_dir}"
              + (f"; resuming at step {iter_num}" if resume else ''))
        if threads < torch_threads and threads_from.endswith('processes'):
            print(f"note: {threads_from}: training on {threads} thread(s), not torch's {torch_threads} (a thread "
                  f"that shares a core with a busy process stalls the others); --threads=N sets the count")
        slow = device_type == 'cpu' and cpu_lacks_matrix_instructions(dtype)
        if slow is not False:         # None: torch cannot tell
            print(f"note: {'this CPU has' if slow else 'on a CPU with'} no matrix instructions for "
                  f"{dtype}, training takes 8x float32's time or more (docs/gpu.md): --dtype={dtype} "
                  f"on a CPU is for testing the GPU path, float32 trains faster")
        if branch and not resume:
            at = run_folder.cooldown_start(cfg, schedule_iters)
            sched = f"; its cooldown starts at step {at:,}" if cfg.lr_schedule == 'wsd' else ''
            print(f"branch of {branch['checkpoint']} at step {branch['step']:,}{sched}")
        if n_iters > schedule_iters:
            print(f"extending: the learning-rate schedule of this run ended at step "
                  f"{schedule_iters:,}; steps {schedule_iters:,}-{n_iters:,} run at min_lr={cfg.min_lr:g}")
    tracker = None
    if cfg.wandb_log and master:   # nanoGPT's convention: each log.csv row goes to W&B too
        import wandb
        tracker = wandb.init(project=cfg.wandb_project, dir=cfg.out_dir, config=vars(cfg),
                             name=cfg.wandb_run_name or os.path.basename(os.path.abspath(cfg.out_dir)))
    # the GPU's peak for mfu: --peak_tflops, else the datasheet's for its name (bench.py's table)
    peak = cfg.peak_tflops
    if not peak and device_type == 'cuda':
        from bench import device_peak_tflops
        peak = device_peak_tflops(dev, dtype)

    # where training stands besides its weights: the checkpoint's (a resume, or a branch's step)
    c = ckpt or {}
    best_val_loss, last_eval = c.get('best_val_loss', float('inf')), c.get('last_eval')
    t0 = time.time() - c.get('elapsed_s', 0.0)     # the clock goes on from the runs this continues
    train_sum = torch.full((), c.get('train_loss_sum', 0.0), device=dev)   # (): LM loss since eval
    train_steps = c.get('train_loss_steps', 0)
    ckpt = c = None                                # free the memory

    def mean_loss(total, n, what='training loss'):
        """A loss summed over n steps, averaged over ranks; NaN or inf stops the run."""
        if ddp:
            torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.AVG)
        mean = total.item() / n
        if not math.isfinite(mean):
            raise diverged(what, mean, '; lower --learning_rate or raise --warmup_iters and resume '
                                       'with --init_from=resume')
        return mean

    def diverged(what, value, advice=''):
        if master:
            info['diverged'] = {'step': iter_num, 'what': what}
            run_folder.write_json(run_path, info)
        return LossDiverged(f"the {what} is {value} at step {iter_num}: stopping. The last good "
                            f"checkpoint ({ckpt_path}, step "
                            f"{last_eval['step'] if last_eval else 'none'}) is kept{advice}")

    def checkpoint(kept=False):
        """Enough to continue exactly (the step fixes the data position) and to branch (kept: a
        step of --save_steps also holds the training loss summed since the last evaluation)."""
        loss_sum = 0.0
        if kept:
            loss_sum = train_sum.clone()
            if ddp:
                torch.distributed.all_reduce(loss_sum, op=torch.distributed.ReduceOp.AVG)
            loss_sum = loss_sum.item()
        rngs = [rng_state()]
        if ddp:
            rngs = [None] * world_size
            torch.distributed.all_gather_object(rngs, rng_state())
        return {'model': raw_model.state_dict(), 'optimizer': optimizer.state_dict(),
                'scaler': scaler.state_dict(), 'config': vars(cfg),
                'model_args': dataclasses.asdict(mcfg), 'step': iter_num,
                'data': {'seed': cfg.seed, 'step': iter_num, 'tokens': iter_num * tokens_per_iter},
                'n_iters': n_iters, 'schedule_iters': schedule_iters, 'best_val_loss': best_val_loss,
                'elapsed_s': time.time() - t0, 'last_eval': last_eval, 'last_row': last_row,
                'rng': rngs, 'meta': meta, 'branch_of': branch, 'train_loss_sum': loss_sum,
                'train_loss_steps': train_steps if kept else 0}

    # ---- the loop: evaluate (a log.csv row, then the checkpoint), then one optimizer step
    bar = tqdm(total=n_iters, initial=iter_num, disable=True if not master else None,
               dynamic_ncols=True, unit='it', leave=False)
    evaluated_at = iter_num if resume or branch else -1     # its evaluation is already logged
    window, window_steps, t_mark = torch.zeros((), device=dev), 0, time.time()   # the bar's
    timed_steps, t_timed = -1, time.time()   # tokens_per_s: steps after the first since the eval
    trained = False                          # a training step done here: compiled evaluation
    progress, t_said = master and not sys.stdout.isatty(), time.time()   # no bar on a log: a line instead
    val = open_split(folder, 'val')
    # Ctrl-C or SIGTERM: the loop saves the state at the next step boundary and stops (a second one stops at once).
    # Not under DDP, where the ranks would stop at different steps: there it stops at once
    stop, handlers = [], {}

    def on_signal(signum, frame):
        if stop:
            raise KeyboardInterrupt
        stop.append(signum)
        os.write(2, b"\ntrain.py: stopping after this step, once its state is saved (again: at once)\n")
    if not ddp and threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            if (iter_num % cfg.eval_interval == 0 or iter_num == n_iters) and iter_num != evaluated_at:
                t_eval = time.time()
                # the training figures since the last row: the loss, and the speed without the first
                # step after an evaluation (which compiles, or warms up): a row after one has none
                train_loss = mean_loss(train_sum, train_steps) if train_steps else ''
                tokens_per_s = (round(timed_steps * tokens_per_iter / (t_eval - t_timed), 1)
                                if timed_steps > 0 else '')
                # val_loss (top-k routing), val_loss_causal (causal: the honest one), then each
                # mode's statistics. Before the first training step, eager: training compiles first
                ev_model = model if trained else raw_model
                ev_args = (val, starts, B, T, dev, ctx, rank, world_size)
                topk = evaluate(ev_model, raw_model, 'topk', *ev_args)
                if mcfg.model == 'dense':       # routes nothing: its causal loss is its loss
                    ev = {'val_loss': topk['lm'], 'val_loss_causal': topk['lm']}
                else:
                    causal = evaluate(ev_model, raw_model, 'causal', *ev_args)
                    ev = {'val_loss': topk.pop('lm'), 'val_loss_causal': causal['lm'], **topk,
                          **{k: v for k, v in causal.items() if k.startswith('causal_')}}
                if not all(math.isfinite(v) for v in (ev['val_loss'], ev['val_loss_causal'])):
                    raise diverged('validation loss', ev['val_loss'])
                tokens = iter_num * tokens_per_iter
                # model FLOPs utilisation per GPU: training FLOPs/s (3 x forward) over the peaks
                mfu = (round(3 * fpt * tokens_per_s / (peak * 1e12 * world_size), 4)
                       if peak and tokens_per_s else '')
                row = {'step': iter_num, 'tokens': tokens, 'flops': 3 * fpt * tokens,
                       'lr': get_lr(cfg, iter_num, schedule_iters),
                       'elapsed_s': round(time.time() - t0, 3), 'tokens_per_s': tokens_per_s,
                       'mfu': mfu, 'train_loss': train_loss, **ev}
                best_val_loss = min(best_val_loss, row['val_loss_causal'])
                last_eval = {k: row[k] for k in ('step', 'tokens', 'flops', 'val_loss',
                                                 'val_loss_causal')}
                last_row = row
                state = checkpoint()
                if master:      # the row first: a kill in between loses the row on resume, not the step
                    run_folder.append_log(log_path, row)
                    if tracker:
                        tracker.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=iter_num)
                    run_folder.save_checkpoint(state, ckpt_path)
                    train_txt = f"train {train_loss:.4f}, " if train_loss != '' else ''
                    tqdm.write(f"step {iter_num:>6}: {train_txt}val {row['val_loss']:.4f}, val "
                               f"causal {row['val_loss_causal']:.4f}, {row['elapsed_s']:.0f}s")
                    t_said = time.time()
                train_sum.zero_()
                train_steps, timed_steps = 0, -1
                t_mark += time.time() - t_eval         # the progress bar's speed leaves the eval out
            if iter_num in save_steps:      # --save_steps: a copy kept as out_dir/ckpt_S.pt
                state = checkpoint(kept=True)
                if master:
                    run_folder.save_checkpoint(state, os.path.join(cfg.out_dir, f'ckpt_{iter_num}.pt'))
            if iter_num >= n_iters:
                break
            if stop:       # as a --save_steps copy is (the loss since the evaluation too), atomically
                state = checkpoint(kept=True)
                run_folder.save_checkpoint(state, ckpt_path)
                raise KeyboardInterrupt(f"saved step {iter_num} to {ckpt_path}: continue from it with "
                                        f"--init_from=resume")

            # one optimizer step over gradient_accumulation_steps micro-batches of the global batch
            lr = get_lr(cfg, iter_num, schedule_iters)
            for group in optimizer.param_groups:
                group['lr'] = lr
            rows = batch_starts(cfg.seed, iter_num, B * cfg.gradient_accumulation_steps, n_train, T)
            data = open_split(folder, 'train')
            step_loss, step_layers = torch.zeros((), device=dev), []
            for micro in range(gas_local):
                first = (rank * gas_local + micro) * B            # this rank's slice of the batch
                x, y = read_windows(data, rows[first:first + B], T, dev)     # (B, T) each
                raw_model.set_draw(cfg.seed, iter_num, row0=first)   # random routing's draw
                # DDP: all-reduce gradients only on the last micro-batch
                with train_model.no_sync() if ddp and micro < gas_local - 1 else nullcontext():
                    if cfg.cuda_graphs:
                        torch.compiler.cudagraph_mark_step_begin()   # old outputs may go
                    with ctx:
                        _, loss, aux = train_model(x, y, return_aux=True)
                    step_loss += aux['losses']['lm'] / gas_local            # the LM loss, logged
                    scaler.scale(loss / gas_local).backward()               # LM + auxiliary
                # calibrate reads the scores after the step's last micro-batch: a CUDA-graph replay
                # overwrites its outputs in place, so each micro-batch's scores (B, T) are copied
                layers = aux['layers']
                if cfg.cuda_graphs:
                    layers = [a._replace(scores=a.scores.clone())
                              if isinstance(a, xmod.RoutedAux) else None for a in layers]
                step_layers.append(layers)
            raw_model.calibrate(step_layers)   # the causal thresholds, from the whole global batch
            if cfg.grad_clip > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            iter_num += 1
            trained = True
            window += step_loss
            train_sum += step_loss
            window_steps, train_steps, timed_steps = window_steps + 1, train_steps + 1, timed_steps + 1
            if timed_steps == 0:
                t_timed = time.time()
            bar.update(1)
            if iter_num % cfg.log_interval == 0:         # the progress bar, and a NaN check
                mean = mean_loss(window, window_steps)
                now = time.time()
                speed = window_steps * tokens_per_iter / (now - t_mark)
                bar.set_postfix(loss=f"{mean:.4f}", tok_s=f"{speed:,.0f}")
                if progress and now - t_said >= PROGRESS_S:
                    print(f"step {iter_num:>6}: loss {mean:.4f}, {speed:,.0f} tokens/s, {now - t0:.0f}s")
                    t_said = now
                window.zero_()
                window_steps, t_mark = 0, now
            if cfg.stop_iter and iter_num == cfg.stop_iter and iter_num < n_iters:
                bar.close()
                if master:
                    print(f"stopped after step {iter_num} (stop_iter), as if killed: the checkpoint "
                          f"is at step {last_eval['step'] if last_eval else 'none'}; continue with "
                          f"--init_from=resume")
                return 0
    except KeyboardInterrupt as e:
        raise KeyboardInterrupt(str(e) or (
            f"continue from the checkpoint of step {last_eval['step']} with --init_from=resume"
            if last_eval else "no checkpoint was written yet: run the same command again (it "
                              "starts the run over)")) from None
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    bar.close()
    if tracker:
        tracker.finish()
    if master:
        info.update(finished=True, final=last_eval)
        run_folder.write_json(run_path, info)
        if cfg.cuda_graphs:       # a graph inductor cannot capture runs uncaptured, and it says so only in logs
            skips = torch._dynamo.utils.counters['inductor']['cudagraph_skips']
            print(f"cuda_graphs: {skips} compiled graph(s) left out of CUDA graphs"
                  + (" (why: rerun with TORCH_LOGS=cudagraphs)" if skips else ""))
        print(f"done: {n_iters:,} iters, {time.time() - t0:.0f}s; val_loss "
              f"{last_eval['val_loss']:.4f}, val_loss_causal {last_eval['val_loss_causal']:.4f}; "
              f"sample with: python sample.py --out_dir={cfg.out_dir}; its curves: python tools/plot_run.py {cfg.out_dir}")
    if ddp:         # the ranks leave together, each on its own device (nccl: never a guessed one)
        torch.distributed.barrier(**({'device_ids': [local_rank]} if device_type == 'cuda' else {}))
    return 0


def main(argv=None):
    threads, locks = torch.get_num_threads(), []     # the run folder's lock, once taken
    try:
        return run_main('train.py', lambda args: train(args, locks), argv,
                        interrupted='nothing was written: run the same command again')
    finally:
        for fd in locks:
            os.close(fd)         # the kernel would at exit; a caller's process (tests) may train again
        torch.set_num_threads(threads)   # --threads changed it: a caller gets its own back


if __name__ == '__main__':
    sys.exit(main())
