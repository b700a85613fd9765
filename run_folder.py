"""
run_folder.py: what several scripts share about a run folder and a run's plan.

  - run.json, log.csv (its first columns, LOG_COLUMNS, are a contract fit_law.py reads) and ckpt.pt, every write
    atomic; load_model for the scripts that use a trained model; one trainer per folder (lock)
  - a run's plan from its config alone (model_config, sizes: FLOP matching, the budget) and the fixed validation
    windows (eval_starts), which train.py trains, sweeps/sweep.py adds up (--dry_run) and tools/routing_plot.py reads
"""
import contextlib
import csv
import dataclasses
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

import xmod
from configurator import UserError, one_line

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
    """(the run's model on dev, in eval mode: causal thresholds frozen, dropout off; its checkpoint), for the scripts
    that use a trained model (sample.py, tools/downstream.py). UserError when the checkpoint is missing or does not
    rebuild."""
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
    """One trainer per run folder: an exclusive flock on out_dir/train.lock, which the kernel drops when the
    process ends (kill -9 too), so no lock is ever stale. Returns the open descriptor (closing it unlocks), or
    None when create=False and no trainer made the file yet; UserError when another process holds it."""
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


# ----------------------------------------------------------------------------------------------------------------------
# A run's plan, from its config alone: the model (FLOP matching), the budget, the fixed validation windows. train.py
# trains it; sweeps/sweep.py adds up its FLOPs (--dry_run) and tools/routing_plot.py reads its windows without starting a run

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
    """(model config, tokens per iteration, forward FLOPs per token, iterations) of a run's config on a dataset
    with this meta.pkl (None: GPTConfig's vocab_size): what run.json records, and what sweeps/sweep.py --dry_run adds up
    without starting a run."""
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
