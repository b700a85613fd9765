"""
law/rates.py: the peak learning rate per arm, and Delta at tuned and at shared rates, from the runs of a
learning-rate sweep (sweeps/study/cpu_lr.py); and fit_law.py --tuned's rule, the runs at their arm's best rate (tuned_runs).

    python -m law.rates RUNS... --out DIR [--panel] [--metric val_loss]     # lr.json, lr.md, lr_vs_loss.png

An arm is a family variant at one stride and capacity, width, context, budget and schedule (a WSD branch counts as
the WSD run of its budget, which it equals); its best rate: best_rate. Delta = sparse - dense at the same width,
context and training FLOPs (dense_key), paired by seed, each arm at its own best rate (a sparse model and its dense
partner need not share one) and both at each shared rate; with 95% t intervals, paired t tests with Holm's
adjustment over the table, and Delta on the seeds after seed 0, the one that chose the rate. docs/fit_law.md.
"""
import csv
import json
import math
import os
import shlex
import sys
from collections import defaultdict

import numpy as np

from configurator import defaults_of, run_main
from law.load import METRICS, command_line, load_runs
from law.report import write_outputs
from law.stats import fmt_t, holm, t_interval


def layout(r):
    """(stride, capacity) of a routed model, (None, None) for one that routes nothing (dense, and the MoE: it routes
    among experts, not over depth); the capacity rounded, so that float noise does not split one arm in two."""
    return (None, None) if r['model'] in ('dense', 'moe') else (r['stride'], round(r['capacity'], 4))


def label(a):
    """An arm's name in tables and legends: the variant, and a routed model's stride and capacity."""
    return a['variant'] if a['stride'] is None else f"{a['variant']} s{a['stride']} c{a['capacity']:g}"


def arm_key(r):
    """(variant, n_embd, T, tokens, schedule, stride, capacity): a run's arm, everything but its rate and seed (a run
    from before lr_schedule existed was trained with the cosine schedule)."""
    return (r['variant'], r['n_embd'], r['T'], r['tokens'], r['config'].get('lr_schedule', 'cosine'), *layout(r))


def arms(runs, metric):
    """{arm_key: {lr: {seed: loss}}}."""
    out = defaultdict(lambda: defaultdict(dict))
    for r in runs:
        out[arm_key(r)][r['config']['learning_rate']][r['seed']] = r['loss'][metric]
    return out


CLOSE = 0.005     # rates this close in seed 0 are told apart by their seeds' mean (sweeps/study/cpu_lr.py, seed_rates)


def best_rate(by_lr):
    """(an arm's best peak rate, how it was chosen): the lowest seed-0 loss ('seed 0'); where other rates are within
    CLOSE of it in seed 0 and they share seeds beyond seed 0 (the sweeps seed every such rate), the lowest mean over
    their shared seeds ('seed mean': one seed cannot tell rates 0.005 apart). (None, None) without seed 0."""
    grid = [lr for lr in by_lr if 0 in by_lr[lr]]     # the sweeps scan rates at seed 0 only
    if not grid:
        return None, None
    best = min(grid, key=lambda lr: by_lr[lr][0])
    close = [lr for lr in grid if by_lr[lr][0] - by_lr[best][0] <= CLOSE]
    # only the seeds every close rate has: a mean over different seeds would compare the seeds, not the rates
    seeds = sorted(set.intersection(*(set(by_lr[lr]) for lr in close)))
    if len(close) > 1 and len(seeds) > 1:
        return min(close, key=lambda lr: np.mean([by_lr[lr][s] for s in seeds])), 'seed mean'
    return best, 'seed 0'


def tuned_runs(runs, metric):
    """Only the runs, all seeds, at their arm's best rate (fit_law.py --tuned; lr.json's best_lr, the same rule)."""
    best = {key: best_rate(by_lr)[0] for key, by_lr in arms(runs, metric).items()}
    return [r for r in runs if r['config']['learning_rate'] == best[arm_key(r)]]


