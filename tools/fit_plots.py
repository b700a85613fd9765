"""
tools/fit_plots.py: the study's five further plots of a fit, beside the three fit_law.py draws: loss against
training FLOPs, the ablations against full X-MoD, FLOP-matched training curves, Delta against training tokens and
the routing diagnostics ("why the gain fades"). It reads FIT_DIR/fit.json and the run folders it lists, and writes
loss_vs_flops.png, ablations.png, training_curves.png, delta_vs_tokens.png and routing_diagnostics.png beside it.

    python tools/fit_plots.py FIT_DIR [--metric val_loss]

A fit of a CSV has no run logs: the panels that need them say so.
"""
import csv
import json
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository root
sys.path.insert(0, ROOT)
from configurator import UserError, configure, defaults_of, run_main  # noqa: E402
from law.load import METRICS, config_key, load_runs, pair_runs  # noqa: E402
from law.report import color, empty_note, marker, rank, shape_label  # noqa: E402

# -----------------------------------------------------------------------------------------------------------------
# the command line (configurator.py): FIT_DIR is the bare argument
metric = ''                  # the loss to draw: val_loss_causal or val_loss; the fit's own when empty
DEFAULTS = defaults_of(globals())


def plot_loss_vs_flops(ax, runs, metric):
    """Each run's final loss (metric, nats per token) against its training FLOPs, by variant;
    a grey segment joins each sparse run to its dense partner."""
    for v in sorted({r['variant'] for r in runs}, key=rank):
        rs = [r for r in runs if r['variant'] == v]
        ax.scatter([r['flops'] for r in rs], [r['loss'][metric] for r in rs], c=color(v), marker=marker(v),
                   label=v, s=25, zorder=3)
    for r in runs:  # thin grey lines join each sparse run to its FLOP-matched dense partner
        if r['partner'] is not None:
            ax.plot([r['partner']['flops'], r['flops']], [r['partner']['loss'][metric], r['loss'][metric]],
                    c='0.7', lw=0.7, zorder=1)
    ax.set_xscale('log')
    ax.set(xlabel='training FLOPs', ylabel=metric, title='loss vs compute (grey: FLOP-matched pairs)')
    ax.legend(fontsize=7)


def plot_ablations(ax, runs, metric):
    """One bar per sparse configuration with a dense partner: mean Delta over its seeds, its
    error bar the std over seeds (not the standard error)."""
    # Delta against each run's own dense partner rather than raw losses: configurations of different compute then
    # share one axis, and 0 is the dense model
    by = {}
    for r in runs:
        if r['partner'] is not None:
            by.setdefault(config_key(r['config'], with_seed=False), []).append(r)
    if not by:
        return empty_note(ax, 'no sparse run with a dense partner')
    # bars sorted by shape (layers, stride, capacity, context) so a full X-MoD config sits beside its ablations
    items = sorted(by.values(), key=lambda rs: (rs[0]['T'], rs[0]['n_layer'], rs[0]['stride'] or 0,
                                                rs[0]['capacity'] or 0, rank(rs[0]['variant'])))
    for i, rs in enumerate(items):
        d = [r['loss'][metric] - r['partner']['loss'][metric] for r in rs]
        # error bar: the std over seeds, one run's spread; the mean's own error is std / sqrt(n)
        ax.bar(i, np.mean(d), color=color(rs[0]['variant']), yerr=np.std(d, ddof=1) if len(d) > 1 else None,
               capsize=3)
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels([shape_label(rs[0]) for rs in items], rotation=75, fontsize=6)
    for v in sorted({rs[0]['variant'] for rs in items}, key=rank):
        ax.bar(0, 0, color=color(v), label=v)              # an empty bar: one legend entry
    ax.axhline(0, c='k', lw=0.6)
    ax.set(ylabel=f'Delta vs FLOP-matched dense ({metric})',
           title='ablations against full X-MoD\n(bars: mean over seeds; error bars: std over seeds)')
    ax.legend(fontsize=7)


