"""
law/ladder.py: the compute ladder's analysis (sweeps/gpu_ladder.py): Delta = X-MoD - dense per width, paired by seed,
and how Delta moves per decade of training FLOPs. sweeps/gpu_ladder.sh runs it after the sweep:

    python -m law.ladder RUNS_DIR --out OUT     # OUT/ladder.md, ladder.json, delta.png, curves.png

The rate rule: at a width where an arm ran two peak rates, the seed-s pair takes each arm's rate with the lower
mean final loss over that arm's other seeds (leave one seed out), so the seed that gives a Delta never chose its own
rate (choosing by the same seed would pick its luckier rate and bias Delta toward each arm's noise). The rates are
compared over the other seeds that both finished: a run that did not finish (cut by the sweep's deadline, or stopped
by train.py's divergence check) is left out of the comparison, not counted against its rate, so a sweep cut short
compares its rates on the seeds it has. A width where an arm ran one rate uses it: nothing is chosen there, so no seed
is left out, and a single seed gets a Delta. The loss is val_loss_causal (causal routing; a dense run's two losses are
equal).

Per width: Delta's mean over seeds and a 95% t-interval with n - 1 degrees of freedom (n the seeds paired there).
The slope: ordinary least squares of the widths' mean Delta on log10 of their training FLOPs (the dense run's), per
decade, with a 95% seed-cluster bootstrap (seeds drawn with replacement from all seeds, each drawn seed bringing its
Delta at every width it has; the rates stay as chosen on all seeds). The verdict, for each routed arm:
  - the slope's interval below 0: the deficit is a small-scale effect (the law needs a compute term);
  - |slope| <= 0.003 per decade and Delta at the widest width >= +0.005: depth routing as built does not pay
    between the ladder's smallest and largest compute;
  - else: undecided at this ladder's size.
"""
import argparse
import json
import math
import os
import sys
from collections import defaultdict

import numpy as np

from law.load import load_runs

METRIC = 'val_loss_causal'
# two-sided 95% Student t quantiles (0.975) by degrees of freedom; beyond 30, the normal's
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 20: 2.086, 30: 2.042}
FLAT, DEFICIT = 0.003, 0.005         # the verdict's thresholds: slope per decade, Delta at the top
BOOTSTRAP = 2000


def t975(df):
    """The 0.975 quantile of Student's t at df degrees of freedom (the next tabled df at or below df)."""
    return T975[max(k for k in T975 if k <= df)] if df <= 30 else 1.960


def arm_of(r):
    """'dense', or 'xmod_s<stride>': the ladder's arm of a run."""
    return 'dense' if r['model'] == 'dense' else f"{r['model']}_s{r['stride']}"


def table(runs):
    """{(arm, width): {lr: {seed: loss}}} and {width: training FLOPs of its dense runs}."""
    losses = defaultdict(lambda: defaultdict(dict))
    flops = defaultdict(list)
    for r in runs:
        losses[(arm_of(r), r['n_embd'])][r['config']['learning_rate']][r['seed']] = r['loss'][METRIC]
        if r['model'] == 'dense':
            flops[r['n_embd']].append(r['flops'])
    return losses, {w: float(np.mean(f)) for w, f in flops.items()}


def chosen_rate(by_lr, seed):
    """The arm's rate for the seed-`seed` pair. One rate: that rate (no choice). Several: the lowest mean loss over
    the other seeds that every rate finished; where they share none, each rate's own other seeds; None when no rate
    has another seed (nothing to choose by)."""
    if len(by_lr) == 1:
        return next(iter(by_lr))
    others = {lr: set(by_seed) - {seed} for lr, by_seed in by_lr.items()}
    common = set.intersection(*others.values())
    judged = {lr: common or s for lr, s in others.items() if common or s}
    if not judged:
        return None
    return min(sorted(judged), key=lambda lr: np.mean([by_lr[lr][s] for s in sorted(judged[lr])]))


def deltas(losses, arm, width):
    """{seed: (Delta, dense rate, sparse rate)} at one width for one routed arm, each arm at its rate for that seed."""
    out = {}
    dense, sparse = losses.get(('dense', width)), losses.get((arm, width))
    if not dense or not sparse:
        return out
    for seed in sorted({s for by_seed in sparse.values() for s in by_seed}):
        lr_d, lr_s = chosen_rate(dense, seed), chosen_rate(sparse, seed)
        if lr_d is None or lr_s is None or seed not in dense[lr_d] or seed not in sparse[lr_s]:
            continue
        out[seed] = (sparse[lr_s][seed] - dense[lr_d][seed], lr_d, lr_s)
    return out


