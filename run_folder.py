"""
run_folder.py: what several scripts share about a run folder and a run's plan, and a training run's lifecycle.

  - run.json, log.csv (its first columns, LOG_COLUMNS, are a contract fit_law.py reads) and ckpt.pt, every write
    atomic; load_model for the scripts that use a trained model; one trainer per folder (lock); what code ran
  - a run's plan from its config alone (sizes: FLOP matching, the budget; get_lr: the learning-rate schedule):
    train.py trains it, sweeps/sweep.py sums it, tools/plot_run.py draws it
  - train.py's lifecycle: which run a command starts or continues, the checks that keep a folder one run's, the
    folder's state, checkpoints, RNG states, Ctrl-C
"""
import contextlib
import csv
import dataclasses
import fcntl
import glob
import hashlib
import io
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import types

import numpy as np
import torch

import xmod
from configurator import LossDiverged, UserError, one_line

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
    return ckpt


def load_model(out_dir, dev):
    """(the run's model on dev, in eval mode: causal thresholds frozen, dropout off; its checkpoint), for sample.py and
    tools/downstream.py. UserError when the checkpoint is missing or does not rebuild."""
    # to the CPU first: only the weights are used, and the optimizer state (twice the weights) stays off the GPU
    ckpt = load_checkpoint(os.path.join(out_dir, 'ckpt.pt'), map_location='cpu',
                           missing=f"train a model into it first: python train.py --out_dir={out_dir}")
    try:
        model = xmod.GPT(xmod.GPTConfig(**ckpt['model_args']))
        model.load_state_dict(clean_state_dict(ckpt['model']))
    except (TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"{out_dir}/ckpt.pt: cannot rebuild the model: {one_line(e)}") from None
    try:
        return model.eval().to(dev), ckpt
    except (RuntimeError, AssertionError) as e:      # an unknown device, or one this machine lacks
        raise UserError(f"--device={dev}: {one_line(e)}") from None


def run_state(out_dir):
    """'finished', 'partial' (run.json says finished: false) or 'new' (no readable run.json)."""
    try:
        with open(os.path.join(out_dir, 'run.json')) as f:
            return 'finished' if json.load(f).get('finished') else 'partial'
    except (OSError, ValueError, AttributeError):
        return 'new'


def lock(out_dir, create):
    """One trainer per run folder: an exclusive flock on out_dir/train.lock, which the kernel drops when the process
    ends (kill -9 too), so it is never stale. The open descriptor (closing it unlocks), or None when create=False and
    no trainer made the file yet; UserError when another process holds it."""
    try:
        fd = os.open(os.path.join(out_dir, 'train.lock'), os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"{out_dir} is being written by another trainer: one trainer per run folder") from None
    return fd


def running_elsewhere(out_dir):
    """Whether another trainer holds out_dir's lock: taken for an instant, so it never waits or creates it."""
    try:
        fd = lock(out_dir, create=False)
    except UserError:
        return True
    if fd is not None:
        os.close(fd)
    return False


def git_state(root):
    """What code ran, for run.json: git_commit, git_dirty (tracked files differ from it) and git_diff_sha256 (the
    sha256 of `git diff HEAD`'s output when dirty, else ''); '', None and '' outside a git checkout."""
    try:
        commit, diff = (subprocess.run(['git', '-C', root, *args], capture_output=True, timeout=30, check=True).stdout
                        for args in (['rev-parse', 'HEAD'], ['diff', 'HEAD']))
    except (OSError, subprocess.SubprocessError):
        return {'git_commit': '', 'git_dirty': None, 'git_diff_sha256': ''}
    return {'git_commit': commit.decode().strip(), 'git_dirty': bool(diff),
            'git_diff_sha256': hashlib.sha256(diff).hexdigest() if diff else ''}


def clean_state_dict(state):
    """Checkpoints hold the raw model's weights. Files saved from a compiled or DDP-wrapped model (nanoGPT's bug)
    carry an '_orig_mod.' or 'module.' prefix on every key: strip them so those load too."""
    for _ in range(2):
        for prefix in ('_orig_mod.', 'module.'):
            if state and all(k.startswith(prefix) for k in state):
                state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def log_rows(path):
    """(header, rows) of a log.csv as strings; (None, []) when there is none yet."""
    if not os.path.isfile(path):
        return None, []
    with open(path, newline='') as f:
        rows = list(csv.reader(f))
    return (rows[0], rows[1:]) if rows else (None, [])