def plot_training_curves(ax, runs, metric):
    """Validation loss (metric) against training FLOPs through training, for one dense run and
    its closest FLOP-matched MoD, X-MoD and MoE partners."""
    # one picture of the families side by side: the dense run with the most FLOP-matched families, each the partner
    # closest in FLOPs per token, so that the curves differ by the family and not by the compute
    best = None
    for d in runs:
        if d['model'] != 'dense' or d['log'] is None:     # a CSV's runs have no curves
            continue
        quartet, cost = [d], 0.0
        for fam in ('mod', 'xmod', 'moe'):
            cands = [r for r in runs if r['partner'] is d and r['variant'] == fam]
            if cands:
                r = min(cands, key=lambda r: abs(math.log(r['fpt'] / d['fpt'])))
                quartet.append(r)
                cost += abs(math.log(r['fpt'] / d['fpt']))    # off in FLOPs per token, as a ratio
        score = (len(quartet), -cost)              # most families first, then the closest match
        if len(quartet) > 1 and (best is None or score > best[0]):
            best = (score, quartet)
    if best is None:
        return empty_note(ax, 'no FLOP-matched dense / MoD / X-MoD / MoE group: skipped')
    quartet = best[1]
    shown = []
    for r in quartet:
        ax.plot(r['log']['flops'], r['log'][metric], c=color(r['variant']), label=f'{r["variant"]}: {r["name"]}')
        shown += [v for f, v in zip(r['log']['flops'], r['log'][metric]) if f > 0]   # step 0 is off a log axis
    if shown:
        lo, hi = min(shown), max(shown)
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    missing = [f for f in ('mod', 'xmod', 'moe') if f not in {r['variant'] for r in quartet}]
    ax.set_xscale('log')
    ax.set(xlabel='training FLOPs', ylabel=metric,
           title='FLOP-matched training curves' + (f' (missing: {", ".join(missing)})' if missing else ''))
    ax.legend(fontsize=7)


def plot_delta_vs_tokens(axes, table):
    """Delta against training tokens, a panel per configuration of delta_vs_tokens' table (as many
    as there are axes: most seeds first), both metrics; band: mean +- 1 standard error."""
    if not table:
        return empty_note(axes[0], 'no sparse configuration with >= 2 seeds and dense partners')
    for ax, (label, e) in zip(axes, table.items()):
        # a configuration whose runs and dense partners logged only their last step in common (a WSD branch against
        # a cosine partner, say) is one point: say so instead of leaving it unexplained
        points = sum(row['tokens'] > 0 for row in e['val_loss_causal'])
        alone = '' if points > 1 else '\n(one point: the pairs share no other evaluation step)'
        for m, c, name in (('val_loss_causal', 'tab:blue', 'causal'), ('val_loss', 'tab:orange', 'top-k')):
            rows = [row for row in e[m] if row['tokens'] > 0]  # at step 0 neither model has trained
            x = [row['tokens'] for row in rows]
            mean = np.array([row['mean'] for row in rows])
            se = np.array([np.nan if row['se'] is None else row['se'] for row in rows])
            ax.plot(x, mean, color=c, marker='o', ms=3, label=f'{name}: mean over seeds')
            # the band: mean +- 1 standard error over seeds (NaN, no band, where one seed)
            ax.fill_between(x, mean - se, mean + se, color=c, alpha=0.25, lw=0)
        ax.axhline(0, c='0.6', lw=0.6)
        ax.set(xlabel='training tokens', ylabel='Delta vs FLOP-matched dense (nats)',
               title=f'{label}, {len(e["seeds"])} seeds\n(band: mean +- 1 standard error; step 0 not shown){alone}')
        ax.legend(fontsize=7)


def log_columns(run):
    """The routing diagnostics of a run's log.csv, averaged over routed layers: {name: np.array over evaluations}
    (tokens, router_acc, score_std, jaccard, gate, causal_rate, untouched_frac, causal_untouched_frac, gap = causal
    minus top-k loss); a column the log lacks (older runs) is all NaN."""
    with open(os.path.join(run['dir'], 'log.csv'), newline='') as f:
        rows = list(csv.DictReader(f))
    num = lambda x: float(x) if x not in ('', None) else np.nan
    out = {}
    for name in ('router_acc', 'score_std', 'jaccard', 'gate', 'causal_rate'):
        # NAME_l for each routed layer l, averaged over layers; the digits test keeps gate_mean_l out of gate
        per_row = [[num(v) for k, v in row.items() if k.startswith(name + '_') and k[len(name) + 1:].isdigit()]
                   for row in rows]
        out[name] = np.array([np.nanmean(x) if x and not np.all(np.isnan(x)) else np.nan for x in per_row])
    for name in ('tokens', 'untouched_frac', 'causal_untouched_frac'):
        out[name] = np.array([num(row.get(name)) for row in rows])
    out['gap'] = np.array([num(row['val_loss_causal']) - num(row['val_loss']) for row in rows])
    return out


