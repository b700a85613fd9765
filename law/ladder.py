"""
law/ladder.py: the compute ladder's analysis (sweeps/gpu_ladder.py): Delta = routed arm - dense per rung, paired by
seed, each arm's best loss against training FLOPs (the core curve), and how Delta moves per decade of FLOPs, with a
verdict read only from intervals.

    python -m law.ladder RUNS [RUNS ...] --out OUT [--windows DIR ...] [--detect 0.011]
                                                      # OUT/ladder.md, ladder.json, delta.png, curves.png

The rate rule (the panel's): at each rung an arm ran seed 0 on several peak rates; the one with the lower final loss
at seed 0 is the arm's rate there, and every seed's pair uses it. Seed 0 chose, so its Delta carries the choice's
optimism; the table also gives Delta over seeds 1+ alone. A rung where seed 0 has not finished every rate it ran
takes the best of those that did, and says so. The loss is val_loss_causal (causal routing; a dense run's two losses
are equal). A rung is a width; its FLOPs are its dense runs' at the width's largest budget (shorter budgets at the
same width are WSD branches: points of the core curve, not rungs).

Delta per rung: the mean over the paired seeds and its 95% t-interval on n - 1 degrees of freedom. The slope: least
squares of every paired seed's Delta on log10 of its rung's training FLOPs, with its 95% t-interval on n - 2 degrees
of freedom (n: the Deltas over all rungs). The verdict, per routed arm, from that interval alone (verdict();
docs/ladder.md says why, tests/test_gpu_ladder.py simulates it): falls, grows, flat (within +-DETECT per decade),
or undecided.
"""
import argparse
import json
import math
import os
import sys
from collections import defaultdict
from functools import lru_cache

import numpy as np

from configurator import run_main
from law.load import load_runs
from law.report import write
from law.stats import t_interval, t_ppf

METRIC = 'val_loss_causal'
DETECT = 0.011           # per decade: what the window ladder detects 80% of the time at SD 0.0074 (docs/ladder.md)


def arm_of(r):
    """'dense', or 'xmod_s<stride>' / 'mod_s<stride>': the ladder's arm of a run."""
    return 'dense' if r['model'] == 'dense' else f"{r['model']}_s{r['stride']}"


def grid(runs):
    """{(arm, width, tokens): {lr: {seed: run}}}, {width: its largest budget in tokens}."""
    g = defaultdict(lambda: defaultdict(dict))
    top = {}
    for r in runs:
        g[(arm_of(r), r['n_embd'], r['tokens'])][r['config']['learning_rate']][r['seed']] = r
        top[r['n_embd']] = max(top.get(r['n_embd'], 0), r['tokens'])
    return g, top


def chosen_rate(by_lr, seed0=0):
    """(the rate with the lowest seed-0 loss among the rates seed 0 finished, whether every rate run at any seed
    has a finished seed-0 run); (None, False) without a seed-0 run."""
    done = {lr: by_seed[seed0]['loss'][METRIC] for lr, by_seed in by_lr.items() if seed0 in by_seed}
    if not done:
        return None, False
    return min(sorted(done), key=lambda lr: done[lr]), len(done) == len(by_lr)


t975 = lru_cache(None)(lambda df: t_ppf(0.975, df))     # computed once per df: the simulations call it often


def slope_fit(xs, ys):
    """Least squares of ys on xs: dict(slope, se, df, lo, hi, n), a 95% t-interval; None below 3 points or one x."""
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    n = len(x)
    if n < 3 or np.ptp(x) == 0:
        return None
    sxx = float(((x - x.mean()) ** 2).sum())
    b = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    resid = y - y.mean() - b * (x - x.mean())
    se = math.sqrt(float((resid ** 2).sum()) / (n - 2) / sxx)
    half = t975(n - 2) * se
    return dict(slope=b, se=se, df=n - 2, lo=b - half, hi=b + half, n=n)


