"""
law/isoflop.py: the comparison Mixture-of-Depths makes (sweeps/study/cpu_isoflop.py): at one
training budget, each arm (dense, and X-MoD at stride 4) trained at several sizes, each on budget / its FLOPs per
token; each arm's optimum is the vertex of a parabola in log N fitted to its seed-mean losses, and Delta at the
optima = L*(X-MoD) - L*(dense). N is params_total (non-embedding, every routed block counted; run.json), the axis
MoD draws; params_active (what a token passes through) is reported beside it.

The budget is the training FLOPs most of the runs share (runs more than BUDGET_TOL away are left out, warned). Only
the seeds every size of every arm has are used: the intervals resample seeds with replacement, a seed's runs at every
size of both arms together, and refit the parabolas. A vertex at or beyond an edge of the sizes is clipped to it,
flagged, and its interval open on that side.

    python -m law.isoflop RUNS... --out DIR [--bootstrap 2000]          # isoflop.json, isoflop.md, isoflop.png
"""

import math
import shlex
import sys

import numpy as np

from configurator import UserError, defaults_of, run_main
from law.load import WARNINGS, command_line, load_runs, warn
from law.report import to_json_text, write_outputs
from law.stats import fmt_t, percentile_ci, t_interval

BUDGET_TOL = 0.02        # runs within 2% of the budget's FLOPs are at it (match_flops' tolerance)


def arm_of(r):
    """'dense' or 'xmod' (full X-MoD at stride 4), None for a run the isoFLOP comparison does not draw."""
    return 'dense' if r['variant'] == 'dense' else 'xmod' if r['variant'] == 'xmod' and r['stride'] == 4 else None


def parabola(x, y):
    """Least squares y = c0 + c1 x + c2 x^2 -> (c0, c1, c2); None for fewer than 3 distinct x."""
    if len(set(np.round(x, 12))) < 3:
        return None
    c2, c1, c0 = np.polyfit(x, y, 2)
    return float(c0), float(c1), float(c2)


def optimum(coef, x, y):
    """The minimum of the fitted parabola over the sizes measured -> (x*, L*, where: one of WHERE's keys)."""
    lo, hi = float(min(x)), float(max(x))
    if coef is None:
        i = int(np.argmin(y))
        return float(x[i]), float(y[i]), 'too few sizes'
    c0, c1, c2 = coef
    f = lambda t: c0 + c1 * t + c2 * t * t
    if c2 <= 0:
        t = lo if f(lo) <= f(hi) else hi
        return t, f(t), 'no minimum'
    t = -c1 / (2 * c2)
    if t <= lo:
        return lo, f(lo), 'below'
    if t >= hi:
        return hi, f(hi), 'above'
    return t, f(t), 'inside'


def select(runs):
    """The runs at the budget, by arm and size: -> (budget, {arm: {n_embd: {seed: run}}}, the seeds used)."""
    use = [r for r in runs if arm_of(r)]
    if len(use) < len(runs):
        warn(f'{len(runs) - len(use)} run(s) neither dense nor X-MoD at stride 4, left out of the isoFLOP comparison')
    if not use:
        raise UserError('no dense or X-MoD (stride 4) run: nothing to compare at one budget')
    budget = float(np.median([r['flops'] for r in use]))
    at = [r for r in use if abs(r['flops'] / budget - 1) <= BUDGET_TOL]
    if len(at) < len(use):
        warn(f'{len(use) - len(at)} run(s) more than {BUDGET_TOL:.0%} from the budget of {budget:.4g} FLOPs, left out')
    grid = {}
    for r in at:
        grid.setdefault(arm_of(r), {}).setdefault(r['n_embd'], {})[r['seed']] = r
    seeds = sorted(set.intersection(*(set(by_seed) for sizes in grid.values() for by_seed in sizes.values())))
    if not seeds:
        raise UserError('no seed has a run at every size of every arm: nothing to pair by seed')
    dropped = sum(len(set(by_seed) - set(seeds)) for sizes in grid.values() for by_seed in sizes.values())
    if dropped:
        warn(f'{dropped} run(s) of seeds not run at every size of every arm, left out (seeds used: '
             f'{", ".join(map(str, seeds))})')
    return budget, grid, seeds