def paired_delta(sparse, dense, drop=()):
    """Delta over the seeds both have, but those in drop: {seed: loss} each -> law.stats.t_interval's dict (mean,
    se, n, df, lo, hi, p) and seeds; None without a shared seed."""
    # paired by seed: the seed sets the data order and the initialisation of both, so their noise partly cancels
    seeds = sorted((set(sparse) & set(dense)) - set(drop))
    if not seeds:
        return None
    return dict(t_interval([sparse[s] - dense[s] for s in seeds]), seeds=seeds)


def routing(run_dirs):
    """What the routers did in the seeds of an arm at one rate, from each log.csv, means over the runs: the mean
    gate on the tokens a routed layer took (gate_mean_l; gate_l for a plain gate logged before it), lowest and highest
    over layers at the end and over every evaluation; the causal threshold's agreement with top-k (router_acc_l) at
    the end; the gate's slope d gate / d score at the end (gate_slope_l, None where not logged). None without
    routed layers."""
    per_run = []
    for d in run_dirs:
        with open(os.path.join(d, 'log.csv'), newline='') as f:
            rows = list(csv.DictReader(f))
        # every routed layer logs router_acc_l, so its columns name the routed layers
        layers = sorted(int(k[len('router_acc_'):]) for k in rows[0] if k.startswith('router_acc_'))
        if not layers:
            return None
        col = 'gate_mean_' if f'gate_mean_{layers[0]}' in rows[0] else 'gate_'
        if col == 'gate_':
            with open(os.path.join(d, 'run.json')) as f:
                if json.load(f)['config'].get('gate') != 'plain':
                    continue                  # an older variance-gate run logged its gain only
        # a row that did not log the statistic has an empty cell
        gates = np.array([[float(r[f'{col}{l}']) for l in layers] for r in rows if r[f'{col}{layers[0]}'] != ''])
        slopes = [[float(r[f'gate_slope_{l}']) for l in layers] for r in rows
                  if r.get(f'gate_slope_{layers[0]}', '') not in ('', None)]
        per_run.append(dict(gate_final_min=gates[-1].min(), gate_final_max=gates[-1].max(),
                            gate_ever_min=gates.min(), gate_ever_max=gates.max(),
                            agreement=np.mean([float(rows[-1][f'router_acc_{l}']) for l in layers]),
                            slope_final_min=min(slopes[-1]) if slopes else None,
                            slope_final_max=max(slopes[-1]) if slopes else None))
    if not per_run:
        return None
    mean = lambda k: None if any(p[k] is None for p in per_run) else float(np.mean([p[k] for p in per_run]))
    return {k: mean(k) for k in per_run[0]}


FLOPS_TOL = 0.02     # arms this close in training FLOPs are FLOP-matched (law/load.py's FPT_TOL at equal tokens)


def same_flops(key, flops):
    """key's FLOP-matched arms (its width, context and schedule, training FLOPs within FLOPS_TOL, any budget), the
    nearest first. flops: {arm_key: training FLOPs}."""
    width, T, schedule = key[1], key[2], key[4]
    near = [k for k in flops if (k[1], k[2], k[4]) == (width, T, schedule)
            and abs(flops[k] / flops[key] - 1) <= FLOPS_TOL]
    return sorted(near, key=lambda k: (abs(math.log(flops[k] / flops[key])), k[3] != key[3]))


def dense_key(key, flops):
    """The dense arm a sparse arm is paired with: at the same training FLOPs (MoD at c 0.125 on 1.80M tokens meets
    the dense model of the budget it was matched to); failing that, at the same budget (the MoE at capacity factor
    1.25, not FLOP-matched). None without either."""
    cands = [k for k in same_flops(key, flops) if k[0] == 'dense']
    fallback = ('dense', *key[1:5], None, None)
    return cands[0] if cands else fallback if fallback in flops else None


def reference_key(key, best, flops):
    """The arm every variant is also compared with, the study's reference: X-MoD at stride 4 FLOP-matched to key
    (the capacity nearest 0.125 where there are several), or None."""
    cands = [k for k in same_flops(key, flops) if k[0] == 'xmod' and k[5] == 4 and k in best]
    return min(cands, key=lambda k: abs(math.log(k[6] / 0.125))) if cands else None


