"""
train.py: train one model of any family (dense, mod, xmod, moe) on a CPU, one GPU, or several GPUs with DDP.

    python train.py --model=xmod --stride=4                  # the default: char-level Shakespeare, minutes on a CPU
    python train.py --model=dense                            # its FLOP-matched dense baseline (same data, same order)
    python train.py config/shakespeare_char_nanogpt.py       # a config file, then any --key=value on top
    torchrun --standalone --nproc_per_node=8 train.py config/openwebtext_xmod.py

Configuration works as in nanoGPT: the defaults below, then a config file (a path, or a name under config/), then
--key=value, each checked against its default's type. `python train.py --help` lists every key. A loss coefficient
has its loss's name (log.csv's column); the old names still work (run_folder.RENAMED): --router_aux is --router_bce,
--balance --depth_balance, --moe_aux --moe_balance, and --router_bce=raw|centred (the old mode) --bce_logits.

Sizing: dense_layers is the depth of the dense baseline that a sparse run is FLOP-matched to. model=dense uses
n_layer (0 = dense_layers); mod/xmod with match_flops=True solve depth and capacity so that forward FLOPs/token are
within 2% of that dense model (xmod.match_flops); moe keeps the dense depth, its active parameters match dense.

Outputs in out_dir: log.csv (a row per evaluation), run.json (the resolved config, sizes, FLOPs, final losses),
ckpt.pt (atomic, at every evaluation), ckpt_S.pt (a kept copy of step S, --save_steps). --init_from=resume continues
exactly where a run stopped. The learning-rate schedule is fixed when a run starts: resuming with a larger budget
extends it at min_lr. --init_from=PATH/ckpt_S.pt branches a new run (its own out_dir, budget and schedule) from a
kept step: one long warmup-stable-decay run gives every shorter budget by branching at that budget's cooldown.
Read it top to bottom, as nanoGPT's: the settings; the config and how the run starts (scratch, resume or a branch,
decided by run_folder.open_run); the data; the model and its optimizer; the schedule and evaluation; run.json and
checkpoints; the loop (train_run; one optimizer step is train_step). What other scripts need of a run (its keys,
its plan) is in run_folder.py.
Exit codes: 0 done (or stopped by stop_iter); 2 bad input (one line on stderr, nothing on disk touched);
3 the loss became NaN or inf (the last good checkpoint is kept); 130 interrupted.
"""
import math
import os
import random
import sys
import time
import types
import warnings
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # xmod.py, configurator.py and data/ live here
import configurator  # configurator.peak_tflops: the name peak_tflops is a key here
import run_folder  # checkpoints, log.csv, run.json; the checks of a config, finding the data
import xmod
from configurator import (
    LossDiverged,
    UserError,
    autocast,
    configure,
    cpu_lacks_matrix_instructions,
    one_line,
    pick_device,
    run_main,
)
from run_folder import cooldown_start, eval_starts, open_split, read_windows, sizes  # the run's plan and data
from xmod import GPT, GPTConfig

# -----------------------------------------------------------------------------------------------------------------
# default config values: char-level Shakespeare, sized to finish in a few minutes on a laptop CPU
# I/O
out_dir = 'out'             # the run folder: log.csv, run.json, ckpt.pt
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
peak_tflops = 0.0           # the GPU's peak TFLOP/s for log.csv's mfu (0 = by device name, configurator.PEAK_TFLOPS)
backend = ''                # DDP backend, '' = nccl on GPU, gloo on CPU
threads = 0                 # CPU threads; 0 = the cores other processes leave free, looked at every 2 s (docs/speed.md)
seed = 1337                 # initial weights, data order and dropout
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = run_folder.train_defaults(globals())    # the settings above, then GPTConfig's fields


# -----------------------------------------------------------------------------------------------------------------
# the config and how the run starts, processes, device, data, the model's shape and budget