def plot_routing_diagnostics(axes, runs, metric):
    """Why the gain fades, four panels: (1) final Delta against the training budget, by stride; (2) the router's
    score spread and accuracy over training; (3) how the routed layers share tokens (Jaccard of consecutive layers'
    selections, tokens no routed layer takes) against independent choices; (4) causal against top-k routing. Panels
    2-4 show the reference config's full X-MoD runs (seed mean) and each router-knob fix beside it."""
    xm = [r for r in runs if r['model'] == 'xmod' and r['partner'] is not None and r['log'] is not None]
    full = [r for r in xm if r['variant'] == 'xmod']
    if not full:
        return empty_note(axes[0], 'no full X-MoD run with a dense partner')
    # the reference config: the full X-MoD config with the most seeds; panel 1 keeps its context and width
    shape = lambda r: (r['T'], r['n_embd'], r['n_layer'], r['stride'], r['capacity'], r['tokens'])
    counts = {}
    for r in full:
        counts[shape(r)] = counts.get(shape(r), 0) + 1
    ref_shape = max(counts, key=counts.get)
    T, width = ref_shape[:2]
    ax, drawn = axes[0], False
    for s in sorted({r['stride'] for r in full}):
        by = {}
        for r in full:
            if r['stride'] == s and r['T'] == T and r['n_embd'] == width:
                by.setdefault((r['capacity'], r['n_layer']), {}).setdefault(r['tokens'], []).append(
                    r['loss'][metric] - r['partner']['loss'][metric])
        for (c, L), at in by.items():
            if len(at) < 2:
                continue                      # one budget: no line to draw
            x = sorted(at)
            mean = [np.mean(at[t]) for t in x]
            # error bar: 1 standard error over seeds, none (0) for a single seed
            se = [np.std(at[t], ddof=1) / math.sqrt(len(at[t])) if len(at[t]) > 1 else 0 for t in x]
            ax.errorbar(x, mean, yerr=se, marker='o', ms=4, capsize=3, label=f'stride {s}, L{L}, c={c:.3g}')
            drawn = True
    if drawn:
        ax.axhline(0, c='0.6', lw=0.6)
        ax.set_xscale('log')
        ax.set(xlabel='training tokens (each point its own run and schedule)', ylabel=f'final Delta ({metric})',
               title=f'the gain against the budget\n(T={T}, width {width}; error bars: 1 SE over seeds)')
        ax.legend(fontsize=7)
    else:
        empty_note(ax, f'no X-MoD config at T={T}, width {width} with pairs at two budgets')
    ref = [r for r in xm if shape(r) == ref_shape]     # its full X-MoD runs and the fixes on it
    groups = {}
    for r in ref:
        d = log_columns(r)
        if not np.all(np.isnan(d['jaccard'])):
            groups.setdefault(r['variant'], []).append(d)
    if not groups:
        for ax in axes[1:]:
            empty_note(ax, 'no reference run logged routing diagnostics')
        return
    c = ref[0]['capacity']
    R = sum(1 for k in range(ref[0]['n_layer']) if k % ref[0]['stride'])         # routed layers (xmod's layout)
    acc_ax, gap_ax = axes[1].twinx(), axes[3].twinx()
    for v in sorted(groups, key=rank):
        ds = groups[v]
        n = min(len(d['tokens']) for d in ds)
        x = ds[0]['tokens'][:n]
        keep = x > 0                                                    # step 0: nothing trained yet
        mean = lambda k: np.nanmean([d[k][:n] for d in ds], axis=0)[keep]
        x, lab = x[keep], f'{v} ({len(ds)} seeds)'
        axes[1].plot(x, mean('score_std'), c=color(v), marker='o', ms=3, label=f'{lab}: score std')
        acc_ax.plot(x, mean('router_acc'), c=color(v), ls=':', label=f'{lab}: router accuracy (right)')
        axes[2].plot(x, mean('jaccard'), c=color(v), marker='o', ms=3, label=f'{lab}: Jaccard, consecutive layers')
        axes[2].plot(x, mean('untouched_frac'), c=color(v), ls='--', label=f'{lab}: untouched by all {R}')
        axes[3].plot(x, mean('causal_rate') / c, c=color(v), marker='o', ms=3, label=f'{lab}: causal rate / c')
        gap_ax.plot(x, mean('gap'), c=color(v), ls='--', label=f'{lab}: causal - top-k loss (right)')
    # the baselines of layers that choose independently, each taking a fraction c: two of them share c^2 of the
    # tokens of the c + c - c^2 either takes (Jaccard c/(2-c)), and all R miss a token with probability (1-c)^R
    axes[2].axhline(c / (2 - c), c='0.4', lw=0.8, ls=':', label='independent choices: Jaccard c/(2-c)')
    axes[2].axhline((1 - c) ** R, c='0.4', lw=0.8, ls='-.', label=f'independent choices: untouched (1-c)^{R}')
    axes[3].axhline(1, c='0.6', lw=0.6)
    axes[1].set(ylabel='std of router scores', title='the router: score spread and accuracy')
    acc_ax.set(ylabel='router accuracy (BCE sign = top-k choice)')
    axes[2].set(ylabel='fraction', title='how the routed layers share tokens')
    axes[3].set(ylabel='causal selection rate / c', title='causal against top-k routing')
    gap_ax.set(ylabel='val_loss_causal - val_loss (nats)')
    for ax, twin in ((axes[1], acc_ax), (axes[2], None), (axes[3], gap_ax)):
        ax.set(xlabel='training tokens')
        handles, labels = ax.get_legend_handles_labels()
        if twin is not None:
            h2, l2 = twin.get_legend_handles_labels()
            handles, labels = handles + h2, labels + l2
        ax.legend(handles, labels, fontsize=6)


