"""
law/report.py: what fit_law.py found, for people: summary.md, the three plots and the lines it prints, and the
table of Delta against training tokens. It fits nothing: the fitted laws come in as functions (fit_law.fitted_law).
A plot whose data is absent says so instead of failing.
"""

import json
import math
import os

import numpy as np

from law.load import METRICS, ROUTER_KNOBS, config_key
from law.stats import fmt_t, t_interval
from law.terms import BASE_TERMS

# -----------------------------------------------------------------------------
# plots

# a variant keeps its family's colour (mod-centred is MoD, moe-cf1 the MoE), so that a reader matches points across
# the plots (here and tools/fit_plots.py) by colour alone; the router-knob ablations of X-MoD get colours of their own
COLORS = {'dense': 'black', 'mod': 'tab:orange', 'mod-centred': 'tab:orange', 'xmod': 'tab:blue', 'moe': 'tab:green',
          'moe-cf1': 'tab:green', 'xmod-plain': 'tab:purple', 'xmod-nobal': 'tab:cyan', 'xmod-plain-nobal': 'tab:pink',
          'xmod-random': 'tab:gray', 'xmod-active': 'tab:olive', 'xmod-mom0': 'tab:red', 'xmod-bce1': 'tab:olive',
          'xmod-z0.01': 'tab:brown'}
MARKERS = {'dense': 'o', 'mod': 's', 'mod-centred': 's', 'xmod': '^', 'moe': 'D', 'moe-cf1': 'D', 'xmod-plain': 'v',
           'xmod-nobal': '<', 'xmod-plain-nobal': '>', 'xmod-random': 'x', 'xmod-active': 'P'}


def color(variant):
    return COLORS.get(variant, 'tab:gray')      # another router-knob ablation: grey


def marker(variant):
    return MARKERS.get(variant, '*')


def rank(variant):
    """Order of variants in legends and bars: as listed in COLORS, the others after."""
    return list(COLORS).index(variant) if variant in COLORS else len(COLORS)


def empty_note(ax, text):
    """The plot's data is absent: say so in the middle of the panel ax."""
    ax.text(0.5, 0.5, text, ha='center', va='center', transform=ax.transAxes, wrap=True)


def plot_loss_vs_params(ax, runs, metric):
    """Final loss against total non-embedding parameters, one grey line per dense run and its FLOP-matched partners:
    the same compute per token, so only the total parameters change, and a line's slope is what they buy."""
    groups = [g for g in ([d] + [r for r in runs if r['partner'] is d] for d in runs if d['model'] == 'dense')
              if len(g) > 1]
    if not groups:
        return empty_note(ax, 'no FLOP-matched sparse/dense group')
    for g in groups:
        g = sorted(g, key=lambda r: r['params_total'])
        ax.plot([r['params_total'] for r in g], [r['loss'][metric] for r in g], c='0.75', lw=0.8, zorder=1)
        for r in g:
            ax.scatter(r['params_total'], r['loss'][metric], c=color(r['variant']), marker=marker(r['variant']),
                       s=25, zorder=3)
    for v in sorted({r['variant'] for g in groups for r in g}, key=rank):
        ax.scatter([], [], c=color(v), marker=marker(v), label=v)
    ax.set_xscale('log')
    ax.set(xlabel='total non-embedding parameters', ylabel=metric,
           title='loss vs total params at fixed active compute\n(one grey line per dense run and its partners)')
    ax.legend(fontsize=7)