def append_log(path, row):
    """Append one row; the first row writes the header (LOG_COLUMNS, then the row's other keys, the statistics, in
    the model's order), later rows follow the file's own; a float as its repr, the shortest exact form."""
    header, _ = log_rows(path)
    new = header is None
    header = header or list(LOG_COLUMNS) + [k for k in row if k not in LOG_COLUMNS]
    with open(path, 'a', newline='') as f:
        w = csv.writer(f, lineterminator='\n')
        if new:
            w.writerow(header)
        w.writerow([repr(v) if isinstance(v, float) else str(v) for v in (row.get(k, '') for k in header)])
        f.flush()
        os.fsync(f.fileno())


# ----------------------------------------------------------------------------------------------------------------------
# A run's plan, from its config alone: the model (FLOP matching), the budget, the schedule. train.py trains it;
# sweeps/sweep.py adds up its FLOPs (--dry_run) without starting a run; tools/plot_run.py draws its schedule

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
    capacity = family.pop('capacity')         # None: 0.125, or FLOP matching's target when n_layer is 0
    try:
        if cfg.model in ('mod', 'xmod') and cfg.match_flops:
            dense = xmod.GPTConfig(model='dense', n_layer=cfg.dense_layers, vocab_size=vocab_size, **args)
            mcfg = dataclasses.replace(xmod.match_flops(dense, cfg.model, stride=cfg.stride,
                                                        n_layer=cfg.n_layer or None, capacity=capacity), **family)
        else:
            mcfg = xmod.GPTConfig(model=cfg.model, n_layer=cfg.n_layer or cfg.dense_layers, vocab_size=vocab_size,
                                  capacity=capacity, **args, **family)
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


def sizes(cfg, meta=None):
    """(model config, tokens per iteration, forward FLOPs per token, iterations) of a run's config on a dataset with
    this meta.pkl (None: GPTConfig's vocab_size): what run.json records, and sweeps/sweep.py --dry_run adds up."""
    meta = meta or {}
    vocab_size = meta.get('vocab_size', xmod.GPTConfig.vocab_size)
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
        start = cooldown_start(cfg, schedule_iters)
        if it < start:
            return cfg.learning_rate
        ratio = min(1.0, (it - start) / max(1, schedule_iters - start))
        return cfg.learning_rate + ratio * (cfg.min_lr - cfg.learning_rate)
    ratio = min(1.0, (it - cfg.warmup_iters) / max(1, schedule_iters - cfg.warmup_iters))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.learning_rate - cfg.min_lr)


def cooldown_start(cfg, schedule_iters):
    """wsd: the step where the linear decay to min_lr begins, the last cooldown_frac of the budget (rounded)."""
    return schedule_iters - round(cfg.cooldown_frac * schedule_iters)


# ----------------------------------------------------------------------------------------------------------------------
# A training run's lifecycle (train.py passes its DEFAULTS)

# Keys of an invocation, not of the run: a resume takes the rest from the checkpoint
SESSION_KEYS = ('out_dir', 'init_from', 'overwrite', 'stop_iter', 'log_interval', 'device', 'dtype', 'compile',
                'cuda_graphs', 'peak_tflops', 'backend', 'threads')
# What fixes a run's evaluation set (data.loader.eval_starts): a resume keeps it, log.csv's losses share a set
EVAL_SET_KEYS = ('dataset', 'data_dir', 'block_size', 'eval_tokens', 'eval_iters', 'batch_size')


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
    need(0 <= cfg.beta1 < 1 and 0 <= cfg.beta2 < 1, "--beta1 and --beta2: expected [0, 1)")
    gas = cfg.gradient_accumulation_steps
    need(not cfg.cuda_graphs or gas // world_size == 1, f"--cuda_graphs=True with --gradient_accumulation_steps={gas} "
         f"({gas // world_size} micro-batches per step): gradients summed across CUDA-graph replays are not sound; "
         f"raise --batch_size instead, or leave cuda_graphs off")
    need(gas % world_size == 0, f"--gradient_accumulation_steps={gas} is not a multiple of the world size "
         f"{world_size}: it counts micro-batches over all ranks, each runs a share")
    try:
        xmod.GPTConfig(**dict(model_keys(cfg), n_layer=cfg.n_layer or cfg.dense_layers))
    except ValueError as e:
        raise UserError(one_line(e)) from None


