"""cpu_panel: depth routing against its baselines, each at its own tuned learning rate, at the reference point of
results/cpu_lr (width 128, T=128, 2M tokens, cosine, the cpu_small recipe). That sweep's dense and X-MoD runs (stride
4, c 0.125; 5 seeds each) are the panel's reference; it adds ten arms:

  calgate      X-MoD with the calibrated gate (gate='calibrated'): gain * sigmoid(r - threshold), the sigmoid centred
               on the layer's causal threshold, where the variance gate's sigmoid(r) saturates (gate_slope_l)
  xmod_s2_calgate  MoD's layout (stride 2, c 0.367) with the calibrated gate
  mod_c125     MoD's layout at MoD's own capacity, c = 0.125 (16 of 128 tokens): 8 layers DrDrDrDr with the mod
               family's plain gate and raw BCE, FLOP-matched to the 4-layer dense model by its token budget (its
               FLOPs per token are 1.109x dense's: 1.80M tokens instead of 2M)

  mod          MoD as published (Raposo et al. 2024): alternating layers, plain gate (the raw score), the router's
               BCE on raw scores (bce_logits='raw', the mod default), no depth balancing; 6 layers FLOP-matched to
               the 4-layer dense model (c 0.367)
  xmod_s2      MoD's layout (DrDrDr, 6 layers, the same c) with X-MoD's gate, BCE and balancing: --stride=2
  moe_cf1      the MoE FLOP-matched: capacity factor 1.0 gives each token two expert slots of hidden 2C, one dense
               MLP's FLOPs (within 0.5%; the default 1.25 pads 15% more)
  plaingate    X-MoD with MoD's plain gate
  nobalance    X-MoD without depth balancing
  random       X-MoD with random routing (router='random'): a random k tokens per routed layer, the gate its gain
               alone; whatever the learned router adds over it is what routing learns
  resid_active X-MoD with its residual projections initialised for the depth a token passes (4.1), not 12

    python sweeps/study/cpu_panel.py
    python -m law.rates results/cpu_panel/runs 'results/cpu_lr/runs/dense_L4_d128_*' 'results/cpu_lr/runs/xmod_s4_L12_*' \
        --panel --out results/cpu_panel     # lr.json, lr.md, lr_vs_loss.png, panel.md

1. Each arm on the rates 2e-3, 4e-3, 8e-3 (seed 0, min_lr = lr / 10), extended by 2x past an edge that holds its
   best finished rate (a diverged run counts as worse than any), as sweeps/study/cpu_lr.py does.
2. Seeds 1-4 at the best rate and at every rate within 0.005 of it in seed 0 (recipe.seed_rates); the seed
   mean then chooses (law.rates.best_rate). The same rule gives the reference X-MoD seeds 1-4 at 8e-3, 0.0004 behind
   its 4e-3 in seed 0: `python sweeps/study/cpu_lr.py` runs them (4 runs, 4.5e13 FLOPs).
About 40 runs of about 1.1e13 training FLOPs each (sweeps/sweep.py --dry_run: 2.4e14 for the 21 runs of the grid, before
the edges and seeds are known): about 3 hours with 2 one-thread runs at a time on 2 quiet cores.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # sweeps/: the runner, the recipe
from recipe import ROOT, builders, common, final_val, seed_rates, tune  # noqa: E402

sys.path.insert(0, ROOT)
from xmod import GPTConfig, flops_per_token  # noqa: E402

name = 'cpu_panel'
jobs = 2
M = 1_000_000
RUNS = os.path.join(ROOT, 'results', name, 'runs')

common = dict(common, threads=1)
run, dense, xmod = builders(tokens_per_iter=2048, width=128, tokens=2 * M, block_size=128)

# MoD at c = 0.125 sees the reference dense run's training FLOPs: tokens = its tokens x dense FLOPs / MoD FLOPs per token
DENSE = GPTConfig(n_layer=4, n_embd=128, block_size=128, vocab_size=84)
MOD_TOKENS = 2048 * round(2_000_896 * flops_per_token(DENSE) / flops_per_token(
    GPTConfig(model='mod', n_layer=8, capacity=0.125, n_embd=128, block_size=128, vocab_size=84)) / 2048)

GRID = (2e-3, 4e-3, 8e-3)
SEEDS = (1, 2, 3, 4)        # 3 and 4: the 3-seed standard errors missed the 0.006
ARMS = {                                    # the most telling first: a partial sweep already answers the most
    'calgate': lambda **kw: xmod(4, 12, 4, gate='calibrated', tag='_calgate', **kw),
    'mod_c125': lambda **kw: run(f'mod_L8_c0.125_{MOD_TOKENS / M:.3g}M', tokens=MOD_TOKENS, model='mod', n_layer=8,
                                 capacity=0.125, match_flops=False, **kw),
    'xmod_s2_calgate': lambda **kw: xmod(2, 6, 4, gate='calibrated', tag='_calgate', **kw),
    'random': lambda **kw: xmod(4, 12, 4, router='random', tag='_random', **kw),
    'mod': lambda **kw: run('mod_L6_D4_2M', model='mod', n_layer=6, dense_layers=4, **kw),
    'moe_cf1': lambda **kw: run('moe_L4_2M_cf1', model='moe', n_layer=4, expert_capacity_factor=1.0, **kw),
    'xmod_s2': lambda **kw: xmod(2, 6, 4, **kw),
    'plaingate': lambda **kw: xmod(4, 12, 4, gate='plain', tag='_plaingate', **kw),
    'nobalance': lambda **kw: xmod(4, 12, 4, depth_balance=0.0, tag='_nobalance', **kw),
    'resid_active': lambda **kw: xmod(4, 12, 4, resid_init='active', tag='_residactive', **kw),
}


def arm(key, lr, seed=0):
    """One run of an arm at a peak rate, named as its shared-rate run in cpu_small plus _lr<rate>[_seed<s>]."""
    r = ARMS[key](learning_rate=lr, min_lr=lr / 10, seed=seed)
    base, _, seed_part = r['name'].partition('_seed')
    r['name'] = f'{base}_lr{lr:g}' + (f'_seed{seed_part}' if seed_part else '')
    return r


def loss_at(key):
    return lambda lr: final_val(RUNS, arm(key, lr)['name'])


runs = [arm(key, lr) for lr in (4e-3, 8e-3, 2e-3) for key in ARMS]
runs += [arm(key, lr) for key in ARMS for lr in tune(loss_at(key), GRID)[0] if lr not in GRID]
for key in ARMS:
    runs += [arm(key, lr, seed=s) for lr in seed_rates(loss_at(key), GRID) for s in SEEDS]


if __name__ == '__main__':          # python sweeps/study/cpu_panel.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
