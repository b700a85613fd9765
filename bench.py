"""
bench.py: training-step speed of every family and both impls, measured side by side in one run.

    python bench.py                          # CPU, the zoo's FLOP-matched configs at T=128, batch 16
    python bench.py --compile=True           # add torch.compile(fullgraph=True) of the fast path
    python bench.py --device=cuda --batch_size=64 --block_size=512 --n_embd=512 --n_head=8

Machines are noisy: read the ratios (each row against dense/fast, measured in the same run, interleaved), not the
absolute figures. FLOP-matched rows do the same useful work per token, so a ratio below 1 is routing overhead.
"""
import os
import sys
import time
from dataclasses import replace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import UserError, configure, defaults_of, pick_device, run_main
from xmod import GPT, GPTConfig, flops_per_token, layout_string, match_flops

# -----------------------------------------------------------------------------------------------------------------
device = 'cpu'        # cpu | cuda | mps
batch_size = 16       # rows per training step
block_size = 128      # context T
n_embd = 128          # width of every model
n_head = 4            # attention heads
dense_layers = 4      # depth of the dense model the sparse ones are FLOP-matched to
steps = 8             # timed steps per measurement, after 2 warm-up steps
rounds = 3            # measurements per row, interleaved across rows; the median is reported
compile = False       # add torch.compile(fullgraph=True) of the fast path
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())


def step_time(model, raw, x, y, n, device):
    """Seconds per training step of `model` (raw: the GPT itself, when model is its compiled wrapper)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for i in range(n + 2):
        if i == 2:
            if device == 'cuda':
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        _, loss, aux = model(x, y, return_aux=True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        raw.calibrate([aux['layers']])                 # part of a training step: the causal thresholds
        opt.step()
    if device == 'cuda':
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def bench(argv):
    opt, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, files=False)
    for k in ('batch_size', 'block_size', 'n_embd', 'n_head', 'dense_layers', 'steps', 'rounds'):
        if getattr(opt, k) < 1:
            raise UserError(f"--{k}={getattr(opt, k)}: expected an integer >= 1")
    device = pick_device(opt.device)
    batch_size, block_size, steps, rounds = opt.batch_size, opt.block_size, opt.steps, opt.rounds
    try:
        dense = GPTConfig(n_layer=opt.dense_layers, n_embd=opt.n_embd, n_head=opt.n_head, block_size=block_size,
                          vocab_size=84)
        configs = {'dense': dense, 'mod': match_flops(dense, 'mod'), 'xmod s4': match_flops(dense, 'xmod', stride=4),
                   'xmod s8': match_flops(dense, 'xmod', stride=8), 'moe': replace(dense, model='moe')}
    except ValueError as e:
        raise UserError(str(e)) from None
    rows = []
    for name, cfg in configs.items():
        impls = ['fast'] if cfg.model == 'dense' else ['fast', 'naive']
        for impl in impls + (['compiled'] if opt.compile else []):
            torch.manual_seed(0)
            m = GPT(replace(cfg, impl='naive' if impl == 'naive' else 'fast')).to(device)
            rows.append((name, impl, cfg, m, torch.compile(m, fullgraph=True) if impl == 'compiled' else m))
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 84, (batch_size, block_size), generator=g).to(device)
    y = torch.randint(0, 84, (batch_size, block_size), generator=g).to(device)
    times = {i: [] for i in range(len(rows))}
    for _ in range(rounds):
        for i, (_, _, _, m, fwd) in enumerate(rows):
            times[i].append(step_time(fwd, m, x, y, steps, device))
    tok = batch_size * block_size
    base = sorted(times[0])[rounds // 2]
    print(f"device {device}, {torch.get_num_threads()} threads, batch {batch_size} x {block_size}, n_embd {opt.n_embd}; "
          f"median of {rounds} x {steps} training steps")
    print("| model | impl | layout | FLOPs/token | ms/step | tokens/s | speed vs dense | useful GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for i, (name, impl, cfg, m, _) in enumerate(rows):
        t = sorted(times[i])[rounds // 2]
        fpt = flops_per_token(cfg, block_size, batch_size)
        print(f"| {name} | {impl} | {layout_string(cfg)} | {fpt / 1e6:.2f}M | {t * 1e3:.0f} | {tok / t:,.0f} | {base / t:.2f} | "
              f"{3 * fpt * tok / t / 1e9:.1f} |")
    return 0


if __name__ == '__main__':
    sys.exit(run_main('bench.py', bench))
