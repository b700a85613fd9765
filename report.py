"""
report.py: what fit_law.py found, for people: summary.md, the seven plots and the lines it prints, and the table of
Delta against training tokens. It fits nothing: the fitted laws come in as functions (fit_law.fitted_law). A plot
whose data is absent says so instead of failing.
"""

import math
import os
from collections import defaultdict

import numpy as np

from runs import METRICS, config_key

# -----------------------------------------------------------------------------
# plots

# a variant not named here (a router-knob ablation such as 'xmod-mom0') is drawn grey with a star
COLORS = defaultdict(lambda: 'tab:gray', {'dense': 'black', 'mod': 'tab:orange', 'xmod': 'tab:blue', 'moe': 'tab:green',
                                          'xmod-plain': 'tab:purple', 'xmod-nobal': 'tab:cyan',
                                          'xmod-plain-nobal': 'tab:pink'})
BASE = ('capacity_gain', 'context_correction', 'stride_interaction')  # fit_law.BASE_TERMS: the terms lines need no D, N
MARKERS = defaultdict(lambda: '*', {'dense': 'o', 'mod': 's', 'xmod': '^', 'moe': 'D', 'xmod-plain': 'v',
                                    'xmod-nobal': '<', 'xmod-plain-nobal': '>'})


def empty_note(ax, text):
    ax.text(0.5, 0.5, text, ha='center', va='center', transform=ax.transAxes, wrap=True)


def plot_loss_vs_flops(ax, runs, metric):
    for v in sorted({r['variant'] for r in runs}, key=list(COLORS).index):
        rs = [r for r in runs if r['variant'] == v]
        ax.scatter([r['flops'] for r in rs], [r['loss'][metric] for r in rs], c=COLORS[v], marker=MARKERS[v],
                   label=v, s=25, zorder=3)
    for r in runs:  # thin grey lines join each sparse run to its FLOP-matched dense partner
        if r['partner'] is not None:
            ax.plot([r['partner']['flops'], r['flops']], [r['partner']['loss'][metric], r['loss'][metric]],
                    c='0.7', lw=0.7, zorder=1)
    ax.set_xscale('log')
    ax.set(xlabel='training FLOPs', ylabel=metric, title='loss vs compute (grey: FLOP-matched pairs)')
    ax.legend(fontsize=7)


def plot_loss_vs_params(ax, runs, metric):
    groups = [(d, [d] + [r for r in runs if r['partner'] is d]) for d in runs if d['model'] == 'dense']
    groups = [(d, g) for d, g in groups if len(g) > 1]
    if not groups:
        return empty_note(ax, 'no FLOP-matched sparse/dense group')
    for d, g in groups:
        g = sorted(g, key=lambda r: r['params_total'])
        ax.plot([r['params_total'] for r in g], [r['loss'][metric] for r in g], c='0.75', lw=0.8, zorder=1)
        for r in g:
            ax.scatter(r['params_total'], r['loss'][metric], c=COLORS[r['variant']], marker=MARKERS[r['variant']],
                       s=25, zorder=3)
    for v in sorted({r['variant'] for _, g in groups for r in g}, key=list(COLORS).index):
        ax.scatter([], [], c=COLORS[v], marker=MARKERS[v], label=v)
    ax.set_xscale('log')
    ax.set(xlabel='total non-embedding parameters', ylabel=metric,
           title='loss vs total params at fixed active compute\n(one grey line per dense run and its partners)')
    ax.legend(fontsize=7)