def fit_arm(sizes, seeds, metric, weights=None):
    """One arm's parabola on its seed means (weights: a bootstrap's draws of each seed) -> (log N, mean loss per
    size, coefficients, optimum)."""
    w = np.ones(len(seeds)) if weights is None else np.asarray(weights, float)
    x = np.array([math.log(sizes[n][seeds[0]]['params_total']) for n in sorted(sizes)])
    y = np.array([np.average([sizes[n][s]['loss'][metric] for s in seeds], weights=w) for n in sorted(sizes)])
    coef = parabola(x, y)
    return x, y, coef, optimum(coef, x, y)


def analyse(runs, metric, n_boot, seed):
    """isoflop.json: the budget, each arm's sizes, parabola and optimum with intervals, and Delta at the optima."""
    budget, grid, seeds = select(runs)
    if set(grid) != {'dense', 'xmod'}:
        raise UserError(f'the isoFLOP comparison needs both arms, dense and X-MoD stride 4; got {", ".join(grid)}')
    result = dict(metric=metric, budget=budget, seeds=seeds, N='params_total (non-embedding)', arms={})
    for arm, sizes in grid.items():
        x, y, coef, (xs, Ls, where) = fit_arm(sizes, seeds, metric)
        rows = []
        for n in sorted(sizes):
            r0 = sizes[n][seeds[0]]
            rows.append(dict(n_embd=n, n_layer=r0['n_layer'], params_total=r0['params_total'],
                             params_active=r0['params_active'], tokens=r0['tokens'], flops=r0['flops'],
                             lr=r0['config'].get('learning_rate'), capacity=r0['capacity'],
                             losses=[sizes[n][s]['loss'][metric] for s in seeds],
                             loss=t_interval([sizes[n][s]['loss'][metric] for s in seeds])))
        logs_act = [math.log(r['params_active']) for r in rows]
        result['arms'][arm] = dict(sizes=rows, coef=coef, N_opt=math.exp(xs), loss_opt=Ls, where=where,
                                   N_active_opt=math.exp(float(np.interp(xs, x, logs_act))),
                                   best_measured=rows[int(np.argmin(y))]['n_embd'])
    result['delta_opt'] = result['arms']['xmod']['loss_opt'] - result['arms']['dense']['loss_opt']
    # Delta measured, paired by seed: at each width both arms ran, and between each arm's best measured size
    pair = lambda nx, nd: t_interval([grid['xmod'][nx][s]['loss'][metric] - grid['dense'][nd][s]['loss'][metric]
                                      for s in seeds])
    widths = sorted(set(grid['dense']) & set(grid['xmod']))
    result['delta_by_width'] = [dict(n_embd=n, delta=pair(n, n)) for n in widths]
    # does Delta move with log(tokens per active N) across the widths? a slope per seed, a t interval over seeds
    q = [math.log(grid['dense'][n][seeds[0]]['tokens'] / grid['dense'][n][seeds[0]]['params_active']) for n in widths]
    slopes = [float(np.polyfit(q, [grid['xmod'][n][s]['loss'][metric] - grid['dense'][n][s]['loss'][metric]
                                   for n in widths], 1)[0]) for s in seeds] if len(widths) > 1 else []
    result['delta_slope_log_q'] = t_interval(slopes) if slopes else None
    bx, bd = result['arms']['xmod']['best_measured'], result['arms']['dense']['best_measured']
    result['delta_best_measured'] = dict(xmod=bx, dense=bd, delta=pair(bx, bd))
    # the bootstrap: seeds drawn with replacement, the same draw for both arms (a seed's runs go together)
    rng, boot = np.random.default_rng(seed), {'dense': [], 'xmod': [], 'delta': []}
    for _ in range(n_boot if len(seeds) > 1 else 0):
        w = np.bincount(rng.integers(0, len(seeds), len(seeds)), minlength=len(seeds))
        opt = {arm: fit_arm(sizes, seeds, metric, w)[3] for arm, sizes in grid.items()}
        for arm in grid:
            boot[arm].append(opt[arm])
        boot['delta'].append(opt['xmod'][1] - opt['dense'][1])
    pct = lambda v: [float(x) for x in percentile_ci(v)] if len(v) > 1 else None
    for arm in grid:
        a, b = result['arms'][arm], boot[arm]
        a['N_opt_ci'] = pct([math.exp(t[0]) for t in b])
        a['loss_opt_ci'] = pct([t[1] for t in b])
        # a draw whose optimum is not inside the sizes did not locate one: the interval is open on that side
        a['share_not_inside'] = float(np.mean([t[2] != 'inside' for t in b])) if b else None
    result['delta_opt_ci'] = pct(boot['delta'])
    result['bootstrap'] = dict(n=len(boot['delta']), distinct_draws=math.comb(2 * len(seeds) - 1, len(seeds)))
    return result