def verdict(fit, top=None, detect=DETECT):
    """(falls, grows, flat or undecided, a sentence) from the slope's interval; where flat, the widest rung's Delta
    says on which side."""
    if fit is None:
        return 'undecided', 'undecided: fewer than two rungs with a Delta (or under 3 Deltas)'
    ci = f"[{fit['lo']:+.4f}, {fit['hi']:+.4f}] per decade, t({fit['df']})"
    if fit['hi'] < 0:
        return 'falls', f'falls: Delta falls as compute grows, slope {ci}: sparse depth gains ground on this ladder'
    if fit['lo'] > 0:
        return 'grows', f'grows: Delta grows with compute, slope {ci}: sparse depth loses ground on this ladder'
    if -detect < fit['lo'] and fit['hi'] < detect:
        side = '' if not top or top.get('lo') is None else (
            '; behind dense at the widest rung (its interval above 0): depth routing as built does not pay here'
            if top['lo'] > 0 else '; ahead of dense at the widest rung (its interval below 0)' if top['hi'] < 0
            else '; level with dense at the widest rung (its interval holds 0)')
        return 'flat', f'flat: the slope {ci} lies within +-{detect} per decade{side}'
    return 'undecided', f'undecided: the slope {ci} holds 0 and slopes of +-{detect} per decade'


def provenance(r):
    """(commit, dirty, diff sha256) from run.json; 'not recorded' where a run predates the field."""
    m = r['meta']
    dirty = m.get('git_dirty')
    return (m.get('git_commit') or 'not recorded')[:12], ('not recorded' if dirty is None else bool(dirty)), \
        m.get('git_diff_sha256', 'not recorded')


def analyse(runs, windows=(), detect=DETECT):
    """The ladder's result as a dict (ladder.json): per routed arm the rungs' Deltas, the slope and the verdict; per
    arm the core curve; the windows and each run's provenance."""
    g, top = grid(runs)
    widths = sorted(top)
    arms = sorted({a for a, _, _ in g})
    routed = [a for a in arms if a != 'dense']
    # each arm's rate at each width, chosen at the width's largest budget; shorter budgets (branches) follow it
    rate = {(arm, w): chosen_rate(g[(arm, w, top[w])]) for arm in arms for w in widths if g.get((arm, w, top[w]))}
    flops = {}
    for w in widths:
        dense = [r['flops'] for by_seed in g.get(('dense', w, top[w]), {}).values() for r in by_seed.values()]
        flops[w] = float(np.mean(dense)) if dense else None
    result = dict(metric=METRIC, detect_per_decade=detect, runs=len(runs), widths=widths,
                  rule="each arm at the rate with the lower seed-0 loss at the width's largest budget", arms={},
                  curves={}, windows=list(windows))
    for arm in routed:
        rows, xs, ys = [], [], []
        for w in widths:
            (lr_d, all_d), (lr_s, all_s) = rate.get(('dense', w), (None, False)), rate.get((arm, w), (None, False))
            if lr_d is None or lr_s is None or flops[w] is None:
                rows.append(dict(width=w, flops=flops[w], n=0, seeds=[], delta=[], mean=None, lo=None, hi=None,
                                 df=None, se=None, p=None, later=None, rates=None))
                continue
            dense, sparse = g[('dense', w, top[w])][lr_d], g[(arm, w, top[w])][lr_s]
            seeds = sorted(set(dense) & set(sparse))
            d = [sparse[s]['loss'][METRIC] - dense[s]['loss'][METRIC] for s in seeds]
            ran = {k: {f'{lr:.3g}': round(by[0]['loss'][METRIC], 4) for lr, by in sorted(g[(a, w, top[w])].items())
                       if 0 in by} for k, a in (('dense', 'dense'), ('sparse', arm))}
            later = [x for s, x in zip(seeds, d) if s != 0]
            rows.append(dict(width=w, flops=flops[w], tokens=top[w], seeds=seeds, delta=d,
                             rates=dict(dense=lr_d, sparse=lr_s, seed0=ran, complete=all_d and all_s),
                             later=t_interval(later) if later else None, **t_interval(d)))
            xs += [math.log10(flops[w])] * len(d)
            ys += d
        fit = slope_fit(xs, ys)
        top_row = next((r for r in reversed(rows) if r['n']), None)
        key, sentence = verdict(fit, top_row, detect)
        result['arms'][arm] = dict(widths=rows, slope=fit, verdict=key, sentence=sentence)
    for arm in arms:        # the core curve: each (width, budget) point at the arm's chosen rate, seed mean
        points = []
        for (a, w, tokens), by_lr in sorted(g.items()):
            lr = rate.get((a, w), (None,))[0]
            if a != arm or lr not in by_lr:
                continue
            rs = list(by_lr[lr].values())
            points.append(dict(width=w, tokens=tokens, flops=float(np.mean([r['flops'] for r in rs])), n=len(rs),
                               loss=float(np.mean([r['loss'][METRIC] for r in rs]))))
        points.sort(key=lambda p: p['flops'])
        best = math.inf
        for p in points:             # the frontier: no point with fewer FLOPs reaches a lower loss
            p['frontier'] = p['loss'] < best
            best = min(best, p['loss'])
        result['curves'][arm] = points
    result['provenance'] = sorted({provenance(r) for r in runs}, key=str)
    return result