def plot_pred_vs_obs(axes, runs, pairs, law_L, metric):
    """Two panels: the relative law's Delta against the observed (pairs: fit_law.run_relative's), and L (law_L(N, D),
    the dense law, plus the predicted Delta for X-MoD) against the observed; dashed: perfect, x: held out."""
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
    # the relative law predicts the gap only: an X-MoD run's L is the dense law at its partner's N and D plus it
    pts = [(r['loss'][metric], law_L(r['params_total'], r['tokens']), r['heldout'], 'dense')
           for r in runs if r['model'] == 'dense']
    pts += [(p['run']['loss'][metric], law_L(p['run']['partner']['params_total'], p['run']['partner']['tokens'])
             + p['pred'], p['heldout'], 'xmod') for p in pp]
    for fam in ('dense', 'xmod'):
        for held in (False, True):
            q = [x for x in pts if x[3] == fam and x[2] == held]
            if q:
                ax.scatter([x[0] for x in q], [x[1] for x in q], c=color(fam), marker='x' if held else marker(fam),
                           label=f'{fam} {"held out" if held else "fit"}', s=25)
    lo, hi = min(min(x[0], x[1]) for x in pts), max(max(x[0], x[1]) for x in pts)
    ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8)
    ax.set(xlabel=f'observed {metric}', ylabel='predicted', title='L: dense law (+ predicted Delta for X-MoD)')
    ax.legend(fontsize=7)


def plot_delta_vs_logrho(axes, pairs, rel, law_delta):
    """Two panels of Delta against log rho: one colour per stride (at the commonest T), then per T (at the commonest
    stride), with the line of law_delta(rho, T, s) where it was fitted (rel: its fit.json entry)."""
    if not pairs:
        for ax in axes:
            empty_note(ax, 'no full X-MoD run with a dense partner')
        return
    # a panel varies one variable and holds the other at its commonest value, the one most points were run at
    most = lambda xs: max(set(xs), key=xs.count)
    T_ref, s_ref = most([p['T'] for p in pairs]), most([p['stride'] for p in pairs])
    xs = np.linspace(0, max(math.log(p['rho']) for p in pairs) * 1.05 or 1.0, 50)   # all rho = 1: still an axis
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
        # the lines need a budget and a size when the law has a term in them: they are drawn at the reference ones
        at_ref = ', D=D0, N_act=N0' if set(rel.get('active_terms', [])) - set(BASE_TERMS) else ''
        ax.set(xlabel='log rho (total / active params)', ylabel='Delta (nats)',
               title=f'one line per {key} (law at {other}={ref}{at_ref}; red ring = held out)')
        ax.legend(fontsize=7)


def shape_label(r):
    """A run's model in a few characters, e.g. 'xmod L6 s4 c0.5 T128'."""
    s = r['variant'] + (f' L{r["n_layer"]}' if r['n_layer'] is not None else '')
    if r['stride'] is not None:
        s += f' s{r["stride"]}' + (f' c{r["capacity"]:g}' if r['capacity'] is not None else '')
    return s + f' T{r["T"]}'


def config_label(r):
    """shape_label with the width and the training tokens, e.g. '... d128 2M': a row's name."""
    return f'{shape_label(r)} d{r["n_embd"]} {r["tokens"] / 1e6:.2g}M'


def n_mean_se(values):
    """dict(n, mean, se) as fit.json's tables write it: se = the std over the values / sqrt(n), None for one value."""
    v = np.asarray(values, dtype=float)
    return dict(n=len(v), mean=float(v.mean()), se=float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else None)


def delta_vs_tokens(runs):
    """Delta = L_sparse - L_dense of each pair at every evaluation both runs logged (log.csv rows with the same
    tokens), for each sparse configuration with >= 2 seeds paired, most seeds first:
    {label: {seeds, runs, <metric>: [{tokens, n, mean, se}]}}, se = std over seeds / sqrt(n), null for one seed."""
    by = {}
    for r in runs:
        if r['partner'] is not None and r['log'] is not None:
            by.setdefault(config_key(r['config'], with_seed=False), []).append(r)
    table = {}
    for rs in sorted(by.values(), key=lambda rs: (-len(rs), config_label(rs[0]))):
        if len(rs) < 2:
            continue
        entry = dict(seeds=sorted(r['seed'] for r in rs), runs=sorted(r['name'] for r in rs))
        for m in METRICS:
            at = {}  # tokens -> [Delta of each seed]
            for r in rs:
                log, plog = r['log'], r['partner']['log']
                tokens, i, j = np.intersect1d(log['tokens'], plog['tokens'], return_indices=True)
                for tok, a, b in zip(tokens, i, j):
                    at.setdefault(float(tok), []).append(float(log[m][a] - plog[m][b]))
            entry[m] = [dict(tokens=tok, **n_mean_se(d)) for tok, d in sorted(at.items())]
        label = config_label(rs[0])
        # two configs can share a label (it omits e.g. the learning rate): a number parts them
        table[label if label not in table else f'{label} ({len(table)})'] = entry
    return table


