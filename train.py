"""
train.py: train one model of any family (dense, mod, xmod, moe) on a CPU, one GPU, or several GPUs with DDP.

    python train.py --model=xmod --stride=4                  # the default: char-level Shakespeare, minutes on a CPU
    python train.py --model=dense                            # its FLOP-matched dense baseline (same data, same order)
    python train.py config/shakespeare_char_nanogpt.py       # a config file, then any --key=value on top
    torchrun --standalone --nproc_per_node=8 train.py config/openwebtext_xmod.py

Configuration works as in nanoGPT: the module-level defaults below, then a config file (a bare argument: a path, or
a name under config/ with or without .py), then --key=value overrides, each type-checked against its default.
`python train.py --help` lists every key.

Sizing: dense_layers is the depth of the dense baseline that a sparse run is FLOP-matched to. model=dense uses
n_layer (0 = dense_layers); mod/xmod with match_flops=True solve depth and capacity so that forward FLOPs/token are
within 2% of that dense model (xmod.match_flops); moe keeps the dense depth, its active parameters match dense.

Outputs in out_dir:
    log.csv   one row per evaluation (step 0, every eval_interval, the last step)
    run.json  the resolved config, sizes, FLOPs, environment, and the final losses once finished
    ckpt.pt   written atomically at every evaluation; --init_from=resume continues exactly where it stopped
Exit codes: 0 done (or stopped by stop_iter); 2 bad input (one line on stderr, nothing on disk touched);
3 the loss became NaN or inf (the last good checkpoint is kept); 130 interrupted.
"""
import builtins
import contextlib
import csv
import difflib
import io
import json
import math
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
import types
from ast import literal_eval
from contextlib import nullcontext
from dataclasses import asdict, replace

import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # xmod.py and data/ live next to this file
import xmod
from xmod import GPT, GPTConfig

# -----------------------------------------------------------------------------------------------------------------
# default config values: char-level Shakespeare, sized to finish in a few minutes on a laptop CPU
# I/O
out_dir = 'out'
eval_interval = 250         # evaluate, log a row and checkpoint every this many iterations (and at the end)
eval_tokens = 65536         # size of the fixed validation set (0 = the whole val split); a few seconds on a CPU
eval_iters = 0              # nanoGPT's knob: if > 0, the val set is eval_iters batches of batch_size windows instead
log_interval = 10           # progress bar and NaN check every this many iterations
init_from = 'scratch'       # 'scratch' | 'resume' | 'auto' (resume when out_dir has a checkpoint, else scratch)
overwrite = False           # scratch into an out_dir that already holds a run replaces it only with this
stop_iter = 0               # stop after this iteration as if killed (0 = off): resume tests, preemption drills
# data
dataset = 'shakespeare'     # reads data/<dataset>/{train.bin, val.bin, meta.pkl}
data_dir = ''               # a folder with those three files instead (tests, custom corpora)
gradient_accumulation_steps = 1   # global: each of world_size DDP ranks runs gradient_accumulation_steps/world_size
batch_size = 16             # micro-batch size (rows per forward)
block_size = 128            # context length T
# model
model = 'xmod'              # 'dense' | 'mod' | 'xmod' | 'moe'
n_layer = 0                 # 0 = auto: dense/moe use dense_layers, mod/xmod solve it by FLOP matching
dense_layers = 4            # depth of the dense baseline a sparse run is FLOP-matched to
match_flops = True          # mod/xmod: solve capacity (and depth, when n_layer=0) to match the dense FLOPs/token
n_head = 4
n_embd = 128
dropout = 0.0
bias = False
impl = 'fast'               # 'fast' (batched gather/scatter, compiles) | 'naive' (loops and masks, for reading)
stride = 4                  # xmod: a dense anchor every `stride` layers
capacity = 0.125            # fraction of a sequence's tokens a routed layer takes (the target when FLOP matching)
gate = ''                   # 'variance' (X-MoD) | 'plain' (MoD) | '' = the family's default
balance = -1.0              # depth-balance loss coefficient; 0 = off; < 0 = the family's default (xmod 0.1, mod 0)
router_aux = GPTConfig.router_aux                 # coefficients: xmod.py's defaults
router_momentum = GPTConfig.router_momentum
n_expert = 8
expert_top_k = 2
expert_hidden = 0           # 0 = 4*n_embd/expert_top_k, so the active parameters match a dense MLP
expert_capacity_factor = 1.25
moe_aux = GPTConfig.moe_aux
moe_zloss = GPTConfig.moe_zloss
# budget: the first one that is set wins, in the order max_flops, max_tokens, max_iters; the cosine decays over it
max_iters = 2000
max_tokens = 0
max_flops = 0.0             # training FLOPs, counted as 3 x forward FLOPs/token x tokens
# optimizer: AdamW, linear warmup, cosine decay to min_lr
learning_rate = 1e-3
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.99                # small batches: a shorter second-moment memory, as nanoGPT's char model
grad_clip = 1.0             # 0 = off
decay_lr = True
warmup_iters = 100
min_lr = 1e-4               # ~ learning_rate/10 (Chinchilla); set it together with learning_rate
# system
device = ''                 # '' = auto: cuda, then mps, then cpu
dtype = ''                  # '' = auto: bfloat16 autocast on CUDA (float16 without bf16 support), float32 elsewhere
compile = False             # torch.compile: worth it on a GPU, barely helps on a CPU
backend = ''                # DDP backend, '' = nccl on GPU, gloo on CPU
seed = 1337
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items() if not k.startswith('_') and type(v) in (bool, int, float, str)}