def fit_plots(argv):
    """Read the fit and its runs (paired and held out as the fit had them), draw the five plots into FIT_DIR."""
    fits = []
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=fits)
    if len(fits) != 1:
        raise UserError('give the fit folder: python tools/fit_plots.py FIT_DIR')
    path = os.path.join(fits[0], 'fit.json')
    try:
        with open(path) as f:
            fit = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f'{path}: cannot read a fit ({e})')
    metric = cfg.metric or fit['metric']
    if metric not in METRICS:
        raise UserError(f"--metric={metric!r}: expected {' | '.join(METRICS)}")
    # the fit's own runs, from the folders (or CSV) it read, paired again: pairing is a function of the runs
    runs = load_runs(sorted({r['dir'] for r in fit['runs']}))
    pair_runs(runs)
    held = {r['dir'] for r in fit['runs'] if r['heldout']}
    for r in runs:
        r['heldout'] = r['dir'] in held
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    dvt = fit['delta_vs_tokens']
    specs = [('loss_vs_flops', 1, lambda a: plot_loss_vs_flops(a[0], runs, metric)),
             ('ablations', 1, lambda a: plot_ablations(a[0], runs, metric)),
             ('training_curves', 1, lambda a: plot_training_curves(a[0], runs, metric)),
             ('delta_vs_tokens', min(4, max(1, len(dvt))), lambda a: plot_delta_vs_tokens(a, dvt)),
             ('routing_diagnostics', (2, 2), lambda a: plot_routing_diagnostics(a, runs, metric))]
    for name, n, draw in specs:
        rows, cols = n if isinstance(n, tuple) else (1, n)             # panels: a row of n, or a (rows, cols) grid
        fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.8 * rows), squeeze=False)
        draw(list(axes.flat))
        fig.tight_layout()
        fig.savefig(os.path.join(fits[0], f'{name}.png'), dpi=110)
        plt.close(fig)
    print(f"wrote {', '.join(f'{name}.png' for name, _, _ in specs)} into {fits[0]}")
    return 0


def main(argv=None):
    return run_main('tools/fit_plots.py', fit_plots, argv)


if __name__ == '__main__':
    sys.exit(main())