def paired_fixes(runs):
    """Each router-knob fix against the full X-MoD run of the same config and seed (all else equal): {label: {fix,
    config, seeds, <metric>: {mean, se, n}}}, difference = L_fix - L_xmod (< 0: the fix helps), se = std over seeds /
    sqrt(n), null for one seed."""
    key = lambda r: config_key({k: v for k, v in r['config'].items() if k not in ROUTER_KNOBS})
    ref = {key(r): r for r in runs if r['variant'] == 'xmod'}
    by = {}
    for r in runs:
        if r['model'] == 'xmod' and r['variant'].startswith('xmod-') and key(r) in ref:
            fixed = {k: v for k, v in r['config'].items() if k not in ROUTER_KNOBS or k == 'seed'}
            by.setdefault((r['variant'], config_key(fixed, with_seed=False)), []).append((r, ref[key(r)]))
    table = {}
    for (v, _), prs in sorted(by.items(), key=lambda kv: (kv[0][0], config_label(kv[1][0][0]))):
        entry = dict(fix=v, config=config_label(prs[0][0]), seeds=sorted(r['seed'] for r, _ in prs),
                     **{m: n_mean_se([r['loss'][m] - x['loss'][m] for r, x in prs]) for m in METRICS})
        table[entry['config']] = entry      # keyed by config_label, which names the fix's variant
    return table


def make_plots(out, runs, pairs, res, metric, law):
    """The three plots of one metric; law = (L(N, D), Delta(rho, T, s, ...)), the fitted laws as functions."""
    import matplotlib  # here, not at the top: the tables and summary.md do not need it
    matplotlib.use('Agg')      # files only: no display is needed, as on a cluster node
    import matplotlib.pyplot as plt
    specs = [('loss_vs_params', 1, lambda a: plot_loss_vs_params(a[0], runs, metric)),
             ('pred_vs_obs', 2, lambda a: plot_pred_vs_obs(a, runs, pairs, law[0], metric)),
             ('delta_vs_logrho', 2, lambda a: plot_delta_vs_logrho(a, pairs, res['relative'], law[1]))]
    paths = []
    for name, n, draw in specs:       # n panels in a row
        fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.8), squeeze=False)
        draw(list(axes.flat))
        fig.tight_layout()
        paths.append(os.path.join(out, f'{name}.png'))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


# -----------------------------------------------------------------------------
# summary.md and printed lines

def fmt(x, spec='.4g'):
    """x formatted with spec, '-' for None (a value fit.json does not have)."""
    return '-' if x is None else format(x, spec)


def with_interval(value, lo, hi, spec):
    """A value and its 95% interval; a missing interval is said, not shown as an empty one."""
    return f'{value:{spec}} (no interval)' if lo is None else f'{value:{spec}} [{fmt(lo)}, {fmt(hi)}]'


def md_table(header, rows):
    """A markdown table (a string): header, a list of column names, and rows, lists of cells."""
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


# What each term's sign means, beside its value in summary.md (easy to misread: the gain enters with a minus sign).
# Delta = L(X-MoD) - L(its FLOP-matched dense partner): above 0, X-MoD is behind.
SIGNS = {'capacity_gain': 'enters with a minus sign: > 0, X-MoD is ahead (Delta falls by it per unit log rho, at T0 '
                          'and s0); < 0, X-MoD is behind',
         'context_correction': '> 0: X-MoD loses ground at longer contexts (per unit log rho and log(T/T0))',
         'stride_interaction': '> 0: X-MoD loses ground at larger strides (per unit log rho and log(s/s0))',
         'budget_correction': '> 0: X-MoD loses ground with more training tokens (per unit log rho and log(D/D0))',
         'size_correction': '> 0: X-MoD loses ground at larger sizes (per unit log rho and log(N_act/N0))',
         'budget_offset': '> 0: Delta grows with the training tokens whatever rho (per unit log(D/D0))'}