ROOT = os.path.dirname(os.path.abspath(__file__))
RUN_FILES = ('run.json', 'log.csv', 'ckpt.pt')
# the first columns of log.csv, in this order (fit_law.py reads them); the model's stats follow
LOG_COLUMNS = ('step', 'tokens', 'flops', 'lr', 'elapsed_s', 'tokens_per_s', 'train_loss', 'val_loss',
               'val_loss_causal')
# Keys that describe this invocation, not the run: a resume takes them from the command line (or their defaults),
# and every other key from the checkpoint unless the command line sets it.
SESSION_KEYS = ('out_dir', 'init_from', 'overwrite', 'stop_iter', 'log_interval', 'device', 'dtype', 'compile',
                'backend')
DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}
EXIT_BAD_INPUT, EXIT_DIVERGED = 2, 3


class UserError(Exception):
    """Bad input the user can fix: printed as one line on stderr, exit code 2, nothing on disk touched."""


class LossDiverged(Exception):
    """The loss became NaN or inf: exit code 3, the last good checkpoint is kept."""


# -----------------------------------------------------------------------------------------------------------------
# configuration: defaults, then a config file, then --key=value

def coerce(value, default, shown, cli):
    """value (a string from the command line when cli, else a Python object from a config file) as the default's
    type. int is accepted for float keys and an integral float (1e6) for int keys; bools are True/False/true/false/
    1/0 on the command line, True/False in a config file."""
    want = type(default)
    if want is str:
        if isinstance(value, str):
            return value
    else:
        v = value
        if cli:
            with contextlib.suppress(ValueError, SyntaxError):
                v = literal_eval(v.strip())
        if want is bool:
            if cli and isinstance(v, str) and v.lower() in ('true', 'false'):
                return v.lower() == 'true'
            if isinstance(v, bool) or (cli and type(v) is int and v in (0, 1)):
                return bool(v)
        elif want is int:
            if type(v) is int:
                return v
            if type(v) is float and v.is_integer():
                return int(v)
        elif type(v) in (int, float):
            return float(v)
    raise UserError(f"{shown}: expected {want.__name__} (like the default {default!r})")


def unknown_key(key, defaults, where):
    best = difflib.get_close_matches(key, list(defaults), n=1, cutoff=0.0)
    hint = f"; did you mean --{best[0]}?" if best else ''
    return UserError(f"unknown key {key!r} {where}{hint}")


def find_config_file(name, config_dir):
    """A bare argument: a path, or a name under config/, with or without .py."""
    for path in (name, name + '.py', os.path.join(config_dir, name), os.path.join(config_dir, name + '.py')):
        if os.path.isfile(path):
            return path
    raise UserError(f"config file not found: {name} (looked for it as a path and under {config_dir})")


