"""cpu_lr: the peak learning rate tuned per arm and width. Every earlier sweep ran both arms at one shared rate
(2e-3) at every width; scaling studies find that tuning the rate per size moves fitted laws (Porian et al. 2024),
so the reference pair (4 dense layers against X-MoD stride 4, c ~0.125, T=128, 2M tokens) is rerun on a grid.

    python sweeps/study/cpu_lr.py                              # the grid, then what it finds (below)
    python -m law.rates results/cpu_lr/runs --out results/cpu_lr    # the table and the loss-against-rate plot

1. The grid: widths 64, 128, 192 x peak rates 1e-3 .. 8e-3 (8x), seed 0, min_lr = lr / 10, cosine as before.
2. Edges: where an arm's best rate at a width is the grid's highest (lowest) finished rate, the next rate up
   (down) by 2x is added, until the best is inside the grid.
3. Seeds at each arm's own best rate: seeds 1-2 at widths 64 and 192, seeds 1-4 at the reference width 128, so that
   Delta at tuned rates has 3 and 5 seeds per arm. A rate within 0.005 of the best in seed 0 gets the same seeds,
   and the seed mean decides (seed_rates; at width 128 X-MoD's 8e-3 was 0.0004 behind its 4e-3).

Steps 2 and 3 read the finished runs of results/cpu_lr/runs each time sweeps/sweep.py reads this file (before each start),
so the runs they add join the same call; `python sweeps/study/cpu_lr.py --dry_run` shows the state. Every run is
2M tokens at the cpu_small recipe otherwise, 1 thread each, 2 at a time; about 2.5 hours for the grid and the seeds.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # sweeps/: the runner, the recipe
from recipe import ROOT, builders, common, final_val, lr_tag, seed_rates, tune  # noqa: E402

name = 'cpu_lr'
jobs = 2
M = 1_000_000
RUNS = os.path.join(ROOT, 'results', name, 'runs')

common = dict(common, threads=1)
run, dense, xmod = builders(tokens_per_iter=2048, width=128, tokens=2 * M, block_size=128)

WIDTHS = (128, 64, 192)                 # the reference width first: a partial sweep already answers the most
GRID = (1e-3, 2e-3, 4e-3, 8e-3)
SEEDS = {128: (1, 2, 3, 4), 64: (1, 2), 192: (1, 2)}


def arm(kind, width, lr, seed=0):
    """One run of an arm at a width and peak rate (min_lr = lr / 10)."""
    kw = dict(learning_rate=lr, min_lr=lr / 10, seed=seed)
    if kind == 'dense':
        r = dense(4, n_embd=width, **kw)
    elif width == 128:
        r = xmod(4, 12, 4, **kw)                                         # c 0.125: the reference X-MoD
    else:
        r = xmod(4, 0, 4, n_embd=width, tag=f'_d{width}', **kw)          # depth and capacity solved, as cpu_medium
    base, _, seed_part = r['name'].partition('_seed')
    r['name'] = base + lr_tag(lr) + (f'_seed{seed_part}' if seed_part else '')
    return r


def rates(kind, width):
    return tune(lambda lr: final_val(RUNS, arm(kind, width, lr)['name']), GRID)


runs = []
for width in WIDTHS:
    for kind in ('dense', 'xmod'):
        lrs, _ = rates(kind, width)
        runs += [arm(kind, width, lr) for lr in lrs]
for width in WIDTHS:
    for kind in ('dense', 'xmod'):
        for lr in seed_rates(lambda lr: final_val(RUNS, arm(kind, width, lr)['name']), GRID):
            runs += [arm(kind, width, lr, seed=s) for s in SEEDS[width]]


if __name__ == '__main__':          # python sweeps/study/cpu_lr.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