def fmt(v, digits=4):
    return '-' if v is None else f'{v:+.{digits}f}'


def ci(d):
    return f"[{fmt(d['lo'])}, {fmt(d['hi'])}]" if d and d.get('lo') is not None else '-'


def untracked(window):
    """', N untracked' where the window's tree had files git did not track (not in its diff's hash)."""
    return f", {len(window['git_untracked'])} untracked" if window.get('git_untracked') else ''


def to_markdown(result):
    lines = [f"# The compute ladder: Delta = routed arm - dense ({result['metric']}), paired by seed", '',
             f"{result['runs']} finished runs; rate rule: {result['rule']}; 95% t-intervals (df = seeds - 1); the "
             f"slope of every seed's Delta on log10 training FLOPs, 95% t-interval (df = Deltas - 2); verdict from "
             f"that interval alone (the ladder detects +-{result['detect_per_decade']} per decade).", '']
    for arm, a in result['arms'].items():
        lines += [f"## {arm} - dense", '',
                  '| width | training FLOPs | seed-0 loss at each rate (dense; sparse) | rates used | seeds | Delta | '
                  '95% interval | df | seeds 1+ only |', '|---|---|---|---|---|---|---|---|---|']
        for r in a['widths']:
            if not r['n']:
                lines.append(f"| {r['width']} | {r['flops'] or 0:.3g} | - | - | 0 | - | - | - | - |")
                continue
            rates = r['rates']
            seed0 = '; '.join(', '.join(f'{lr}: {v:.4f}' for lr, v in rates['seed0'][k].items()) or '-'
                              for k in ('dense', 'sparse'))
            used = f"{rates['dense']:.3g}; {rates['sparse']:.3g}" + ('' if rates['complete'] else
                                                                      ' (not every seed-0 rate finished)')
            later = f"{fmt(r['later']['mean'])} {ci(r['later'])}" if r['later'] else '-'
            lines.append(f"| {r['width']} | {r['flops']:.3g} | {seed0} | {used} | {r['n']} | {fmt(r['mean'])} | "
                         f"{ci(r)} | {r['df'] if r['df'] is not None else '-'} | {later} |")
        s = a['slope']
        lines += ['', f"slope {fmt(s and s['slope'])} per decade, 95% {ci(s)}" +
                  (f", t({s['df']}) over {s['n']} Deltas" if s else ''), '', f"**{arm}: {a['sentence']}.**", '']
    lines += ['## The core curve: each arm\'s loss against training FLOPs (seed means at its chosen rate)', '',
              '| arm | width | tokens | training FLOPs | seeds | loss | on the frontier |', '|---|---|---|---|---|---|---|']
    for arm, points in result['curves'].items():
        lines += [f"| {arm} | {p['width']} | {p['tokens'] / 1e6:.3g}M | {p['flops']:.3g} | {p['n']} | "
                  f"{p['loss']:.4f} | {'yes' if p['frontier'] else 'no'} |" for p in points]
    if result['windows']:
        lines += ['', '## The windows that produced these runs', '',
                  '| window | date | device | commit | uncommitted changes | diff sha256 | runs trained there |',
                  '|---|---|---|---|---|---|---|']
        for w in result['windows']:
            lines.append(f"| {w.get('name', '-')} | {w.get('date', '-')} | {w.get('device', '-')} | "
                         f"{str(w.get('git_commit', '-'))[:12]} | {w.get('git_dirty', 'not recorded')}{untracked(w)} | "
                         f"{(w.get('git_diff_sha256') or '-')[:12]} | {len(w.get('runs', []))} |")
    lines += ['', 'The runs\' own run.json (commit, uncommitted changes, diff sha256): ' +
              '; '.join(f'{c} {d} {str(h)[:12]}' for c, d, h in result['provenance'])]
    return '\n'.join(lines)