def form_sentence(sel):
    """The selection's verdict in words (fit_law.select_terms): the abstract's terms stay whatever their score,
    candidate terms only when they beat their removal."""
    terms = sel['terms']
    base = [t for t in sel['kept'] if terms[t]['base']]
    cands = [t for t in sel['kept'] if not terms[t]['base']]
    weak = [t for t in base if not terms[t]['beats_removal']]
    their = lambda ts: 'its' if len(ts) == 1 else 'their'
    said = ('; none of them beats its removal here' if weak and weak == base else
            f'; of them, {", ".join(weak)} {"does" if len(weak) == 1 else "do"} not beat {their(weak)} removal here'
            if weak else '; each beats its removal')
    kept = f"Kept: the abstract's terms, which stay whatever their score ({', '.join(base)}{said})" + (
        f', and {", ".join(cands)}, beating {their(cands)} removal' if cands else '')
    beaten = [t for t in sel['dropped'] if terms[t]['cv_testable']]
    dropped = ([f'{", ".join(beaten)}, not beating {their(beaten)} removal'] if beaten else []) + [
        f'no held-out test: {t} (one configuration alone pins it down)' for t in sel['dropped']
        if not terms[t]['cv_testable']]
    return f'{kept}. Dropped: {"; ".join(dropped) or "none"}.'


def shared_rate_note(result, runs):
    """What a Delta rests on when every run shares one peak learning rate, untuned for each arm (as
    sweeps/classroom.py's do): said first in summary.md and last in what fit_law.py prints; '' otherwise."""
    rates = {r['config'].get('learning_rate') for r in runs}
    i = result['inputs']
    if len(rates) != 1 or None in rates or (i['tuned'] and i['n_off_best_rate']) or not any(r['partner'] for r in runs):
        return ''
    return (f'Read this first: all {len(runs)} runs share one peak learning rate ({rates.pop():g}), not tuned for each '
            f"arm. Dense has a sharp optimum in the rate and X-MoD a flat one, so a rate off dense's best favours "
            f"X-MoD: at each arm's own tuned rate the study's X-MoD does not beat its FLOP-matched dense model "
            f'(docs/results.md, "Learning-rate sensitivity"; tutorial chapter 12). Read the Delta below as what this '
            f'rate gives, not as the answer; tune each arm (sweeps/study/cpu_lr.py) and fit with --tuned for that.')


