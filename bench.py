"""
bench.py: training-step speed of every family and both impls, measured side by side in one run.

    python bench.py                          # CPU, the zoo's FLOP-matched configs at T=128, batch 16
    python bench.py --compile=True           # add torch.compile(fullgraph=True) of the fast path
    python bench.py --device=cuda --batch_size=64 --block_size=512 --n_embd=512 --n_head=8

Machines are noisy: read the ratios (each row against dense/fast, measured in the same run, interleaved), not the
absolute figures. FLOP-matched rows do the same useful work per token, so a ratio below 1 is routing overhead.
"""
import sys
import time
from dataclasses import replace

import torch

from xmod import GPT, GPTConfig, layout_string, match_flops

# defaults, overridable with --key=value
device = 'cpu'
batch_size = 16
block_size = 128
n_embd = 128
n_head = 4
dense_layers = 4
steps = 8             # timed steps per measurement, after 2 warm-up steps
rounds = 3            # measurements per row, interleaved across rows; the median is reported
compile = False
for arg in sys.argv[1:]:
    key, _, val = arg.lstrip('-').partition('=')
    if key not in globals() or key.startswith('_'):
        raise SystemExit(f"bench.py: unknown option --{key}")
    globals()[key] = type(globals()[key])(val) if not isinstance(globals()[key], bool) else val in ('1', 'True', 'true')


def step_time(model, x, y, n):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for i in range(n + 2):
        if i == 2:
            if device == 'cuda':
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device == 'cuda':
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def main():
    dense = GPTConfig(n_layer=dense_layers, n_embd=n_embd, n_head=n_head, block_size=block_size, vocab_size=84)
    configs = {'dense': dense, 'mod': match_flops(dense, 'mod'), 'xmod s4': match_flops(dense, 'xmod', stride=4),
               'xmod s8': match_flops(dense, 'xmod', stride=8), 'moe': replace(dense, model='moe')}
    rows = []
    for name, cfg in configs.items():
        impls = ['fast'] if cfg.model == 'dense' else ['fast', 'naive']
        for impl in impls + (['compiled'] if compile else []):
            torch.manual_seed(0)
            m = GPT(replace(cfg, impl='naive' if impl == 'naive' else 'fast')).to(device)
            rows.append((name, impl, cfg, m, torch.compile(m, fullgraph=True) if impl == 'compiled' else m))
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 84, (batch_size, block_size), generator=g).to(device)
    y = torch.randint(0, 84, (batch_size, block_size), generator=g).to(device)
    times = {i: [] for i in range(len(rows))}
    for _ in range(rounds):
        for i, (_, _, _, _, fwd) in enumerate(rows):
            times[i].append(step_time(fwd, x, y, steps))
    tok = batch_size * block_size
    base = sorted(times[0])[rounds // 2]
    print(f"device {device}, {torch.get_num_threads()} threads, batch {batch_size} x {block_size}, n_embd {n_embd}; "
          f"median of {rounds} x {steps} training steps")
    print("| model | impl | layout | FLOPs/token | ms/step | tokens/s | speed vs dense | useful GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for i, (name, impl, cfg, m, _) in enumerate(rows):
        t = sorted(times[i])[rounds // 2]
        fpt = m.flops_per_token(block_size, batch_size)
        print(f"| {name} | {impl} | {layout_string(m)} | {fpt / 1e6:.2f}M | {t * 1e3:.0f} | {tok / t:,.0f} | {base / t:.2f} | "
              f"{3 * fpt * tok / t / 1e9:.1f} |")


if __name__ == '__main__':
    main()
