"""cpu_settle: what cpu_medium left unsettled, at cpu_small's recipe and scale (width 128, context 128, 2M tokens
unless said). 4.4e14 training FLOPs (sweeps/sweep.py --dry_run), 4.4 job-hours measured (elapsed_s summed): about 2.2 h on
2 CPU cores (2 runs at a time); resumable like every sweep.

    python sweeps/study/cpu_settle.py
    python fit_law.py results/cpu_small/runs results/cpu_medium/runs results/cpu_settle/runs --out results/cpu_settle

1. Statistical power. cpu_medium's 6 seeds per arm gave a seed std of the paired Delta of ~0.012 at T=128 and ~0.008
   at T=256, so a standard error of 0.0049 and 0.0034; 0.003 needs about 16 and 8 seeds. Seeds 6-15 at T=128 and
   6-7 at T=256.
2. Fixes, paired by seed with the reference X-MoD (seeds 0-2 at 2M tokens, seed 0 at 4M), each one knob away from it
   (docs/results.md, "Why the gain fades"): the causal threshold as each step's own quantile (router_momentum=0), a 10x
   heavier router BCE (router_bce=1.0), a penalty on the routers' squared scores (router_zloss=0.01).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # sweeps/: the runner, the recipe
from recipe import builders, common  # noqa: E402,F401  (common: the settings sweep.py gives every run)

name = 'cpu_settle'
jobs = 2
M = 1_000_000

run, dense, xmod = builders(tokens_per_iter=2048, width=128, tokens=2 * M, block_size=128)


def pair(seed, **kw):
    if kw.get('block_size') == 256:
        return [dense(4, seed=seed, **kw), xmod(4, 0, 4, capacity=0.125, tag='_T256', seed=seed, **kw)]
    return [dense(4, seed=seed, **kw), xmod(4, 12, 4, seed=seed, **kw)]


FIXES = [dict(router_momentum=0.0, tag='_mom0'), dict(router_bce=1.0, tag='_bce1'),
         dict(router_zloss=0.01, tag='_z0.01')]

runs = [
    *[r for s in range(6, 11) for r in pair(s)],                                    # power, T=128, first half
    *[xmod(4, 12, 4, seed=s, **fix) for fix in FIXES for s in (0, 1, 2)],           # fixes at 2M tokens
    *[r for s in (6, 7) for r in pair(s, block_size=256)],                          # power, T=256
    *[r for s in range(11, 16) for r in pair(s)],                                   # power, T=128, second half
    *[xmod(4, 12, 4, tokens=4 * M, **fix) for fix in FIXES],                        # fixes at 4M tokens
]


if __name__ == '__main__':          # python sweeps/study/cpu_settle.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