def analyse(runs, metric):
    """lr.json: {metric, arms: [each arm's losses at its rates and its best rate], deltas: [each sparse arm against
    dense (and against X-MoD) at the best rates, and against dense at each shared rate]}."""
    table = arms(runs, metric)
    dirs, flops = defaultdict(list), {}
    for r in runs:
        dirs[(arm_key(r), r['config']['learning_rate'])].append(r['dir'])
        flops.setdefault(arm_key(r), r['flops'])      # one budget per arm: its runs' training FLOPs agree
    result = {'metric': metric, 'arms': [], 'deltas': []}
    best = {}
    # tables read by schedule, width, context and budget, with dense first in each, the reference of the rows below
    for key in sorted(table, key=lambda k: (k[4], k[1], k[2], k[3], k[0] != 'dense', k[0], k[5] or 0, k[6] or 0)):
        by_lr = table[key]
        grid = sorted(lr for lr in by_lr if 0 in by_lr[lr])
        if not grid:
            continue
        lr_best, how = best_rate(by_lr)
        at_best = t_interval(list(by_lr[lr_best].values()))
        # a best rate at the grid's edge may not be the best rate at all: the table flags it for a wider scan
        edge = len(grid) > 1 and lr_best in (grid[0], grid[-1])
        best[key] = lr_best
        variant, width, T, tokens, schedule, stride, capacity = key
        result['arms'].append(dict(variant=variant, stride=stride, capacity=capacity, n_embd=width, T=T,
                                   tokens=tokens, schedule=schedule, flops=flops[key], lrs=grid,
                                   loss=[by_lr[lr][0] for lr in grid], best_lr=lr_best, best_at_edge=edge,
                                   chosen_by=how, best_mean=at_best['mean'], best_se=at_best['se'],
                                   best_seeds=at_best['n'], best_ci=[at_best['lo'], at_best['hi']],
                                   best_df=at_best['df'],
                                   seeds={lr: [by_lr[lr][s] for s in sorted(by_lr[lr])] for lr in sorted(by_lr)},
                                   routing=routing(dirs[(key, lr_best)]) if stride is not None else None))
    for key, lr_s in best.items():
        variant, width, T, tokens, schedule, stride, capacity = key
        dkey = dense_key(key, flops)
        if variant == 'dense' or dkey not in best:
            continue
        sparse, dense = table[key], table[dkey]
        xkey = reference_key(key, best, flops)
        xkey = xkey if xkey != key else None
        row = dict(variant=variant, stride=stride, capacity=capacity, n_embd=width, T=T, tokens=tokens,
                   schedule=schedule, dense_tokens=dkey[3], lr_sparse=lr_s,
                   lr_dense=best[dkey],
                   tuned=paired_delta(sparse[lr_s], dense[best[dkey]]),
                   # the seeds the rates were not screened on: seed 0 chose them and would flatter the chosen
                   unscreened=paired_delta(sparse[lr_s], dense[best[dkey]], drop=(0,)),
                   lr_xmod=best[xkey] if xkey else None,
                   vs_xmod=paired_delta(sparse[lr_s], table[xkey][best[xkey]]) if xkey else None,
                   shared={lr: paired_delta(sparse[lr], dense[lr]) for lr in sorted(set(sparse) & set(dense))})
        result['deltas'].append(row)
    # one table, one family of comparisons: Holm's adjustment over every Delta at the best rates with a p
    tests = [d[k] for d in result['deltas'] for k in ('tuned', 'vs_xmod') if d[k] and d[k]['p'] is not None]
    for t, p in zip(tests, holm([t['p'] for t in tests])):
        t['p_holm'] = p
    result['n_comparisons'] = len(tests)
    return result


def fmt_delta(d):
    """'+0.0097 ± 0.0033, 95% t(4) [+0.0005, +0.0190] (n=5)'; '-' for none."""
    return '-' if d is None else f"{fmt_t(d)} (n={d['n']})"


