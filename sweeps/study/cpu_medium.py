"""cpu_medium: what cpu_small left open, run beside it and fitted together with it. Same data, recipe and scale
(width 128, context 128, 2M tokens unless said; sweeps/cpu_small.py), with the causal thresholds calibrated once per
optimizer step and the routing diagnostics in every log. 3.11e14 training FLOPs (sweeps/sweep.py --dry_run); 3.3 job-hours
measured (the runs' elapsed_s summed: 2.6e10 FLOP/s a job, evaluations included), so about 1.7 h at 2 runs at a time.

    python sweeps/study/cpu_medium.py
    python fit_law.py results/cpu_small/runs results/cpu_medium/runs --out results/cpu_medium

1. Statistical power: the reference pair (X-MoD stride 4, c=0.125 against 4 dense layers) gets seeds 3-5 at T=128
   (6 seeds per arm with cpu_small's 0-2) and seeds 1-5 at T=256 (6 with cpu_small's 0), so that the standard error
   of the mean paired Delta is about 0.003 (seed std of Delta ~0.007 in cpu_small).
2. The law's missing axes. Budget: pairs at 0.5M, 1M and 4M tokens for strides 2, 4 and 8 against the 4-layer dense
   runs cpu_small already has at those budgets. Width: stride-4 pairs at widths 64 and 192 (depth and capacity
   solved), at 0.5M, 1M and 2M tokens, against cpu_small's dense runs of those widths.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # sweeps/: the runner, the recipe
from recipe import builders, common  # noqa: E402,F401  (common: the settings sweep.py gives every run)

name = 'cpu_medium'
jobs = 2
M = 1_000_000

run, dense, xmod = builders(tokens_per_iter=2048, width=128, tokens=2 * M, block_size=128)

runs = [
    # 1. seeds of the reference pair, T=128 then T=256: what answers the headline question comes first
    *[r for s in (3, 4, 5) for r in (dense(4, seed=s), xmod(4, 12, 4, seed=s))],
    *[r for s in (1, 2, 3, 4, 5) for r in (dense(4, block_size=256, seed=s),
                                           xmod(4, 0, 4, capacity=0.125, block_size=256, tag='_T256', seed=s))],
    # 2. budget: the three strides at 0.5M, 1M and 4M tokens (cpu_small has them at 2M, stride 4 also at 4M)
    *[xmod(4, 12, 4, tokens=b) for b in (M // 2, M)],
    *[xmod(2, 5, 4, tokens=b) for b in (M // 2, M, 4 * M)],         # c 0.531
    *[xmod(8, 11, 4, tokens=b) for b in (M // 2, M, 4 * M)],        # c 0.250
    #    width: stride 4 at widths 64 and 192, against cpu_small's dense_L4_d64_* and dense_L4_d192_*
    *[xmod(4, 0, 4, n_embd=d, tokens=b, tag=f'_d{d}') for d in (64, 192) for b in (M // 2, M, 2 * M)],
]


if __name__ == '__main__':          # python sweeps/study/cpu_medium.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
