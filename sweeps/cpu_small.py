"""cpu_small: the scaling-law sweep at laptop scale, 4.29e14 training FLOPs (sweeps/sweep.py --dry_run): 2.09 job-hours
measured (the runs' elapsed_s summed), about 65 minutes on 2 CPU cores (2 runs at a time, 1 thread each). Char-level Shakespeare, width 128 for the X-MoD grid, context 128 unless said, one fixed validation set.

    python sweeps/cpu_small.py
    python fit_law.py results/cpu_small/runs --out results/cpu_small --holdout "stride==8"

Every X-MoD point is FLOP-matched (within 2%) to a dense run of the same width, context and token budget whose depth
is the X-MoD point's active-equivalent depth (train.py: dense_layers, then n_layer fixed and capacity solved). The
capacities are the solved ones nearest to the grid's 0.125 / 0.25 / 0.5, not exactly those. `plan` (sweeps/recipe.py)
builds the runs at any scale; sweeps/gpu_small.py calls it with bigger numbers, sweeps/classroom.py with smaller."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))      # sweeps/: the runner and the shared recipe
from recipe import builders, common, plan  # noqa: E402,F401  (builders too: gpu_ladder.py reads it here)

name = 'cpu_small'
jobs = 2
M = 1_000_000

# On this machine two 1-thread runs reach ~24k tokens/s together when nothing else runs. A second context point
# (stride 8, c 0.25) is left to gpu_small.
runs = plan(tokens_per_iter=2048, width=128, tokens=2 * M, block_size=128, contexts=(64, 256),
            widths=(64, 128, 192), budgets=(M // 2, M, 2 * M), context_points=1)


if __name__ == '__main__':          # python sweeps/cpu_small.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