def conclusion(result, runs):
    """summary.md's opening paragraph in plain words, for the primary metric: Delta at the reference configuration
    over seeds and over all fitted pairs, the gain's sign, and whether any term beats a constant Delta held out."""
    m, rel, bm = result['metric'], result['relative'], result['by_metric'][result['metric']]
    pairs = [r for r in runs if r['variant'] == 'xmod' and r.get('partner') and not r['heldout']]
    if not pairs:
        return 'No full X-MoD run has a FLOP-matched dense partner here: there is no Delta to conclude about.\n'
    s = [note for note in [shared_rate_note(result, runs)] if note]
    delta = lambda r: r['loss'][m] - r['partner']['loss'][m]
    # the reference pairs, where the law's gain is read: tokens within the pairing's 1% (2,000,896 is D0 = 2M)
    ref = [r for r in pairs if r['stride'] == rel['s0'] and r['T'] == rel['T0'] and
           abs(r['tokens'] - rel['D0']) <= 0.01 * rel['D0'] and r['partner']['params_total'] == rel['N0']]
    if ref:
        # pairs of one seed share its data order and initialisation (a WSD branch reuses the seed of a cosine run):
        # the seed, not the pair, is the unit of independent evidence, so the interval is over seed means
        by_seed = {}
        for r in ref:
            by_seed.setdefault(r['seed'], []).append(delta(r))
        t = t_interval([np.mean(v) for _, v in sorted(by_seed.items())])
        at = (f'At the reference configuration (stride {rel["s0"]}, T={rel["T0"]}, {rel["D0"] / 1e6:g}M tokens, '
              f'a dense partner of {rel["N0"]:,} parameters)')
        if len(ref) == 1:
            s.append(f'{at} there is one pair (seed {ref[0]["seed"]}): X-MoD minus its FLOP-matched dense model is '
                     f'{t["mean"]:+.4f} ({m}), one difference of two runs, with no interval: it says nothing about '
                     f'which is better until more seeds are run.')
        else:
            shared = len(ref) - len(by_seed)
            pooled = f'{len(ref)} pairs in {len(by_seed)} seeds (' + (
                f'{shared} pair(s) share a seed with another: the seed is the unit, the pairs of a seed averaged '
                f'first' if shared else 'one pair per seed') + ')'
            if t['se'] is None:
                s.append(f'{at}, X-MoD minus its FLOP-matched dense model is {t["mean"]:+.4f} ({m}; {pooled}): one '
                         f'seed, no interval, no evidence either way.')
            else:
                s.append(f'{at}, X-MoD is {"behind" if t["mean"] > 0 else "ahead of"} its FLOP-matched dense model by '
                         f'{abs(t["mean"]):.4f} (Delta = {fmt_t(t)}, {m}; from {pooled}, seeds '
                         f'{", ".join(str(x) for x in sorted(by_seed))}' + (
                             '; the interval includes zero' if t['lo'] <= 0 <= t['hi'] else '') + ').')
    ds = [delta(r) for r in pairs]
    d = np.mean(ds)
    s.append(f'Over all {len(pairs)} fitted pairs Delta averages {d:+.4f} (from {min(ds):+.4f} to {max(ds):+.4f}; '
             f'the seed noise of Delta is {fmt(bm["metrics"]["seed_noise"]["delta_std"])}); Delta > 0 means X-MoD '
             f'is behind.')
    gc = bm['relative']['coefficients']['capacity_gain']
    if (g := gc['value']) is not None:
        # a coefficient without an interval is where the fit stopped, not an estimate: said so, not headlined
        sure = (f' (95% bootstrap [{gc["ci_low"]:+.4g}, {gc["ci_high"]:+.4g}])' if gc.get('ci_low') is not None
                else f' (no interval: {bm["relative"].get("n_pairs", "these")} pair(s) cannot give one; not an estimate)')
        s.append(f'The fitted capacity_gain is {g:+.4g}{sure}: ' + ('negative, so X-MoD is behind' if g < 0 else
                                                                    'positive, so X-MoD is ahead')
                 + f' by {abs(g):.4f} per unit log rho at T0 and s0.')
    if bm.get('dense', {}).get('ill_posed'):
        s.append('The dense law is ill-posed on these runs (' + '; '.join(bm['dense']['notes'])
                 + '): its parameters are not estimates.')
    # the verdict a reader needs before the tables: a law whose terms predict left-out configurations no better
    # than one constant has found no trend, however well it fits
    null = (bm['metrics'].get('budget_forms') or {}).get('constant Delta (null)') or {}
    law, terms = (bm['metrics']['cv'] or {}).get('delta_rmse'), ', '.join(bm['relative'].get('active_terms', []))
    if law is not None and null.get('cv_rmse') is not None:
        s.append(f'No term beats a constant Delta held out: leaving one configuration out at a time, a constant Delta '
                 f'predicts it to RMSE {null["cv_rmse"]:.4f}, the fitted law ({terms}) to {law:.4f}.'
                 if null['cv_rmse'] <= law else
                 f'The fitted law ({terms}) predicts left-out configurations better than a constant Delta: RMSE '
                 f'{law:.4f} against {null["cv_rmse"]:.4f}, leaving one configuration out at a time.')
    return ' '.join(s) + '\n'