WHERE = {'inside': 'inside the sizes', 'below': 'at or below the smallest size: open below',
         'above': 'at or above the largest size: open above', 'no minimum': 'no minimum (the parabola opens '
         'downward): open', 'too few sizes': 'fewer than 3 sizes: the best size measured'}
ARM_NAMES = {'dense': 'dense (4 layers)', 'xmod': 'X-MoD (stride 4)'}


def to_markdown(result, command):
    ci = lambda v, f: '' if v is None else f' [{v[0]:{f}}, {v[1]:{f}}]'
    b = result['bootstrap']
    lines = ['# IsoFLOP optima: each arm at its best size for one budget', '', '```', command, '```', '',
             f"Budget {result['budget']:.4g} training FLOPs; {result['metric']}; seeds {', '.join(map(str, result['seeds']))} "
             f"(those run at every size of both arms). N = {result['N']}; active N: the parameters a token passes "
             'through. Loss: mean over seeds ± SE, 95% t interval. Each arm: a parabola in log N through its seed '
             f"means; its vertex is the optimum. Intervals: {b['n']} bootstrap draws of the seeds (with replacement, "
             f"both arms on the same draw; {b['distinct_draws']} distinct draws exist), each refitted.", '',
             '| arm | width | layers | N | active N | tokens | tokens per active N | lr | loss | parabola |',
             '|---|---|---|---|---|---|---|---|---|---|']
    for arm, a in result['arms'].items():
        c = a['coef']
        for s in a['sizes']:
            fit = '-' if c is None else f"{c[0] + c[1] * math.log(s['params_total']) + c[2] * math.log(s['params_total']) ** 2:.4f}"
            t = s['loss']
            loss = f"{t['mean']:.4f}" + ('' if t['se'] is None else
                                         f" ± {t['se']:.4f}, 95% t({t['df']}) [{t['lo']:.4f}, {t['hi']:.4f}]")
            lines.append(f"| {ARM_NAMES[arm]} | {s['n_embd']} | {s['n_layer']} | {s['params_total']:,.0f} | "
                         f"{s['params_active']:,.0f} | {s['tokens']:,.0f} | {s['tokens'] / s['params_active']:.3g} | "
                         f"{s['lr']:g} | {loss} | {fit} |")
    lines += ['', '| arm | N* (95%) | active N* | L* (95%) | where the optimum lies | draws not inside |',
              '|---|---|---|---|---|---|']
    for arm, a in result['arms'].items():
        share = '-' if a['share_not_inside'] is None else f"{a['share_not_inside']:.0%}"
        lines.append(f"| {ARM_NAMES[arm]} | {a['N_opt']:,.0f}{ci(a['N_opt_ci'], ',.0f')} | {a['N_active_opt']:,.0f} | "
                     f"{a['loss_opt']:.4f}{ci(a['loss_opt_ci'], '.4f')} | {WHERE[a['where']]} | {share} |")
    d = result['delta_opt']
    lines += ['', f"Delta at the optima, L*(X-MoD) - L*(dense): {d:+.4f}{ci(result['delta_opt_ci'], '+.4f')} "
              '(above 0: the best X-MoD is behind the best dense model).']
    b = result['delta_best_measured']
    lines += [f"Delta between the best measured sizes (X-MoD width {b['xmod']}, dense width {b['dense']}), paired by "
              f"seed: {fmt_t(b['delta'])}. At each width, X-MoD - dense, paired by seed: "
              + '; '.join(f"{r['n_embd']}: {fmt_t(r['delta'])}" for r in result['delta_by_width']) + '.']
    if result['delta_slope_log_q']:
        lines.append("Across the widths, Delta's slope per e-fold of tokens per active parameter (dense's), one "
                     f"least-squares slope per seed: {fmt_t(result['delta_slope_log_q'])} (below 0: X-MoD gains on "
                     'dense as the data per parameter grows).')
    open_ = [ARM_NAMES[arm] for arm, a in result['arms'].items() if a['where'] != 'inside']
    if open_:
        lines.append(f"The optimum of {' and '.join(open_)} is not inside the sizes measured: its N* and L* are the "
                     'edge of what was run, and Delta at the optima is a bound, not an estimate.')
    if result.get('warnings'):
        lines += ['', 'Warnings:'] + [f'- {w}' for w in result['warnings']]
    return '\n'.join(lines) + '\n'


