"""cpu_context: long context on Python source. Dense (4 layers) against X-MoD at width 128, 2M tokens, T = 512, on
data/pycode, each arm at its own tuned rate with 3 seeds (the rule of sweeps/study/cpu_code.py, whose `arm` and `tuned`
build the runs). At T=128 a routed layer at c 0.125 attends over 16 tokens; here over 64 or more.

    python sweeps/study/cpu_context.py
    python sweeps/study/cpu_context.py                     # the FLOP-matched layouts below
    python -m law.rates results/cpu_context/runs --out results/cpu_context

FLOP matching at long context moves budget towards routed layers: attention's T^2 term grows with T, and a routed
layer's attention over k = cT tokens costs c^2 of a dense layer's. At stride 4 that budget cannot become more routed
layers: a 13th layer is a 4th anchor, which leaves the routed ones nothing (k = 1), so the 12-layer layout of T=128
takes it as capacity, c 0.166 (k = 85), not 0.125. Stride 5 spends it on 3 more routed layers at k = 65 (c 0.127), the
nearest to the k = 64 the study asks for. Both X-MoD arms run; with pycode's vocabulary (257) and batch 4 x 512:

    dense_L4_d128_2M_T512:     DDDD (4 layers), 2.687M FLOPs/token
    xmod_s4_Lauto_D4_2M_T512:  DrrrDrrrDrrr (12 layers, capacity 0.1660 (85/512 tokens)), 2.687M FLOPs/token
    xmod_s5_Lauto_D4_2M_T512:  DrrrrDrrrrDrrrr (15 layers, capacity 0.1270 (65/512 tokens)), 2.685M FLOPs/token
    (at T=128, sweeps/study/cpu_code.py: DrrrDrrrDrrr at c 0.125 (16/128), 1.896M against dense's 1.901M)

1. Each arm on 2e-3, 4e-3, 8e-3 (seed 0), extended by 2x past an edge that holds its best finished rate.
2. Seeds 1 and 2 at the best rate and at every rate within 0.005 of it in seed 0; the seed mean chooses.
sweeps/sweep.py --dry_run: 1.45e14 training FLOPs for the 9 runs of the grid (1.61e13 a run, every arm), before the edges and
seeds are known; with seeds at one rate per arm, 15 runs and 2.42e14: about 10 minutes a run, 1.3 hours with 2 at a
time.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]     # the studies beside it; sweeps/: the runner, the recipe
import cpu_code  # noqa: E402
from recipe import ROOT  # noqa: E402

name = 'cpu_context'
jobs = 2
RUNS = os.path.join(ROOT, 'results', name, 'runs')

common = cpu_code.common
T = 512
STRIDES = {'dense': 4, 'xmod': 4, 'xmod_s5': 5}                # arm -> X-MoD stride (dense: unused)


def arm(kind, lr, seed=0):
    return cpu_code.arm(kind.partition('_')[0], lr, seed, block_size=T, stride=STRIDES[kind])


runs = cpu_code.tuned(RUNS, arm, cpu_code.GRID, arms=tuple(STRIDES))


if __name__ == '__main__':          # python sweeps/study/cpu_context.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