def configure(argv, defaults, config_dir=os.path.join(ROOT, 'config'), doc=__doc__):
    """argv -> (config namespace, set of keys given explicitly by a config file or the command line)."""
    cfg, explicit = dict(defaults), set()
    for arg in argv:
        if arg in ('-h', '--help'):
            print(doc.strip() + '\n\nkeys and defaults:')
            for k, v in defaults.items():
                print(f"  --{k}={v!r}")
            sys.exit(0)
        if not arg.startswith('--'):
            path = find_config_file(arg, config_dir)
            ns = {'__file__': os.path.abspath(path)}
            try:
                with open(path) as f:
                    exec(builtins.compile(f.read(), path, 'exec'), ns)   # `compile` is a key here
            except Exception as e:
                raise UserError(f"config file {path}: {type(e).__name__}: {one_line(e)}") from None
            for k, v in ns.items():
                if k.startswith('_') or isinstance(v, (types.ModuleType, types.FunctionType, type)):
                    continue          # imports and helpers a config file may use
                if k not in defaults:
                    raise unknown_key(k, defaults, f"in config file {path}")
                cfg[k] = coerce(v, defaults[k], f"{k} = {v!r} in {path}", cli=False)
                explicit.add(k)
        else:
            key, eq, value = arg[2:].partition('=')
            if not eq:
                raise UserError(f"{arg}: overrides are --key=value")
            if key not in defaults:
                raise unknown_key(key, defaults, 'on the command line')
            cfg[key] = coerce(value, defaults[key], arg, cli=True)
            explicit.add(key)
    return types.SimpleNamespace(**cfg), explicit


def one_line(e):
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def check_config(cfg, world_size):
    """Ranges and divisibility that no later step would report clearly."""
    def need(ok, msg):
        if not ok:
            raise UserError(msg)
    need(cfg.init_from in ('scratch', 'resume', 'auto'),
         f"--init_from={cfg.init_from!r}: expected scratch | resume | auto")
    need(cfg.model in xmod.MODELS, f"--model={cfg.model!r}: expected {' | '.join(xmod.MODELS)}")
    for k in ('batch_size', 'block_size', 'gradient_accumulation_steps', 'eval_interval', 'log_interval',
              'dense_layers', 'n_head', 'n_embd'):
        need(getattr(cfg, k) >= 1, f"--{k}={getattr(cfg, k)}: expected an integer >= 1")
    for k in ('n_layer', 'eval_tokens', 'eval_iters', 'stop_iter', 'expert_hidden', 'max_iters', 'max_tokens',
              'max_flops', 'warmup_iters', 'min_lr', 'weight_decay', 'grad_clip', 'seed'):
        need(getattr(cfg, k) >= 0, f"--{k}={getattr(cfg, k)}: expected a number >= 0")
    need(cfg.max_iters > 0 or cfg.max_tokens > 0 or cfg.max_flops > 0,
         "no budget: set one of --max_iters, --max_tokens or --max_flops to a number > 0")
    need(cfg.learning_rate > 0, f"--learning_rate={cfg.learning_rate}: expected a number > 0")
    need(0 <= cfg.beta1 < 1 and 0 <= cfg.beta2 < 1, "--beta1 and --beta2: expected numbers in [0, 1)")
    need(cfg.dtype in ('',) + tuple(DTYPES), f"--dtype={cfg.dtype!r}: expected '' (auto) | {' | '.join(DTYPES)}")
    need(cfg.gradient_accumulation_steps % world_size == 0,
         f"--gradient_accumulation_steps={cfg.gradient_accumulation_steps} is not a multiple of the world size "
         f"{world_size}: it counts micro-batches over all ranks, each rank runs an equal share")


def model_config(cfg, vocab_size):
    """The run's GPTConfig from the train config: dense/moe at n_layer (0 = dense_layers); mod/xmod FLOP-matched to
    the dense baseline of depth dense_layers (xmod.match_flops), or as given with match_flops=False."""
    args = dict(block_size=cfg.block_size, vocab_size=vocab_size, n_head=cfg.n_head, n_embd=cfg.n_embd,
                dropout=cfg.dropout, bias=cfg.bias, impl=cfg.impl, stride=cfg.stride, capacity=cfg.capacity,
                router_aux=cfg.router_aux, router_momentum=cfg.router_momentum, n_expert=cfg.n_expert,
                expert_top_k=cfg.expert_top_k, expert_hidden=cfg.expert_hidden or None,
                expert_capacity_factor=cfg.expert_capacity_factor, moe_aux=cfg.moe_aux, moe_zloss=cfg.moe_zloss)
    knobs = dict(gate=cfg.gate or None, balance=cfg.balance if cfg.balance >= 0 else None)   # None: family default
    try:
        if cfg.model in ('mod', 'xmod') and cfg.match_flops:
            dense = GPTConfig(model='dense', n_layer=cfg.dense_layers, **args)
            matched = xmod.match_flops(dense, cfg.model, stride=cfg.stride, n_layer=cfg.n_layer or None,
                                       capacity=cfg.capacity)
            return replace(matched, **knobs)        # match_flops resets gate/balance to the family's defaults
        return GPTConfig(model=cfg.model, n_layer=cfg.n_layer or cfg.dense_layers, **args, **knobs)
    except ValueError as e:
        raise UserError(one_line(e)) from None