def summary_md(result, runs):
    """summary.md's text from fit.json's result and the runs: the conclusion, the dense and
    relative laws, errors, selection, goals, joint law, Delta against tokens, fixes, every run."""
    bm, metrics, i = result['by_metric'], list(result['by_metric']), result['inputs']
    s = ['# X-MoD scaling-law fit\n', conclusion(result, runs),
         f'Primary metric: `{result["metric"]}`. Inputs: {i["n_runs"]} finished runs '
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
             f's0={rel["s0"]}, D0={rel["D0"]:g}, N0={rel["N0"]:g}. Delta = L(X-MoD) - L(dense partner): above 0, '
             f'X-MoD is behind.\n')
    rows = [[t] + [with_interval(c['value'], c['ci_low'], c['ci_high'], '.5g') if c['value'] is not None
                   else f'not fitted: {c["note"]}' for c in (bm[m]['relative']['coefficients'][t] for m in metrics)]
            + [SIGNS.get(t, '')] for t in rel['coefficients']]
    rows.append(['pairs (fit / held out)'] + [f'{bm[m]["relative"]["n_pairs"]} / {bm[m]["relative"]["n_heldout_pairs"]}'
                                               for m in metrics] + [''])
    s.append(md_table(['term', *(f'{m} (95% CI)' for m in metrics), 'its sign'], rows) + '\n')
    s.append('## Errors\n')
    keys = [('fit', 'rmse', 'Delta RMSE (fit)'), ('fit', 'r2', 'Delta R^2 (fit)'),
            ('cv', 'delta_rmse', 'Delta RMSE (leave-one-config-out)'),
            ('heldout', 'rmse', 'Delta RMSE (held out)'), ('heldout', 'r2', 'Delta R^2 (held out)'),
            ('heldout', 'L_rel_err_law_mean', 'L rel. err, dense law + Delta (held out)'),
            ('heldout', 'L_rel_err_partner_mean', 'L rel. err, observed partner + Delta (held out)'),
            ('heldout', 'sign_acc', 'sign of Delta right (held out)'),
            ('heldout', 'sign_acc_big', 'sign right where abs(Delta) > 2 seed noise (held out)')]
    rows = [[lab] + [fmt((bm[m]['metrics'][grp] or {}).get(k)) for m in metrics] for grp, k, lab in keys]
    rows += [[f'dense L rel. err ({m_})'] + [fmt((bm[m]['metrics']['dense'][m_] or {}).get('L_rel_err_mean'))
                                             for m in metrics] for m_ in ('fit', 'heldout')]
    rows += [[f'seed noise: {k}'] + [fmt(bm[m]['metrics']['seed_noise'][k]) for m in metrics]
             for k in ('loss_std', 'delta_std')]
    held = {m: bm[m]['metrics']['heldout'] or {} for m in metrics}
    if any('vs_null' in h for h in held.values()):
        for name, lab in (('constant', 'a constant Delta'), ('zero', 'Delta = 0')):
            rows.append([f'held-out Delta RMSE of {lab}'] + [fmt(h['vs_null'][name]['null_rmse_delta'])
                                                           if 'vs_null' in h else '-' for h in held.values()])
        # beaten: the 95% paired-bootstrap interval of (law - null) squared error lies below 0
        rows.append(['the law beats both at 95% (paired bootstrap)'] + [
            ('yes' if h['beats_null'] else 'no: no better than a constant') if 'vs_null' in h else '-'
            for h in held.values()])
    s.append(md_table(['', *metrics], rows) + '\n')
    s.append('## Does each term earn its place? (refit without it)\n')
    rows = [[m, name, fmt(a.get('fit_rmse')), fmt(a.get('cv_rmse')), fmt(a.get('heldout_rmse')), a.get('note', '')]
            for m in metrics for name, a in bm[m]['metrics']['ablation'].items()]
    s.append(md_table(['metric', 'model', 'fit RMSE', 'CV RMSE', 'held-out RMSE', 'note'], rows) + '\n')
    s.append(selection_md(bm))
    # the budget term's shapes side by side (law.forms.budget_forms): Delta's errors of each, and of the null model
    rows = [[m, name, fmt(f['fit_rmse']), fmt(f['cv_rmse']), fmt(f['cv_max_abs']), fmt(f['heldout_rmse']),
             fmt(f['heldout_max_abs'])] for m in bm if bm[m]['metrics'].get('budget_forms')
            for name, f in bm[m]['metrics']['budget_forms'].items()]
    s.append('## The budget term\'s shape (errors of Delta; CV: leave one configuration out)\n\n' + md_table(
        ['metric', 'form', 'fit RMSE', 'CV RMSE', 'CV max abs', 'held-out RMSE', 'held-out max abs'], rows) + '\n'
        if rows else '')
    rows = [[m] + goal_texts(bm[m]['metrics']['goals']) for m in bm if bm[m]['metrics'].get('goals')]
    s.append('## Held-out goals (seed std: the seed noise of Delta)\n\n'
             + md_table(['metric', 'RMSE', 'sign', 'R^2'], rows) + '\n' if rows else '')
    # the joint law of each metric: its terms with intervals, its held-out tests against a constant Delta
    coefs = lambda j: ', '.join(f'{k} {with_interval(c["value"], *(c["ci"] or (None, None)), ".4g")}'
                                for k, c in j['coefficients'].items())
    joint = [f'- `{m}`: {joint_text(r["joint"])}' + (f'\n  {coefs(r["joint"])}' if r['joint'].get('fitted') else '')
             for m, r in bm.items() if r.get('joint')]
    s.append('\n'.join(['## Joint law (dense and X-MoD in one law; law/joint.py)\n', *joint]) + '\n' if joint else '')
    s.append(delta_vs_tokens_md(result['delta_vs_tokens']))
    s.append(fixes_md(result['fixes']))
    s.append('## Runs\n')
    # m the primary metric, o the other (METRICS has two: val_loss_causal and val_loss)
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