def plot_pred_vs_obs(axes, runs, pairs, law_L, metric):
    ax = axes[0]
    pp = [p for p in pairs if 'pred' in p]
    if pp:
        for held, c, m, lab in ((False, 'tab:blue', 'o', 'fit'), (True, 'tab:red', 'x', 'held out')):
            q = [p for p in pp if p['heldout'] == held]
            if q:
                ax.scatter([p['delta'] for p in q], [p['pred'] for p in q], c=c, marker=m, label=lab, s=25)
        both = [p['delta'] for p in pp] + [p['pred'] for p in pp]
        lo, hi = min(both), max(both)
        ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8)
        ax.legend(fontsize=7)
    else:
        empty_note(ax, 'relative law not fitted')
    ax.set(xlabel='observed Delta (nats)', ylabel='predicted Delta', title='X-MoD Delta vs FLOP-matched dense')
    ax = axes[1]
    pts = [(r['loss'][metric], law_L(r['params_total'], r['tokens']), r['heldout'], 'dense')
           for r in runs if r['model'] == 'dense']
    pts += [(p['run']['loss'][metric], law_L(p['run']['partner']['params_total'], p['run']['partner']['tokens'])
             + p['pred'], p['heldout'], 'xmod') for p in pp]
    for fam in ('dense', 'xmod'):
        for held in (False, True):
            q = [x for x in pts if x[3] == fam and x[2] == held]
            if q:
                ax.scatter([x[0] for x in q], [x[1] for x in q], c=COLORS[fam], marker='x' if held else MARKERS[fam],
                           label=f'{fam} {"held out" if held else "fit"}', s=25)
    lo, hi = min(min(x[0], x[1]) for x in pts), max(max(x[0], x[1]) for x in pts)
    ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8)
    ax.set(xlabel=f'observed {metric}', ylabel='predicted', title='L: dense law (+ predicted Delta for X-MoD)')
    ax.legend(fontsize=7)


def plot_delta_vs_logrho(axes, pairs, rel, law_delta):
    if not pairs:
        for ax in axes:
            empty_note(ax, 'no full X-MoD run with a dense partner')
        return
    most = lambda xs: max(set(xs), key=xs.count)
    T_ref, s_ref = most([p['T'] for p in pairs]), most([p['stride'] for p in pairs])
    x_max = max(math.log(p['rho']) for p in pairs) * 1.05 or 1.0
    xs = np.linspace(0, x_max, 50)
    import matplotlib
    cmap = matplotlib.colormaps['viridis']
    for ax, key, ref, other in ((axes[0], 'stride', T_ref, 'T'), (axes[1], 'T', s_ref, 'stride')):
        vals = sorted({p[key] for p in pairs})
        for i, v in enumerate(vals):
            c = cmap(i / max(1, len(vals) - 1))
            q = [p for p in pairs if p[key] == v]
            ax.scatter([math.log(p['rho']) for p in q], [p['delta'] for p in q], color=c, s=22, label=f'{key}={v}')
            held = [p for p in q if p['heldout']]
            ax.scatter([math.log(p['rho']) for p in held], [p['delta'] for p in held], facecolors='none',
                       edgecolors='red', s=70)
            if rel.get('fitted'):
                T, s = (ref, v) if key == 'stride' else (v, ref)
                ax.plot(xs, [law_delta(math.exp(x), T, s) for x in xs], color=c, lw=1)
        ax.axhline(0, c='0.6', lw=0.6)
        at_ref = ', D=D0, N_act=N0' if set(rel.get('active_terms', [])) - set(BASE) else ''
        ax.set(xlabel='log rho (total / active params)', ylabel='Delta (nats)',
               title=f'one line per {key} (law at {other}={ref}{at_ref}; red ring = held out)')
        ax.legend(fontsize=7)


def shape_label(r):
    s = f'{r["variant"]} L{r["n_layer"]}'
    if r['stride'] is not None:
        s += f' s{r["stride"]} c{r["capacity"]:g}'
    return s + f' T{r["T"]}'


def plot_ablations(ax, runs, metric):
    by = {}
    for r in runs:
        if r['partner'] is not None:
            by.setdefault(config_key(r['config'], with_seed=False), []).append(r)
    if not by:
        return empty_note(ax, 'no sparse run with a dense partner')
    # bars sorted by shape (layers, stride, capacity, context) so a full X-MoD config sits beside its ablations
    items = sorted(by.values(), key=lambda rs: (rs[0]['T'], rs[0]['n_layer'], rs[0]['stride'] or 0,
                                                rs[0]['capacity'] or 0, list(COLORS).index(rs[0]['variant'])))
    for i, rs in enumerate(items):
        d = [r['loss'][metric] - r['partner']['loss'][metric] for r in rs]
        ax.bar(i, np.mean(d), color=COLORS[rs[0]['variant']], yerr=np.std(d, ddof=1) if len(d) > 1 else None,
               capsize=3)
    ax.set_xticks(range(len(items)))
    ax.set_xticklabels([shape_label(rs[0]) for rs in items], rotation=75, fontsize=6)
    for v in sorted({rs[0]['variant'] for rs in items}, key=list(COLORS).index):
        ax.bar(0, 0, color=COLORS[v], label=v)
    ax.axhline(0, c='k', lw=0.6)
    ax.set(ylabel=f'Delta vs FLOP-matched dense ({metric})',
           title='ablations against full X-MoD\n(bars: mean over seeds; error bars: std over seeds)')
    ax.legend(fontsize=7)


