"""cpu_tokens: many tokens per active parameter. At width 64 (4 dense layers against X-MoD stride 4, depth and capacity
solved as in cpu_lr: c 0.14), one warmup-stable-decay run per arm, corpus and seed to 16M tokens, with cooldown
branches at 2, 4 and 8M (sweeps/study/cpu_wsd.py's branches: a branch equals a WSD run of its budget): Delta at 2, 4, 8 and
16M tokens, up to about 80 training tokens per active parameter, 3 seeds, T=128, 1 thread a run, 2 at a time.

    python sweeps/study/cpu_tokens.py     # a branch joins the queue once its parent has kept its step
    python -m law.rates 'results/cpu_tokens/runs/*_2M_pycode_lr*' 'results/cpu_tokens/runs/*_2M_d64_pycode_lr*' \
        --out results/cpu_tokens/lr                  # the pycode rate tune alone (--lr does not tell corpora apart)

Two corpora:
- pycode (data/pycode/prepare.py): 25M training bytes, so no run repeats data up to 16M tokens;
- Shakespeare: its 4.5M training characters are seen about 3.5 times by 16M tokens, so its long end measures
  repetition as much as tokens per parameter.
1. The rate on pycode: each arm at width 64, 2M tokens, cosine, seed 0 on 4e-3, 8e-3, 1.6e-2, extended by 2x past an
   edge that holds its best (recipe.tune). An arm's pycode WSD runs are listed once its best is known.
   On Shakespeare both arms use width 64's tuned rate from results/cpu_lr, 1.6e-2 (3 seeds each there).
2. The WSD runs (lr_schedule=wsd, min_lr = lr / 10, cooldown the last 20% of each budget) at that rate, seeds 0-2,
   seed by seed so that a partial sweep already has both corpora, then each one's branches as their steps are kept.
The MoE arm is left out until the baseline panel (sweeps/study/cpu_panel.py) says whether it pays.
sweeps/sweep.py --dry_run before any run: the 6 tune runs (3.34e12 training FLOPs each) and the 6 Shakespeare WSD runs
(2.57e13 each), 1.74e14 FLOPs. Everything once listed (the pycode rates known, the 36 branches; run_flops counts a
branch's cooldown only): 54 runs, 3.9e14 FLOPs to train (6.1e14 were each branch a separate run). At the issue's
estimate, about 25 minutes a 16M-token run at width 64, about 3 hours on 2 cores.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]     # the studies beside it; sweeps/: the runner, the recipe
import cpu_code  # noqa: E402  (arm, loss_at, ARMS)
from cpu_wsd import branches_of, keep_cooldowns  # noqa: E402
from recipe import ROOT, tune  # noqa: E402

name = 'cpu_tokens'
jobs = 2
M = 1_000_000
RUNS = os.path.join('results', name, 'runs')            # as train.py (run from the repository root) sees it

common = cpu_code.common

WIDTH = 64
LONG = 16 * M
BUDGETS = (2 * M, 4 * M, 8 * M)                         # the branches; the stable run's own budget is LONG
GRID = (4e-3, 8e-3, 1.6e-2)                             # pycode, width 64, 2M tokens, seed 0
SHAKESPEARE_LR = 1.6e-2                                 # results/cpu_lr: width 64's best for both arms
SEEDS = (0, 1, 2)
CORPORA = ('pycode', 'shakespeare')


def tune_arm(kind, lr, seed=0):
    return cpu_code.arm(kind, lr, seed, width=WIDTH)


def wsd_arm(kind, corpus, lr, seed, tokens):
    return cpu_code.arm(kind, lr, seed, width=WIDTH, tokens=tokens, corpus=corpus, tag='_wsd', lr_schedule='wsd')


def rate(kind, corpus):
    """The arm's peak rate on the corpus; None while the pycode tune has no best yet."""
    if corpus == 'shakespeare':
        return SHAKESPEARE_LR
    return tune(cpu_code.loss_at(os.path.join(ROOT, RUNS), tune_arm, kind), GRID)[1]


def wsd_runs(kind, corpus, seed):
    """The stable run to LONG tokens and the branches its kept steps allow so far."""
    lr = rate(kind, corpus)
    if lr is None:
        return []
    parent = keep_cooldowns(wsd_arm(kind, corpus, lr, seed, LONG), BUDGETS, LONG)
    return [parent, *branches_of(parent, lambda b: wsd_arm(kind, corpus, lr, seed, b), BUDGETS, RUNS)]


runs = [tune_arm(kind, lr) for kind in cpu_code.ARMS
        for lr in tune(cpu_code.loss_at(os.path.join(ROOT, RUNS), tune_arm, kind), GRID)[0]]
for seed in SEEDS:
    runs += [r for corpus in CORPORA for kind in cpu_code.ARMS for r in wsd_runs(kind, corpus, seed)]


if __name__ == '__main__':          # python sweeps/study/cpu_tokens.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