def joint_text(j):
    """One line about the joint law (law/joint.py) of one metric."""
    if not j.get('fitted'):
        return f'joint: not fitted ({j.get("note")})'
    held = '; '.join(f'held out {v["held_out"]}: RMSE(Delta) {fmt(v["rmse_delta"])}, constant Delta '
                     f'{fmt(v["null_rmse_delta"])}, Delta = 0 {fmt(v["vs_null"]["zero"]["null_rmse_delta"])}: '
                     + ('beats both nulls (95%)' if v['beats_null'] else 'no better than a constant')
                     for v in j['heldout'].values() if v.get('rmse_delta') is not None)
    return (f'joint ({j["n_runs"]} runs, {j["n_pairs"]} pairs): terms {", ".join(j["terms"]) or "none (the dense law)"}'
            f'; Delta rmse fit {fmt(j["fit"]["rmse_delta"])}, cv {fmt(j["cv"]["rmse_delta"])}; {held}')


def selection_md(bm):
    """Each term's Delta RMSE with and without it (CV: leave one configuration out; held out: the --holdout pairs),
    against the chosen form, and every form of the base terms plus some candidates."""
    sel = {m: bm[m]['metrics'].get('selection') for m in bm}
    if not any(sel.values()):
        return ''
    rule = next(x['rule'] for x in sel.values() if x)
    s = ['## Form selection by held-out error\n', f'Rule: {rule}.\n']
    s += [f'- {m}: {form_sentence(x)}' for m, x in sel.items() if x]
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


def mean_pm_se(row):
    """A {mean, se} row of n_mean_se as summary.md writes it: '-0.0100 +- 0.0058', the mean alone for one seed."""
    return '-' if row is None else f'{row["mean"]:+.4f}' + ('' if row['se'] is None else f' +- {row["se"]:.4f}')


def delta_vs_tokens_md(table):
    """summary.md's section on delta_vs_tokens' table: a row per configuration and evaluation."""
    s = ['## Delta against training tokens (tools/fit_plots.py draws it)\n',
         'Mean over seeds +- 1 standard error, at every evaluation a run and its dense partner both logged.\n']
    if not table:
        return '\n'.join(s + ['No sparse configuration has 2 seeds or more with dense partners.\n'])
    rows = []
    for label, e in table.items():
        # a row per evaluation of the causal metric, beside the top-k one at the same tokens
        topk = {row['tokens']: row for row in e['val_loss']}
        rows += [[label, len(e['seeds']), f'{row["tokens"]:.0f}', mean_pm_se(row), mean_pm_se(topk.get(row['tokens']))]
                 for row in e['val_loss_causal']]
    return '\n'.join(s + [md_table(['config', 'seeds', 'tokens', 'Delta causal', 'Delta top-k'], rows) + '\n'])