def check_wandb():
    """--wandb_log=True: the package and, unless WANDB_MODE keeps it local, a login."""
    try:
        import wandb
    except ImportError:
        raise UserError("--wandb_log=True needs the wandb package: pip install wandb") from None
    if not (os.environ.get('WANDB_MODE', '') in ('offline', 'dryrun', 'disabled') or os.environ.get('WANDB_API_KEY')
            or getattr(getattr(wandb, 'api', None), 'api_key', None)):
        raise UserError("--wandb_log=True: wandb is not logged in: run `wandb login`, or set "
                        "WANDB_MODE=offline to keep the run local (`wandb sync` uploads it later)")


def resume_config(saved, cfg, explicit, defaults):
    """A resume's or branch's config: the checkpoint's, the session keys and overrides on top."""
    merged = {**defaults, **{k: v for k, v in saved.items() if k in defaults}}
    merged.update({k: getattr(cfg, k) for k in set(SESSION_KEYS) | explicit})
    return types.SimpleNamespace(**merged)


def check_eval_set(saved, cfg, defaults):
    """A resume must evaluate on the run's own set: log.csv would mix two sets."""
    def eval_set(c):
        n = ('iters', c['eval_iters'], c['batch_size']) if c['eval_iters'] else c['eval_tokens']
        return c['data_dir'] or ('dataset', c['dataset']), c['block_size'], n
    was = {k: saved.get(k, defaults[k]) for k in EVAL_SET_KEYS}
    now = {k: getattr(cfg, k) for k in EVAL_SET_KEYS}
    if eval_set(was) != eval_set(now):
        changed = [f"--{k}={now[k]!r} (the run's: {was[k]!r})" for k in EVAL_SET_KEYS if now[k] != was[k]]
        raise UserError(f"{', '.join(changed)} would change the evaluation set of the run in {cfg.out_dir} (log.csv "
                        f"would mix two sets): resume with the run's own settings, or use another --out_dir")


def check_new_run(out_dir, overwrite, say=True):
    """A new run replaces one in out_dir only with --overwrite, or if it has no checkpoint."""
    present = [f for f in RUN_FILES if os.path.exists(os.path.join(out_dir, f))]
    if not present or overwrite:
        return
    if run_state(out_dir) != 'partial' or 'ckpt.pt' in present:
        raise UserError(f"{out_dir} already holds a run ({', '.join(present)}): resume it with --init_from=resume, "
                        f"pick another --out_dir, or replace it with --overwrite=True")
    if say:
        print(f"{out_dir} holds a run that never reached its first checkpoint: replacing it")


def which_run(cfg, explicit, world_size, defaults, locks=None):
    """(cfg, resume, checkpoint, branch), decided before anything is written (bad input: UserError). locks: rank 0's
    list for the folder's lock, taken here if a trainer wrote there. A branch whose out_dir holds it continues it."""
    check_config(cfg, world_size)
    if locks is not None and (fd := lock(cfg.out_dir, create=False)) is not None:
        locks.append(fd)
    ckpt_path = os.path.join(cfg.out_dir, 'ckpt.pt')
    branch_from = cfg.init_from if cfg.init_from.endswith('.pt') else None
    own = load_checkpoint(ckpt_path) if branch_from and os.path.exists(ckpt_path) else None
    continues = own is not None and (own.get('branch_of') or {}).get('checkpoint') == branch_from
    if cfg.init_from == 'resume' or (cfg.init_from == 'auto' and os.path.exists(ckpt_path)) or (
            continues and not cfg.overwrite):
        checkpoint = own or load_checkpoint(ckpt_path)
        cfg = resume_config(checkpoint['config'], cfg, explicit, defaults)
        check_config(cfg, world_size)         # again: a resumed config comes from the checkpoint
        check_eval_set(checkpoint['config'], cfg, defaults)
        return cfg, True, checkpoint, checkpoint.get('branch_of')
    checkpoint, branch = None, None
    if branch_from:
        if os.path.realpath(os.path.dirname(branch_from) or '.') == os.path.realpath(cfg.out_dir):
            raise UserError(f"--init_from={branch_from}: a branch needs its own --out_dir (this one holds the run it "
                            f"branches from)")
        checkpoint = load_checkpoint(branch_from, missing='keep that step with --save_steps in the run it comes from')
        cfg = resume_config(checkpoint['config'], cfg, explicit, defaults)
        if 'save_steps' not in explicit:
            cfg.save_steps = ''                  # the parent's branch points are not the branch's
        check_config(cfg, world_size)
        branch = {'checkpoint': branch_from, 'step': checkpoint['step']}
    check_new_run(cfg.out_dir, cfg.overwrite)
    return cfg, False, checkpoint, branch


