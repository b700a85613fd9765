"""gpu_small: the cpu_small sweep (same plan, see sweeps/cpu_small.py) at about 34x its compute, at tuned learning
rates. Char-level Shakespeare (4.5M training tokens, so the largest budgets repeat the data a few times), width 256
for the X-MoD grid, context 256 unless said, contexts 128 and 512 for two grid points, bf16 autocast, torch.compile.
Two stages, as sweeps/study/cpu_lr.py (an arm at one shared rate is the confound the tuned CPU study removed):

1. The grid: the reference pair (4 dense layers against X-MoD stride 4, c ~0.125) at width 256, T=256, 16M tokens,
   seed 0, at peak rates 7.5e-4 .. 6e-3 (8x), min_lr = lr / 10. Where an arm's best finished rate is the grid's
   highest (lowest), the next rate up (down) by 2x is added, until the best is inside (recipe.tune).
2. The sweep: cpu_small's plan at this scale, every dense run at the dense arm's best rate and every other run
   (X-MoD, MoD, MoE) at the X-MoD arm's. The reference pair's seed-0 runs are the grid's runs at those rates.

Stage 2 joins once both arms' grids are finished: sweeps/sweep.py reads this file before each start, so one call runs
both (`python sweeps/gpu_small.py --dry_run` shows the state). The grid is 8 runs, 2.83e15 training FLOPs
(--dry_run); the sweep's other 36 runs 1.37e16 (the shared-rate plan's 38 runs, 1.44e16, less the reference
pair). The time depends on the throughput these small models sustain on a GPU, not measured yet
(tools/gpu_check.sh's per_gpu step gives it in tokens/s, eager).

    python sweeps/gpu_small.py                          # one GPU; --gpus=0,1,2,3 --per_gpu=2 for more
    python sweeps/gpu_small.py --commands                # for a Slurm array (sweeps/slurm_array.sh)
    python -m law.rates results/gpu_small/runs --out results/gpu_small                  # the rates per arm
    python fit_law.py results/gpu_small/runs --tuned --out results/gpu_small --holdout "stride==8"
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))      # sweeps/: the runner and the shared recipe
from recipe import ROOT, builders, final_val, lr_tag, plan, tune  # noqa: E402

name = 'gpu_small'
jobs = 1
M = 1_000_000
RUNS = os.path.join(ROOT, 'results', name, 'runs')

common = dict(dataset='shakespeare', n_head=8, learning_rate=1.5e-3, min_lr=1.5e-4, warmup_iters=100,
              weight_decay=0.1, dropout=0.0, eval_tokens=262144, device='cuda', compile=True)

SCALE = dict(tokens_per_iter=16384, width=256, tokens=16 * M, block_size=256)
GRID = (7.5e-4, 1.5e-3, 3e-3, 6e-3)
_, dense, xmod = builders(**SCALE)
REFERENCE = {'dense': dense(4), 'xmod': xmod(4, 12, 4)}       # the pair the grid tunes, at the default rate


def at_rate(r, lr, tag=True):
    """Run r at peak rate lr (min_lr = lr / 10); tag: its name says the rate (a grid run)."""
    return dict(r, learning_rate=lr, min_lr=lr / 10, name=r['name'] + (lr_tag(lr) if tag else ''))


def rates(arm):
    """(the arm's grid rates, its best rate once they are all finished, else None)."""
    return tune(lambda lr: final_val(RUNS, at_rate(REFERENCE[arm], lr)['name']), GRID)


grids = {arm: rates(arm) for arm in REFERENCE}
# rate by rate, both arms at each: the first runs already pair the arms (gpu_check.sh's per_gpu step runs 4)
runs = [at_rate(REFERENCE[arm], lrs[i]) for i in range(max(len(g[0]) for g in grids.values()))
        for arm, (lrs, _) in grids.items() if i < len(lrs)]
best = {arm: grids[arm][1] for arm in REFERENCE}
if None not in best.values():
    study = plan(**SCALE, contexts=(128, 512), widths=(128, 256, 384), budgets=(4 * M, 8 * M, 16 * M),
                 context_points=2)
    reference_names = {r['name'] for r in REFERENCE.values()}
    runs += [at_rate(r, best['dense' if r['model'] == 'dense' else 'xmod'], tag=False) for r in study
             if r['name'] not in reference_names]


if __name__ == '__main__':          # python sweeps/gpu_small.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
