"""
law/rates.py: the peak learning rate per arm and width, and Delta at tuned and at shared rates, from the runs of a
learning-rate sweep (sweeps/cpu_lr.py); lr_sweep.py is its command line, and fit_law.py --tuned keeps the runs at
their arm's best rate (tuned_runs).

An arm is a family variant (dense, xmod, ...) at one stride and capacity, width, context, budget and learning-rate
schedule (a WSD branch counts as the WSD run of its budget, which it equals). For each arm: its final loss at
every peak rate (seed 0), its best rate (the lowest seed-0 loss, or among rates within 0.005 of it in seed 0 the
lowest mean of their shared seeds: best_rate), and the seeds' mean and standard error there. Delta = sparse - dense
at the same width, context and budget, paired by seed: with each arm at its own best rate (the fair comparison) and
with both at each shared rate. The metric is val_loss_causal unless --metric says otherwise (a dense run's two
losses are equal).

Why both Deltas: a sparse model and its dense partner need not share a best rate, so Delta at one shared rate can
be a gap in tuning rather than in the models; Delta at each arm's own best rate is the comparison the law should
see (fit_law.py --tuned), and the shared-rate Deltas beside it show how much the rate alone moves the verdict.
"""
import csv
import json
import math
import os
from collections import defaultdict

import numpy as np

from law.report import mean_se


def layout(r):
    """(stride, capacity) of a routed model, (None, None) for one that routes nothing."""
    # the capacity is rounded so that one configuration read from several runs is one arm, whatever float noise
    # its computation (FLOP matching, routed_k) left in each; the MoE routes among experts, not over depth
    return (None, None) if r['model'] in ('dense', 'moe') else (r['stride'], round(r['capacity'], 4))


def label(a):
    """An arm's name in tables and legends: the variant, and a routed model's stride and capacity."""
    return a['variant'] if a['stride'] is None else f"{a['variant']} s{a['stride']} c{a['capacity']:g}"


def arm_key(r):
    """(variant, n_embd, T, tokens, schedule, stride, capacity): a run's arm, everything but its rate and seed."""
    # a run from before lr_schedule existed was trained with the cosine schedule, so it joins the cosine arm
    return (r['variant'], r['n_embd'], r['T'], r['tokens'], r['config'].get('lr_schedule', 'cosine'), *layout(r))


def arms(runs, metric):
    """{arm_key: {lr: {seed: loss}}}."""
    out = defaultdict(lambda: defaultdict(dict))
    for r in runs:
        out[arm_key(r)][r['config']['learning_rate']][r['seed']] = r['loss'][metric]
    return out


CLOSE = 0.005     # rates this close in seed 0 are told apart by their seeds' mean (sweeps/cpu_lr.py, seed_rates)


def best_rate(by_lr):
    """An arm's best peak rate: the lowest seed-0 loss; where other rates are within CLOSE of it in seed 0 and
    they share seeds beyond seed 0 (the sweeps seed every such rate), the lowest mean over their shared seeds. One
    seed cannot tell rates 0.005 apart: picking by it alone favours the lucky seed. None without seed 0."""
    grid = [lr for lr in by_lr if 0 in by_lr[lr]]     # the sweeps scan rates at seed 0 only
    if not grid:
        return None
    best = min(grid, key=lambda lr: by_lr[lr][0])
    close = [lr for lr in grid if by_lr[lr][0] - by_lr[best][0] <= CLOSE]
    # only the seeds every close rate has: a mean over different seeds would compare the seeds, not the rates
    seeds = sorted(set.intersection(*(set(by_lr[lr]) for lr in close)))
    if len(close) > 1 and len(seeds) > 1:
        return min(close, key=lambda lr: np.mean([by_lr[lr][s] for s in seeds]))
    return best


def tuned_runs(runs, metric):
    """Only the runs, all seeds, at their arm's best rate (fit_law.py --tuned); an arm run at one rate keeps it."""
    table = arms(runs, metric)
    # the same rule as lr.json's best_lr, so that a tuned fit and the rate table agree on every arm's rate
    best = {key: best_rate(by_lr) for key, by_lr in table.items()}
    return [r for r in runs if r['config']['learning_rate'] == best[arm_key(r)]]


def paired_delta(sparse, dense):
    """Delta over the seeds both have: {seed: loss} each -> dict(mean, se, n, seeds)."""
    # paired by seed: the seed sets the data order and the initialisation of both, so their noise partly cancels
    seeds = sorted(set(sparse) & set(dense))
    if not seeds:
        return None
    m, se = mean_se([sparse[s] - dense[s] for s in seeds])
    return dict(mean=m, se=se, n=len(seeds), seeds=seeds)