def interval(values):
    """dict(n, mean, se, df, lo, hi): the mean and its 95% t-interval (None where n < 2)."""
    v = np.asarray(values, dtype=float)
    n = len(v)
    out = dict(n=n, mean=float(v.mean()) if n else None, se=None, df=n - 1 if n > 1 else None, lo=None, hi=None)
    if n > 1:
        out['se'] = float(v.std(ddof=1) / math.sqrt(n))
        half = t975(n - 1) * out['se']
        out['lo'], out['hi'] = out['mean'] - half, out['mean'] + half
    return out


def slope(points):
    """Least-squares slope of Delta on log10 FLOPs over [(flops, mean Delta)], per decade; None below 2 points."""
    if len(points) < 2:
        return None
    x = np.log10([p[0] for p in points])
    y = np.array([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def analyse(runs, seed=0):
    losses, flops = table(runs)
    widths = sorted(flops)
    routed = sorted({arm for arm, _ in losses if arm != 'dense'})
    rng = np.random.default_rng(seed)
    result = dict(metric=METRIC, widths=widths, flops={str(w): flops[w] for w in widths}, arms={},
                  runs=len(runs), rule='where an arm ran two rates, each at the one with the lower mean loss over '
                  'its other seeds that both finished; where it ran one, that one')
    for arm in routed:
        per_width = {w: deltas(losses, arm, w) for w in widths}
        rows = []
        for w in widths:
            d = per_width[w]
            ran = {a: sorted(losses.get((a, w), {})) for a in ('dense', arm)}    # the rates each arm ran here
            rows.append(dict(width=w, flops=flops[w], seeds=sorted(d), delta=[d[s][0] for s in sorted(d)],
                             rates_run=dict(dense=ran['dense'], sparse=ran[arm]),
                             rates={str(s): dict(dense=d[s][1], sparse=d[s][2]) for s in sorted(d)},
                             **interval([d[s][0] for s in sorted(d)])))
        points = [(r['flops'], r['mean']) for r in rows if r['n']]
        est = slope(points)
        seeds = sorted({s for d in per_width.values() for s in d})
        boot = []
        for _ in range(BOOTSTRAP if est is not None else 0):
            draw = rng.choice(seeds, size=len(seeds), replace=True)
            pts = [(flops[w], np.mean([per_width[w][s][0] for s in draw if s in per_width[w]]))
                   for w in widths if any(s in per_width[w] for s in draw)]
            b = slope(pts)
            if b is not None:
                boot.append(b)
        lo, hi = (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))) if boot else (None, None)
        top = next((r for r in reversed(rows) if r['n']), None)
        result['arms'][arm] = dict(widths=rows, slope_per_decade=est, slope_lo=lo, slope_hi=hi, bootstrap=len(boot),
                                   top_width=top and top['width'], top_delta=top and top['mean'],
                                   verdict=verdict(est, hi, top and top['mean']))
    return result


def verdict(est, hi, top):
    """One sentence: what the slope and the top width's Delta say (module docstring)."""
    if est is None:
        return 'undecided: fewer than two widths have a Delta'
    if hi is not None and hi < 0:
        return ('the deficit is a small-scale effect: Delta falls with compute (the slope interval excludes 0), so '
                'the law needs a compute term')
    if abs(est) <= FLAT and top is not None and top >= DEFICIT:
        return ('depth routing as built does not pay at this ladder\'s compute: Delta is flat with compute '
                f'(|slope| <= {FLAT}) and at least +{DEFICIT} at the widest width')
    return 'undecided: neither a falling Delta nor a flat deficit is established at this ladder\'s size'


def fmt(v, digits=4):
    return '-' if v is None else f'{v:+.{digits}f}'