def fmt_p(d):
    if d is None or d.get('p') is None:
        return '-'
    return f"p {d['p']:.2g}" + (f", Holm {d['p_holm']:.2g}" if d.get('p_holm') is not None else '')


def fmt_loss(a):
    """'1.7087 ± 0.0035, 95% t(4) [1.6990, 1.7184] (5)': an arm's loss at its best rate."""
    if a['best_se'] is None:
        return f"{a['best_mean']:.4f} ({a['best_seeds']})"
    return (f"{a['best_mean']:.4f} ± {a['best_se']:.4f}, 95% t({a['best_df']}) [{a['best_ci'][0]:.4f}, "
            f"{a['best_ci'][1]:.4f}] ({a['best_seeds']})")


def routers_md(arms_, name=label):
    """The routers table of lr.md and panel.md, a row per routed arm (lr.json's arms with routing)."""
    slope = lambda g: '-' if g['slope_final_min'] is None else f"{g['slope_final_min']:.3g}, {g['slope_final_max']:.3g}"
    lines = ['The routers at each arm\'s best rate, means over its seeds: the mean gate on the tokens a routed layer '
             'took, lowest and highest over layers at the end and over every evaluation; the agreement of the causal '
             'threshold with top-k (router_acc, mean over layers, at the end); the gate\'s slope d gate / d score on '
             'the tokens taken at the end (gate_slope_l, lowest and highest over layers; near 0 the gate is saturated '
             'and passes the language model\'s gradient to the router no more; - where the runs did not log it).', '',
             '| arm | width | T | tokens | schedule | gate at the end (min, max) | gate ever (min, max) | '
             'causal/top-k agreement | gate slope at the end (min, max) |', '|---|---|---|---|---|---|---|---|---|']
    for a in arms_:
        g = a['routing']
        lines.append(f"| {name(a)} | {a['n_embd']} | {a['T']} | {int(a['tokens']):,} | {a['schedule']} | "
                     f"{g['gate_final_min']:.3f}, {g['gate_final_max']:.3f} | {g['gate_ever_min']:.3f}, "
                     f"{g['gate_ever_max']:.3f} | {g['agreement']:.4f} | {slope(g)} |")
    return lines


def to_markdown(result):
    lines = [f"# Learning rate per arm ({result['metric']})", '',
             'Means over seeds ± one standard error, with the 95% t interval on n - 1 degrees of freedom.', '',
             '| arm | width | T | tokens | schedule | loss at each peak rate (seed 0) | best rate (chosen by) | at the '
             'best: mean ± SE, 95% t interval (seeds) |', '|---|---|---|---|---|---|---|---|']
    for a in result['arms']:
        losses = ', '.join(f"{lr:g}: {v:.4f}" for lr, v in zip(a['lrs'], a['loss']))
        lines.append(f"| {label(a)} | {a['n_embd']} | {a['T']} | {int(a['tokens']):,} | {a['schedule']} | {losses} | "
                     f"{a['best_lr']:g}{' (grid edge)' if a['best_at_edge'] else ''} ({a['chosen_by']}) | "
                     f"{fmt_loss(a)} |")
    lines += ['', 'Delta = sparse - dense, paired by seed (negative: the sparse model is better), dense at the same '
              'width, context and training FLOPs; against X-MoD: the same, with X-MoD (stride 4) of that width, '
              'context and FLOPs at its own best rate in place of dense. p: a paired t test; Holm: adjusted over the '
              f"{result.get('n_comparisons', 0)} comparisons at the best rates in this table. Seeds 1+: Delta at the "
              'best rates without seed 0, the seed the rates were screened on (where the seed mean chose between '
              'close rates, the other seeds took part in the choice too).', '',
              '| sparse | width | T | tokens | schedule | each at its best rate | p | seeds 1+ only | against X-MoD, '
              'each at its best rate | p | Delta at each shared rate |', '|---|---|---|---|---|---|---|---|---|---|---|']
    for d in result['deltas']:
        shared = '; '.join(f"{lr:g}: {fmt_delta(v)}" for lr, v in d['shared'].items())
        vs = f"{fmt_delta(d['vs_xmod'])} (X-MoD {d['lr_xmod']:g})" if d.get('vs_xmod') else '-'
        partner = '' if d.get('dense_tokens', d['tokens']) == d['tokens'] else \
            f", dense on {int(d['dense_tokens']):,} tokens at the same FLOPs"
        lines.append(f"| {label(d)} | {d['n_embd']} | {d['T']} | {int(d['tokens']):,} | {d['schedule']} | "
                     f"{fmt_delta(d['tuned'])} (sparse {d['lr_sparse']:g}, dense {d['lr_dense']:g}{partner}) | "
                     f"{fmt_p(d['tuned'])} | {fmt_delta(d.get('unscreened'))} | {vs} | {fmt_p(d.get('vs_xmod'))} | "
                     f"{shared} |")
    routed = [a for a in result['arms'] if a.get('routing')]
    if routed:
        lines += [''] + routers_md(routed)
    return '\n'.join(lines) + '\n'


