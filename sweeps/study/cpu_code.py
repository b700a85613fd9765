"""cpu_code: the reference pair on Python source (data/pycode: sympy's .py files, byte-level, vocab 257), each arm at
its own tuned rate with 3 seeds, by the panel's rule. 4 dense layers against X-MoD stride 4 (12 layers, c 0.125),
width 128, T=128, 2M tokens, the cpu_small recipe (cosine, min_lr = lr / 10), 1 thread a run, 2 at a time. 2M
tokens are 8% of pycode's 25M training bytes: no run repeats data.

    python data/pycode/prepare.py                    # once: the corpus (train.py refuses --dataset=pycode without it)
    python sweeps/study/cpu_code.py
    python -m law.rates results/cpu_code/runs --out results/cpu_code

1. Each arm on the rates 2e-3, 4e-3, 8e-3 (seed 0), extended by 2x past an edge that holds its best finished rate
   (recipe.tune; a diverged run counts as worse than any).
2. Seeds 1 and 2 at the best rate and at every rate within 0.005 of it in seed 0 (recipe.seed_rates); the seed mean
   then chooses (law.rates.best_rate).
sweeps/sweep.py --dry_run: 6.84e13 training FLOPs for the 6 runs of the grid (1.14e13 a run, both arms), before the edges
and seeds are known; with seeds at one rate per arm, 10 runs and 1.14e14, about an hour on 2 quiet cores. The layouts
(python sweeps/study/cpu_code.py): dense DDDD 1.901M FLOPs/token, X-MoD DrrrDrrrDrrr at c 0.125 (16/128) 1.896M.

`arm` and `tuned` also build sweeps/study/cpu_context.py (T=512) and the rate tune of sweeps/study/cpu_tokens.py (width 64).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # sweeps/: the runner, the recipe
from recipe import ROOT, builders, common, final_val, seed_rates, train_defaults, tune  # noqa: E402

name = 'cpu_code'
jobs = 2
M = 1_000_000
RUNS = os.path.join(ROOT, 'results', name, 'runs')

common = dict(common, threads=1)

GRID = (2e-3, 4e-3, 8e-3)
SEEDS = (1, 2)
ARMS = ('dense', 'xmod')


def arm(kind, lr, seed=0, width=128, block_size=128, tokens=2 * M, corpus='pycode', tag='', stride=4, **kw):
    """One run of 4 dense layers, or of X-MoD FLOP-matched to them at c ~0.125: at width 128 and T=128 the 12-layer
    stride-4 reference of cpu_lr; at another width its depth and capacity solved (cpu_lr), at another context its
    depth solved for the capacity nearest 0.125 (cpu_medium). Peak rate lr, min_lr = lr / 10; named as cpu_lr's runs with the tag and
    the corpus before the rate: xmod_s4_L12_D4_2M_pycode_lr0.004_seed1, dense_L4_d64_16M_wsd_shakespeare_lr0.016."""
    _, dense, xmod = builders(tokens_per_iter=2048, width=width, tokens=tokens, block_size=block_size)
    kw.update(learning_rate=lr, min_lr=lr / 10, seed=seed, dataset=corpus)
    if block_size != 128:
        kw['block_size'] = block_size                                   # and the name says _T<block_size>
    if kind == 'dense':
        r = dense(4, **kw)
    elif block_size != 128:
        r = xmod(stride, 0, 4, capacity=0.125, tag=f'_T{block_size}', **kw)
    elif width != 128:
        r = xmod(4, 0, 4, tag=f'_d{width}', **kw)
    else:
        r = xmod(4, 12, 4, **kw)
    base, _, seed_part = r['name'].partition('_seed')
    r['name'] = f'{base}{tag}_{corpus}_lr{lr:g}' + (f'_seed{seed_part}' if seed_part else '')
    return r


def loss_at(runs_dir, make, kind):
    """lr -> the final causal val loss of the arm's seed-0 run at lr in runs_dir (None until it has finished)."""
    return lambda lr: final_val(runs_dir, make(kind, lr, 0)['name'])


def tuned(runs_dir, make, grid, seeds=SEEDS, arms=ARMS):
    """Each arm's rate grid in seed 0, extended past an edge that holds its best (recipe.tune), then `seeds` at the
    best rate and at every rate within 0.005 of it in seed 0 (recipe.seed_rates) once the grid is finished.
    make(kind, lr, seed): the run of arm `kind`."""
    runs = [make(kind, lr, 0) for kind in arms for lr in tune(loss_at(runs_dir, make, kind), grid)[0]]
    for kind in arms:
        runs += [make(kind, lr, s) for lr in seed_rates(loss_at(runs_dir, make, kind), grid)
                 for s in seeds]
    return runs


def layout(r):
    """A run's model as train.py builds it (FLOP matching included), in one line: its layout, depth, capacity with
    k of T tokens, and forward FLOPs per token. Needs the dataset's meta.pkl (the vocabulary)."""
    import pickle
    sys.path.insert(0, ROOT)
    import xmod
    from configurator import configure
    from run_folder import sizes
    args = {**common, **{k: v for k, v in r.items() if k != 'name'}}
    cfg, _ = configure([f'--{k}={v}' for k, v in args.items()], train_defaults(), model=xmod.GPTConfig)
    with open(os.path.join(ROOT, 'data', cfg.dataset, 'meta.pkl'), 'rb') as f:
        mcfg, _, fpt, _ = sizes(cfg, pickle.load(f))
    routed = (f", capacity {mcfg.capacity:.4f} ({xmod.routed_k(mcfg.capacity, cfg.block_size)}/{cfg.block_size} "
              f"tokens)") if mcfg.model in ('mod', 'xmod') else ''
    return f"{r['name']}: {xmod.layout_string(mcfg)} ({mcfg.n_layer} layers{routed}), {fpt / 1e6:.3f}M FLOPs/token"


runs = tuned(RUNS, arm, GRID)


if __name__ == '__main__':          # python sweeps/study/cpu_code.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