def setup_run(argv, lock=None):
    """Everything decided before anything is written: the config and how the run starts (run_folder.open_run:
    scratch, resume, auto, a branch; the folder's lock, --overwrite), processes, device, data, model shape and
    budget. Bad input raises UserError here, with nothing on disk touched. lock: the RunLock rank 0 takes (None: a
    caller that only wants the resolved run, not to train it)."""
    from_file = set()
    cfg, explicit = configure(argv, DEFAULTS, doc=__doc__, source=__file__, from_file=from_file, model=GPTConfig,
                              renamed=run_folder.new_key)
    ddp = int(os.environ.get('RANK', -1)) != -1
    rank, local_rank, world_size = 0, 0, 1
    if ddp:
        rank, local_rank, world_size = (int(os.environ[k]) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE'))
    # The key's default (1) is one process's. Under torchrun without it, each rank runs one micro-batch (the global
    # batch grows with the ranks, as in plain data parallelism) instead of every documented torchrun line stopping
    # on "not a multiple of the world size". A resume or branch takes the run's own value from its checkpoint.
    follows_world = world_size > 1 and 'gradient_accumulation_steps' not in explicit
    if follows_world:
        cfg.gradient_accumulation_steps = world_size
    start = run_folder.open_run(cfg, explicit, DEFAULTS, world_size, lock if rank == 0 else None)  # only rank 0 writes
    cfg, checkpoint = start.cfg, start.checkpoint
    dev = pick_device(cfg.device, local_rank if ddp else None)
    device_type = dev.split(':')[0]
    if cfg.cuda_graphs and (device_type != 'cuda' or not cfg.compile):
        raise UserError(f"--cuda_graphs=True captures the compiled training step in CUDA graphs: it needs "
                        f"--compile=True and a CUDA device (here {dev}{'' if cfg.compile else ', compile=False'})")
    if cfg.wandb_log and rank == 0:
        try:
            import wandb  # noqa: F401  (imported only when asked for: not a dependency)
        except ImportError:
            raise UserError("--wandb_log=True needs the wandb package: pip install wandb") from None
    dtype, ctx = autocast(cfg.dtype, device_type, cuda_fallback='float16')
    if dtype == 'float16' and device_type not in ('cuda', 'cpu'):
        raise UserError(f"--dtype=float16 needs a CUDA device or the CPU (its grad scaler), not {device_type} "
                        f"(use float32 or bfloat16)")

    folder, meta = run_folder.find_data(cfg, ddp)
    T = cfg.block_size
    n_train, n_val = len(open_split(folder, 'train')), len(open_split(folder, 'val'))
    for split, n in (('validation', n_val), ('training', n_train)):
        if n < T + 1:
            raise UserError(f"block_size={T} is larger than the {split} split ({n} tokens in {folder}): "
                            f"lower --block_size")
    if 'n_layer' in from_file and checkpoint is None and rank == 0:
        run_folder.explain_n_layer(cfg)
    mcfg, tokens_per_iter, fpt, n_iters = sizes(cfg, meta)
    # the schedule's length is fixed when a run starts; a resumed run with a larger budget goes on at min_lr. A branch
    # is a new run: its schedule follows its own budget
    schedule_iters = start.schedule_iters(mcfg, n_iters)
    starts = eval_starts(n_val, T, cfg.eval_iters * cfg.batch_size * T if cfg.eval_iters else cfg.eval_tokens,
                         cfg.batch_size)
    return types.SimpleNamespace(
        cfg=cfg, start=start, gas_note=follows_world and checkpoint is None, ddp=ddp, rank=rank, local_rank=local_rank,
        world_size=world_size, master=rank == 0, dev=dev, device_type=device_type, dtype=dtype, ctx=ctx, folder=folder,
        meta=meta, n_train=n_train, n_val=n_val, mcfg=mcfg, tokens_per_iter=tokens_per_iter, fpt=fpt, n_iters=n_iters,
        schedule_iters=schedule_iters, starts=starts,
        save_steps={int(x) for x in cfg.save_steps.split(',') if x.strip()})


# -----------------------------------------------------------------------------------------------------------------
# data: batches are a pure function of (seed, step); the validation set is fixed (run_folder.eval_starts)

def batch_starts(seed, step, n_rows, n_tokens, T):
    """Start positions of the global batch of training step `step`: a pure function of (seed, step), so runs of
    different families with the same seed see the same data in the same order, a resumed run sees exactly the
    batches it would have seen, and DDP ranks slice the very batch one process would draw."""
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, n_tokens - T, size=n_rows)