# the panel's arms in words (panel.md), by (variant, stride); None: any stride
PANEL_NAMES = {('dense', None): 'dense', ('xmod', 4): 'X-MoD (stride 4)', ('xmod', 2): "MoD's layout, X-MoD's gate",
               ('mod', None): 'MoD as published', ('moe-cf1', None): 'MoE, FLOP-matched', ('moe', None): 'MoE',
               ('xmod-calgate', 4): 'X-MoD, calibrated gate', ('xmod-calgate', 2): "MoD's layout, calibrated gate",
               ('xmod-plain', 4): 'X-MoD, plain gate', ('xmod-nobal', 4): 'X-MoD, no depth balancing',
               ('xmod-random', 4): 'X-MoD, random routing', ('xmod-active', 4): 'X-MoD, resid_init=active'}


def panel_label(a):
    """An arm's name in panel.md: PANEL_NAMES, MoD with its capacity, label() for any other."""
    name = PANEL_NAMES.get((a['variant'], a['stride'])) or PANEL_NAMES.get((a['variant'], None))
    if name is None:
        return label(a)
    return f"{name} (c {a['capacity']:.3g})" if a['variant'] == 'mod' else name


def panel_md(by_metric, command):
    """panel.md: every arm at its own best rate against its dense partner, one table per metric; by_metric:
    {metric: analyse()'s result}, the primary metric first."""
    lines = ['# The panel: each arm at its own best learning rate', '', '```', command, '```', '',
             'Means over seeds ± one standard error, 95% t interval on n - 1 degrees of freedom. Delta = arm - dense '
             '(or - X-MoD stride 4), paired by seed, the partner at the same width, context and training FLOPs (a '
             'model FLOP-matched by its token budget meets the dense run of that budget). p: a paired t test; Holm: '
             "adjusted over the table's comparisons (a comparison holds at 5% when its Holm p is below 0.05). Each "
             'best rate is chosen on seed 0 (by the seed mean between rates within 0.005 of each other there), and '
             'seed 0 enters the mean: "seeds 1+" is Delta without it.']
    key = lambda a: (a['variant'], a['n_embd'], a['T'], a['tokens'], a['schedule'], a['stride'], a['capacity'])
    for metric, res in by_metric.items():
        deltas = {key(d): d for d in res['deltas']}
        for dense in [a for a in res['arms'] if a['variant'] == 'dense']:
            dk = (dense['n_embd'], dense['T'], dense['tokens'], dense['schedule'])
            rows = [(a, deltas.get(key(a))) for a in res['arms'] if a['variant'] != 'dense']
            rows = sorted([(a, d) for a, d in rows if d and (d['n_embd'], d['T'], d['dense_tokens'], d['schedule'])
                           == dk], key=lambda ad: panel_rank(ad[0]))
            if not rows:
                continue
            held = [f"{panel_label(a)} - {'dense' if k == 'tuned' else 'X-MoD'}" for a, d in rows
                    for k in ('tuned', 'vs_xmod') if d[k] and d[k].get('p_holm') is not None and d[k]['p_holm'] < 0.05]
            lines += ['', f"## {metric}: width {dense['n_embd']}, T={dense['T']}, {dense['tokens'] / 1e6:.2f}M tokens, "
                      f"{dense['schedule']}", '',
                      f"{res['n_comparisons']} comparisons; at 5% after Holm: "
                      + (', '.join(held) if held else 'none') + '.', '',
                      '| arm | seeds | rate (chosen by) | tokens | loss | Delta vs dense | p (Holm) | Delta vs dense, '
                      'seeds 1+ | Delta vs X-MoD | p (Holm) |', '|---|---|---|---|---|---|---|---|---|---|',
                      f"| dense | {dense['best_seeds']} | {dense['best_lr']:g} ({dense['chosen_by']}) | "
                      f"{int(dense['tokens']):,} | {fmt_loss(dense)} | - | - | - | - | - |"]
            for a, d in rows:
                lines.append(f"| {panel_label(a)} | {a['best_seeds']} | {a['best_lr']:g} ({a['chosen_by']}) | "
                             f"{int(a['tokens']):,} | {fmt_loss(a)} | {fmt_delta(d['tuned'])} | {fmt_p(d['tuned'])} | "
                             f"{fmt_delta(d.get('unscreened'))} | {fmt_delta(d.get('vs_xmod'))} | "
                             f"{fmt_p(d.get('vs_xmod'))} |")
    routed = [a for a in next(iter(by_metric.values()))['arms'] if a.get('routing')]
    if routed:
        lines += ['', '## The routers', ''] + routers_md(routed, panel_label)
    return '\n'.join(lines) + '\n'