def plot(result, path):
    """isoflop.png: loss against N for both arms, each seed a point, the seed means, the parabolas and the optima
    (a star, its interval of N* as a bar), as Mixture-of-Depths draws its isoFLOP curves."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    colors = {'dense': 'black', 'xmod': 'tab:blue'}
    for arm, a in result['arms'].items():
        c = colors[arm]
        N = np.array([s['params_total'] for s in a['sizes']])
        for s in a['sizes']:
            ax.scatter([s['params_total']] * len(s['losses']), s['losses'], s=12, color=c, alpha=0.45)
        ax.plot(N, [s['loss']['mean'] for s in a['sizes']], 'o', color=c, mfc='white', label=f'{ARM_NAMES[arm]}: seed mean')
        if a['coef'] is not None:
            g = np.geomspace(N.min() / 1.15, N.max() * 1.15, 100)
            c0, c1, c2 = a['coef']
            ax.plot(g, c0 + c1 * np.log(g) + c2 * np.log(g) ** 2, '-', color=c, lw=1)
        lo, hi = a['N_opt_ci'] or (a['N_opt'], a['N_opt'])
        ax.errorbar([a['N_opt']], [a['loss_opt']], xerr=[[a['N_opt'] - lo], [hi - a['N_opt']]], fmt='*', ms=14,
                    color=c, capsize=3, label=f"{ARM_NAMES[arm]} optimum" + ('' if a['where'] == 'inside' else
                                                                           ' (at an edge)'))
    ax.set_xscale('log')
    ax.set(xlabel='N, non-embedding parameters (total)', ylabel=result['metric'],
           title=f"isoFLOP at {result['budget']:.3g} FLOPs: Delta at the optima {result['delta_opt']:+.4f}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -----------------------------------------------------------------------------
# the command line (configurator.py): RUNS... are bare arguments, run folders or globs of them
out = ''                     # output directory (created); required
metric = 'val_loss_causal'   # the loss: val_loss_causal or val_loss
bootstrap = 200              # resamples of the seeds for the intervals
seed = 0                     # the resamples' seed
DEFAULTS = defaults_of(globals())


def run(argv):
    cfg = command_line(argv, DEFAULTS, __doc__, __file__, 'python -m law.isoflop RUNS... --out DIR')
    result = analyse(load_runs(cfg.runs), cfg.metric, cfg.bootstrap, cfg.seed)
    result['warnings'] = list(WARNINGS)
    command = ('python -m law.isoflop ' + ' '.join(shlex.quote(r) for r in cfg.runs) + f' --out {cfg.out}'
               + (f' --bootstrap {cfg.bootstrap}' if cfg.bootstrap != bootstrap else ''))
    md = to_markdown(result, command)
    write_outputs(cfg.out, {'isoflop.json': to_json_text(result), 'isoflop.md': md}, 'isoflop.png',
                  lambda path: plot(result, path), md)
    return 0


def main(argv=None):
    return run_main('python -m law.isoflop', run, argv)


if __name__ == '__main__':
    sys.exit(main())
