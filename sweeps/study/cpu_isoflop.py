"""cpu_isoflop: the comparison Mixture-of-Depths makes, isoFLOP optima. At one training budget, the reference run's
(4 dense layers, width 128, T=128, 2M tokens: 1.114e13 FLOPs), each arm is trained at five sizes, each size on
tokens = budget / (3 x its FLOPs per token); each arm's optimum is the minimum of a parabola in log N fitted to its
sizes. MoD's claim is about these optima (the best MoD model is bigger than the best dense one and beats it), not
about one FLOP-matched pair.

    python sweeps/study/cpu_isoflop.py
    python -m law.isoflop results/cpu_isoflop/runs 'results/cpu_lr/runs/*_2M_lr0.004*' --out results/cpu_isoflop

Arms: dense (4 layers) and X-MoD stride 4 FLOP-matched to it (4 anchors, depth and capacity solved near c 0.125,
as sweeps/study/cpu_lr.py's other widths), at widths 48, 64, 88, 176 here; width 128 is the reference pair itself,
results/cpu_lr's runs at 4e-3 (the same recipe, tokens and seeds). Seeds 0-2. Where seed 0 of an arm is best at
the smallest width, width 32 joins (an edge, as cpu_lr extends its rate grid).
The rate: the tuned rule lr = 4e-3 x (128 / width)^2, min_lr = lr / 10 (results/cpu_lr's seed-mean best rates,
64: 1.6e-2, 128: 4e-3, 192: 2e-3, lie on it within a factor 1.13); at 48 and 32 the rule is an extrapolation.
Sized with `python sweeps/study/cpu_isoflop.py --dry_run`: see docs/results.md.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # sweeps/: the runner, the recipe
from recipe import ROOT, builders, common, final_val  # noqa: E402

sys.path.insert(0, ROOT)
from xmod import GPTConfig, flops_per_token  # noqa: E402

name = 'cpu_isoflop'
jobs = 2
M = 1_000_000
RUNS = os.path.join(ROOT, 'results', name, 'runs')

common = dict(common, threads=1)
run, dense, xmod = builders(tokens_per_iter=2048, width=128, tokens=2 * M, block_size=128)

REF_TOKENS = 2_000_896                                      # the reference run's 977 steps of 2048 tokens
BUDGET = 3 * flops_per_token(GPTConfig(n_layer=4, n_embd=128, block_size=128, vocab_size=84)) * REF_TOKENS
WIDTHS = (64, 48, 88, 176)                                  # the likely optimum first; 128 is results/cpu_lr's
EDGE = 32
SEEDS = (0, 1, 2)


def tokens_at(width):
    """The budget's tokens for the 4-layer dense model of this width, in whole steps of 2048 tokens."""
    fpt = flops_per_token(GPTConfig(n_layer=4, n_embd=width, block_size=128, vocab_size=84))
    return 2048 * round(BUDGET / (3 * fpt) / 2048)


def lr_rule(width):
    return 4e-3 * (128 / width) ** 2


def arm(kind, width, seed=0):
    lr = lr_rule(width)
    kw = dict(tokens=tokens_at(width), learning_rate=float(f'{lr:.3g}'), min_lr=float(f'{lr / 10:.3g}'), seed=seed)
    r = dense(4, n_embd=width, **kw) if kind == 'dense' else xmod(4, 0, 4, n_embd=width, tag=f'_d{width}', **kw)
    r['name'] = (f'dense_L4_d{width}_iso' if kind == 'dense' else f'xmod_s4_Lauto_D4_d{width}_iso') + \
        (f'_seed{seed}' if seed else '')
    return r


def widths():
    """WIDTHS, and EDGE once seed 0 of either arm is finished at every width and best at the smallest."""
    for kind in ('dense', 'xmod'):
        vals = {w: final_val(RUNS, arm(kind, w)['name']) for w in WIDTHS}
        if all(v is not None for v in vals.values()) and min(vals, key=vals.get) == min(WIDTHS):
            return WIDTHS + (EDGE,)
    return WIDTHS


runs = [arm(kind, w, seed) for seed in SEEDS for w in widths() for kind in ('dense', 'xmod')]


if __name__ == '__main__':          # python sweeps/study/cpu_isoflop.py [--dry_run | --commands | --jobs=N | ...]
    import sweep
    sys.exit(sweep.main([__file__] + sys.argv[1:]))
