"""
train.py: train one model of any family (dense, mod, xmod, moe) on a CPU, one GPU, or several GPUs with DDP.

    python train.py --model=xmod --stride=4                  # the default: char-level Shakespeare, into out-xmod
    python train.py --model=dense                            # its FLOP-matched dense baseline, into out-dense
    python train.py config/shakespeare_char_nanogpt.py       # a config file, then any --key=value on top
    torchrun --standalone --nproc_per_node=8 train.py config/openwebtext_xmod.py

Configuration works as in nanoGPT: the defaults below, then a config file (a path, or a name under config/), then
--key=value, each checked against its default's type. `python train.py --help` lists every key.

Sizing: dense_layers is the depth of the dense baseline that a sparse run is FLOP-matched to. model=dense uses
n_layer (0 = dense_layers); mod/xmod with match_flops=True solve depth and capacity so that forward FLOPs/token are
within 2% of that dense model (xmod.match_flops); moe keeps the dense depth, its active parameters match dense.

Outputs in out_dir: log.csv (a row per evaluation), run.json (the resolved config, sizes, FLOPs, final losses),
ckpt.pt (atomic, at every evaluation), ckpt_S.pt (a kept copy of step S, --save_steps). --init_from=resume continues
exactly where a run stopped. The learning-rate schedule is fixed when a run starts: resuming with a larger budget
extends it at min_lr. --init_from=PATH/ckpt_S.pt branches a new run (its own out_dir, budget and schedule) from a
kept step: one long warmup-stable-decay run gives every shorter budget by branching at that budget's cooldown.
Read `train` top to bottom, as nanoGPT's train.py: the settings, the data, the model and its optimizer, how the run
starts (scratch, resume, auto or a branch), the loop. What other scripts share of a run (checkpoints, log.csv,
run.json, its plan) is in run_folder.py.
Exit codes: 0 done (or stopped by stop_iter); 2 bad input (one line on stderr, nothing on disk touched);
3 the loss became NaN or inf (the last good checkpoint is kept); 130 interrupted.
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
import subprocess
import sys
import time
import types
import warnings
from contextlib import nullcontext

import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # xmod.py, configurator.py and data/ live here
import run_folder  # checkpoints, log.csv, run.json, the run's plan
import xmod
from configurator import LossDiverged, UserError, configure, defaults_of, one_line, run_main
from run_folder import eval_starts, open_split, read_windows, sizes
from xmod import GPT, GPTConfig

ROOT = os.path.dirname(os.path.abspath(__file__))

# -----------------------------------------------------------------------------------------------------------------
# default config values: char-level Shakespeare, sized to finish in a few minutes on a laptop CPU
# I/O
out_dir = ''                # the run folder: log.csv, run.json, ckpt.pt ('' = out-<model>, e.g. out-xmod)
eval_interval = 250         # evaluate, log a row and checkpoint every this many iterations (and at the end)
eval_tokens = 65536         # size of the fixed validation set (0 = the whole val split), in whole batches; seconds on a CPU
eval_iters = 0              # nanoGPT's knob: if > 0, the val set is eval_iters batches of batch_size windows instead
log_interval = 10           # progress bar and NaN check every this many iterations
init_from = 'scratch'       # 'scratch' | 'resume' | 'auto' (resume when out_dir has a checkpoint, else scratch) |
                            # PATH/ckpt_S.pt: a new run in out_dir branched from that kept step (weights, optimizer,
                            # RNG, data position); its schedule follows its own budget (WSD cooldowns)
save_steps = ''             # comma-separated steps whose checkpoint is also kept as out_dir/ckpt_S.pt (branch points)
overwrite = False           # scratch into an out_dir that already holds a run replaces it only with this
stop_iter = 0               # stop after this iteration as if killed (0 = off): resume tests, preemption drills
wandb_log = False           # also log every log.csv row to Weights & Biases (pip install wandb; WANDB_MODE=offline works)
wandb_project = 'xmod'      # its project
wandb_run_name = ''         # its run name ('' = out_dir's last folder name)
# data
dataset = 'shakespeare'     # reads data/<dataset>/{train.bin, val.bin, meta.pkl}
data_dir = ''               # a folder with those three files instead (tests, custom corpora)
gradient_accumulation_steps = 1   # global: each of world_size DDP ranks runs gradient_accumulation_steps/world_size
batch_size = 16             # micro-batch size (rows per forward)
block_size = 128            # context length T
# model: every field of xmod.GPTConfig is a key too (--n_head, --stride, --capacity, --gate, ...), with the default
# and the comment it has there (--help lists them after n_layer); None = the family's default. train.py's own:
model = 'xmod'              # 'dense' | 'mod' | 'xmod' | 'moe'
dense_layers = 4            # depth of the dense baseline a sparse run is FLOP-matched to
match_flops = True          # mod/xmod: solve capacity (and depth, when n_layer=0) to match the dense FLOPs/token
n_layer = 0                 # 0 = auto: dense/moe use dense_layers, mod/xmod solve it by FLOP matching
# budget: the first one that is set wins, in the order max_flops, max_tokens, max_iters; the cosine decays over it
max_iters = 2000            # optimizer steps
max_tokens = 0              # training tokens (the way to give a FLOP-matched pair the same data)
max_flops = 0.0             # training FLOPs, counted as 3 x forward FLOPs/token x tokens
# optimizer: AdamW, linear warmup, then the schedule: cosine decay to min_lr, or warmup-stable-decay
learning_rate = 1e-3        # peak learning rate
lr_schedule = 'cosine'      # 'cosine' | 'wsd' (constant, then linear to min_lr over the last cooldown_frac) | 'constant'
cooldown_frac = 0.2         # wsd: the fraction of the budget that decays to min_lr
weight_decay = 0.1          # AdamW's, on matrices only
beta1 = 0.9                 # AdamW's first-moment decay
beta2 = 0.99                # small batches: a shorter second-moment memory, as nanoGPT's char model
grad_clip = 1.0             # clip the gradient norm to this (0 = off)
decay_lr = True             # False: constant learning_rate after warmup, whatever lr_schedule says (nanoGPT's key)
warmup_iters = 100          # linear warmup steps
min_lr = 1e-4               # ~ learning_rate/10 (Chinchilla); set it together with learning_rate
# system
device = ''                 # '' = auto: cuda, then mps, then cpu
dtype = ''                  # '' = auto: bfloat16 autocast on CUDA (float16 without bf16 support), float32 elsewhere
compile = False             # torch.compile: on a GPU; on a CPU, only long runs gain (docs/speed.md)
cuda_graphs = False         # with compile: the training step replayed from CUDA graphs (reduce-overhead); CUDA only
peak_tflops = 0.0           # the GPU's peak TFLOP/s for log.csv's mfu (0 = by device name, train.PEAK_TFLOPS)
backend = ''                # DDP backend, '' = nccl on GPU, gloo on CPU
threads = 0                 # CPU threads for the whole run (0 = torch's default; sweeps/sweep.py sets one per job)
seed = 1337                 # initial weights, data order and dropout
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals(), GPTConfig, skip=('vocab_size',))   # the settings above, then GPTConfig's fields


# -----------------------------------------------------------------------------------------------------------------
# devices: what --device and --dtype become (sample.py, tools/downstream.py and bench.py use these too)

def pick_device(name, local_rank=None):
    """'' picks cuda, then mps, then cpu; under DDP each rank takes cuda:local_rank."""
    if not name:
        name = 'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else 'cpu'
    kind, _, index = name.partition(':')
    if kind not in ('cpu', 'cuda', 'mps'):
        raise UserError(f"--device={name!r}: expected '' (auto) | cpu | cuda | cuda:N | mps")
    if kind == 'cuda' and not torch.cuda.is_available():
        raise UserError(f"--device={name}: no CUDA device is available (leave --device empty to pick one)")
    if kind == 'mps' and not torch.backends.mps.is_available():
        raise UserError(f"--device={name}: MPS is not available (leave --device empty to pick one)")
    if kind == 'cuda' and local_rank is not None:
        name, index = f'cuda:{local_rank}', str(local_rank)        # DDP: one GPU per rank
    if kind == 'cuda' and not (index or '0').isdigit():
        raise UserError(f"--device={name!r}: expected cuda or cuda:N")
    if kind == 'cuda' and int(index or 0) >= torch.cuda.device_count():
        raise UserError(f"device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)"
                        + (" (torchrun: --nproc_per_node at most that)" if local_rank is not None else ''))
    return name


DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}


def autocast(name, device_type, cuda_fallback='float16', choices=('',) + tuple(DTYPES)):
    """--dtype -> (the dtype's name, the context forward passes run in: autocast to it, none for float32).
    '' = auto: bfloat16 on a CUDA device that has it, cuda_fallback on one that lacks it, float32 elsewhere.
    train.py falls back to float16, which its grad scaler keeps trainable (nanoGPT's choice); sample.py to float32,
    since a model trained in another dtype need not fit float16's range."""
    if name not in choices:
        shown = ' | '.join(c or "'' (auto)" for c in choices)
        raise UserError(f"--dtype={name!r}: expected {shown}")
    dtype = name or ('float32' if device_type != 'cuda' else
                     'bfloat16' if torch.cuda.is_bf16_supported() else cuda_fallback)
    ctx = nullcontext() if dtype == 'float32' else torch.autocast(device_type=device_type, dtype=DTYPES[dtype])
    return dtype, ctx


# Dense (no sparsity) bf16/fp16 tensor-core peaks from NVIDIA's datasheets, TFLOP/s, for MFU: the first name that is
# part of torch.cuda.get_device_name wins, so the more specific names come first. Datasheets quote "with sparsity",
# twice these. Not in the table: pass --peak_tflops.
PEAK_TFLOPS = (('H100 PCIe', 756.0), ('H100 NVL', 835.0), ('H200 NVL', 835.0), ('H100', 989.0), ('H200', 989.0),
               ('H800', 989.0), ('B200', 2250.0), ('A100', 312.0), ('A800', 312.0), ('L40S', 362.0), ('L40', 181.0),
               ('L4', 121.0), ('A10G', 70.0), ('A10', 125.0), ('RTX 4090', 165.0), ('RTX 3090', 71.0),
               ('V100', 125.0), ('T4', 65.0))


def device_peak_tflops(dev, dtype, override=0.0):
    """The device's peak TFLOP/s for MFU: override when > 0, else PEAK_TFLOPS's for a CUDA device in bfloat16 or
    float16; 0.0 when unknown (a CPU, float32, a device not in the table)."""
    if override > 0:
        return override
    if not dev.startswith('cuda') or dtype not in ('bfloat16', 'float16'):
        return 0.0
    name = torch.cuda.get_device_name(dev)
    return next((tflops for key, tflops in PEAK_TFLOPS if key in name), 0.0)


def cpu_lacks_matrix_instructions(dtype):
    """Whether this CPU multiplies dtype's matrices without instructions made for them (bfloat16: AVX512-BF16 or
    AMX; float16: AVX512-FP16 or AMX-FP16, as oneDNN sees them). Without them torch falls back to a kernel that
    takes 6-70x float32's time per matmul (docs/gpu.md). False for float32; None where this torch does not say."""
    if dtype == 'float32':
        return False
    check = {'bfloat16': '_is_mkldnn_bf16_supported', 'float16': '_is_mkldnn_fp16_supported'}[dtype]
    try:
        return not getattr(torch.ops.mkldnn, check)()
    except (AttributeError, RuntimeError):
        return None


# -----------------------------------------------------------------------------------------------------------------
# how a run starts: the checks of a config, resume and branch, the folder's claim, the data

# Keys that describe this invocation, not the run: a resume takes them from the command line (or their defaults),
# and every other key from the checkpoint unless the command line sets it.
SESSION_KEYS = ('out_dir', 'init_from', 'overwrite', 'stop_iter', 'log_interval', 'device', 'dtype', 'compile',
                'cuda_graphs', 'peak_tflops', 'backend', 'threads')
LR_SCHEDULES = ('cosine', 'wsd', 'constant')
# What fixes a run's evaluation set (eval_starts): a resume keeps them, so log.csv's losses are over one set
EVAL_SET_KEYS = ('dataset', 'data_dir', 'block_size', 'eval_tokens', 'eval_iters', 'batch_size')


def check_config(cfg, world_size, explicit):
    """Ranges and combinations that no later step would report clearly. The model's own keys are GPTConfig's to
    check: it is built here once, before the data is looked for (or prepared)."""
    def need(ok, msg):
        if not ok:
            raise UserError(msg)
    need(cfg.init_from in ('scratch', 'resume', 'auto') or cfg.init_from.endswith('.pt'),
         f"--init_from={cfg.init_from!r}: expected scratch | resume | auto | PATH/ckpt_S.pt (a kept step to branch "
         f"from)")
    need(cfg.lr_schedule in LR_SCHEDULES, f"--lr_schedule={cfg.lr_schedule!r}: expected {' | '.join(LR_SCHEDULES)}")
    need(0 <= cfg.cooldown_frac <= 1, f"--cooldown_frac={cfg.cooldown_frac}: expected a fraction in [0, 1]")
    need(all(x.strip().isdigit() for x in cfg.save_steps.split(',')) if cfg.save_steps.strip() else True,
         f"--save_steps={cfg.save_steps!r}: expected comma-separated step numbers, e.g. --save_steps=400,800")
    for k in ('batch_size', 'gradient_accumulation_steps', 'eval_interval', 'log_interval', 'dense_layers'):
        need(getattr(cfg, k) >= 1, f"--{k}={getattr(cfg, k)}: expected an integer >= 1")
    for k in ('n_layer', 'eval_tokens', 'eval_iters', 'stop_iter', 'max_iters', 'max_tokens', 'max_flops',
              'warmup_iters', 'min_lr', 'weight_decay', 'grad_clip', 'seed', 'threads'):
        need(getattr(cfg, k) >= 0, f"--{k}={getattr(cfg, k)}: expected a number >= 0")
    need(cfg.max_iters > 0 or cfg.max_tokens > 0 or cfg.max_flops > 0,
         "no budget: set one of --max_iters, --max_tokens or --max_flops to a number > 0")
    need(cfg.learning_rate > 0, f"--learning_rate={cfg.learning_rate}: expected a number > 0")
    need(cfg.min_lr <= cfg.learning_rate or not cfg.decay_lr or cfg.lr_schedule == 'constant',
         f"--learning_rate={cfg.learning_rate:g} is below --min_lr={cfg.min_lr:g}: the decay would rise "
         f"{cfg.min_lr / cfg.learning_rate:.3g}x; set --min_lr too (about learning_rate/10)")
    need(0 <= cfg.beta1 < 1 and 0 <= cfg.beta2 < 1, "--beta1 and --beta2: expected numbers in [0, 1)")
    need(cfg.gradient_accumulation_steps % world_size == 0,
         f"--gradient_accumulation_steps={cfg.gradient_accumulation_steps} is not a multiple of the world size "
         f"{world_size}: it counts micro-batches over all ranks, each rank runs an equal share")
    need(not (cfg.model == 'mod' and 'stride' in explicit and cfg.stride != 2),
         f"--stride={cfg.stride} does nothing for --model=mod: MoD alternates dense and routed layers (stride 2); "
         f"for an anchor every {cfg.stride} layers use --model=xmod --stride={cfg.stride}")
    autocast(cfg.dtype, 'cpu')                                   # only its check of the name
    try:
        GPTConfig(**dict(run_folder.model_keys(cfg), n_layer=cfg.n_layer or cfg.dense_layers))
    except ValueError as e:
        raise UserError(one_line(e)) from None


def resume_config(saved, cfg, explicit):
    """The config of a resumed run or a branch: the checkpoint's, with this invocation's session keys and explicit
    overrides; a resume must keep the run's evaluation set (log.csv would mix losses over two sets)."""
    merged = dict(DEFAULTS)
    merged.update({k: v for k, v in saved.items() if k in DEFAULTS})
    for k in set(SESSION_KEYS) | explicit:
        merged[k] = getattr(cfg, k)
    return types.SimpleNamespace(**merged)


def eval_set(c):
    """The settings that decide the evaluation set, as comparable values (dataset counts only without data_dir,
    eval_tokens only without eval_iters, batch_size only with it)."""
    windows = ('eval_iters', c['eval_iters'], c['batch_size']) if c['eval_iters'] else ('eval_tokens',
                                                                                          c['eval_tokens'])
    return c['data_dir'] or ('dataset', c['dataset']), c['block_size'], windows


def check_eval_set(saved, cfg):
    """A resume that would evaluate on another set than the run's own is refused: log.csv would mix two sets."""
    was = {k: saved.get(k, DEFAULTS[k]) for k in EVAL_SET_KEYS}
    now = {k: getattr(cfg, k) for k in EVAL_SET_KEYS}
    if eval_set(was) == eval_set(now):
        return
    changed = ', '.join(f"--{k}={now[k]!r} (the run's: {was[k]!r})" for k in EVAL_SET_KEYS if now[k] != was[k])
    raise UserError(f"{changed} would change the evaluation set of the run in {cfg.out_dir}, and log.csv would mix "
                    f"losses over two sets: resume with the run's own settings, or start a new run in another "
                    f"--out_dir")


def check_new_run(out_dir, overwrite, say=True):
    """A new run into out_dir: refused when the folder holds a run, unless --overwrite or that run never reached its
    first checkpoint (nothing to resume and nothing to keep: it is replaced, saying so unless say=False)."""
    held = [f for f in run_folder.RUN_FILES if os.path.exists(os.path.join(out_dir, f))]
    if held and not overwrite and run_folder.run_state(out_dir) == 'partial' and \
            not os.path.exists(os.path.join(out_dir, 'ckpt.pt')):
        if say:
            print(f"{out_dir} holds a run that never reached its first checkpoint: replacing it")
    elif held and not overwrite:
        raise UserError(f"{out_dir} already holds a run ({', '.join(held)}): resume it with "
                        f"--init_from=resume, pick another --out_dir, or replace it with --overwrite=True")


def open_run(cfg, explicit, world_size, lock=None):
    """How the run of this config starts, decided before anything is written (bad input raises UserError with the
    folder as it was): (cfg, resume, checkpoint, branch). lock: rank 0's RunLock, taken here when a trainer has
    written in out_dir before (claim makes the file otherwise).
      scratch  a new run; refused when out_dir holds one, unless --overwrite or it never reached a checkpoint
      resume   the checkpoint in out_dir, with its config (this command line's session keys and overrides on top)
      auto     resume when out_dir has a checkpoint, else scratch
      PATH/ckpt_S.pt  a branch: a new run in its own out_dir from that kept step, with its own budget; a branch whose
               out_dir already holds its checkpoint continues it, like auto (sweeps/sweep.py reruns its commands)"""
    check_config(cfg, world_size, explicit)
    if lock is not None:
        lock.take(cfg.out_dir, create=False)
    ckpt_path = os.path.join(cfg.out_dir, 'ckpt.pt')
    branch_from = cfg.init_from if cfg.init_from.endswith('.pt') else None
    own = run_folder.load_checkpoint(ckpt_path) if branch_from and os.path.exists(ckpt_path) else None
    if (cfg.init_from == 'resume' or (cfg.init_from == 'auto' and os.path.exists(ckpt_path)) or
            (own is not None and (own.get('branch_of') or {}).get('checkpoint') == branch_from and not cfg.overwrite)):
        checkpoint = own or run_folder.load_checkpoint(ckpt_path)
        cfg = resume_config(checkpoint['config'], cfg, explicit)
        check_config(cfg, world_size, explicit)         # again: a resumed config comes from the checkpoint
        check_eval_set(checkpoint['config'], cfg)
        return cfg, True, checkpoint, checkpoint.get('branch_of')
    checkpoint, branch = None, None
    if branch_from:
        if os.path.realpath(os.path.dirname(branch_from) or '.') == os.path.realpath(cfg.out_dir):
            raise UserError(f"--init_from={branch_from}: a branch needs its own --out_dir (this one holds the run it "
                            f"branches from)")
        checkpoint = run_folder.load_checkpoint(branch_from,
                                                missing='keep that step with --save_steps in the run it comes from')
        cfg = resume_config(checkpoint['config'], cfg, explicit)
        if 'save_steps' not in explicit:
            cfg.save_steps = ''                          # the parent's branch points are not the branch's
        check_config(cfg, world_size, explicit)
        branch = {'checkpoint': branch_from, 'step': checkpoint['step']}
    check_new_run(cfg.out_dir, cfg.overwrite)
    return cfg, False, checkpoint, branch


def truncate_log(path, last_step):
    """On resume: drop the rows after the checkpoint's step (written after it, before the kill) and a torn last
    line (a row cut mid-line: written whole, newline last). Returns the torn line's text, or None."""
    header, rows = run_folder.log_rows(path)
    if header is None:
        return None
    with open(path, 'rb') as f:
        torn = rows.pop() if rows and not f.read().endswith(b'\n') else None
    kept = [header] + [r for r in rows if len(r) == len(header) and r[0].isdigit() and int(r[0]) <= last_step]
    buf = io.StringIO()
    csv.writer(buf, lineterminator='\n').writerows(kept)
    run_folder.atomic_write(path, lambda f: f.write(buf.getvalue().encode()))
    return None if torn is None else ','.join(torn)


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


def check_wandb(cfg):
    """--wandb_log=True needs the wandb package and, unless WANDB_MODE keeps the run local, a login: checked before
    anything is written, as any other bad input."""
    try:
        import wandb
    except ImportError:
        raise UserError("--wandb_log=True needs the wandb package: pip install wandb") from None
    local = os.environ.get('WANDB_MODE', '') in ('offline', 'dryrun', 'disabled')
    if not local and not os.environ.get('WANDB_API_KEY') and not getattr(getattr(wandb, 'api', None), 'api_key', None):
        raise UserError("--wandb_log=True: wandb is not logged in: run `wandb login`, or set WANDB_MODE=offline "
                        "to keep the run local (`wandb sync` uploads it later)")


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


def git_commit():
    try:
        r = subprocess.run(['git', '-C', ROOT, 'rev-parse', 'HEAD'], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ''
    except (OSError, subprocess.SubprocessError):
        return ''


# -----------------------------------------------------------------------------------------------------------------
# data, schedule, evaluation

def batch_starts(seed, step, n_rows, n_tokens, T):
    """Start positions of the global batch of training step `step`: a pure function of (seed, step), so runs of
    different families with the same seed see the same data in the same order, a resumed run sees exactly the
    batches it would have seen, and DDP ranks slice the very batch one process would draw."""
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, n_tokens - T, size=n_rows)


def get_lr(cfg, it, schedule_iters):
    """Linear warmup, then over the iterations the run started with (schedule_iters):
      cosine    decay from learning_rate to min_lr; beyond them (a run extended on resume), min_lr;
      wsd       warmup-stable-decay (Hagele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed
                Training Durations"): learning_rate until cooldown_start, then linearly to min_lr. Until its
                cooldown a run does not depend on its budget, so a long run's step cooldown_start(N) is the start of
                every run of budget N: one stable run and a short branch per budget replace a run per budget;
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
    """Mean losses and routing statistics over the fixed validation windows (starts). Batches are dealt out to DDP
    ranks; each batch is weighted by its rows, so the result does not depend on the world size. A rank with no batch
    runs batch 0 with weight 0 (it must still join the all_reduce with the same keys)."""
    raw_model.eval()                       # causal thresholds frozen, dropout off
    batches = [(i, starts[i:i + B]) for i in range(0, len(starts), B)]
    mine = [(i, b, len(b)) for i, b in batches[rank::world_size]] or [(*batches[0], 0)]
    keys, total = None, None
    for i, b, weight in mine:
        x, y = read_windows(data, b, T, dev)         # (B, T) each
        raw_model.set_draw(row0=i)           # random routing: each window's draw is fixed by its place in the set
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


# -----------------------------------------------------------------------------------------------------------------
# the run, top to bottom

def train(argv, lock):
    # ---- settings: defaults, config file, --key=value; processes; device
    from_file = set()
    cfg, explicit = configure(argv, DEFAULTS, doc=__doc__, source=__file__, from_file=from_file, model=GPTConfig)
    cfg.out_dir = cfg.out_dir or f'out-{cfg.model}'     # each family its own folder: xmod then dense, as documented
    ddp = int(os.environ.get('RANK', -1)) != -1
    rank, local_rank, world_size = 0, 0, 1
    if ddp:
        rank, local_rank, world_size = (int(os.environ[k]) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE'))
    master = rank == 0                             # rank 0 writes the run folder and prints
    # The key's default (1) is one process's. Under torchrun without it, each rank runs one micro-batch (the global
    # batch grows with the ranks, as in plain data parallelism). A resume or branch takes the run's own value.
    follows_world = world_size > 1 and 'gradient_accumulation_steps' not in explicit
    if follows_world:
        cfg.gradient_accumulation_steps = world_size
    # how the run starts: scratch, resume, auto or a branch (decided here; nothing is written until claim below)
    cfg, resume, ckpt, branch = open_run(cfg, explicit, world_size, lock if master else None)
    dev = pick_device(cfg.device, local_rank if ddp else None)
    device_type = dev.split(':')[0]
    if device_type == 'cpu' and cfg.threads:
        torch.set_num_threads(cfg.threads)         # from the start: step 0's evaluation runs with them too
    if cfg.cuda_graphs and (device_type != 'cuda' or not cfg.compile):
        raise UserError(f"--cuda_graphs=True captures the compiled training step in CUDA graphs: it needs "
                        f"--compile=True and a CUDA device (here {dev}{'' if cfg.compile else ', compile=False'})")
    if cfg.wandb_log and master:
        check_wandb(cfg)
    dtype, ctx = autocast(cfg.dtype, device_type, cuda_fallback='float16')
    if dtype == 'float16' and device_type not in ('cuda', 'cpu'):
        raise UserError(f"--dtype=float16 needs a CUDA device or the CPU (its grad scaler), not {device_type} "
                        f"(use float32 or bfloat16)")

    # ---- data: the model's plan and budget; batches are a pure function of (seed, step), the val set is fixed
    folder, meta = find_data(cfg, ddp)
    T, B = cfg.block_size, cfg.batch_size
    n_train, n_val = len(open_split(folder, 'train')), len(open_split(folder, 'val'))
    for split, n in (('validation', n_val), ('training', n_train)):
        if n < T + 1:
            raise UserError(f"block_size={T} is larger than the {split} split ({n} tokens in {folder}): "
                            f"lower --block_size")
    mcfg, tokens_per_iter, fpt, n_iters = sizes(cfg, meta)
    if ckpt is not None and dataclasses.asdict(mcfg) != ckpt['model_args']:
        diff = [f"{k}={ckpt['model_args'].get(k)!r} (now {v!r})" for k, v in dataclasses.asdict(mcfg).items()
                if ckpt['model_args'].get(k) != v]
        raise UserError(f"the checkpoint's model differs from this config: {', '.join(diff)}; resume with the "
                        f"run's own settings")
    if branch is not None and not resume and branch['step'] >= n_iters:
        raise UserError(f"--init_from={cfg.init_from} is step {branch['step']:,}, and this run's budget is "
                        f"{n_iters:,} steps: nothing left to train (give a larger --max_tokens or --max_iters)")
    # the schedule's length is fixed when a run starts: a resume with a larger budget goes on at min_lr; a branch is
    # a new run, its schedule follows its own budget
    schedule_iters = ckpt.get('schedule_iters', ckpt['n_iters']) if resume else n_iters
    starts = eval_starts(n_val, T, cfg.eval_iters * B * T if cfg.eval_iters else cfg.eval_tokens, B)
    save_steps = {int(x) for x in cfg.save_steps.split(',') if x.strip()}
    gas_local = cfg.gradient_accumulation_steps // world_size       # this rank's micro-batches per step

    # ---- the model and its optimizer; DDP joins the ranks here, once all of them have passed the checks
    if ddp:
        backend = cfg.backend or ('nccl' if device_type == 'cuda' else 'gloo')
        if device_type == 'cuda':
            torch.cuda.set_device(dev)          # before the process group, so nccl binds this rank's GPU
        bound = {'device_id': torch.device(dev)} if backend == 'nccl' else {}
        torch.distributed.init_process_group(backend=backend, **bound)
    if device_type == 'cuda':
        torch.set_float32_matmul_precision('high')    # TF32 matmuls for what autocast leaves in float32
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)                    # the initial weights: a pure function of the seed
    raw_model = GPT(mcfg)
    with warnings.catch_warnings():                # step 0's causal eval runs before any calibration, by design:
        warnings.simplefilter('ignore')            # the model's one look for uncalibrated thresholds is spent here
        raw_model.warn_if_uncalibrated()
    torch.manual_seed(cfg.seed + rank)             # dropout: its own stream per rank
    if ckpt is not None:
        try:
            raw_model.load_state_dict(run_folder.clean_state_dict(ckpt['model']))
        except RuntimeError as e:
            raise UserError(f"{cfg.out_dir}/ckpt.pt: the weights do not fit the model: {one_line(e)}") from None
    raw_model.to(dev)
    scaler = torch.amp.GradScaler(device_type, enabled=dtype == 'float16')
    optimizer = raw_model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2),
                                               device_type)
    if ckpt is not None:
        optimizer.load_state_dict(ckpt['optimizer'])
        if ckpt.get('scaler'):
            scaler.load_state_dict(ckpt['scaler'])
        set_rng_state(ckpt['rng'][rank] if rank < len(ckpt['rng']) else ckpt['rng'][0])
    if cfg.compile:   # causal routing reads its padded count k_max from the data: captured, it stays in the graph
        torch._dynamo.config.capture_scalar_outputs = True
    model = torch.compile(raw_model) if cfg.compile else raw_model            # what evaluation calls
    # --cuda_graphs: the training step (top-k routing, static shapes) replayed from CUDA graphs; evaluation keeps the
    # default mode (causal routing's sizes come from the data)
    train_model = torch.compile(raw_model, mode='reduce-overhead') if cfg.cuda_graphs else model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # MoD's plain gate leaves Router.gain out of the graph: DDP must be told some parameters get no gradient.
        # No buffer syncing in forward: the RoPE tables and causal thresholds are the same on every rank by
        # construction (calibrate gathers every rank's scores), and random routing's draw is each rank's own
        unused = mcfg.gate == 'plain' and bool(raw_model.routed_layers())
        no_sync = ({'forward_sync_buffers': False} if 'forward_sync_buffers' in inspect.signature(DDP).parameters
                   else {'broadcast_buffers': False})     # torch < 2.13 knows only the older name
        train_model = DDP(train_model, device_ids=[local_rank] if device_type == 'cuda' else None,
                          find_unused_parameters=unused, **no_sync)

    # ---- the run's start: run.json written (the folder is this run's now), what is about to happen said
    iter_num = ckpt['step'] if ckpt else 0
    run_path, log_path, ckpt_path = (os.path.join(cfg.out_dir, f) for f in ('run.json', 'log.csv', 'ckpt.pt'))
    params_total, params_active = raw_model.num_params(), raw_model.num_active_params()
    layout = xmod.layout_string(mcfg)
    info = {'config': {k: getattr(mcfg, k, v) for k, v in vars(cfg).items()},    # the model's keys as resolved
            'model_config': dataclasses.asdict(mcfg), 'layout': layout, 'params_total': params_total,
            'params_active': params_active, 'flops_per_token': fpt, 'tokens_per_iter': tokens_per_iter,
            'n_iters': n_iters, 'world_size': world_size, 'seed': cfg.seed, 'git_commit': git_commit(),
            'torch_version': torch.__version__, 'device': dev, 'dtype': dtype, 'finished': False, 'final': None}
    if branch:
        info['branch_of'] = branch
    last_row = ckpt.get('last_row') if resume else None    # the checkpoint's evaluation, as log.csv has it
    if master:
        os.makedirs(cfg.out_dir, exist_ok=True)
        if lock.fd is None:     # no trainer had written here: the lock file is made now, before the first write
            lock.take(cfg.out_dir, create=True)
            if not resume:      # a trainer that took it in between has written a run by now: look again
                check_new_run(cfg.out_dir, cfg.overwrite, say=False)
        lock.write_pid()
        if resume:              # log.csv cut back to the checkpoint's step; a row lost in a cut, written again
            torn = truncate_log(log_path, iter_num)
            _, rows = run_folder.log_rows(log_path)
            relog = last_row is not None and (not rows or int(rows[-1][0]) < iter_num)
            if relog:
                run_folder.append_log(log_path, last_row)
            if torn is not None:
                print(f"note: dropped the last row of {log_path}, cut mid-line when the run stopped (it began "
                      f"{torn[:30]!r}); " + (f"wrote step {iter_num}'s row again from the checkpoint" if relog else
                                             f"training resumes at step {iter_num} and logs the steps after it"))
        else:                   # a new run clears the run it replaces (--overwrite, or one never checkpointed)
            for f in run_folder.RUN_FILES + tuple(glob.glob(os.path.join(glob.escape(cfg.out_dir), 'ckpt_*.pt'))):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(cfg.out_dir, f))
        run_folder.write_json(run_path, info)
        if follows_world and ckpt is None:
            print(f"note: --gradient_accumulation_steps follows the world size: {cfg.gradient_accumulation_steps}, "
                  f"one micro-batch of {B} rows per rank (a global batch of {B * cfg.gradient_accumulation_steps} "
                  f"rows); pass --gradient_accumulation_steps=N, a multiple of {world_size}, to set it")
        if 'n_layer' in from_file and ckpt is None and cfg.model in ('mod', 'xmod') and cfg.match_flops:
            print(f"note: n_layer={cfg.n_layer} (from the config file) is the {cfg.model} model's own depth, "
                  f"FLOP-matched to a dense model of dense_layers={cfg.dense_layers} layers; to match a "
                  f"{cfg.n_layer}-layer dense model, run with --dense_layers={cfg.n_layer} --n_layer=0 (FLOP "
                  f"matching then picks the depth)")
        sparse = (f", capacity {mcfg.capacity:.4f} ({xmod.routed_k(mcfg.capacity, T)}/{T} tokens)"
                  if 'routed' in xmod.layer_kinds(mcfg) else ', no routed layer: the dense model' if
                  mcfg.model in ('mod', 'xmod') else '')
        matched = (f", FLOP-matched to dense {cfg.dense_layers} layers" if mcfg.model in ('mod', 'xmod')
                   and cfg.match_flops else '')
        print(f"model {mcfg.model}: layout {layout} ({mcfg.n_layer} layers{sparse}){matched}")
        print(f"params {params_total:,} total, {params_active:,.0f} active (non-embedding), rho "
              f"{params_total / params_active:.2f}; {fpt / 1e6:.3f}M FLOPs/token forward")
        shown = folder if os.path.relpath(folder).startswith('..') else os.path.relpath(folder)
        print(f"data {shown}: {n_train:,} train / {n_val:,} val tokens, {meta.get('tokenizer')} vocab "
              f"{meta['vocab_size']:,}; eval set {len(starts)} windows x {T} = {len(starts) * T:,} tokens")
        print(f"budget {n_iters:,} iters x {tokens_per_iter:,} tokens = {n_iters * tokens_per_iter / 1e6:.2f}M "
              f"tokens, {3 * fpt * n_iters * tokens_per_iter:.3g} FLOPs; device {dev} {dtype}"
              f"{f' x {world_size} ranks' if ddp else ''}; out_dir {cfg.out_dir}"
              + (f"; resuming at step {iter_num}" if resume else ''))
        slow = device_type == 'cpu' and cpu_lacks_matrix_instructions(dtype)
        if slow is not False:         # None: torch cannot tell
            which = 'this CPU has' if slow else 'on a CPU with'
            print(f"note: {which} no matrix instructions for {dtype}, training takes 8x float32's time or more "
                  f"(docs/gpu.md): --dtype={dtype} on a CPU is for testing the GPU path, float32 trains faster")
        if branch and not resume:
            sched = (f"; its cooldown starts at step {run_folder.cooldown_start(cfg, schedule_iters):,}"
                     if cfg.lr_schedule == 'wsd' else '')
            print(f"branch of {branch['checkpoint']} at step {branch['step']:,}{sched}")
        if n_iters > schedule_iters:
            print(f"extending: the learning-rate schedule of this run ended at step {schedule_iters:,}; steps "
                  f"{schedule_iters:,}-{n_iters:,} run at min_lr={cfg.min_lr:g}")
    tracker = None
    if cfg.wandb_log and master:   # nanoGPT's convention: each log.csv row also goes to Weights & Biases
        import wandb
        tracker = wandb.init(project=cfg.wandb_project, dir=cfg.out_dir, config=vars(cfg),
                             name=cfg.wandb_run_name or os.path.basename(os.path.abspath(cfg.out_dir)))

    # where training stands besides its weights: the checkpoint's (a resume, or the kept step a branch starts from;
    # a kept step between evaluations carries its training-loss sum, so a branch logs its parent's train_loss)
    c = ckpt or {}
    best_val_loss, last_eval = c.get('best_val_loss', float('inf')), c.get('last_eval')
    t0 = time.time() - c.get('elapsed_s', 0.0)     # the clock goes on from the runs this one continues
    train_sum = torch.full((), c.get('train_loss_sum', 0.0), device=dev)   # (): the LM loss summed since the eval
    train_steps = c.get('train_loss_steps', 0)
    ckpt = c = None                                # free the memory

    def mean_loss(total, n, what='training loss'):
        """A loss summed over n steps, averaged over DDP ranks (so every rank takes the same decision); a NaN or
        inf stops the run, with its last good checkpoint kept and run.json saying where."""
        if ddp:
            torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.AVG)
        mean = total.item() / n
        if not math.isfinite(mean):
            raise diverged(what, mean, '; lower --learning_rate or raise --warmup_iters and resume with '
                                       '--init_from=resume')
        return mean

    def diverged(what, value, advice=''):
        if master:
            info['diverged'] = {'step': iter_num, 'what': what}
            run_folder.write_json(run_path, info)
        return LossDiverged(f"the {what} is {value} at step {iter_num}: stopping. The last good checkpoint "
                            f"({ckpt_path}, step {last_eval['step'] if last_eval else 'none'}) is kept{advice}")

    def checkpoint(kept=False):
        """What a checkpoint holds: enough to continue exactly (weights, optimizer, scaler, every rank's RNG state,
        the step, which fixes the data position) and to branch (kept: a step of --save_steps, which may fall between
        evaluations, also holds the training loss summed since the last one). Every rank calls it."""
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
        return {'model': raw_model.state_dict(), 'optimizer': optimizer.state_dict(), 'scaler': scaler.state_dict(),
                'config': vars(cfg), 'model_args': dataclasses.asdict(mcfg), 'step': iter_num,
                'data': {'seed': cfg.seed, 'step': iter_num, 'tokens': iter_num * tokens_per_iter},
                'n_iters': n_iters, 'schedule_iters': schedule_iters, 'best_val_loss': best_val_loss,
                'elapsed_s': time.time() - t0, 'last_eval': last_eval, 'last_row': last_row, 'rng': rngs,
                'meta': meta, 'branch_of': branch, 'train_loss_sum': loss_sum,
                'train_loss_steps': train_steps if kept else 0}

    # ---- the loop: evaluate (a log.csv row, then the checkpoint), then one optimizer step
    bar = tqdm(total=n_iters, initial=iter_num, disable=True if not master else None, dynamic_ncols=True,
               unit='it', leave=False)
    evaluated_at = iter_num if resume or branch else -1     # its evaluation is already logged
    window, window_steps, t_mark = torch.zeros((), device=dev), 0, time.time()   # the progress bar's loss and clock
    timed_steps, t_timed = -1, time.time()         # log.csv's tokens_per_s: steps after the first since the eval
    trained = False                                # a training step done by this process: compiled evaluation
    val = open_split(folder, 'val')
    try:
        while True:
            if (iter_num % cfg.eval_interval == 0 or iter_num == n_iters) and iter_num != evaluated_at:
                t_eval = time.time()
                # the training figures since the last row: the loss, and the speed without the first step after
                # an evaluation (which compiles, or warms up): a row right after one has no speed
                train_loss = mean_loss(train_sum, train_steps) if train_steps else ''
                tokens_per_s = (round(timed_steps * tokens_per_iter / (t_eval - t_timed), 1)
                                if timed_steps > 0 else '')
                # val_loss (top-k routing) and val_loss_causal (causal routing: the honest one), LM cross-entropy
                # only; then each mode's auxiliary losses and routing statistics (causal ones named causal_*).
                # Before this process's first training step, the eager model: the training graph compiles first
                ev_model = model if trained else raw_model
                topk = evaluate(ev_model, raw_model, 'topk', val, starts, B, T, dev, ctx, rank, world_size)
                if mcfg.model == 'dense':       # routes nothing: its causal loss is its loss
                    ev = {'val_loss': topk['lm'], 'val_loss_causal': topk['lm']}
                else:
                    causal = evaluate(ev_model, raw_model, 'causal', val, starts, B, T, dev, ctx, rank, world_size)
                    ev = {'val_loss': topk.pop('lm'), 'val_loss_causal': causal['lm'], **topk,
                          **{k: v for k, v in causal.items() if k.startswith('causal_')}}
                if not all(math.isfinite(v) for v in (ev['val_loss'], ev['val_loss_causal'])):
                    raise diverged('validation loss', ev['val_loss'])
                tokens = iter_num * tokens_per_iter
                # model FLOPs utilisation per GPU: training FLOPs/s (3 x forward) over the peak of world_size GPUs
                peak = device_peak_tflops(dev, dtype, cfg.peak_tflops)
                mfu = round(3 * fpt * tokens_per_s / (peak * 1e12 * world_size), 4) if peak and tokens_per_s else ''
                row = {'step': iter_num, 'tokens': tokens, 'flops': 3 * fpt * tokens,
                       'lr': get_lr(cfg, iter_num, schedule_iters), 'elapsed_s': round(time.time() - t0, 3),
                       'tokens_per_s': tokens_per_s, 'mfu': mfu, 'train_loss': train_loss, **ev}
                best_val_loss = min(best_val_loss, row['val_loss_causal'])
                last_eval = {k: row[k] for k in ('step', 'tokens', 'flops', 'val_loss', 'val_loss_causal')}
                last_row = row
                state = checkpoint()
                if master:          # the row first: a kill in between loses the row on resume, never the step
                    run_folder.append_log(log_path, row)
                    if tracker:
                        tracker.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=iter_num)
                    run_folder.save_checkpoint(state, ckpt_path)
                    train_txt = f"train {train_loss:.4f}, " if train_loss != '' else ''
                    tqdm.write(f"step {iter_num:>6}: {train_txt}val {row['val_loss']:.4f}, val causal "
                               f"{row['val_loss_causal']:.4f}, {row['elapsed_s']:.0f}s")
                train_sum.zero_()
                train_steps, timed_steps = 0, -1
                t_mark += time.time() - t_eval             # the progress bar's speed leaves the evaluation out
            if iter_num in save_steps:      # --save_steps: a copy kept as out_dir/ckpt_S.pt, for branching
                state = checkpoint(kept=True)
                if master:
                    run_folder.save_checkpoint(state, os.path.join(cfg.out_dir, f'ckpt_{iter_num}.pt'))
            if iter_num >= n_iters:
                break

            # one optimizer step over gradient_accumulation_steps micro-batches of the global batch
            lr = get_lr(cfg, iter_num, schedule_iters)
            for group in optimizer.param_groups:
                group['lr'] = lr
            rows = batch_starts(cfg.seed, iter_num, B * cfg.gradient_accumulation_steps, n_train, T)
            data = open_split(folder, 'train')
            step_loss, step_layers = torch.zeros((), device=dev), []
            for micro in range(gas_local):
                first = (rank * gas_local + micro) * B               # this rank's slice of the global batch
                x, y = read_windows(data, rows[first:first + B], T, dev)     # (B, T) each
                raw_model.set_draw(cfg.seed, iter_num, row0=first)    # random routing's draw for these rows
                # DDP: all-reduce gradients only on the last micro-batch
                with train_model.no_sync() if ddp and micro < gas_local - 1 else nullcontext():
                    if cfg.cuda_graphs:
                        torch.compiler.cudagraph_mark_step_begin()     # a new step: the last replay's outputs may go
                    with ctx:
                        _, loss, aux = train_model(x, y, return_aux=True)
                    step_loss += aux['losses']['lm'] / gas_local                # the LM loss, for the log
                    scaler.scale(loss / gas_local).backward()                   # LM + auxiliary losses
                # calibrate reads the scores after the step's last micro-batch: a CUDA-graph replay overwrites its
                # outputs in place, so each micro-batch's scores (B, T) are copied before the next one
                step_layers.append([a._replace(scores=a.scores.clone()) if isinstance(a, xmod.RoutedAux) else None
                                    for a in aux['layers']] if cfg.cuda_graphs else aux['layers'])
            raw_model.calibrate(step_layers)      # the causal thresholds: once per step, from the whole global batch
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
                bar.set_postfix(loss=f"{mean:.4f}", tok_s=f"{window_steps * tokens_per_iter / (now - t_mark):,.0f}")
                window.zero_()
                window_steps, t_mark = 0, now
            if cfg.stop_iter and iter_num == cfg.stop_iter and iter_num < n_iters:
                bar.close()
                if master:
                    print(f"stopped after step {iter_num} (stop_iter), as if killed: the checkpoint is at step "
                          f"{last_eval['step'] if last_eval else 'none'}; continue with --init_from=resume")
                return 0
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"continue from the checkpoint of step {last_eval['step']} with --init_from=resume"
                                if last_eval else "no checkpoint was written yet: run the same command again (it "
                                                  "starts the run over)") from None

    bar.close()
    if tracker:
        tracker.finish()
    if master:
        info.update(finished=True, final=last_eval)
        run_folder.write_json(run_path, info)
        print(f"done: {n_iters:,} iters, {time.time() - t0:.0f}s; val_loss {last_eval['val_loss']:.4f}, "
              f"val_loss_causal {last_eval['val_loss_causal']:.4f}; sample with: python sample.py "
              f"--out_dir={cfg.out_dir}; its curves: python tools/plot_run.py {cfg.out_dir}")
    if ddp:         # the ranks leave together, each on its own device (nccl: never a guessed one)
        torch.distributed.barrier(**({'device_ids': [local_rank]} if device_type == 'cuda' else {}))
    return 0


def main(argv=None):
    threads, lock = torch.get_num_threads(), run_folder.RunLock()   # one trainer per run folder
    try:
        return run_main('train.py', lambda args: train(args, lock), argv,
                        interrupted='nothing was written: run the same command again')
    finally:
        lock.release()               # the kernel would at exit; a caller's process (tests) may train again
        torch.set_num_threads(threads)   # --threads changed it: a caller gets its own back


if __name__ == '__main__':
    sys.exit(main())