def panel_rank(a):
    """An arm's place in panel.md: PANEL_NAMES' order, then by capacity."""
    keys = list(PANEL_NAMES)
    k = (a['variant'], a['stride']) if (a['variant'], a['stride']) in PANEL_NAMES else (a['variant'], None)
    return (keys.index(k) if k in keys else len(keys), label(a), -(a['capacity'] or 0))


def plot(result, path):
    """lr_vs_loss.png: per width, context, budget and schedule, each arm's seed-0 loss against the peak rate (a
    line), every seed's loss (points), and its seeds' mean +- 1 SE at its best rate."""
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
            ax.plot(a['lrs'], a['loss'], '-', c=c, lw=1, label=f"{label(a)} (line: seed 0)")
            if a.get('seeds'):
                pts = [(float(lr), v) for lr, vs in a['seeds'].items() for v in vs]
                ax.scatter(*zip(*pts), s=12, color=c, alpha=0.6, zorder=3)
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


# -----------------------------------------------------------------------------
# the command line (configurator.py): RUNS... are bare arguments, run folders or globs of them
out = ''                     # output directory (created); required
metric = 'val_loss_causal'   # the loss to compare: val_loss_causal or val_loss
panel = False                # also panel.md: every arm at its best rate against dense and X-MoD, both metrics, with
                             # t intervals and Holm-adjusted p
DEFAULTS = defaults_of(globals())


def run(argv):
    cfg = command_line(argv, DEFAULTS, __doc__, __file__, 'python -m law.rates RUNS... --out DIR')
    runs = load_runs(cfg.runs)
    result = analyse(runs, cfg.metric)
    md = to_markdown(result)
    files = {'lr.json': json.dumps(result, indent=1, default=str), 'lr.md': md}
    if cfg.panel:
        # both metrics, the primary first: the panel reads the top-k loss beside the honest one
        by_metric = {m: result if m == cfg.metric else analyse(runs, m)
                     for m in (cfg.metric, *[x for x in METRICS if x != cfg.metric])}
        command = ('python -m law.rates ' + ' '.join(shlex.quote(r) for r in cfg.runs) + ' --panel'
                   + (f' --metric {cfg.metric}' if cfg.metric != metric else '') + f' --out {cfg.out}')
        files['panel.md'] = panel_md(by_metric, command)
    write_outputs(cfg.out, files, 'lr_vs_loss.png', lambda path: plot(result, path), files.get('panel.md', md))
    return 0


def main(argv=None):
    return run_main('python -m law.rates', run, argv)


if __name__ == '__main__':
    sys.exit(main())
