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
data, the model and optimizer, the run's folder, the loop; the run's lifecycle is in run_folder.py.
Exit codes: 0 done (or stopped by stop_iter); 2 bad input (one line on stderr, nothing on disk
touched); 3 the loss became NaN or inf (the last good checkpoint is kept); 130 interrupted (saved).
"""
import dataclasses
import inspect
import math
import os
import random
import signal
import sys
import time
import warnings
from contextlib import nullcontext

import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # xmod.py, configurator.py, data/
import run_folder  # checkpoints, log.csv, run.json, the run's plan and lifecycle
import xmod
from configurator import UserError, configure, defaults_of, run_main
from data.loader import eval_starts, find_data, open_split, read_windows
from run_folder import get_lr, sizes  # the learning-rate schedule: a run's plan, shared with tools/plot_run.py
from xmod import GPT, GPTConfig

# --------------------------------------------------------------------------------------------------
# default config values: char-level Shakespeare, sized to finish in a few minutes on a laptop CPU
# I/O
out_dir = ''                # the run folder: log.csv, run.json, ckpt.pt ('' = out-<model>)
eval_interval = 250         # evaluate, log a row and checkpoint every this many steps, and last
eval_tokens = 65536         # the fixed validation set's size (0 = the whole val split)
eval_iters = 0              # nanoGPT's knob: > 0: the val set is eval_iters batches of batch_size
log_interval = 10           # progress bar and NaN check every this many iterations
init_from = 'scratch'       # 'scratch' | 'resume' | 'auto' (resume when out_dir has a checkpoint, else scratch) |
                            # PATH/ckpt_S.pt: a new run in out_dir branched from that kept step (weights, optimizer,
                            # RNG, data position); its schedule follows its own budget (WSD cooldowns)
save_steps = ''             # steps also kept as out_dir/ckpt_S.pt, comma-separated (branch points)
overwrite = False           # scratch into an out_dir that holds a run replaces it only with this
stop_iter = 0               # stop after this step as if killed (0 = off): resume tests, drills
wandb_log = False           # also log each log.csv row to Weights & Biases (pip install wandb; WANDB_MODE=offline)
wandb_project = 'xmod'      # its project
wandb_run_name = ''         # its run name ('' = out_dir's last folder name)
# data
dataset = 'shakespeare'     # reads data/<dataset>/{train.bin, val.bin, meta.pkl}
data_dir = ''               # a folder with those three files instead (tests, custom corpora)
gradient_accumulation_steps = 1   # global: each of world_size DDP ranks runs an equal share
batch_size = 16             # micro-batch size (rows per forward)
block_size = 128            # context length T
# model: every field of xmod.GPTConfig is a key too (--n_head, --stride, --capacity, --gate, ...), with its default and
# comment (--help lists them after n_layer); None = the family's default. train.py's own:
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
lr_schedule = 'cosine'      # 'cosine' | 'wsd' (constant, then linear to min_lr over the last cooldown_frac) | constant
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
cuda_graphs = False         # with compile: the training step replayed from CUDA graphs (CUDA, one micro-batch a step)
peak_tflops = 0.0           # the GPU's peak TFLOP/s for mfu (0 = by its name: bench.PEAK_TFLOPS)
backend = ''                # DDP backend, '' = nccl on GPU, gloo on CPU
threads = 0                 # CPU threads of the whole run (0 = torch's count less the cores other processes keep
                            # busy at the start; sweeps/sweep.py sets each job's)
seed = 1337                 # initial weights, data order and dropout
# --------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals(), GPTConfig, skip=('vocab_size',))   # then GPTConfig's fields
PROGRESS_S = 30   # stdout not a terminal (a log file, a sweep's train.log): a progress line at least this often


# --------------------------------------------------------------------------------------------------
# data, evaluation (the schedule, get_lr, is run_folder's: tools/plot_run.py draws it too)

def batch_starts(seed, step, n_rows, n_tokens, T):
    """The global batch's start positions: a pure function of (seed, step), so every family sees
    the same data, a resume the batches it would have seen, DDP ranks one process's batch."""
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, n_tokens - T, size=n_rows)


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
    # ---- settings: defaults, config file, --key=value; processes; which run; device
    from_file = set()
    cfg, explicit = configure(argv, DEFAULTS, doc=__doc__, source=__file__, from_file=from_file, model=GPTConfig)
    cfg.out_dir = cfg.out_dir or f'out-{cfg.model}'   # each family its own folder: xmod, then dense
    ddp = int(os.environ.get('RANK', -1)) != -1
    rank, local_rank, world_size = (int(os.environ[k]) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE')) if ddp else \
        (0, 0, 1)
    master = rank == 0                             # rank 0 writes the run folder and prints
    # Under torchrun without the key, each rank runs one micro-batch (the batch grows with them)
    follows_world = world_size > 1 and 'gradient_accumulation_steps' not in explicit
    if follows_world:
        cfg.gradient_accumulation_steps = world_size
    # scratch, resume, auto or a branch, decided before anything is written: a resume's config is its checkpoint's
    cfg, resume, ckpt, branch = run_folder.which_run(cfg, explicit, world_size, DEFAULTS, locks if master else None)
    dev = pick_device(cfg.device, local_rank if ddp else None)
    device_type = dev.split(':')[0]
    threads, threads_from = torch.get_num_threads(), f'torch (device {device_type})'
    if device_type == 'cpu':
        threads, threads_from = cpu_threads(cfg.threads, say=master)
        torch.set_num_threads(threads)             # from the start: step 0's evaluation too
    if cfg.cuda_graphs and (device_type != 'cuda' or not cfg.compile):
        raise UserError(f"--cuda_graphs=True captures the compiled training step in CUDA graphs: it needs "
                        f"--compile=True and a CUDA device (here {dev}{'' if cfg.compile else ', compile=False'})")
    if cfg.wandb_log and master:
        run_folder.check_wandb()
    # --dtype '' = bfloat16 on a CUDA device that has it, float16 on one that lacks it (its grad scaler keeps it
    # trainable, nanoGPT's choice), float32 elsewhere
    dtype = cfg.dtype or ('float32' if device_type != 'cuda' else
                          'bfloat16' if torch.cuda.is_bf16_supported() else 'float16')
    ctx = nullcontext() if dtype == 'float32' else torch.autocast(device_type, dtype=getattr(torch, dtype))
    if dtype == 'float16' and device_type not in ('cuda', 'cpu'):
        raise UserError(f"--dtype=float16 needs a CUDA device or the CPU (its grad scaler), not {device_type} "
                        f"(use float32 or bfloat16)")
    slow = device_type == 'cpu' and cpu_lacks_matrix_instructions(dtype)
    if master and slow is not False:         # None: torch cannot tell
        print(f"note: {'this CPU has' if slow else 'on a CPU with'} no matrix instructions for {dtype}, training "
              f"takes 8x float32's time or more (docs/gpu.md): --dtype={dtype} on a CPU is for testing the GPU "
              f"path, float32 trains faster")

    # ---- data: the model's plan and budget; batches are a pure function of (seed, step)
    folder, meta, n_train, n_val = find_data(cfg, ddp)
    T, B = cfg.block_size, cfg.batch_size
    mcfg, tokens_per_iter, fpt, n_iters = sizes(cfg, meta)
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
    raw_model.to(dev)
    scaler = torch.amp.GradScaler(device_type, enabled=dtype == 'float16')
    optimizer = raw_model.configure_optimizers(cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2), device_type)

    # ---- the run's folder: a checkpoint's state loaded (resume, branch), run.json written; what happens said
    info = {'config': {k: getattr(mcfg, k, v) for k, v in vars(cfg).items()},  # model's: resolved
            'model_config': dataclasses.asdict(mcfg), 'layout': xmod.layout_string(mcfg),
            'params_total': raw_model.num_params(), 'params_active': raw_model.num_active_params(),
            'flops_per_token': fpt, 'tokens_per_iter': tokens_per_iter,
            'n_iters': n_iters, 'world_size': world_size, 'seed': cfg.seed, 'device': dev, 'dtype': dtype,
            'threads': threads, 'threads_from': threads_from}
    run = run_folder.open_run(cfg, (resume, ckpt, branch), raw_model, optimizer, scaler, info, meta, locks, rank,
                              world_size)
    iter_num, schedule_iters, ckpt = run.step, run.schedule_iters, None     # free the checkpoint's memory
    run.say_start((folder, n_train, n_val, len(starts)), ddp, follows_world, 'n_layer' in from_file)
    # the GPU's peak for mfu: --peak_tflops, else the datasheet's for its name (bench.py's table)
    peak = cfg.peak_tflops
    if not peak and device_type == 'cuda':
        from bench import device_peak_tflops
        peak = device_peak_tflops(dev, dtype)

    # ---- how a step runs: compiled, from CUDA graphs, under DDP
    if cfg.compile:   # causal routing reads its padded count k_max from the data: in the graph
        torch._dynamo.config.capture_scalar_outputs = True
    model = torch.compile(raw_model) if cfg.compile else raw_model      # what evaluation calls
    # --cuda_graphs: CUDA graphs for the training step (top-k: static shapes), not for evaluation (causal sizes vary)
    train_model = torch.compile(raw_model, mode='reduce-overhead') if cfg.cuda_graphs else model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # MoD's plain gate leaves Router.gain out of the graph. No buffer syncing: the RoPE tables and thresholds
        # agree by construction (calibrate gathers every rank's scores), random routing's draw is each rank's own;
        # torch < 2.13 knows only broadcast_buffers
        unused = mcfg.gate == 'plain' and bool(raw_model.routed_layers())
        new = 'forward_sync_buffers' in inspect.signature(DDP).parameters
        no_sync = {'forward_sync_buffers' if new else 'broadcast_buffers': False}
        train_model = DDP(train_model, device_ids=[local_rank] if device_type == 'cuda' else None,
                          find_unused_parameters=unused, **no_sync)

    def mean_loss(total, n, what='training loss'):
        """A loss summed over n steps, averaged over ranks; NaN or inf stops the run."""
        if ddp:
            torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.AVG)
        mean = total.item() / n
        if not math.isfinite(mean):
            raise run.diverged(what, mean, iter_num, '; lower --learning_rate or raise --warmup_iters and resume '
                                                     'with --init_from=resume')
        return mean

    # ---- the loop: evaluate (a log.csv row, then the checkpoint), then one optimizer step
    t0 = time.time() - run.elapsed_s               # the clock goes on from the runs this continues
    train_sum = torch.full((), run.train_loss_sum, device=dev)   # (): the LM loss summed since the last row
    train_steps = run.train_loss_steps
    bar = tqdm(total=n_iters, initial=iter_num, disable=None if master else True, dynamic_ncols=True, leave=False)
    evaluated_at = iter_num if resume or branch else -1     # its evaluation is already logged
    window, window_steps, t_mark = torch.zeros((), device=dev), 0, time.time()   # the bar's
    timed_steps, t_timed = -1, time.time()   # tokens_per_s: steps after the first since the eval
    trained = False                          # a training step done here: compiled evaluation
    progress, t_said = master and not sys.stdout.isatty(), time.time()   # no bar on a log: a line instead
    val = open_split(folder, 'val')
    stop = run_folder.stop_on_signals(enabled=not ddp)     # Ctrl-C: save the step, then stop
    try:
        while True:
            if (iter_num % cfg.eval_interval == 0 or iter_num == n_iters) and iter_num != evaluated_at:
                t_eval = time.time()
                # the training figures since the last row: the loss, and the speed without the first step after an
                # evaluation (which compiles, or warms up): a row after one has none
                train_loss = mean_loss(train_sum, train_steps) if train_steps else ''
                tokens_per_s = round(timed_steps * tokens_per_iter / (t_eval - t_timed), 1) if timed_steps > 0 else ''
                # val_loss (top-k routing), val_loss_causal (causal: the honest one), then each mode's statistics.
                # Before the first training step, eager: training compiles first
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
                    raise run.diverged('validation loss', ev['val_loss'], iter_num)
                tokens = iter_num * tokens_per_iter
                # model FLOPs utilisation per GPU: training FLOPs/s (3 x forward) over the peaks
                mfu = round(3 * fpt * tokens_per_s / (peak * 1e12 * world_size), 4) if peak and tokens_per_s else ''
                row = {'step': iter_num, 'tokens': tokens, 'flops': 3 * fpt * tokens,
                       'lr': get_lr(cfg, iter_num, schedule_iters), 'elapsed_s': round(time.time() - t0, 3),
                       'tokens_per_s': tokens_per_s, 'mfu': mfu, 'train_loss': train_loss, **ev}
                run.evaluated(row, time.time() - t0)      # log.csv's row, then the checkpoint
                if master:
                    train_txt = f"train {train_loss:.4f}, " if train_loss != '' else ''
                    tqdm.write(f"step {iter_num:>6}: {train_txt}val {row['val_loss']:.4f}, val causal "
                               f"{row['val_loss_causal']:.4f}, {row['elapsed_s']:.0f}s")
                    t_said = time.time()
                train_sum.zero_()
                train_steps, timed_steps = 0, -1
                t_mark += time.time() - t_eval         # the progress bar's speed leaves the eval out
            if iter_num in save_steps:      # --save_steps: a copy kept as out_dir/ckpt_S.pt
                run.save(os.path.join(cfg.out_dir, f'ckpt_{iter_num}.pt'), iter_num, time.time() - t0, train_sum,
                         train_steps)
            if iter_num >= n_iters:
                break
            if stop:       # Ctrl-C: this step, as a --save_steps copy is (the loss since the row too), atomically
                run.save(run.ckpt_path, iter_num, time.time() - t0, train_sum, train_steps)
                raise KeyboardInterrupt(f"saved step {iter_num} to {run.ckpt_path}: continue from it with "
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
                # calibrate reads the scores after the step's last micro-batch: a CUDA-graph replay overwrites its
                # outputs in place, so each micro-batch's scores (B, T) are copied
                layers = aux['layers']
                if cfg.cuda_graphs:
                    layers = [a._replace(scores=a.scores.clone()) if isinstance(a, xmod.RoutedAux) else None
                              for a in layers]
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
                    print(f"stopped after step {iter_num} (stop_iter), as if killed: the checkpoint is at step "
                          f"{run.last_eval['step'] if run.last_eval else 'none'}; continue with --init_from=resume")
                return 0
    except KeyboardInterrupt as e:
        last = run.last_eval
        raise KeyboardInterrupt(str(e) or (
            f"continue from the checkpoint of step {last['step']} with --init_from=resume" if last else
            "no checkpoint was written yet: run the same command again (it starts the run over)")) from None

    bar.close()
    run.finish()
    if master:
        if cfg.cuda_graphs:       # a graph inductor cannot capture runs uncaptured, and it says so only in logs
            skips = torch._dynamo.utils.counters['inductor']['cudagraph_skips']
            print(f"cuda_graphs: {skips} compiled graph(s) left out of CUDA graphs"
                  + (" (why: rerun with TORCH_LOGS=cudagraphs)" if skips else ""))
        print(f"done: {n_iters:,} iters, {time.time() - t0:.0f}s; val_loss {run.last_eval['val_loss']:.4f}, "
              f"val_loss_causal {run.last_eval['val_loss_causal']:.4f}; sample with: python sample.py "
              f"--out_dir={cfg.out_dir}; its curves: python tools/plot_run.py {cfg.out_dir}")
    if ddp:         # the ranks leave together, each on its own device (nccl: never a guessed one)
        torch.distributed.barrier(**({'device_ids': [local_rank]} if device_type == 'cuda' else {}))
    return 0


# --------------------------------------------------------------------------------------------------
# the device: train's settings call these

def pick_device(name, local_rank=None):
    """--device: '' picks cuda, then mps, then cpu; under DDP each rank takes cuda:local_rank."""
    name = name or ('cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else 'cpu')
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


def cpu_threads(threads, say=True):
    """(the run's CPU thread count, how it was chosen): --threads=N; else OMP_NUM_THREADS when set; else torch's count
    less the cores other processes keep busy, at least 1 (said when that lowers it): OpenMP's threads spin-wait for
    each other at every op, so one that shares a core with a busy process stalls the rest (docs/speed.md)."""
    if threads or os.environ.get('OMP_NUM_THREADS'):
        return (threads, '--threads') if threads else (torch.get_num_threads(), 'OMP_NUM_THREADS')
    n = torch.get_num_threads()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else range(os.cpu_count() or 1)
    busy = busy_cores(cores)
    threads, how = max(1, min(n, len(cores) - round(busy))), f'{busy:.2f} of {len(cores)} cores busy with other work'
    if say and threads < n:
        print(f"note: {how}: training on {threads} thread(s), not torch's {n} (a thread that shares a core with a busy "
              f"process stalls the others); --threads=N sets the count")
    return threads, how


def busy_cores(cores, seconds=0.25):
    """How many of these cores other processes use: their busy share over a quarter second while this process
    sleeps (Linux's /proc/stat), else the 1-minute load average (macOS), else 0."""
    def ticks():       # {cpu: (idle + iowait, all)} in clock ticks
        with open('/proc/stat') as f:
            return {int(r[0][3:]): (int(r[4]) + int(r[5]), sum(map(int, r[1:9])))
                    for r in (line.split() for line in f if line.startswith('cpu') and line[3].isdigit())}
    try:
        a, _, b = ticks(), time.sleep(seconds), ticks()      # in this order: before, the sleep, after
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


def main(argv=None):
    threads, locks = torch.get_num_threads(), []     # the run folder's lock, once taken
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run_main('train.py', lambda args: train(args, locks), argv,
                        interrupted='nothing was written: run the same command again')
    finally:
        for fd in locks:
            os.close(fd)         # the kernel would at exit; a caller's process (tests) may train again
        torch.set_num_threads(threads)   # --threads changed it: a caller gets its own back
        for sig, handler in handlers.items():     # and its signal handlers (train's Ctrl-C saves the step)
            if signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)


if __name__ == '__main__':
    sys.exit(main())