def plot_training_curves(ax, runs, metric):
    best = None
    for d in runs:
        if d['model'] != 'dense':
            continue
        quartet, cost = [d], 0.0
        for fam in ('mod', 'xmod', 'moe'):
            cands = [r for r in runs if r['partner'] is d and r['variant'] == fam]
            if cands:
                r = min(cands, key=lambda r: abs(math.log(r['fpt'] / d['fpt'])))
                quartet.append(r)
                cost += abs(math.log(r['fpt'] / d['fpt']))
        score = (len(quartet), -cost)
        if len(quartet) > 1 and (best is None or score > best[0]):
            best = (score, quartet)
    if best is None:
        return empty_note(ax, 'no FLOP-matched dense / MoD / X-MoD / MoE group: skipped')
    quartet = best[1]
    shown = []
    for r in quartet:
        ax.plot(r['log']['flops'], r['log'][metric], c=COLORS[r['variant']], label=f'{r["variant"]}: {r["name"]}')
        shown += [v for f, v in zip(r['log']['flops'], r['log'][metric]) if f > 0]   # step 0 is off a log axis
    if shown:
        lo, hi = min(shown), max(shown)
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    missing = [f for f in ('mod', 'xmod', 'moe') if f not in {r['variant'] for r in quartet}]
    ax.set_xscale('log')
    ax.set(xlabel='training FLOPs', ylabel=metric,
           title='FLOP-matched training curves' + (f' (missing: {", ".join(missing)})' if missing else ''))
    ax.legend(fontsize=7)


def config_label(r):
    return f'{shape_label(r)} d{r["n_embd"]} {r["tokens"] / 1e6:.2g}M'


def delta_vs_tokens(runs, min_seeds=2):
    """Delta = L_sparse - L_dense of each pair at every evaluation both runs logged (log.csv rows with the same
    tokens), for each sparse configuration with >= min_seeds seeds paired, most seeds first:
    {label: {seeds, runs, <metric>: [{tokens, n, mean, se}]}}, se = std over seeds / sqrt(n), null for one seed."""
    by = {}
    for r in runs:
        if r['partner'] is not None:
            by.setdefault(config_key(r['config'], with_seed=False), []).append(r)
    table = {}
    for rs in sorted(by.values(), key=lambda rs: (-len(rs), config_label(rs[0]))):
        if len(rs) < min_seeds:
            continue
        entry = dict(seeds=sorted(r['seed'] for r in rs), runs=sorted(r['name'] for r in rs))
        for m in METRICS:
            at = {}  # tokens -> [Delta of each seed]
            for r in rs:
                log, plog = r['log'], r['partner']['log']
                tokens, i, j = np.intersect1d(log['tokens'], plog['tokens'], return_indices=True)
                for tok, a, b in zip(tokens, i, j):
                    at.setdefault(float(tok), []).append(float(log[m][a] - plog[m][b]))
            entry[m] = [dict(tokens=tok, n=len(d), mean=float(np.mean(d)),
                             se=float(np.std(d, ddof=1) / math.sqrt(len(d))) if len(d) > 1 else None)
                        for tok, d in sorted(at.items())]
        label = config_label(rs[0])
        table[label if label not in table else f'{label} ({len(table)})'] = entry
    return table


def plot_delta_vs_tokens(axes, table):
    if not table:
        return empty_note(axes[0], 'no sparse configuration with >= 2 seeds and dense partners')
    for ax, (label, e) in zip(axes, table.items()):
        for m, c, name in (('val_loss_causal', 'tab:blue', 'causal'), ('val_loss', 'tab:orange', 'top-k')):
            rows = [row for row in e[m] if row['tokens'] > 0]  # at step 0 neither model has trained
            x = [row['tokens'] for row in rows]
            mean = np.array([row['mean'] for row in rows])
            se = np.array([np.nan if row['se'] is None else row['se'] for row in rows])
            ax.plot(x, mean, color=c, marker='o', ms=3, label=f'{name}: mean over seeds')
            ax.fill_between(x, mean - se, mean + se, color=c, alpha=0.25, lw=0)
        ax.axhline(0, c='0.6', lw=0.6)
        ax.set(xlabel='training tokens', ylabel='Delta vs FLOP-matched dense (nats)',
               title=f'{label}, {len(e["seeds"])} seeds\n(band: mean +- 1 standard error; step 0 not shown)')
        ax.legend(fontsize=7)