# -----------------------------------------------------------------------------------------------------------------
# the model and its optimizer

def build_model(run):
    """The model, its optimizer and grad scaler, restored from the checkpoint when resuming; DDP joins the ranks
    here, so all of them have passed the checks. Returns raw_model (the GPT), model (what evaluation calls:
    compiled or not), ddp_model (what training calls: model, or with --cuda_graphs its own compile in CUDA graphs;
    DDP-wrapped under DDP), optimizer and scaler."""
    cfg, dev = run.cfg, run.dev
    if run.ddp:
        backend = cfg.backend or ('nccl' if run.device_type == 'cuda' else 'gloo')
        if run.device_type == 'cuda':
            torch.cuda.set_device(dev)          # before the process group, so nccl binds this rank's GPU
        bound = {'device_id': torch.device(dev)} if backend == 'nccl' else {}
        torch.distributed.init_process_group(backend=backend, **bound)
    if run.device_type == 'cuda':
        torch.set_float32_matmul_precision('high')    # TF32 matmuls for what autocast leaves in float32
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)                    # the initial weights: a pure function of the seed
    raw_model = GPT(run.mcfg)
    with warnings.catch_warnings():                # step 0's causal eval runs before any calibration, by design:
        warnings.simplefilter('ignore')            # the model's one look for uncalibrated thresholds is spent here
        raw_model.warn_if_uncalibrated()
    torch.manual_seed(cfg.seed + run.rank)         # dropout: its own stream per rank
    ckpt = run.start.checkpoint
    if ckpt is not None:
        try:
            raw_model.load_state_dict(run_folder.clean_state_dict(ckpt['model']))
        except RuntimeError as e:
            raise UserError(f"{run.start.ckpt_path}: the weights do not fit the model: {one_line(e)}") from None
    raw_model.to(dev)
    scaler = torch.amp.GradScaler(run.device_type, enabled=run.dtype == 'float16')
    optimizer = raw_model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2),
                                               run.device_type)
    if ckpt is not None:
        optimizer.load_state_dict(ckpt['optimizer'])
        if ckpt.get('scaler'):
            scaler.load_state_dict(ckpt['scaler'])
        run_folder.set_rng_state(ckpt['rng'][run.rank] if run.rank < len(ckpt['rng']) else ckpt['rng'][0])
    if cfg.compile:   # causal routing reads its padded count k_max from the data: captured, it stays in the graph
        torch._dynamo.config.capture_scalar_outputs = True
    model = torch.compile(raw_model) if cfg.compile else raw_model
    # --cuda_graphs: the training step (top-k routing, static shapes) replayed from CUDA graphs; evaluation keeps the
    # default mode (causal routing's sizes come from the data)
    ddp_model = torch.compile(raw_model, mode='reduce-overhead') if cfg.cuda_graphs else model
    if run.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # MoD's plain gate leaves Router.gain out of the graph: DDP must be told some parameters get no gradient.
        # broadcast_buffers=False: the RoPE tables and causal thresholds are the same on every rank by construction
        # (calibrate gathers every rank's scores), and random routing's draw is each rank's own (set_draw)
        unused = run.mcfg.gate == 'plain' and bool(raw_model.routed_layers())
        ddp_model = DDP(ddp_model, device_ids=[run.local_rank] if run.device_type == 'cuda' else None,
                        find_unused_parameters=unused, broadcast_buffers=False)
    return raw_model, model, ddp_model, optimizer, scaler


# -----------------------------------------------------------------------------------------------------------------
# the schedule and evaluation

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
        start = cooldown_start(cfg, schedule_iters)
        if it < start:
            return cfg.learning_rate
        ratio = min(1.0, (it - start) / max(1, schedule_iters - start))
        return cfg.learning_rate + ratio * (cfg.min_lr - cfg.learning_rate)
    ratio = min(1.0, (it - cfg.warmup_iters) / max(1, schedule_iters - cfg.warmup_iters))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.learning_rate - cfg.min_lr)