def fixes_md(table):
    """summary.md's section on paired_fixes' table: each fix's difference from full X-MoD."""
    s = ['## Router-knob fixes, paired by seed with full X-MoD\n',
         'L(fix) - L(X-MoD) of the same config and seed, mean over seeds +- 1 standard error (< 0: the fix helps). '
         'A fix wins beyond noise when the mean is below -2 standard errors.\n']
    if not table:
        return '\n'.join(s + ['No router-knob fix has a full X-MoD run of the same config and seed.\n'])
    rows = [[e['fix'], e['config'], ', '.join(map(str, e['seeds'])), mean_pm_se(e['val_loss_causal']),
             mean_pm_se(e['val_loss'])] for e in table.values()]
    return '\n'.join(s + [md_table(['fix', 'config', 'seeds', 'causal', 'top-k'], rows) + '\n'])


def print_summary(result, runs, out, n_plots):
    """Print, per metric, the dense, joint and relative laws, the form and the goals; where the files went (out); and
    last what a shared untuned rate means."""
    i = result['inputs']
    print(f'runs: {i["n_runs"]} ({", ".join(f"{k} {v}" for k, v in i["variants"].items())}), {i["n_heldout"]} held '
          f'out' + (f' by {i["holdout"]!r}' if i['holdout'] else ''))
    for m, r in result['by_metric'].items():
        d = r['dense']
        print(f'[{m}] dense: L = {d["E"]:.4g} + {d["A"]:.4g}/N^{d["alpha"]:.4g} + {d["B"]:.4g}/D^{d["beta"]:.4g}, '
              f'rmse(log L) {d["rmse_log"]:.3g}' + (' (ILL-POSED: ' + '; '.join(d['notes']) + ': not estimates, no '
                                                    'intervals)' if d['ill_posed'] else ''))
        if r.get('joint'):
            print(f'[{m}] {joint_text(r["joint"])}')
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
        print(f'[{m}] form: {form_sentence(r["metrics"]["selection"])}')
        if r['metrics']['goals']:
            print(f'[{m}] held-out goals: ' + '; '.join(goal_texts(r['metrics']['goals'])))
    print(f'wrote {os.path.join(out, "fit.json")}, summary.md and {n_plots} plots')
    if note := shared_rate_note(result, runs):
        print(note)


# -----------------------------------------------------------------------------
# the files: fit.json's rows and numbers, written into the output folder

def run_row(r):
    """One run as fit.json lists it."""
    p = r['partner']
    return dict(run=r['name'], dir=r['dir'], model=r['model'], variant=r['variant'], n_layer=r['n_layer'],
                n_embd=r['n_embd'], stride=r['stride'], capacity=r['capacity'], T=r['T'], seed=r['seed'],
                params_total=r['params_total'], params_active=r['params_active'], rho=r['rho'],
                flops_per_token=r['fpt'], tokens=r['tokens'], flops=r['flops'], heldout=r['heldout'], loss=r['loss'],
                partner=p['name'] if p else None,
                delta={m: r['loss'][m] - p['loss'][m] for m in METRICS} if p else None)


def to_json(x):
    if isinstance(x, dict):
        return {k: to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    return int(x) if isinstance(x, np.integer) else x


def to_json_text(x):
    """x as the JSON text of fit.json and the modes' files: NaN and inf as null, numpy numbers as Python's."""
    return json.dumps(to_json(x), indent=1)


def write(out, files):
    """Write {name: text} into the folder out (created)."""
    os.makedirs(out, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(out, name), 'w') as f:
            f.write(text)


def write_outputs(out, files, png, draw, shown):
    """A law/ command's end: files {name: text} and the picture png, draw(path), into the folder out; then print
    shown and what was written."""
    write(out, files)
    draw(os.path.join(out, png))
    print(shown)
    print(f"wrote {out}/{', '.join(files)}, {png}")