def open_run(cfg, which, model, optimizer, scaler, info, meta, locks, rank=0, world_size=1):
    """The Run (which: which_run's resume, checkpoint, branch): the checkpoint checked against the model and budget,
    its state loaded; then on rank 0 the folder's lock, log.csv cut back to the checkpoint's step (a row a cut lost,
    again) or the run a new one replaces cleared, and run.json (info, what code ran): the folder is this run's."""
    resume, ckpt, branch = which
    args, c = dataclasses.asdict(model.config), ckpt or {}
    if ckpt is not None and args != ckpt['model_args']:
        diff = [f"{k}={c['model_args'].get(k)!r} (now {v!r})" for k, v in args.items() if c['model_args'].get(k) != v]
        raise UserError(f"the checkpoint's model differs from this config: {', '.join(diff)}; resume with the run's "
                        f"own settings")
    if branch is not None and not resume and branch['step'] >= info['n_iters']:
        raise UserError(f"--init_from={cfg.init_from} is step {branch['step']:,}, and this run's budget is "
                        f"{info['n_iters']:,} steps: nothing left to train (give a larger --max_tokens or --max_iters)")
    if ckpt is not None:
        try:
            model.load_state_dict(clean_state_dict(ckpt['model']))
        except RuntimeError as e:
            raise UserError(f"{cfg.out_dir}/ckpt.pt: the weights do not fit the model: {one_line(e)}") from None
        optimizer.load_state_dict(ckpt['optimizer'])
        if ckpt.get('scaler'):
            scaler.load_state_dict(ckpt['scaler'])
        set_rng_state(ckpt['rng'][rank] if rank < len(ckpt['rng']) else ckpt['rng'][0])
    info = {**info, **git_state(os.path.dirname(os.path.abspath(__file__))), 'torch_version': torch.__version__,
            'finished': False, 'final': None, **({'branch_of': branch} if branch else {})}
    # the schedule's length is fixed when a run starts: a longer resume goes on at min_lr; a branch has its own
    run = Run(cfg=cfg, model=model, optimizer=optimizer, scaler=scaler, info=info, meta=meta, resume=resume,
              branch=branch, rank=rank, world_size=world_size, tracker=None, step=c.get('step', 0),
              schedule_iters=c.get('schedule_iters', c.get('n_iters')) if resume else info['n_iters'],
              best_val_loss=c.get('best_val_loss', float('inf')), last_eval=c.get('last_eval'),
              last_row=c.get('last_row') if resume else None, elapsed_s=c.get('elapsed_s', 0.0),
              train_loss_sum=c.get('train_loss_sum', 0.0), train_loss_steps=c.get('train_loss_steps', 0),
              **{f'{name}_path': os.path.join(cfg.out_dir, f) for name, f in zip(('run', 'log', 'ckpt'), RUN_FILES)})
    if rank != 0:
        return run
    os.makedirs(cfg.out_dir, exist_ok=True)
    if not locks:     # no trainer had written here: the lock file is made before the first write
        locks.append(lock(cfg.out_dir, create=True))
        if not resume:    # a trainer that took it in between has written a run: look again
            check_new_run(cfg.out_dir, cfg.overwrite, say=False)
    if resume:            # log.csv cut back to the checkpoint's step; a row lost in a cut, again
        torn = truncate_log(run.log_path, run.step)
        _, rows = log_rows(run.log_path)
        relog = run.last_row is not None and (not rows or int(rows[-1][0]) < run.last_row['step'])
        if relog:
            append_log(run.log_path, run.last_row)
        if torn is not None:
            print(f"note: dropped the last row of {run.log_path}, cut mid-line when the run stopped (it began "
                  f"{torn[:30]!r}); " + (f"wrote step {run.step}'s row again from the checkpoint" if relog else
                                         f"training resumes at step {run.step} and logs the steps after it"))
    else:                 # a new run clears the run it replaces (--overwrite, or no checkpoint)
        for f in RUN_FILES + tuple(glob.glob(os.path.join(glob.escape(cfg.out_dir), 'ckpt_*.pt'))):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(cfg.out_dir, os.path.basename(f)))   # glob's paths hold out_dir
    write_json(run.run_path, info)
    if cfg.wandb_log:   # nanoGPT's convention: each log.csv row goes to W&B too
        import wandb
        run.tracker = wandb.init(project=cfg.wandb_project, dir=cfg.out_dir, config=vars(cfg),
                                 name=cfg.wandb_run_name or os.path.basename(os.path.abspath(cfg.out_dir)))
    return run