@torch.no_grad()
def evaluate(run, model, raw_model, routing):
    """Mean losses and routing statistics over the fixed validation windows. Batches are dealt out to DDP ranks;
    each batch is weighted by its rows, so the result does not depend on the world size. A rank with no batch runs
    batch 0 with weight 0 (it must still join the all_reduce with the same keys)."""
    raw_model.eval()                       # causal thresholds frozen, dropout off
    data = open_split(run.folder, 'val')
    B, T = run.cfg.batch_size, run.cfg.block_size
    batches = [(i, run.starts[i:i + B]) for i in range(0, len(run.starts), B)]
    mine = [(i, b, len(b)) for i, b in batches[run.rank::run.world_size]] or [(*batches[0], 0)]
    keys, total = None, None
    for i, b, weight in mine:
        x, y = read_windows(data, b, T, run.dev)
        raw_model.set_draw(row0=i)           # random routing: each window's draw is fixed by its place in the set
        with run.ctx:
            _, _, aux = model(x, y, routing=routing, return_aux=True)
        values = {**aux['losses'], **xmod.routing_stats(raw_model, aux['layers'], routing)}
        keys = keys or list(values)
        vec = torch.stack([values[k].float() for k in keys]) * weight
        total = vec if total is None else total + vec
    if run.world_size > 1:
        torch.distributed.all_reduce(total)
    raw_model.train()
    return dict(zip(keys, (total / len(run.starts)).tolist()))



def eval_row(run, model, raw_model):
    """val_loss (top-k routing) and val_loss_causal (causal routing: the honest one), as LM cross-entropy only;
    then the top-k mode's auxiliary losses and routing statistics, and the causal mode's (named causal_*). A dense
    model routes nothing, so its causal loss is its loss; the MoE is evaluated causally too (it then drops none)."""
    topk = evaluate(run, model, raw_model, 'topk')
    if run.mcfg.model == 'dense':
        return {'val_loss': topk['lm'], 'val_loss_causal': topk['lm']}
    causal = evaluate(run, model, raw_model, 'causal')
    row = {'val_loss': topk.pop('lm'), 'val_loss_causal': causal['lm']}
    row.update(topk)
    row.update({k: v for k, v in causal.items() if k.startswith('causal_')})
    return row


def log_row(run, model, raw_model, iter_num, progress):
    """Evaluate, and return log.csv's row of step iter_num: the tokens, FLOPs, learning rate and clock so far,
    the training loss and speed since the last row (empty at a run's first), then eval_row's. A NaN or inf loss
    stops the run."""
    p = progress
    train_loss = (train_loss_mean(run, p.train_sum, p.train_steps, iter_num, p.last_eval)
                  if p.train_steps else '')
    tokens_per_s = (round(p.train_steps * run.tokens_per_iter / (time.time() - p.t_eval_end), 1)
                    if p.train_steps else '')
    ev = eval_row(run, model, raw_model)
    if not all(math.isfinite(v) for v in (ev['val_loss'], ev['val_loss_causal'])):
        raise diverged(run, 'validation loss', ev['val_loss'], iter_num, p.last_eval)
    tokens = iter_num * run.tokens_per_iter
    # model FLOPs utilisation per GPU: training FLOPs/s (3 x forward) over the peak of world_size GPUs; a peak
    # of 0 (a CPU, an unknown GPU): no mfu
    peak = configurator.peak_tflops(run.dev, run.dtype, run.cfg.peak_tflops)
    mfu = (round(3 * run.fpt * tokens_per_s / (peak * 1e12 * run.world_size), 4)
           if peak and tokens_per_s != '' else '')
    return {'step': iter_num, 'tokens': tokens, 'flops': 3 * run.fpt * tokens,
            'lr': get_lr(run.cfg, iter_num, run.schedule_iters), 'elapsed_s': round(time.time() - p.t0, 3),
            'tokens_per_s': tokens_per_s, 'mfu': mfu, 'train_loss': train_loss, **ev}


# -----------------------------------------------------------------------------------------------------------------
# run.json, checkpoints, a loss that diverged