def routing(run_dirs):
    """What the routers did in a set of runs (the seeds of an arm at one rate), from each log.csv: per run, the
    final mean gate on the tokens each routed layer took (gate_mean_l; gate_l for a plain gate logged before
    gate_mean_l existed), the lowest and highest such gate over all evaluations, and the final agreement between
    the causal threshold's choice and top-k's (router_acc_l, averaged over layers). None for a model without
    routed layers. -> dict(gate_final_min, gate_final_max, gate_ever_min, gate_ever_max, agreement), means over
    runs of each run's figure (the extremes over layers)."""
    per_run = []
    for d in run_dirs:
        with open(os.path.join(d, 'log.csv'), newline='') as f:
            rows = list(csv.DictReader(f))
        # every routed layer logs router_acc_l, so its columns name the routed layers
        layers = sorted(int(k[len('router_acc_'):]) for k in rows[0] if k.startswith('router_acc_'))
        if not layers:
            return None
        col = 'gate_mean_' if f'gate_mean_{layers[0]}' in rows[0] else None
        if col is None:
            with open(os.path.join(d, 'run.json')) as f:
                plain = json.load(f)['config'].get('gate') == 'plain'
            if not plain:
                continue                  # an older variance-gate run logged its gain only
            col = 'gate_'
        # a statistic a row did not log is an empty cell (run_folder writes ''): such a row has no gate to read
        gates = np.array([[float(r[f'{col}{l}']) for l in layers] for r in rows if r[f'{col}{layers[0]}'] != ''])
        per_run.append(dict(gate_final_min=gates[-1].min(), gate_final_max=gates[-1].max(),
                            gate_ever_min=gates.min(), gate_ever_max=gates.max(),
                            agreement=np.mean([float(rows[-1][f'router_acc_{l}']) for l in layers])))
    if not per_run:
        return None
    return {k: float(np.mean([p[k] for p in per_run])) for k in per_run[0]}


def reference_key(key, best):
    """The arm every variant is also compared with: full X-MoD at stride 4 at the same width, context, budget and
    schedule (the capacity nearest 0.125 where there are several), or None."""
    # the study's reference configuration (docs/results.md): the baselines and ablations are read against it
    variant, width, T, tokens, schedule, stride, capacity = key
    cands = [k for k in best if k[0] == 'xmod' and k[1:5] == (width, T, tokens, schedule) and k[5] == 4]
    return min(cands, key=lambda k: abs(math.log(k[6] / 0.125))) if cands else None


def analyse(runs, metric):
    """lr.json: {metric, arms: [each arm's losses at its rates and its best rate], deltas: [each sparse arm against
    dense (and against X-MoD) at the best rates, and against dense at each shared rate]}."""
    table = arms(runs, metric)
    dirs = defaultdict(list)
    for r in runs:
        dirs[(arm_key(r), r['config']['learning_rate'])].append(r['dir'])
    result = {'metric': metric, 'arms': [], 'deltas': []}
    best = {}
    # tables read by schedule, width, context and budget, with dense first in each, the reference of the rows below
    for key in sorted(table, key=lambda k: (k[4], k[1], k[2], k[3], k[0] != 'dense', k[0], k[5] or 0, k[6] or 0)):
        by_lr = table[key]
        grid = sorted(lr for lr in by_lr if 0 in by_lr[lr])
        if not grid:
            continue
        lr_best = best_rate(by_lr)
        m, se = mean_se(list(by_lr[lr_best].values()))
        n = len(by_lr[lr_best])
        # a best rate at the grid's edge may not be the best rate at all: the table flags it for a wider scan
        edge = len(grid) > 1 and lr_best in (grid[0], grid[-1])
        best[key] = lr_best
        variant, width, T, tokens, schedule, stride, capacity = key
        result['arms'].append(dict(variant=variant, stride=stride, capacity=capacity, n_embd=width, T=T,
                                   tokens=tokens, schedule=schedule, lrs=grid,
                                   loss=[by_lr[lr][0] for lr in grid], best_lr=lr_best, best_at_edge=edge,
                                   best_mean=m, best_se=se, best_seeds=n,
                                   routing=routing(dirs[(key, lr_best)]) if stride is not None else None))
    for key, lr_s in best.items():
        variant, width, T, tokens, schedule, stride, capacity = key
        dkey = ('dense', width, T, tokens, schedule, None, None)
        if variant == 'dense' or dkey not in best:
            continue
        sparse, dense = table[key], table[dkey]
        xkey = reference_key(key, best)
        row = dict(variant=variant, stride=stride, capacity=capacity, n_embd=width, T=T, tokens=tokens,
                   schedule=schedule, lr_sparse=lr_s,
                   lr_dense=best[dkey],
                   tuned=paired_delta(sparse[lr_s], dense[best[dkey]]),
                   lr_xmod=best[xkey] if xkey and xkey != key else None,
                   vs_xmod=paired_delta(sparse[lr_s], table[xkey][best[xkey]]) if xkey and xkey != key else None,
                   shared={lr: paired_delta(sparse[lr], dense[lr]) for lr in sorted(set(sparse) & set(dense))})
        result['deltas'].append(row)
    return result


