"""cpu_recheck: the wins that Results found at one shared learning rate (2e-3), rechecked with each arm at its own
tuned rate. At 2e-3 the T=256 pair gave Delta -0.0118 +- 0.0025, and the 0.5M-token pairs of strides 2, 4 and 8 led
by 0.025 to 0.052; at the reference point (T=128, 2M tokens) tuning turned a lead into a deficit (results/cpu_lr).

    python sweeps/study/cpu_recheck.py
    python -m law.rates results/cpu_recheck/runs --out results/cpu_recheck

1. Each arm on the rates 2e-3, 4e-3, 8e-3 (seed 0, min_lr = lr / 10, cosine as before), extended by 2x past an edge
   that holds its best finished rate, as sweeps/study/cpu_lr.py does. So the best rate is found at 0.5M tokens and at
   T=256 themselves, rather than assumed to be the 2M, T=128 one.
2. Seeds 1 and 2 at each arm's best rate, and at a rate within 0.005 of it in seed 0 (recipe.seed_rates; stride 4's
   4e-3 was 0.0026 behind its 8e-3): Delta with 3 seeds per arm, paired by seed, the rate chosen by the seed mean.
3. The reference X-MoD (T=128, 2M tokens, 4e-3) with depth balancing at 0.5 instead of 0.1, seeds 0-2, paired
   with results/cpu_lr's dense runs of those seeds. In 10 of the 12 trained X-MoD models of results/cpu_lr/overlap
   some pair of routed layers takes nearly the same tokens (causal Jaccard 0.6-1.0, where independent choices give
   0.07). The balance loss is the variance of each token's routed depth, which is the sum of every
   pair's co-selection: a larger coefficient is the principled push against a collapsed pair (--depth_balance, a
   switch that exists).
The arms: the 4-layer dense model against X-MoD strides 2 (c 0.531), 4 (c 0.125) and 8 (c 0.250) at 0.5M tokens,
then the T=256 pair at 2M tokens (X-MoD stride 4, c 0.125, depth solved), then part 3. 38 runs, 2.3e14 training
FLOPs (`python sweeps/study/cpu_recheck.py --dry_run`); about 1.8 hours with its 2 jobs on 2 CPU cores, as
measured: the elapsed_s of results/cpu_recheck/runs sum to 3.7 hours of 1-thread jobs (1.7e10 FLOP/s each,
evaluations included). Resumable.

    python -m law.rates results/cpu_recheck/runs 'results/cpu_lr/runs/dense_L4_d128_2M_lr0.004*' --out DIR   # 3.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # sweeps/: the runner, the recipe
from recipe import ROOT, builders, common, final_val, seed_rates, tune  # noqa: E402

name = 'cpu_recheck'
jobs = 2
M = 1_000_000
RUNS = os.path.join(ROOT, 'results', name, 'runs')

common = dict(common, threads=1)
run, dense, xmod = builders(tokens_per_iter=2048, width=128, tokens=2 * M, block_size=128)

GRID = (2e-3, 4e-3, 8e-3)
SEEDS = (1, 2)
ARMS = {                                    # the arms of cpu_small / cpu_medium, by their names there
    'dense_0.5M': lambda **kw: dense(4, tokens=M // 2, **kw),
    'xmod_s2_0.5M': lambda **kw: xmod(2, 5, 4, tokens=M // 2, **kw),
    'xmod_s4_0.5M': lambda **kw: xmod(4, 12, 4, tokens=M // 2, **kw),
    'xmod_s8_0.5M': lambda **kw: xmod(8, 11, 4, tokens=M // 2, **kw),
    'dense_T256': lambda **kw: dense(4, block_size=256, **kw),
    'xmod_s4_T256': lambda **kw: xmod(4, 0, 4, capacity=0.125, block_size=256, tag='_T256', **kw),
}


def arm(key, lr, seed=0, arms=ARMS):
    """One run of an arm at a peak rate, named as the shared-rate run it rechecks plus _lr<rate>."""
    r = arms[key](learning_rate=lr, min_lr=lr / 10, seed=seed)
    base, _, seed_part = r['name'].partition('_seed')
    r['name'] = f'{base}_lr{lr:g}' + (f'_seed{seed_part}' if seed_part else '')
    return r


def rates(key):
    return tune(lambda lr: final_val(RUNS, arm(key, lr)['name']), GRID)


runs = [arm(key, lr) for key in ARMS for lr in rates(key)[0]]
for key in ARMS:
    for lr in seed_rates(lambda lr: final_val(RUNS, arm(key, lr)['name']), GRID):
        runs += [arm(key, lr, seed=s) for s in SEEDS]
BALANCE = {'xmod_s4_balance0.5': lambda **kw: xmod(4, 12, 4, depth_balance=0.5, tag='_balance0.5', **kw)}
runs += [arm('xmod_s4_balance0.5', 4e-3, seed=s, arms=BALANCE) for s in (0, 1, 2)]


if __name__ == '__main__':          # python sweeps/study/cpu_recheck.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