def start_run(run, raw_model, iter_num):
    """Write run.json (and, on a resume, cut log.csv back to the checkpoint) and print what is about to happen.
    Returns run.json's contents, which the end of the run completes."""
    cfg, mcfg = run.cfg, run.mcfg
    params_total, params_active = raw_model.num_params(), raw_model.num_active_params()
    layout = xmod.layout_string(mcfg)
    resolved = {k: getattr(mcfg, k, v) for k, v in vars(cfg).items()}   # the model's keys as FLOP matching and
                                                                          # the family's defaults made them
    info = {'config': resolved, 'model_config': asdict(mcfg), 'layout': layout, 'params_total': params_total,
            'params_active': params_active, 'flops_per_token': run.fpt, 'tokens_per_iter': run.tokens_per_iter,
            'n_iters': run.n_iters, 'world_size': run.world_size, 'seed': cfg.seed,
            'git_commit': run_folder.git_commit(), 'torch_version': torch.__version__, 'device': run.dev,
            'dtype': run.dtype, 'finished': False, 'final': None}
    if run.start.branch:
        info['branch_of'] = run.start.branch
    if not run.master:
        return info
    run.start.claim(info, iter_num)        # the folder is this run's now: run.json written, the log cut or cleared
    T = cfg.block_size
    sparse = (f", capacity {mcfg.capacity:.4f} ({xmod.routed_k(mcfg.capacity, T)}/{T} tokens)"
              if 'routed' in xmod.layer_kinds(mcfg) else ', no routed layer: the dense model' if
              mcfg.model in ('mod', 'xmod') else '')
    matched = (f", FLOP-matched to dense {cfg.dense_layers} layers" if mcfg.model in ('mod', 'xmod')
               and cfg.match_flops else '')
    if run.gas_note:
        print(f"note: --gradient_accumulation_steps follows the world size: {cfg.gradient_accumulation_steps}, one "
              f"micro-batch of {cfg.batch_size} rows per rank (a global batch of "
              f"{cfg.batch_size * cfg.gradient_accumulation_steps} rows); pass --gradient_accumulation_steps=N, a "
              f"multiple of {run.world_size}, to set it")
    print(f"model {mcfg.model}: layout {layout} ({mcfg.n_layer} layers{sparse}){matched}")
    print(f"params {params_total:,} total, {params_active:,.0f} active (non-embedding), rho "
          f"{params_total / params_active:.2f}; {run.fpt / 1e6:.3f}M FLOPs/token forward")
    shown = run.folder if os.path.relpath(run.folder).startswith('..') else os.path.relpath(run.folder)
    print(f"data {shown}: {run.n_train:,} train / {run.n_val:,} val tokens, "
          f"{run.meta.get('tokenizer')} vocab {run.meta['vocab_size']:,}; eval set {len(run.starts)} windows x {T} = "
          f"{len(run.starts) * T:,} tokens")
    print(f"budget {run.n_iters:,} iters x {run.tokens_per_iter:,} tokens = "
          f"{run.n_iters * run.tokens_per_iter / 1e6:.2f}M tokens, {3 * run.fpt * run.n_iters * run.tokens_per_iter:.3g}"
          f" FLOPs; device {run.dev} {run.dtype}{f' x {run.world_size} ranks' if run.ddp else ''}; out_dir "
          f"{cfg.out_dir}" + (f"; resuming at step {iter_num}" if run.start.resume else ''))
    slow = run.device_type == 'cpu' and cpu_lacks_matrix_instructions(run.dtype)
    if slow is not False:         # None: torch cannot tell
        which = 'this CPU has' if slow else 'on a CPU with'
        print(f"note: {which} no matrix instructions for {run.dtype}, training takes 8x float32's time or more "
              f"(docs/gpu.md): --dtype={run.dtype} on a CPU is for testing the GPU path, float32 trains faster")
    if run.start.branch and not run.start.resume:
        sched = (f"; its cooldown starts at step {cooldown_start(cfg, run.schedule_iters):,}"
                 if cfg.lr_schedule == 'wsd' else '')
        print(f"branch of {run.start.branch['checkpoint']} at step {run.start.branch['step']:,}{sched}")
    if run.n_iters > run.schedule_iters:
        print(f"extending: the learning-rate schedule of this run ended at step {run.schedule_iters:,}; steps "
              f"{run.schedule_iters:,}-{run.n_iters:,} run at min_lr={cfg.min_lr:g}")
    return info