def make_plots(out, runs, pairs, res, metric, law, dvt):
    """The seven plots of one metric; law = (L(N, D), Delta(rho, T, s, ...)), the fitted laws as functions;
    dvt = delta_vs_tokens(runs), one panel per configuration (at most 4)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    specs = [('loss_vs_flops', 1, lambda a: plot_loss_vs_flops(a[0], runs, metric)),
             ('loss_vs_params', 1, lambda a: plot_loss_vs_params(a[0], runs, metric)),
             ('pred_vs_obs', 2, lambda a: plot_pred_vs_obs(a, runs, pairs, law[0], metric)),
             ('delta_vs_logrho', 2, lambda a: plot_delta_vs_logrho(a, pairs, res['relative'], law[1])),
             ('ablations', 1, lambda a: plot_ablations(a[0], runs, metric)),
             ('training_curves', 1, lambda a: plot_training_curves(a[0], runs, metric)),
             ('delta_vs_tokens', min(4, max(1, len(dvt))), lambda a: plot_delta_vs_tokens(a, dvt))]
    paths = []
    for name, n, draw in specs:
        fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.8), squeeze=False)
        draw(list(axes[0]))
        fig.tight_layout()
        paths.append(os.path.join(out, f'{name}.png'))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


# -----------------------------------------------------------------------------
# summary.md and printed lines

def fmt(x, spec='.4g'):
    return '-' if x is None else format(x, spec)


def with_interval(value, lo, hi, spec):
    """A value and its 95% interval; a missing interval is said, not shown as an empty one."""
    return f'{value:{spec}} (no interval)' if lo is None else f'{value:{spec}} [{fmt(lo)}, {fmt(hi)}]'


def md_table(header, rows):
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


def summary_md(result, runs):
    bm, metrics, i = result['by_metric'], list(result['by_metric']), result['inputs']
    s = [f'# X-MoD scaling-law fit\n', f'Primary metric: `{result["metric"]}`. Inputs: {i["n_runs"]} finished runs '
         f'({", ".join(f"{k} {v}" for k, v in i["variants"].items())}), {i["n_heldout"]} held out'
         + (f' by `{i["holdout"]}`' if i['holdout'] else ' (no --holdout)') + '.\n']
    if result['warnings']:
        s.append('Warnings:\n' + '\n'.join(f'- {w}' for w in result['warnings']) + '\n')
    s.append('## Dense law: L = E + A/N^alpha + B/D^beta\n')
    rows = [[k] + [with_interval(bm[m]['dense'][k], *(bm[m]['dense']['ci'][k] or (None, None)), '.6g')
                   for m in metrics] for k in ('E', 'A', 'alpha', 'B', 'beta')]
    rows.append(['rmse(log L)'] + [f'{bm[m]["dense"]["rmse_log"]:.4g}' for m in metrics])
    ill = lambda d: 'ill-posed: ' + '; '.join(d['notes']) if d['ill_posed'] else 'well-posed'
    rows.append(['runs'] + [f'{bm[m]["dense"]["n_runs"]} ({ill(bm[m]["dense"])})' for m in metrics])
    s.append(md_table(['', *(f'{m} (95% CI)' for m in metrics)], rows) + '\n')
    rel = result['relative']
    s.append(f'## Relative law (full X-MoD vs FLOP-matched dense)\n\n`{rel["form"]}`, T0={rel["T0"]}, '
             f's0={rel["s0"]}, D0={rel["D0"]:g}, N0={rel["N0"]:g}\n')
    rows = [[t] + [with_interval(c['value'], c['ci_low'], c['ci_high'], '.5g') if c['value'] is not None
                   else f'not fitted: {c["note"]}' for c in (bm[m]['relative']['coefficients'][t] for m in metrics)]
            for t in rel['coefficients']]
    rows.append(['pairs (fit / held out)'] + [f'{bm[m]["relative"]["n_pairs"]} / {bm[m]["relative"]["n_heldout_pairs"]}'
                                               for m in metrics])
    s.append(md_table(['term', *(f'{m} (95% CI)' for m in metrics)], rows) + '\n')
    s.append('## Errors\n')
    keys = [('fit', 'rmse', 'Delta RMSE (fit)'), ('fit', 'r2', 'Delta R^2 (fit)'),
            ('cv', 'delta_rmse', 'Delta RMSE (leave-one-config-out)'),
            ('heldout', 'rmse', 'Delta RMSE (held out)'), ('heldout', 'r2', 'Delta R^2 (held out)'),
            ('heldout', 'L_rel_err_law_mean', 'L rel. err, dense law + Delta (held out)'),
            ('heldout', 'L_rel_err_partner_mean', 'L rel. err, observed partner + Delta (held out)'),
            ('heldout', 'sign_acc', 'sign of Delta right (held out)'),
            ('heldout', 'sign_acc_big', 'sign right where abs(Delta) > 2 seed noise (held out)')]
    rows = [[lab] + [fmt((bm[m]['metrics'][grp] or {}).get(k)) for m in metrics] for grp, k, lab in keys]
    for m_ in ('fit', 'heldout'):
        rows.append([f'dense L rel. err ({m_})'] + [fmt((bm[m]['metrics']['dense'][m_] or {}).get('L_rel_err_mean'))
                                                    for m in metrics])
    for k in ('loss_std', 'delta_std'):
        rows.append([f'seed noise: {k}'] + [fmt(bm[m]['metrics']['seed_noise'][k]) for m in metrics])
    s.append(md_table(['', *metrics], rows) + '\n')
    s.append('## Does each term earn its place? (refit without it)\n')
    rows = []
    for m in metrics:
        for name, a in bm[m]['metrics']['ablation'].items():
            rows.append([m, name, fmt(a.get('fit_rmse')), fmt(a.get('cv_rmse')), fmt(a.get('heldout_rmse')),
                         a.get('note', '')])
    s.append(md_table(['metric', 'model', 'fit RMSE', 'CV RMSE', 'held-out RMSE', 'note'], rows) + '\n')
    s.append(selection_md(bm))
    s.append(goals_md(bm))
    s.append(delta_vs_tokens_md(result['delta_vs_tokens']))
    s.append('## Runs\n')
    m, o = result['metric'], [x for x in metrics if x != result['metric']][0]
    rows = []
    for r in sorted(runs, key=lambda r: (r['variant'], r['T'], r['n_layer'], r['stride'] or 0, r['capacity'] or 0,
                                         r['seed'])):
        p = r['partner']
        rows.append([r['name'], r['variant'], r['n_layer'], fmt(r['stride'], 'd'), fmt(r['capacity'], 'g'), r['T'],
                     f'{r["rho"]:.4g}', f'{r["loss"][m]:.5f}', fmt(p and p['loss'][m], '.5f'),
                     fmt(p and r['loss'][m] - p['loss'][m], '+.5f'), fmt(p and r['loss'][o] - p['loss'][o], '+.5f'),
                     'held out' if r['heldout'] else ''])
    s.append(md_table(['run', 'model', 'n_layer', 'stride', 'capacity', 'T', 'rho', f'L ({m})', 'partner L',
                       'Delta', f'Delta ({o})', ''], rows) + '\n')
    return '\n'.join(s)


def selection_md(bm):
    """Each term's Delta RMSE with and without it (CV: leave one configuration out; held out: the --holdout pairs),
    against the chosen form, and every form of the base terms plus some candidates."""
    sel = {m: bm[m]['metrics'].get('selection') for m in bm}
    if not any(sel.values()):
        return ''
    rule = next(x['rule'] for x in sel.values() if x)
    s = ['## Form selection by held-out error\n', f'Rule: {rule}.\n']
    s += [f'- {m}: {x["summary"]}' for m, x in sel.items() if x]
    rows = [[m, t, 'base' if e['base'] else 'candidate', fmt(e['cv_rmse_with']), fmt(e['cv_rmse_without']),
             fmt(e['heldout_rmse_with']), fmt(e['heldout_rmse_without']), 'yes' if e['beats_removal'] else 'no',
             'yes' if e['kept'] else 'no'] for m, x in sel.items() if x for t, e in x['terms'].items()]
    s.append('\n' + md_table(['metric', 'term', 'kind', 'CV RMSE with', 'CV RMSE without', 'held-out RMSE with',
                              'held-out RMSE without', 'beats its removal', 'kept'], rows) + '\n')
    rows = [[m, ', '.join(f['terms']), fmt(f['cv_rmse']), fmt(f['heldout_rmse'])]
            for m, x in sel.items() if x for f in x['forms']]
    s.append(md_table(['metric', 'form (terms)', 'CV RMSE', 'held-out RMSE'], rows) + '\n')
    return '\n'.join(s)


def goal_texts(g):
    """The three held-out goals in words, each with its verdict."""
    r, sg, q = g['rmse'], g['sign'], g['r2']
    right = '-' if sg['value'] is None else f'{round(sg["value"] * sg["n"])}/{sg["n"]}'
    return [f'RMSE(Delta) {fmt(r["value"])} (goal <= {fmt(r["limit"])}, max(0.01, 1.5 seed std)): {r["status"]}',
            f'sign right on {right} pairs with abs(Delta) > 2 seed std (goal >= 90%): {sg["status"]}',
            f'R^2(Delta) {fmt(q["value"])} (goal >= 0.85 where the held-out Deltas span > 3 seed std = '
            f'{fmt(q["span_needed"])}; span {fmt(q["span"])}): {q["status"]}']


def goals_md(bm):
    rows = [[m] + goal_texts(bm[m]['metrics']['goals']) for m in bm if bm[m]['metrics'].get('goals')]
    if not rows:
        return ''
    return ('## Held-out goals (seed std: the seed noise of Delta)\n\n'
            + md_table(['metric', 'RMSE', 'sign', 'R^2'], rows) + '\n')


def delta_vs_tokens_md(table):
    s = ['## Delta against training tokens (delta_vs_tokens.png)\n',
         'Mean over seeds +- 1 standard error, at every evaluation a run and its dense partner both logged.\n']
    if not table:
        return '\n'.join(s + ['No sparse configuration has 2 seeds or more with dense partners.\n'])
    pm = lambda row: ('-' if row is None else f'{row["mean"]:+.4f}'
                      + ('' if row['se'] is None else f' +- {row["se"]:.4f}'))
    rows = []
    for label, e in table.items():
        topk = {row['tokens']: row for row in e['val_loss']}
        rows += [[label, len(e['seeds']), f'{row["tokens"]:.0f}', pm(row), pm(topk.get(row['tokens']))]
                 for row in e['val_loss_causal']]
    return '\n'.join(s + [md_table(['config', 'seeds', 'tokens', 'Delta causal', 'Delta top-k'], rows) + '\n'])


def print_summary(result, out, n_plots):
    i = result['inputs']
    print(f'runs: {i["n_runs"]} ({", ".join(f"{k} {v}" for k, v in i["variants"].items())}), {i["n_heldout"]} held '
          f'out' + (f' by {i["holdout"]!r}' if i['holdout'] else ''))
    for m, r in result['by_metric'].items():
        d = r['dense']
        print(f'[{m}] dense: L = {d["E"]:.4g} + {d["A"]:.4g}/N^{d["alpha"]:.4g} + {d["B"]:.4g}/D^{d["beta"]:.4g}, '
              f'rmse(log L) {d["rmse_log"]:.3g}' + (' (ILL-POSED: ' + '; '.join(d['notes']) + ': not estimates, no '
                                                    'intervals)' if d['ill_posed'] else ''))
        if not r['relative'].get('fitted'):
            print(f'[{m}] relative: not fitted ({r["relative"]["note"]})')
            continue
        c = r['relative']['coefficients']
        terms = ', '.join(f'{t} {with_interval(c[t]["value"], c[t]["ci_low"], c[t]["ci_high"], ".4g")}'
                          if c[t]['value'] is not None else f'{t} -' for t in c)
        fit, held = r['metrics']['fit'] or {}, r['metrics']['heldout'] or {}
        print(f'[{m}] relative ({r["relative"]["n_pairs"]} pairs): {terms}; Delta rmse fit {fmt(fit.get("rmse"))}, '
              f'held out {fmt(held.get("rmse"))} (R^2 {fmt(held.get("r2"))}); seed noise L '
              f'{fmt(r["metrics"]["seed_noise"]["loss_std"])}, Delta {fmt(r["metrics"]["seed_noise"]["delta_std"])}')
        print(f'[{m}] form: {r["metrics"]["selection"]["summary"]}')
        if r['metrics']['goals']:
            print(f'[{m}] held-out goals: ' + '; '.join(goal_texts(r['metrics']['goals'])))
    print(f'wrote {os.path.join(out, "fit.json")}, summary.md and {n_plots} plots')
