"""cpu_wsd: Delta at 0.5, 1, 2, 4 and 8M tokens from one warmup-stable-decay run per arm and seed, at the tuned
learning rate, to tell a schedule effect from a data effect. Every earlier budget had its own cosine run; Delta
shrank from budget to budget but hardly moved inside a 2M-token run, which points at the schedule.

    python sweeps/study/cpu_wsd.py       # a branch joins the queue once its parent has kept its step
    python fit_law.py results/cpu_wsd/runs --out results/cpu_wsd

1. Stable runs: the reference pair (4 dense layers against X-MoD stride 4, c 0.125, width 128, T=128) with
   lr_schedule=wsd over 8M tokens (the 4.5M-token training split seen about 1.8 times), keeping the steps where the
   0.5, 1, 2 and 4M budgets' cooldowns start (the last 20% of each budget: run_folder.cooldown_start).
2. Branches: from each kept step, the cooldown of that budget (--init_from=.../ckpt_S.pt). A branch equals, bit for
   bit, a separate WSD run of its budget (tests/test_train.py), so each stable run gives all five budgets.
3. Arms at the rate sweeps/study/cpu_lr.py found best for both at width 128 (4e-3, seed 0: dense 1.7044, X-MoD 1.7249);
   seeds 0-2, then seed 0 at 2e-3 and 8e-3, which asks whether the best rate moves with the budget.
4. Separate cosine runs at 4e-3 at the same budgets (seed 0 right after seed 0's branches), to put Delta(D) from
   the branches beside Delta(D) from a run per budget (2M: results/cpu_lr has those).
This file lists a branch only once its parent has kept its step (sweeps/sweep.py reads it again before each start). About
6 hours on 2 CPU cores in all (2 runs at a time), resumable, and the runs are useful in the order listed.
"""
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # sweeps/: the runner, the recipe
from recipe import ROOT, builders, common, train_defaults  # noqa: E402

sys.path.insert(0, ROOT)
import run_folder  # noqa: E402  (train.py's budget and cooldown rules, so the kept steps are the branch points)

name = 'cpu_wsd'
jobs = 2
M = 1_000_000
RUNS = os.path.join('results', name, 'runs')           # as train.py (run from the repository root) sees it

common = dict(common, threads=1)
run, dense, xmod = builders(tokens_per_iter=2048, width=128, tokens=2 * M, block_size=128)
TOKENS_PER_ITER = 2048
BUDGETS = (M // 2, M, 2 * M, 4 * M)                     # the branches; the stable run's own budget is 8M
LONG = 8 * M


def iters(tokens):
    return run_folder.resolve_iters(types.SimpleNamespace(max_flops=0, max_tokens=tokens), None, TOKENS_PER_ITER)


def cooldown_start(tokens):
    """Where a WSD run of this budget starts its cooldown: train.py's own rule, at its default cooldown_frac."""
    frac = train_defaults()['cooldown_frac']
    return run_folder.cooldown_start(types.SimpleNamespace(cooldown_frac=frac), iters(tokens))


def arm(kind, lr, seed, tokens, schedule):
    kw = dict(learning_rate=lr, min_lr=lr / 10, seed=seed, tokens=tokens, lr_schedule=schedule)
    r = dense(4, **kw) if kind == 'dense' else xmod(4, 12, 4, **kw)
    base, _, seed_part = r['name'].partition('_seed')
    r['name'] = f"{base}_{schedule}_lr{lr:g}" + (f'_seed{seed_part}' if seed_part else '')
    return r


def keep_cooldowns(r, budgets, long):
    """r, a WSD run of `long` tokens, made to keep the steps where each budget's cooldown starts (its branch points),
    with 16 evaluations on the way."""
    r['save_steps'] = ','.join(str(cooldown_start(b)) for b in budgets)
    r['eval_interval'] = iters(long) // 16
    return r


def branches_of(parent, budget_run, budgets, runs_dir):
    """The cooldown branch of each budget from the parent's kept step, once that step is kept. budget_run(b): the
    WSD run of budget b that the branch stands for (its name's _wsd_ becomes _wsdbranch_); runs_dir as train.py,
    run from the repository root, sees it. Also used by sweeps/study/cpu_tokens.py."""
    out = []
    for b in budgets:
        ckpt = os.path.join(runs_dir, parent['name'], f'ckpt_{cooldown_start(b)}.pt')
        if os.path.exists(os.path.join(ROOT, ckpt)):
            r = budget_run(b)
            r.update(init_from=ckpt, name=r['name'].replace('_wsd_', '_wsdbranch_'))
            out.append(r)
    return out


def stable(kind, lr, seed):
    return keep_cooldowns(arm(kind, lr, seed, LONG, 'wsd'), BUDGETS, LONG)


def branches(kind, lr, seed):
    """The branch of each budget from the stable run's kept step, once that step is kept."""
    return branches_of(stable(kind, lr, seed), lambda b: arm(kind, lr, seed, b, 'wsd'), BUDGETS, RUNS)


ARMS = ('dense', 'xmod')
TUNED = 4e-3
POINTS = [(TUNED, s) for s in (0, 1, 2)] + [(2e-3, 0), (8e-3, 0)]
runs = []
for lr, seed in POINTS:
    runs += [stable(kind, lr, seed) for kind in ARMS]
    runs += [r for kind in ARMS for r in branches(kind, lr, seed)]
    if (lr, seed) == (TUNED, 0):         # the cosine run per budget beside the first branches, before more seeds
        runs += [arm(kind, TUNED, 0, b, 'cosine') for b in BUDGETS for kind in ARMS if b != 2 * M]
runs += [arm(kind, TUNED, 0, LONG, 'cosine') for kind in ARMS]       # 8M cosine: the costliest comparison, last
for seed in (1, 2):
    runs += [arm(kind, TUNED, seed, b, 'cosine') for b in (*BUDGETS, LONG) for kind in ARMS if b != 2 * M]


if __name__ == '__main__':          # python sweeps/study/cpu_wsd.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