def finish_run(run, info, progress):
    """Rank 0, at the end: run.json completed (finished, the last evaluation's losses), and what to run next."""
    last = progress.last_eval
    info.update(finished=True, final=last)
    run_folder.write_json(run.start.run_path, info)
    print(f"done: {run.n_iters:,} iters, {time.time() - progress.t0:.0f}s; val_loss {last['val_loss']:.4f}, "
          f"val_loss_causal {last['val_loss_causal']:.4f}; sample with: python sample.py "
          f"--out_dir={run.cfg.out_dir}; its curves: python plot_run.py {run.cfg.out_dir}")


@dataclass
class Progress:
    """Where training stands besides its step, weights and optimizer: what a checkpoint keeps of it, and what
    log.csv's rows read. Step losses are summed on the device and brought to the host only at evaluations
    (one sync each); train_sum is its own sum since the last evaluation, so the progress bar's sum (brought
    over every log_interval steps) cannot change its rounding."""
    best_val_loss: float          # the lowest val_loss_causal so far
    last_eval: dict               # the last evaluation's step, tokens, FLOPs and losses (None before one)
    t0: float                     # time.time() at the start, less the seconds of the runs this one continues
    train_sum: torch.Tensor       # (): the LM loss summed over the train_steps steps since the last eval
    train_steps: int
    t_eval_end: float             # when the last evaluation ended: log.csv's tokens_per_s counts from there

    @classmethod
    def of(cls, ckpt, dev):
        """Step 0's, or the checkpoint's: a resume, or the kept step a branch starts from (a kept step between
        evaluations carries its training-loss sum, so a branch logs its parent's very train_loss)."""
        ckpt = ckpt or {}
        return cls(best_val_loss=ckpt.get('best_val_loss', float('inf')), last_eval=ckpt.get('last_eval'),
                   t0=time.time() - ckpt.get('elapsed_s', 0.0),
                   train_sum=torch.full((), ckpt.get('train_loss_sum', 0.0), device=dev),
                   train_steps=ckpt.get('train_loss_steps', 0), t_eval_end=time.time())


def checkpoint_state(run, raw_model, optimizer, scaler, iter_num, progress, kept=False):
    """What a checkpoint holds: enough to continue exactly (weights, optimizer, scaler, every rank's RNG state,
    the step, which fixes the data position) and to branch (kept: a step of --save_steps, which may fall
    between evaluations, also holds the training loss summed since the last one, averaged over DDP ranks).
    Call it on every rank."""
    train_sum, train_steps = 0.0, 0
    if kept:
        total = progress.train_sum.clone()
        if run.ddp:
            torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.AVG)
        train_sum, train_steps = total.item(), progress.train_steps
    rngs = [run_folder.rng_state()]
    if run.ddp:
        rngs = [None] * run.world_size
        torch.distributed.all_gather_object(rngs, run_folder.rng_state())
    return {'model': raw_model.state_dict(), 'optimizer': optimizer.state_dict(), 'scaler': scaler.state_dict(),
            'config': vars(run.cfg), 'model_args': asdict(run.mcfg), 'step': iter_num,
            'data': {'seed': run.cfg.seed, 'step': iter_num, 'tokens': iter_num * run.tokens_per_iter},
            'n_iters': run.n_iters, 'schedule_iters': run.schedule_iters,
            'best_val_loss': progress.best_val_loss, 'elapsed_s': time.time() - progress.t0,
            'last_eval': progress.last_eval, 'rng': rngs, 'meta': run.meta, 'branch_of': run.start.branch,
            'train_loss_sum': train_sum, 'train_loss_steps': train_steps}



def train_loss_mean(run, total, n, iter_num, last_eval):
    """The training loss summed in total over n steps, as a float averaged over DDP ranks (so every rank takes the
    same decision); stop on NaN or inf."""
    if run.ddp:
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.AVG)
    mean = total.item() / n
    if not math.isfinite(mean):
        raise diverged(run, 'training loss', mean, iter_num, last_eval,
                       '; lower --learning_rate or raise --warmup_iters and resume with --init_from=resume')
    return mean



