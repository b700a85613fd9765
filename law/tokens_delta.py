"""law/tokens_delta.py: Delta against tokens per active parameter, from sweeps/study/cpu_tokens.py's runs: for each
corpus, seed and budget (2, 4, 8, 16M tokens: the WSD run's cooldown branches and its own end), Delta = X-MoD's final val_loss_causal minus
dense's; then each seed's least-squares slope of Delta in ln(tokens per active parameter of the dense model), and
their mean, standard error and 95% t interval over seeds (pairing by seed: a seed's slope is its own).

    python -m law.tokens_delta [results/cpu_tokens/runs] > results/cpu_tokens/delta.txt
"""
import json
import math
import os
import sys

import numpy as np

from law.stats import t_interval

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(ROOT, 'results', 'cpu_tokens', 'runs')
LR = {'pycode': '0.008', 'shakespeare': '0.016'}      # each corpus's tuned rate (the sweep file's)
BUDGETS = (2, 4, 8, 16)                               # millions of tokens; 16 is the stable run's own end
SEEDS = (0, 1, 2)


def final(runs, name):
    """(final val_loss_causal, active parameters) of a finished run, or None."""
    path = os.path.join(runs, name, 'run.json')
    if not os.path.exists(path):
        return None
    with open(path) as f:
        run = json.load(f)
    return (run['final']['val_loss_causal'], run['params_active']) if run.get('finished') else None


def names(corpus, millions, seed):
    kind = 'wsd' if millions == BUDGETS[-1] else 'wsdbranch'
    tail = f'{kind}_{corpus}_lr{LR[corpus]}' + (f'_seed{seed}' if seed else '')
    return f'dense_L4_d64_{millions}M_{tail}', f'xmod_s4_Lauto_D4_{millions}M_d64_{tail}'


def main(runs):
    for corpus in LR:
        print(f'## {corpus} (rate {LR[corpus]})')
        print('seed  tokens  tokens/N_act  dense    X-MoD    Delta')
        slopes, by_budget = [], {}
        for seed in SEEDS:
            x, delta = [], []
            for m in BUDGETS:
                dense, sparse = (final(runs, n) for n in names(corpus, m, seed))
                if dense is None or sparse is None:
                    continue
                per_param = m * 1e6 / dense[1]
                x.append(math.log(per_param))
                delta.append(sparse[0] - dense[0])
                by_budget.setdefault(m, []).append(delta[-1])
                print(f'{seed:>4}  {m:>4}M  {per_param:>12.1f}  {dense[0]:.4f}   {sparse[0]:.4f}   {delta[-1]:+.4f}')
            if len(x) >= 3:
                slopes.append(np.polyfit(x, delta, 1)[0])
                print(f'seed {seed}: slope {slopes[-1]:+.4f} per e-fold of tokens per active parameter')
        for m, d in by_budget.items():
            t = t_interval(d)
            print(f"{m}M: Delta {t['mean']:+.4f} +- {float('nan') if t['se'] is None else t['se']:.4f} (n={t['n']})")
        if len(slopes) >= 2:
            t = t_interval(slopes)
            print(f"slope {t['mean']:+.4f} +- {t['se']:.4f} (n={t['n']} seeds), 95% interval [{t['lo']:+.4f}, "
                  f"{t['hi']:+.4f}]")
        print()


if __name__ == '__main__':
    main(sys.argv[1] if len(sys.argv) > 1 else RUNS)
