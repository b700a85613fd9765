"""cpu_context_shakespeare: sweeps/study/cpu_context.py's long context on Shakespeare (characters) instead of Python
source: dense (4 layers) against X-MoD stride 4 at width 128, 2M tokens, T = 512, each arm at its own tuned rate with
3 seeds (the rule of sweeps/study/cpu_code.py, whose `arm` and `tuned` build the runs). Stride 5, which was worse on code,
is left out.

    python sweeps/study/cpu_context_shakespeare.py
    python sweeps/study/cpu_context_shakespeare.py         # the FLOP-matched layouts below
    python -m law.rates results/cpu_context_shakespeare/runs --out results/cpu_context_shakespeare

With Shakespeare's characters and batch 4 x 512:

    dense_L4_d128_2M_T512_shakespeare_lr0.004: DDDD (4 layers), 2.643M FLOPs/token
    xmod_s4_Lauto_D4_2M_T512_shakespeare_lr0.004: DrrrDrrrDrrr (12 layers, capacity 0.1660 (85/512 tokens)), 2.642M

1. Each arm on 2e-3, 4e-3, 8e-3 (seed 0), extended by 2x past an edge that holds its best finished rate.
2. Seeds 1 and 2 at the best rate and at every rate within 0.005 of it in seed 0; the seed mean chooses.
sweeps/sweep.py --dry_run: 9.52e13 training FLOPs for the 6 runs of the grid (1.59e13 a run), before the edges and seeds are
known. Measured (from a worktree pinned at c1921c0): 11 runs (the X-MoD grid extended down to 1e-3; 4 seeded runs),
24.1 minutes with 2 at a time, about 4.4 minutes a one-thread run.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]     # the studies beside it; sweeps/: the runner, the recipe
import cpu_code  # noqa: E402
from recipe import ROOT  # noqa: E402

name = 'cpu_context_shakespeare'
jobs = 2
RUNS = os.path.join(ROOT, 'results', name, 'runs')

common = cpu_code.common
T = 512


def arm(kind, lr, seed=0):
    return cpu_code.arm(kind, lr, seed, block_size=T, stride=4, corpus='shakespeare')


runs = cpu_code.tuned(RUNS, arm, cpu_code.GRID)


if __name__ == '__main__':          # python sweeps/study/cpu_context_shakespeare.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