def diverged(run, what, value, iter_num, last_eval, advice=''):
    """The error that stops a run whose loss became NaN or inf (exit code 3); its last good checkpoint stays, and
    run.json records the step ("diverged"), so a sweep can tell a diverged rate from an unfinished run."""
    info = getattr(run, 'info', None)
    if run.master and info is not None:
        info['diverged'] = {'step': iter_num, 'what': what}
        run_folder.write_json(run.start.run_path, info)
    return LossDiverged(f"the {what} is {value} at step {iter_num}: stopping. The last good checkpoint "
                        f"({run.start.ckpt_path}, step {last_eval['step'] if last_eval else 'none'}) is kept{advice}")


# -----------------------------------------------------------------------------------------------------------------
# the loop

def start_wandb(run):
    """nanoGPT's convention: with --wandb_log=True, a Weights & Biases run whose config is this run's, in out_dir
    (its files under out_dir/wandb/), that train_run logs each log.csv row to. WANDB_MODE=offline keeps it local
    (`wandb sync` uploads it later). None when not asked for."""
    if not run.cfg.wandb_log:
        return None
    import wandb
    name = run.cfg.wandb_run_name or os.path.basename(os.path.abspath(run.cfg.out_dir))
    return wandb.init(project=run.cfg.wandb_project, name=name, dir=run.cfg.out_dir, config=vars(run.cfg))


def train_step(run, raw_model, ddp_model, optimizer, scaler, iter_num):
    """One optimizer step over gradient_accumulation_steps micro-batches of step iter_num's global batch
    (under DDP, this rank's share of them). Returns the step's LM loss, a () tensor left on the device."""
    cfg, T, gas_local = run.cfg, run.cfg.block_size, run.cfg.gradient_accumulation_steps // run.world_size
    lr = get_lr(cfg, iter_num, run.schedule_iters)
    for group in optimizer.param_groups:
        group['lr'] = lr
    rows = batch_starts(cfg.seed, iter_num, cfg.batch_size * cfg.gradient_accumulation_steps, run.n_train, T)
    data = open_split(run.folder, 'train')
    step_loss, step_layers = torch.zeros((), device=run.dev), []
    for micro in range(gas_local):
        first = (run.rank * gas_local + micro) * cfg.batch_size       # this rank's slice of the global batch
        x, y = read_windows(data, rows[first:first + cfg.batch_size], T, run.dev)     # (B, T) each
        raw_model.set_draw(cfg.seed, iter_num, row0=first)    # random routing's draw for these rows
        # DDP: all-reduce gradients only on the last micro-batch
        sync = ddp_model.no_sync() if run.ddp and micro < gas_local - 1 else nullcontext()
        with sync:
            if cfg.cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()     # a new step: the last replay's outputs may go
            with run.ctx:
                _, loss, aux = ddp_model(x, y, return_aux=True)
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
    return step_loss


def say_threads(run, thread_note, iter_num, may_say):
    """On a CPU with --threads=0: a line when the thread count has changed and the new count has held
    (run_folder.ThreadNote), at most once per evaluation interval (may_say). True when rank 0 said one."""
    threads = thread_note(torch.get_num_threads(), time.time(), may_say=may_say)
    if threads and run.master:
        tqdm.write(f"step {iter_num:>6}: CPU threads -> {threads} (the cores other processes leave free; "
                   f"--threads=N fixes the count)")
    return bool(threads) and run.master


def train(argv):
    lock = run_folder.RunLock()
    try:
        code = train_run(argv, lock)
    finally:
        lock.release()               # the kernel would at exit; a caller's process (tests) may train again
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # the ranks leave together: a rank that tears its process group down while rank 0 still writes the
        # last checkpoint and run.json is our suspect for a rare abort at exit under gloo (not reproduced)
        torch.distributed.barrier()
    return code