def resume_config(saved, cfg, explicit):
    """The config of a resumed run: the checkpoint's, with this invocation's session keys and explicit overrides."""
    merged = dict(DEFAULTS)
    merged.update({k: v for k, v in saved.items() if k in DEFAULTS})
    for k in set(SESSION_KEYS) | explicit:
        merged[k] = getattr(cfg, k)
    return types.SimpleNamespace(**merged)


# -----------------------------------------------------------------------------------------------------------------
# data: batches are a pure function of (seed, step), the validation set is fixed

def find_data(cfg, ddp):
    """(folder, meta) of the dataset; prepares the default one when it is missing."""
    folder = cfg.data_dir or os.path.join(ROOT, 'data', cfg.dataset)
    missing = [f for f in ('train.bin', 'val.bin', 'meta.pkl') if not os.path.isfile(os.path.join(folder, f))]
    if missing and not cfg.data_dir and cfg.dataset == 'shakespeare' and not ddp:
        print(f"{folder} is not prepared yet: preparing the char-level Shakespeare dataset now (once) ...")
        from data.tokenizers import DataError
        from data.shakespeare.prepare import prepare
        try:
            prepare('char')
        except (DataError, OSError) as e:
            raise UserError(f"could not prepare the default dataset: {one_line(e)}") from None
        missing = []
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


def batch_starts(seed, step, n_rows, n_tokens, T):
    """Start positions of the global batch of training step `step`: a pure function of (seed, step), so runs of
    different families with the same seed see the same data in the same order, a resumed run sees exactly the
    batches it would have seen, and DDP ranks slice the very batch one process would draw."""
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, n_tokens - T, size=n_rows)