def to_markdown(result):
    lines = [f"# The compute ladder: Delta = X-MoD - dense ({result['metric']}), paired by seed", '',
             f"{result['runs']} finished runs; rate rule: {result['rule']}; 95% t-intervals (df = seeds - 1); "
             f"slope of Delta per decade of training FLOPs with a {BOOTSTRAP}-draw seed-cluster bootstrap.", '']
    for arm, a in result['arms'].items():
        lines += [f"## {arm} - dense", '',
                  '| width | training FLOPs | rates run (dense; sparse) | seeds | Delta | 95% interval | df |',
                  '|---|---|---|---|---|---|---|']
        for r in a['widths']:
            ci = f"[{fmt(r['lo'])}, {fmt(r['hi'])}]" if r['lo'] is not None else '-'
            ran = '; '.join(', '.join(f'{lr:.3g}' for lr in r['rates_run'][k]) or '-' for k in ('dense', 'sparse'))
            lines.append(f"| {r['width']} | {r['flops']:.3g} | {ran} | {r['n']} | {fmt(r['mean'])} | {ci} | "
                         f"{r['df'] if r['df'] is not None else '-'} |")
        ci = f"[{fmt(a['slope_lo'])}, {fmt(a['slope_hi'])}]" if a['slope_lo'] is not None else '-'
        lines += ['', f"slope {fmt(a['slope_per_decade'])} per decade, 95% bootstrap {ci}", '',
                  f"**{arm}: {a['verdict']}.**", '']
    return '\n'.join(lines)


def plots(result, runs, out):
    """delta.png: each routed arm's Delta against FLOPs with its t-intervals and slope; curves.png: every run's
    final loss against its FLOPs, by arm (the chosen rates' runs filled)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, a in result['arms'].items():
        rows = [r for r in a['widths'] if r['n']]
        x = [r['flops'] for r in rows]
        y = [r['mean'] for r in rows]
        err = [[r['mean'] - r['lo'] if r['lo'] is not None else 0 for r in rows],
               [r['hi'] - r['mean'] if r['hi'] is not None else 0 for r in rows]]
        line = ax.errorbar(x, y, yerr=err, fmt='o', capsize=4, label=f"{arm}: slope {fmt(a['slope_per_decade'])}"
                           f"/decade")
        if a['slope_per_decade'] is not None and len(x) > 1:
            xs = np.log10(x)
            b = np.mean(y) - a['slope_per_decade'] * np.mean(xs)
            ax.plot(x, b + a['slope_per_decade'] * xs, '-', c=line[0].get_color())
    ax.axhline(0, c='grey', lw=0.8)
    save(fig, ax, os.path.join(out, 'delta.png'), ylabel=f"Delta {result['metric']} (X-MoD - dense)",
         title='compute ladder: Delta per width (95% t-intervals)')
    chosen = set()                       # (arm, width, seed, rate) of every run a Delta used
    for arm, a in result['arms'].items():
        for r in a['widths']:
            for s, rates in r['rates'].items():
                chosen |= {('dense', r['width'], s, rates['dense']), (arm, r['width'], s, rates['sparse'])}
    fig, ax = plt.subplots(figsize=(6, 4))
    colours = dict(zip(sorted({arm_of(r) for r in runs}), plt.rcParams['axes.prop_cycle'].by_key()['color']))
    for arm, c in colours.items():
        rs = [r for r in runs if arm_of(r) == arm]
        picked = [(arm, r['n_embd'], str(r['seed']), r['config']['learning_rate']) in chosen for r in rs]
        ax.scatter([r['flops'] for r, p in zip(rs, picked) if p], [r['loss'][METRIC] for r, p in zip(rs, picked) if p],
                   color=c, s=18, label=f'{arm} (at its chosen rate)')
        ax.scatter([r['flops'] for r, p in zip(rs, picked) if not p],
                   [r['loss'][METRIC] for r, p in zip(rs, picked) if not p], facecolors='none', edgecolors=c, s=18)
    save(fig, ax, os.path.join(out, 'curves.png'), ylabel=f"final {result['metric']}",
         title='every run (open: the rate not chosen)')


def save(fig, ax, path, **labels):
    """A plot against training FLOPs (log axis), with its legend, to path."""
    import matplotlib.pyplot as plt
    ax.set(xscale='log', xlabel='training FLOPs per run', **labels)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv):
    p = argparse.ArgumentParser(prog='python -m law.ladder', description=__doc__.split('\n\n')[0].strip())
    p.add_argument('runs', nargs='+', help='run folders, or folders of run folders (globs as fit_law.py takes them)')
    p.add_argument('--out', required=True, help='where ladder.md, ladder.json, delta.png and curves.png go')
    args = p.parse_args(argv)
    runs = load_runs(args.runs)
    result = analyse(runs)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'ladder.json'), 'w') as f:
        json.dump(result, f, indent=1)
    md = to_markdown(result)
    with open(os.path.join(args.out, 'ladder.md'), 'w') as f:
        f.write(md + '\n')
    plots(result, runs, args.out)
    print(md)
    return 0


if __name__ == '__main__':
    from configurator import run_main
    sys.exit(run_main('law.ladder', main))