def train_run(argv, lock):
    run = setup_run(argv, lock)
    cfg, master, n_iters = run.cfg, run.master, run.n_iters
    raw_model, model, ddp_model, optimizer, scaler = build_model(run)
    # where training stands: step 0, or the checkpoint's (a resume, or the kept step a branch starts from)
    iter_num = run.start.checkpoint['step'] if run.start.checkpoint else 0
    info = run.info = start_run(run, raw_model, iter_num)
    tracker = start_wandb(run) if master else None
    bar = tqdm(total=n_iters, initial=iter_num, disable=True if not master else None, dynamic_ncols=True,
               unit='it', leave=False)
    progress = Progress.of(run.start.checkpoint, run.dev)     # best and last evaluation, clock, loss sum
    run.start.checkpoint = None                    # free the memory
    resumed_at = iter_num if run.start.resume or run.start.branch else -1     # its evaluation is already logged
    window, window_steps, t_mark = torch.zeros((), device=run.dev), 0, time.time()   # the progress bar's sum
    share_cpu = run_folder.cpu_threads(run.device_type, cfg.threads)
    thread_note, said_since_eval = run_folder.ThreadNote(torch.get_num_threads(), time.time()), False
    trained = False                                # a training step done by this process: compiled evaluation
    while True:
        # evaluate, append a row to log.csv, then write the checkpoint (the row first: a kill in between loses the
        # row on resume, never the checkpoint's step)
        if (iter_num % cfg.eval_interval == 0 or iter_num == n_iters) and iter_num != resumed_at:
            # before this process's first training step, the eager model: the training graph compiles first, and
            # the evaluation graphs (causal routing's data-dependent sizes) only after a training figure is out
            row = log_row(run, model if trained else raw_model, raw_model, iter_num, progress)
            progress.best_val_loss = min(progress.best_val_loss, row['val_loss_causal'])
            progress.last_eval = {k: row[k] for k in ('step', 'tokens', 'flops', 'val_loss', 'val_loss_causal')}
            state = checkpoint_state(run, raw_model, optimizer, scaler, iter_num, progress)
            if master:
                run_folder.append_log(run.start.log_path, row)
                if tracker:
                    tracker.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=iter_num)
                run_folder.save_checkpoint(state, run.start.ckpt_path)
                train_txt = f"train {row['train_loss']:.4f}, " if row['train_loss'] != '' else ''
                tqdm.write(f"step {iter_num:>6}: {train_txt}val {row['val_loss']:.4f}, val causal "
                           f"{row['val_loss_causal']:.4f}, {row['elapsed_s']:.0f}s")
            progress.train_sum.zero_()
            progress.train_steps, progress.t_eval_end, said_since_eval = 0, time.time(), False
        if iter_num in run.save_steps:             # --save_steps: a copy kept as out_dir/ckpt_S.pt, for branching
            state = checkpoint_state(run, raw_model, optimizer, scaler, iter_num, progress, kept=True)
            if master:
                run_folder.save_checkpoint(state, os.path.join(cfg.out_dir, f'ckpt_{iter_num}.pt'))
        if iter_num >= n_iters:
            break

        # one optimizer step over gradient_accumulation_steps micro-batches of the global batch
        step_loss = train_step(run, raw_model, ddp_model, optimizer, scaler, iter_num)    # (): its LM loss
        iter_num += 1
        trained = True
        window += step_loss
        window_steps += 1
        progress.train_sum += step_loss
        progress.train_steps += 1
        bar.update(1)

        # logging; on a CPU, --threads=0 also looks here at the cores other processes leave free
        if iter_num % cfg.log_interval == 0:
            mean = train_loss_mean(run, window, window_steps, iter_num, progress.last_eval)
            now = time.time()
            tok_s = window_steps * run.tokens_per_iter / (now - t_mark)
            bar.set_postfix(loss=f"{mean:.4f}", tok_s=f"{tok_s:,.0f}")
            window.zero_()
            window_steps, t_mark = 0, now
        share_cpu()
        if say_threads(run, thread_note, iter_num, may_say=not said_since_eval):
            said_since_eval = True
        if cfg.stop_iter and iter_num == cfg.stop_iter and iter_num < n_iters:
            bar.close()
            if master:
                print(f"stopped after step {iter_num} (stop_iter), as if killed: the checkpoint is at step "
                      f"{progress.last_eval['step'] if progress.last_eval else 'none'}; continue with "
                      f"--init_from=resume")
            return 0

    bar.close()
    if tracker:
        tracker.finish()
    if master:
        finish_run(run, info, progress)
    return 0


def main(argv=None):
    threads = torch.get_num_threads()           # --threads changes it while a run trains: a caller gets it back
    try:
        return run_main('train.py', train, argv, interrupted='continue from the last checkpoint with --init_from=resume')
    finally:
        torch.set_num_threads(threads)


if __name__ == '__main__':
    sys.exit(main())