def eval_starts(n_tokens, T, tokens):
    """The fixed validation set: evenly spaced windows of T+1 tokens over the split, from its start to its end.
    tokens=0: the whole split (as many non-overlapping windows as fit). The same for every run and every eval, so
    two runs' losses differ only by the models (random eval batches read 0.01 high or low by the draw)."""
    last = n_tokens - T - 1                       # the last valid start
    count = last // T + 1
    if tokens:
        count = max(1, min(count, tokens // T))
    if count == 1:
        return [0]
    return [round(i * last / (count - 1)) for i in range(count)]


# -----------------------------------------------------------------------------------------------------------------
# checkpoints and run files: every write is atomic

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


CKPT_KEYS = ('model', 'optimizer', 'config', 'model_args', 'step', 'rng', 'meta')


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


def never_checkpointed(out_dir):
    """True for an unfinished run (run.json says finished: false) that has no checkpoint to resume from."""
    try:
        with open(os.path.join(out_dir, 'run.json')) as f:
            return json.load(f).get('finished') is False and not os.path.exists(os.path.join(out_dir, 'ckpt.pt'))
    except (OSError, ValueError, AttributeError):
        return False


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


def read_log(path):
    if not os.path.isfile(path):
        return None, []
    with open(path, newline='') as f:
        rows = list(csv.reader(f))
    return (rows[0], rows[1:]) if rows else (None, [])


def truncate_log(path, last_step):
    """On resume: drop the rows after the checkpoint's step (written after it, before the kill) and any torn
    last line, so the resumed run appends without duplicates."""
    header, rows = read_log(path)
    if header is None:
        return
    n = len(header)

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


def append_log(path, row):
    """Append one row; the header is written by the first row (the fixed columns, then the stats in the model's
    order), and later rows follow the file's own header."""
    header, _ = read_log(path)
    new = header is None
    header = header or list(row)
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


# -----------------------------------------------------------------------------------------------------------------
# devices, schedule, evaluation

def pick_device(name, local_rank):
    if not name:
        name = 'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else 'cpu'
    kind = name.split(':')[0]
    if kind not in ('cpu', 'cuda', 'mps'):
        raise UserError(f"--device={name!r}: expected '' (auto) | cpu | cuda | cuda:N | mps")
    if kind == 'cuda' and not torch.cuda.is_available():
        raise UserError(f"--device={name}: no CUDA device is available (leave --device empty to pick one)")
    if kind == 'mps' and not torch.backends.mps.is_available():
        raise UserError(f"--device={name}: MPS is not available (leave --device empty to pick one)")
    if kind == 'cuda' and local_rank is not None:
        name = f'cuda:{local_rank}'        # DDP: one GPU per rank
    return name


def get_lr(cfg, it, n_iters):
    """Linear warmup, then cosine decay from learning_rate to min_lr over the run's resolved iterations."""
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if not cfg.decay_lr:
        return cfg.learning_rate
    ratio = min(1.0, (it - cfg.warmup_iters) / max(1, n_iters - cfg.warmup_iters))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.learning_rate - cfg.min_lr)


def resolve_iters(cfg, fpt, tokens_per_iter):
    """The budget as a number of iterations: max_flops, else max_tokens, else max_iters (the closest count).
    A FLOP-matched pair should use max_tokens: both then see the same tokens (max_flops gives each its own)."""
    if cfg.max_flops > 0:
        return max(1, round(cfg.max_flops / (3 * fpt * tokens_per_iter)))
    if cfg.max_tokens > 0:
        return max(1, round(cfg.max_tokens / tokens_per_iter))
    return cfg.max_iters


@torch.no_grad()
def evaluate(fwd, raw_model, folder, starts, B, T, routing, device, ctx, rank, world_size):
    """Mean LM loss and model.stats over the fixed validation windows. Batches are dealt out to DDP ranks; each
    batch's stats are weighted by its rows, so the result does not depend on the world size. A rank with no batch
    runs batch 0 with weight 0 (it must still join the all_reduce with the same keys)."""
    raw_model.eval()                       # causal thresholds frozen, dropout off
    data = open_split(folder, 'val')
    batches = [starts[i:i + B] for i in range(0, len(starts), B)]
    mine = [(b, len(b)) for b in batches[rank::world_size]] or [(batches[0], 0)]
    keys, total = None, None
    for b, weight in mine:
        x, y = read_windows(data, b, T, device)
        with ctx:
            fwd(x, y, routing=routing)
        stats = raw_model.stats
        keys = keys or list(stats)
        vec = torch.stack([stats[k].float() for k in keys]) * weight
        total = vec if total is None else total + vec
    if world_size > 1:
        torch.distributed.all_reduce(total)
    raw_model.train()
    return dict(zip(keys, (total / len(starts)).tolist()))


def eval_row(fwd, raw_model, mcfg, folder, starts, cfg, device, ctx, rank, world_size):
    """val_loss (top-k routing) and val_loss_causal (causal routing: the honest one), as LM cross-entropy only,
    plus the stats: top-k ones as they are, causal ones prefixed causal_. A dense model routes nothing, so its
    causal loss is its loss; the MoE is evaluated causally too (it then drops no token)."""
    run = lambda routing: evaluate(fwd, raw_model, folder, starts, cfg.batch_size, cfg.block_size, routing,
                                   device, ctx, rank, world_size)
    topk = run('topk')
    causal = dict(topk) if mcfg.model == 'dense' else run('causal')
    row = {'val_loss': topk.pop('lm_loss'), 'val_loss_causal': causal.pop('lm_loss')}
    row.update(topk)
    if mcfg.model != 'dense':
        row.update({'causal_' + k: v for k, v in causal.items()})
    return row


# -----------------------------------------------------------------------------------------------------------------

def train(argv):
    cfg, explicit = configure(argv, DEFAULTS)

    # -- processes and device
    ddp = int(os.environ.get('RANK', -1)) != -1
    rank, local_rank, world_size = 0, 0, 1
    if ddp:
        rank, local_rank, world_size = (int(os.environ[k]) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE'))
    master = rank == 0

    # -- resume or start: decided before anything is written
    check_config(cfg, world_size)
    ckpt_path = os.path.join(cfg.out_dir, 'ckpt.pt')
    resume = cfg.init_from == 'resume' or (cfg.init_from == 'auto' and os.path.exists(ckpt_path))
    checkpoint = None
    if resume:
        checkpoint = load_checkpoint(ckpt_path)
        cfg = resume_config(checkpoint['config'], cfg, explicit)
    else:
        held = [f for f in RUN_FILES if os.path.exists(os.path.join(cfg.out_dir, f))]
        # auto (the sweep runner's mode) may replace a run killed before its first checkpoint: nothing to keep
        if held and not cfg.overwrite and not (cfg.init_from == 'auto' and never_checkpointed(cfg.out_dir)):
            raise UserError(f"{cfg.out_dir} already holds a run ({', '.join(held)}): resume it with "
                            f"--init_from=resume, pick another --out_dir, or replace it with --overwrite=True")
    check_config(cfg, world_size)              # again: a resumed config comes from the checkpoint
    dev = pick_device(cfg.device, local_rank if ddp else None)
    device_type = dev.split(':')[0]
    dtype = cfg.dtype or ('float32' if device_type != 'cuda' else
                          'bfloat16' if torch.cuda.is_bf16_supported() else 'float16')
    if dtype == 'float16' and device_type != 'cuda':
        raise UserError("--dtype=float16 needs a CUDA device (use float32 or bfloat16)")

    # -- data and model shape
    folder, meta = find_data(cfg, ddp)
    vocab_size = meta['vocab_size']
    if meta.get('tokenizer') == 'gpt2':
        vocab_size = -(-vocab_size // 64) * 64     # 50257 -> 50304: a multiple of 64 is faster, the rest unused
    T = cfg.block_size
    n_train, n_val = len(open_split(folder, 'train')), len(open_split(folder, 'val'))
    for split, n in (('validation', n_val), ('training', n_train)):
        if n < T + 1:
            raise UserError(f"block_size={T} is larger than the {split} split ({n} tokens in {folder}): "
                            f"lower --block_size")
    mcfg = model_config(cfg, vocab_size)
    if checkpoint is not None and asdict(mcfg) != checkpoint['model_args']:
        diff = [f"{k}={checkpoint['model_args'].get(k)!r} (now {v!r})" for k, v in asdict(mcfg).items()
                if checkpoint['model_args'].get(k) != v]
        raise UserError(f"the checkpoint's model differs from this config: {', '.join(diff)}; resume with the "
                        f"run's own settings")
    gas_local = cfg.gradient_accumulation_steps // world_size
    tokens_per_iter = cfg.batch_size * cfg.gradient_accumulation_steps * T
    fpt = xmod.flops_per_token(mcfg, T, cfg.batch_size)
    n_iters = resolve_iters(cfg, fpt, tokens_per_iter)
    starts = eval_starts(n_val, T, cfg.eval_iters * cfg.batch_size * T if cfg.eval_iters else cfg.eval_tokens)

    # -- from here on we write: DDP joins the ranks first, so all of them have passed the checks above
    if ddp:
        torch.distributed.init_process_group(backend=cfg.backend or ('nccl' if device_type == 'cuda' else 'gloo'))
        if device_type == 'cuda':
            torch.cuda.set_device(dev)
    if device_type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    ctx = nullcontext() if dtype == 'float32' else torch.autocast(device_type=device_type, dtype=DTYPES[dtype])

    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)                    # the initial weights: a pure function of the seed
    model = GPT(mcfg)
    torch.manual_seed(cfg.seed + rank)             # dropout: its own stream per rank
    if checkpoint is not None:
        try:
            model.load_state_dict(clean_state_dict(checkpoint['model']))
        except RuntimeError as e:
            raise UserError(f"{ckpt_path}: the weights do not fit the model: {one_line(e)}") from None
    model.to(dev)
    raw_model = model
    scaler = torch.amp.GradScaler(device_type, enabled=dtype == 'float16')
    optimizer = raw_model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2),
                                               device_type)
    step, best_val, elapsed0, last_eval = 0, float('inf'), 0.0, None
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint['optimizer'])
        if checkpoint.get('scaler'):
            scaler.load_state_dict(checkpoint['scaler'])
        step, best_val = checkpoint['step'], checkpoint.get('best_val_loss', best_val)
        elapsed0, last_eval = checkpoint.get('elapsed_s', 0.0), checkpoint.get('last_eval')
        rngs = checkpoint['rng']
        set_rng_state(rngs[rank] if rank < len(rngs) else rngs[0])
        checkpoint = None                          # free the memory
    fwd = torch.compile(model) if cfg.compile else model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # MoD's plain gate leaves Router.gain out of the graph: DDP must be told some parameters get no gradient
        unused = mcfg.gate == 'plain' and 'routed' in xmod.layer_kinds(mcfg)
        model = DDP(fwd, device_ids=[local_rank] if device_type == 'cuda' else None,
                    find_unused_parameters=unused)
    else:
        model = fwd

    params_total, params_active = raw_model.num_params(), raw_model.num_active_params()
    layout = xmod.layout_string(raw_model)
    resolved = dict(vars(cfg), n_layer=mcfg.n_layer, capacity=mcfg.capacity, gate=mcfg.gate,
                    balance=mcfg.balance, expert_hidden=mcfg.expert_hidden)
    run_info = {'config': resolved, 'model_config': asdict(mcfg), 'layout': layout, 'params_total': params_total,
                'params_active': params_active, 'flops_per_token': fpt, 'tokens_per_iter': tokens_per_iter,
                'n_iters': n_iters, 'world_size': world_size, 'seed': cfg.seed, 'git_commit': git_commit(),
                'torch_version': torch.__version__, 'device': dev, 'dtype': dtype, 'finished': False, 'final': None}
    log_path, run_path = os.path.join(cfg.out_dir, 'log.csv'), os.path.join(cfg.out_dir, 'run.json')
    if master:
        os.makedirs(cfg.out_dir, exist_ok=True)
        if resume:
            truncate_log(log_path, step)
        else:
            for f in RUN_FILES:                    # --overwrite: the old run goes (checked above)
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(cfg.out_dir, f))
        write_json(run_path, run_info)
        sparse = (f", capacity {mcfg.capacity:.4f} ({xmod.capacity_k(mcfg.capacity, T)}/{T} tokens)"
                  if mcfg.model in ('mod', 'xmod') else '')
        matched = (f", FLOP-matched to dense {cfg.dense_layers} layers" if mcfg.model in ('mod', 'xmod')
                   and cfg.match_flops else '')
        print(f"model {mcfg.model}: layout {layout} ({mcfg.n_layer} layers{sparse}){matched}")
        print(f"params {params_total:,} total, {params_active:,.0f} active (non-embedding), rho "
              f"{params_total / params_active:.2f}; {fpt / 1e6:.3f}M FLOPs/token forward")
        shown = folder if os.path.relpath(folder).startswith('..') else os.path.relpath(folder)
        print(f"data {shown}: {n_train:,} train / {n_val:,} val tokens, "
              f"{meta.get('tokenizer')} vocab {meta['vocab_size']:,}; eval set {len(starts)} windows x {T} = "
              f"{len(starts) * T:,} tokens")
        print(f"budget {n_iters:,} iters x {tokens_per_iter:,} tokens = {n_iters * tokens_per_iter / 1e6:.2f}M tokens,"
              f" {3 * fpt * n_iters * tokens_per_iter:.3g} FLOPs; device {dev} {dtype}"
              f"{f' x {world_size} ranks' if ddp else ''}; out_dir {cfg.out_dir}"
              f"{f'; resuming at step {step}' if resume else ''}")

    # -- the loop
    bar = tqdm(total=n_iters, initial=step, disable=True if not master else None, dynamic_ncols=True,
               unit='it', leave=False)
    t0 = time.time() - elapsed0
    resumed_at = step if resume else -1
    # step losses are summed on the device and brought to the host only every log_interval steps and at evals
    # (one sync each); train_loss is its own sum since the last eval, so log_interval cannot change its rounding
    window, since_eval = torch.zeros((), device=dev), torch.zeros((), device=dev)
    window_steps, since_eval_steps = 0, 0
    t_mark, tok_mark = time.time(), step * tokens_per_iter
    t_eval_end = time.time()

    def host_mean(total, n, what):
        """total/n as a float, averaged over DDP ranks (so every rank takes the same decision); stop on NaN/inf."""
        if ddp:
            torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.AVG)
        mean = total.item() / n
        if not math.isfinite(mean):
            raise LossDiverged(f"the {what} is {mean} at step {step}: stopping. The last good checkpoint "
                               f"({ckpt_path}, step {last_eval['step'] if last_eval else 'none'}) is kept; lower "
                               f"--learning_rate or raise --warmup_iters and resume with --init_from=resume")
        return mean

    while True:
        if (step % cfg.eval_interval == 0 or step == n_iters) and step != resumed_at:
            train_loss = host_mean(since_eval, since_eval_steps, 'training loss') if since_eval_steps else ''
            t_train = time.time() - t_eval_end
            ev = eval_row(fwd, raw_model, mcfg, folder, starts, cfg, dev, ctx, rank, world_size)
            if not all(math.isfinite(v) for v in (ev['val_loss'], ev['val_loss_causal'])):
                raise LossDiverged(f"the validation loss is {ev['val_loss']} at step {step}: stopping. The last good "
                                   f"checkpoint ({ckpt_path}, step {last_eval['step'] if last_eval else 'none'}) is "
                                   f"kept")
            tokens = step * tokens_per_iter
            row = {'step': step, 'tokens': tokens, 'flops': 3 * fpt * tokens, 'lr': get_lr(cfg, step, n_iters),
                   'elapsed_s': round(time.time() - t0, 3),
                   'tokens_per_s': round(since_eval_steps * tokens_per_iter / t_train, 1) if since_eval_steps else '',
                   'train_loss': train_loss}
            row.update(ev)
            since_eval.zero_()
            since_eval_steps = 0
            best_val = min(best_val, ev['val_loss_causal'])
            last_eval = {k: row[k] for k in ('step', 'tokens', 'flops', 'val_loss', 'val_loss_causal')}
            rngs = [rng_state()]
            if ddp:
                rngs = [None] * world_size
                torch.distributed.all_gather_object(rngs, rng_state())
            if master:
                append_log(log_path, row)        # the row first: a kill before the checkpoint loses it on resume
                save_checkpoint({'model': raw_model.state_dict(), 'optimizer': optimizer.state_dict(),
                                 'scaler': scaler.state_dict(), 'config': vars(cfg), 'model_args': asdict(mcfg),
                                 'step': step, 'data': {'seed': cfg.seed, 'step': step, 'tokens': tokens},
                                 'n_iters': n_iters, 'best_val_loss': best_val, 'elapsed_s': time.time() - t0,
                                 'last_eval': last_eval, 'rng': rngs, 'meta': meta}, ckpt_path)
                train_txt = f"train {row['train_loss']:.4f}, " if row['train_loss'] != '' else ''
                tqdm.write(f"step {step:>6}: {train_txt}val {ev['val_loss']:.4f}, val causal "
                           f"{ev['val_loss_causal']:.4f}, {row['elapsed_s']:.0f}s")
            t_eval_end = time.time()
        if step >= n_iters:
            break

        # one optimizer step over gradient_accumulation_steps micro-batches of the global batch
        lr = get_lr(cfg, step, n_iters)
        for group in optimizer.param_groups:
            group['lr'] = lr
        rows = batch_starts(cfg.seed, step, cfg.batch_size * cfg.gradient_accumulation_steps, n_train, T)
        data = open_split(folder, 'train')
        step_loss = torch.zeros((), device=dev)
        for micro in range(gas_local):
            first = (rank * gas_local + micro) * cfg.batch_size       # this rank's slice of the global batch
            x, y = read_windows(data, rows[first:first + cfg.batch_size], T, dev)
            # DDP: all-reduce gradients only on the last micro-batch
            sync = model.no_sync() if ddp and micro < gas_local - 1 else nullcontext()
            with sync:
                with ctx:
                    _, loss = model(x, y)
                step_loss += raw_model.stats['lm_loss'] / gas_local
                scaler.scale(loss / gas_local).backward()
        if cfg.grad_clip > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        window += step_loss
        since_eval += step_loss
        window_steps += 1
        since_eval_steps += 1
        bar.update(1)

        if step % cfg.log_interval == 0:
            mean = host_mean(window, window_steps, 'training loss')
            window.zero_()
            window_steps = 0
            now = time.time()
            bar.set_postfix(loss=f"{mean:.4f}", tok_s=f"{(step * tokens_per_iter - tok_mark) / (now - t_mark):,.0f}")
            t_mark, tok_mark = now, step * tokens_per_iter
        if cfg.stop_iter and step == cfg.stop_iter and step < n_iters:
            bar.close()
            if master:
                print(f"stopped after step {step} (stop_iter), as if killed: the checkpoint is at step "
                      f"{last_eval['step'] if last_eval else 'none'}; continue with --init_from=resume")
            return 0

    bar.close()
    if master:
        run_info.update(finished=True, final=last_eval)
        write_json(run_path, run_info)
        print(f"done: {n_iters:,} iters, {time.time() - t0:.0f}s; val_loss {last_eval['val_loss']:.4f}, "
              f"val_loss_causal {last_eval['val_loss_causal']:.4f}; sample with: python sample.py "
              f"--out_dir={cfg.out_dir}")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        return train(argv)
    except UserError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except LossDiverged as e:
        print(f"train.py: {e}", file=sys.stderr)
        return EXIT_DIVERGED
    except KeyboardInterrupt:
        print("train.py: interrupted; continue from the last checkpoint with --init_from=resume", file=sys.stderr)
        return 130
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == '__main__':
    sys.exit(main())