def truncate_log(path, last_step):
    """On resume: drop the rows after the checkpoint's step, and a last line cut mid-line (returned, else None)."""
    header, rows = log_rows(path)
    if header is None:
        return None
    with open(path, 'rb') as f:
        torn = rows.pop() if rows and not f.read().endswith(b'\n') else None
    kept = [r for r in rows if len(r) == len(header) and r[0].isdigit() and int(r[0]) <= last_step]
    buf = io.StringIO()
    csv.writer(buf, lineterminator='\n').writerows([header] + kept)
    atomic_write(path, lambda f: f.write(buf.getvalue().encode()))
    return None if torn is None else ','.join(torn)


class Run(types.SimpleNamespace):
    """A run as open_run opened it: where it stands (step, schedule_iters, evaluations, clock, loss) and its writes."""

    def say_start(self, data, ddp, follows_world, n_layer_from_file):
        """What the run is (data: folder, train and val tokens, eval windows), and the notes its start calls for."""
        if self.rank != 0:
            return
        cfg, mcfg, info, (folder, n_train, n_val, windows) = self.cfg, self.model.config, self.info, data
        T, fpt, n_iters, per_iter = cfg.block_size, info['flops_per_token'], info['n_iters'], info['tokens_per_iter']
        new, sparse = not self.resume and not self.branch, cfg.model in ('mod', 'xmod')
        if follows_world and new:
            print(f"note: --gradient_accumulation_steps follows the world size: {cfg.gradient_accumulation_steps}, "
                  f"one micro-batch of {cfg.batch_size} rows per rank; pass --gradient_accumulation_steps=N, a "
                  f"multiple of {self.world_size}, to set it")
        if n_layer_from_file and new and sparse and cfg.match_flops:
            print(f"note: n_layer={cfg.n_layer} (from the config file) is the {cfg.model} model's own depth, "
                  f"FLOP-matched to a dense model of dense_layers={cfg.dense_layers} layers; to match a "
                  f"{cfg.n_layer}-layer dense model, run with --dense_layers={cfg.n_layer} --n_layer=0")
        routed = (f", capacity {mcfg.capacity:.4f} ({xmod.routed_k(mcfg.capacity, T)}/{T} tokens)"
                  if 'routed' in xmod.layer_kinds(mcfg) else ', no routed layer: the dense model' if sparse else '')
        matched = f", FLOP-matched to dense {cfg.dense_layers} layers" if sparse and cfg.match_flops else ''
        print(f"model {mcfg.model}: layout {info['layout']} ({mcfg.n_layer} layers{routed}){matched}")
        print(f"params {info['params_total']:,} total, {info['params_active']:,.0f} active (non-embedding), rho "
              f"{info['params_total'] / info['params_active']:.2f}; {fpt / 1e6:.3f}M FLOPs/token forward")
        shown = folder if os.path.relpath(folder).startswith('..') else os.path.relpath(folder)
        print(f"data {shown}: {n_train:,} train / {n_val:,} val tokens, {self.meta.get('tokenizer')} vocab "
              f"{self.meta['vocab_size']:,}; eval set {windows} windows x {T} = {windows * T:,} tokens")
        print(f"budget {n_iters:,} iters x {per_iter:,} tokens = {n_iters * per_iter / 1e6:.2f}M tokens, "
              f"{3 * fpt * n_iters * per_iter:.3g} FLOPs; device {info['device']} {info['dtype']}"
              f"{f' x {self.world_size} ranks' if ddp else ''}; out_dir {cfg.out_dir}"
              + (f"; resuming at step {self.step}" if self.resume else ''))
        if self.branch and not self.resume:
            at = cooldown_start(cfg, self.schedule_iters)
            sched = f"; its cooldown starts at step {at:,}" if cfg.lr_schedule == 'wsd' else ''
            print(f"branch of {self.branch['checkpoint']} at step {self.branch['step']:,}{sched}")
        if n_iters > self.schedule_iters:
            print(f"extending: the learning-rate schedule of this run ended at step {self.schedule_iters:,}; steps "
                  f"{self.schedule_iters:,}-{n_iters:,} run at min_lr={cfg.min_lr:g}")

    def evaluated(self, row, elapsed_s):
        """log.csv's row (and W&B's), then the checkpoint: a kill in between loses the row, not the step."""
        self.best_val_loss = min(self.best_val_loss, row['val_loss_causal'])
        self.last_eval = {k: row[k] for k in ('step', 'tokens', 'flops', 'val_loss', 'val_loss_causal')}
        self.last_row = row
        if self.rank == 0:
            append_log(self.log_path, row)
            if self.tracker:
                self.tracker.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=row['step'])
        self.save(self.ckpt_path, row['step'], elapsed_s)

    def save(self, path, step, elapsed_s, loss_sum=None, loss_steps=0):
        """A checkpoint to continue exactly and to branch (loss_sum over loss_steps since the row); rank 0 writes."""
        if loss_sum is not None:
            loss_sum = loss_sum.clone()
            if self.world_size > 1:
                torch.distributed.all_reduce(loss_sum, op=torch.distributed.ReduceOp.AVG)
            loss_sum = loss_sum.item()
        rngs = [rng_state()] * self.world_size
        if self.world_size > 1:
            torch.distributed.all_gather_object(rngs, rng_state())
        if self.rank == 0:
            save_checkpoint({'model': self.model.state_dict(), 'optimizer': self.optimizer.state_dict(),
                             'scaler': self.scaler.state_dict(), 'config': vars(self.cfg),
                             'model_args': self.info['model_config'], 'step': step,
                             'data': dict(seed=self.cfg.seed, step=step, tokens=step * self.info['tokens_per_iter']),
                             'n_iters': self.info['n_iters'], 'schedule_iters': self.schedule_iters,
                             'best_val_loss': self.best_val_loss, 'elapsed_s': elapsed_s, 'last_eval': self.last_eval,
                             'last_row': self.last_row, 'rng': rngs, 'meta': self.meta, 'branch_of': self.branch,
                             'train_loss_sum': loss_sum or 0.0, 'train_loss_steps': loss_steps}, path)

    def diverged(self, what, value, step, advice=''):
        """The loss became NaN or inf: run.json records where; the last good checkpoint stays."""
        if self.rank == 0:
            self.info['diverged'] = {'step': step, 'what': what}
            write_json(self.run_path, self.info)
        last = self.last_eval['step'] if self.last_eval else 'none'
        return LossDiverged(f"the {what} is {value} at step {step}: stopping. The last good checkpoint "
                            f"({self.ckpt_path}, step {last}) is kept{advice}")

    def finish(self):
        if self.tracker:
            self.tracker.finish()
        if self.rank == 0:
            self.info.update(finished=True, final=self.last_eval)
            write_json(self.run_path, self.info)


def stop_on_signals(enabled):
    """From now on Ctrl-C or SIGTERM goes into the list returned (the loop saves its step, then stops); a second stops
    at once, as the first does under DDP (enabled=False: ranks would stop at different steps). Caller restores."""
    stop = []

    def on_signal(signum, frame):
        if stop:
            raise KeyboardInterrupt
        stop.append(signum)
        os.write(2, b"\ntrain.py: stopping after this step, once its state is saved (again: at once)\n")
    if enabled and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
    return stop


def rng_state():
    """Every generator's state, as plain values and tensors (the checkpoint loads weights_only)."""
    name, key, pos, has_gauss, cached = np.random.get_state()
    return {'python': random.getstate(), 'numpy': [name, key.tolist(), pos, has_gauss, cached],
            'torch': torch.get_rng_state(), 'cuda': torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(s):
    random.setstate((s['python'][0], tuple(s['python'][1]), s['python'][2]))
    name, key, pos, has_gauss, cached = s['numpy']
    np.random.set_state((name, np.array(key, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(s['torch'])
    if s['cuda'] and torch.cuda.is_available() and len(s['cuda']) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(s['cuda'])