def plots(result, out):
    """delta.png: each routed arm's Delta per rung with its t-interval and the fitted slope; curves.png: each arm's
    loss against training FLOPs, its frontier joined (the core curves, one picture)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, a in result['arms'].items():
        rows = [r for r in a['widths'] if r['n']]
        x, y = [r['flops'] for r in rows], [r['mean'] for r in rows]
        err = [[r['mean'] - r['lo'] if r['lo'] is not None else 0 for r in rows],
               [r['hi'] - r['mean'] if r['hi'] is not None else 0 for r in rows]]
        s = a['slope']
        line = ax.errorbar(x, y, yerr=err, fmt='o', capsize=4, label=f"{arm}: {a['verdict']}, slope "
                           f"{fmt(s and s['slope'])}/decade")
        if s:
            xs = np.log10(x)
            b = np.mean([d for r in rows for d in r['delta']]) - s['slope'] * np.mean(
                [math.log10(r['flops']) for r in rows for _ in r['delta']])
            ax.plot(x, b + s['slope'] * xs, '-', c=line[0].get_color())
    ax.axhline(0, c='grey', lw=0.8)
    save(fig, ax, os.path.join(out, 'delta.png'), ylabel=f"Delta {result['metric']} (routed - dense)",
         title='Delta per rung (95% t-intervals) and its slope')
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, points in result['curves'].items():
        front = [p for p in points if p['frontier']]
        line, = ax.plot([p['flops'] for p in front], [p['loss'] for p in front], '-o', ms=4, label=arm)
        rest = [p for p in points if not p['frontier']]
        ax.scatter([p['flops'] for p in rest], [p['loss'] for p in rest], facecolors='none',
                   edgecolors=line.get_color(), s=18)
    save(fig, ax, os.path.join(out, 'curves.png'), ylabel=f"final {result['metric']} (seed mean)",
         title="each arm's loss against compute (open: off its frontier)")


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
    p.add_argument('--windows', nargs='*', default=[], help='window folders (window.json each): which made which runs')
    p.add_argument('--detect', type=float, default=DETECT, help='the margin of a flat verdict, per decade: '
                   f'{DETECT} for the window plan, 0.006 for the full plan')
    args = p.parse_args(argv)
    # each window folder's window.json (what sweeps/gpu_window.sh writes), with the folder's name
    windows = [dict(json.load(open(os.path.join(f, 'window.json'))), name=os.path.basename(os.path.normpath(f)))
               for f in args.windows if os.path.isfile(os.path.join(f, 'window.json'))]
    result = analyse(load_runs(args.runs), windows, args.detect)
    md = to_markdown(result)
    write(args.out, {'ladder.json': json.dumps(result, indent=1, default=str), 'ladder.md': md + '\n'})
    plots(result, args.out)
    print(md)
    return 0


if __name__ == '__main__':
    sys.exit(run_main('law.ladder', main))