def fmt_delta(d):
    if d is None:
        return '-'
    return f"{d['mean']:+.4f}" + (f" ± {d['se']:.4f}" if d['se'] is not None else '') + f" (n={d['n']})"


def to_markdown(result):
    lines = [f"# Learning rate per arm ({result['metric']})", '',
             '| arm | width | T | tokens | schedule | loss at each peak rate (seed 0) | best rate | at the best: mean ± SE '
             '(seeds) |', '|---|---|---|---|---|---|---|---|']
    for a in result['arms']:
        losses = ', '.join(f"{lr:g}: {v:.4f}" for lr, v in zip(a['lrs'], a['loss']))
        se = f" ± {a['best_se']:.4f}" if a['best_se'] is not None else ''
        lines.append(f"| {label(a)} | {a['n_embd']} | {a['T']} | {int(a['tokens']):,} | {a['schedule']} | {losses} | "
                     f"{a['best_lr']:g}"
                     f"{' (grid edge)' if a['best_at_edge'] else ''} | {a['best_mean']:.4f}{se} ({a['best_seeds']}) |")
    lines += ['', 'Delta = sparse - dense, paired by seed (negative: the sparse model is better); against X-MoD: the '
              'same, with X-MoD (stride 4) of that width, context and budget at its own best rate in place of dense.',
              '', '| sparse | width | T | tokens | schedule | each at its best rate | against X-MoD, each at its best '
              'rate | Delta at each shared rate |', '|---|---|---|---|---|---|---|---|']
    for d in result['deltas']:
        shared = '; '.join(f"{lr:g}: {fmt_delta(v)}" for lr, v in d['shared'].items())
        vs = f"{fmt_delta(d['vs_xmod'])} (X-MoD {d['lr_xmod']:g})" if d.get('vs_xmod') else '-'
        lines.append(f"| {label(d)} | {d['n_embd']} | {d['T']} | {int(d['tokens']):,} | {d['schedule']} | "
                     f"{fmt_delta(d['tuned'])} "
                     f"(sparse {d['lr_sparse']:g}, dense {d['lr_dense']:g}) | {vs} | {shared} |")
    routed = [a for a in result['arms'] if a.get('routing')]
    if routed:
        lines += ['', 'The routers at each arm\'s best rate, means over its seeds: the mean gate on the tokens a routed '
                  'layer took, lowest and highest over layers at the end and over every evaluation; the agreement of '
                  'the causal threshold with top-k (router_acc, mean over layers, at the end).', '',
                  '| arm | width | T | tokens | schedule | gate at the end (min, max) | gate ever (min, max) | '
                  'causal/top-k agreement |', '|---|---|---|---|---|---|---|---|']
        for a in routed:
            g = a['routing']
            lines.append(f"| {label(a)} | {a['n_embd']} | {a['T']} | {int(a['tokens']):,} | {a['schedule']} | "
                         f"{g['gate_final_min']:.3f}, {g['gate_final_max']:.3f} | {g['gate_ever_min']:.3f}, "
                         f"{g['gate_ever_max']:.3f} | {g['agreement']:.4f} |")
    return '\n'.join(lines) + '\n'


def plot(result, path):
    """lr_vs_loss.png: one panel per width, context, budget and schedule; each arm's seed-0 loss against the peak
    rate, and its seeds' mean +- 1 standard error at its best rate."""
    import matplotlib
    matplotlib.use('Agg')           # files only: no display is needed, as on a cluster node
    import matplotlib.pyplot as plt
    panels = sorted({(a['n_embd'], a['T'], a['tokens'], a['schedule']) for a in result['arms']})
    cols = min(4, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.8 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis('off')
    for ax, (width, T, tokens, schedule) in zip(axes.flat, panels):
        colours = iter(plt.rcParams['axes.prop_cycle'].by_key()['color'])
        for a in result['arms']:
            if (a['n_embd'], a['T'], a['tokens'], a['schedule']) != (width, T, tokens, schedule):
                continue
            c = 'black' if a['variant'] == 'dense' else next(colours)
            ax.plot(a['lrs'], a['loss'], 'o-', c=c, label=f"{label(a)} (seed 0)")
            if a['best_se'] is not None:
                ax.errorbar([a['best_lr']], [a['best_mean']], yerr=[a['best_se']], fmt='s', c=c, capsize=4,
                            mfc='white', label=f"{label(a)}: {a['best_seeds']} seeds at its best")
        ax.set_xscale('log')
        lrs = sorted({lr for a in result['arms'] if a['n_embd'] == width for lr in a['lrs']})
        ax.set_xticks(lrs, [f'{lr:g}' for lr in lrs])
        ax.minorticks_off()
        ax.set(xlabel='peak learning rate', ylabel=result['metric'],
               title=f'width {width}, T={T}, {tokens / 1e6:.3g}M tokens, {schedule}')
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
