"""
law/regimes.py: one law of Delta across regimes: corpora, contexts and tokens per active
parameter, from the tuned runs of every sweep. The absolute law is per corpus (law/load.py refuses to mix them), but
Delta, X-MoD's loss minus its FLOP-matched dense partner's on the same corpus and seed, can be compared across them:

    Delta = log(rho) * (-capacity_gain + stride_interaction*log(s/s0) [+ tokens_per_param*log(q/q0)]
                        [+ context_correction*log(T/T0)] [+ corpus_<name>*[corpus is name]])

q = training tokens per active parameter of the dense partner (D / N_act), q0 = D0/N0 (the reference pair's, 2.5).
The bracketed terms are candidates, chosen by the relative law's rule (leave-one-configuration-out RMSE of Delta).
The chosen form is then tested, against a constant Delta and Delta = 0 (versus_nulls), on what it was not fitted on:
each configuration; the pairs at the largest q; at the longest context; each corpus but the reference. In a refit, a
term the remaining pairs cannot constrain is left out (its coefficient 0).

Where Delta crosses zero: with tokens_per_param in the form (forced in when the selection dropped it),
Delta / log(rho) = level + tokens_per_param * log(q/q0) for each corpus at T = T0 and s = s0, 0 at
q* = q0 * exp(-level / tokens_per_param); a cluster bootstrap over configurations gives its interval, and Delta's at
q = REACH_Q, the most tokens per parameter this machine reaches in a two-hour one-thread run.

    python -m law.regimes RUNS... --out DIR [--bootstrap 2000]          # regimes.json, regimes.md, regimes.png
"""

import math
import sys
from collections import Counter

import numpy as np

from configurator import UserError, defaults_of, run_main
from law.load import WARNINGS, command_line, load_runs, pair_runs
from law.rates import tuned_runs
from law.report import to_json_text, write_outputs
from law.stats import percentile_ci, rank_quantile, t_interval, versus_nulls
from law.terms import D0, N0, S0, SELECT_MARGIN, T0, backward_select

Q0 = D0 / N0                       # tokens per active parameter of the reference pair, 2.5
REFERENCE_CORPUS = 'shakespeare'   # the reference pair's (law/terms.py: D0, N0)
# width 64 (0.2M active parameters) trains 16M tokens in about 25 minutes on one thread here (results/cpu_tokens), so
# two hours reach about 80M tokens: 400 tokens per active parameter
REACH_Q = 400.0
BASE = ('capacity_gain', 'stride_interaction')
CANDIDATES = ('tokens_per_param', 'context_correction')   # plus one corpus_<name> per corpus beyond the reference


def regime_pairs(runs, metric):
    """Each full X-MoD run with a dense partner (law.load.pair_runs) -> one pair, Delta and what the law reads."""
    pairs = []
    for r in runs:
        if r['variant'] != 'xmod' or r['partner'] is None:
            continue
        d = r['partner']
        config = (r['dataset'], r['n_embd'], r['T'], r['tokens'], r['stride'], round(r['capacity'], 4),
                  r['config'].get('lr_schedule', 'cosine'))
        pairs.append(dict(corpus=r['dataset'], T=r['T'], stride=r['stride'], rho=r['rho'], seed=r['seed'],
                          tokens=r['tokens'], n_embd=r['n_embd'], q=r['tokens'] / d['params_active'],
                          config=config, name=r['name'], delta=r['loss'][metric] - d['loss'][metric]))
    return pairs


def reference_corpus(pairs):
    """The corpus the other corpora's terms are read against: REFERENCE_CORPUS when it is there, else the one with
    the most pairs (ties: by name)."""
    counts = Counter(p['corpus'] for p in pairs)
    return min(counts, key=lambda c: (c != REFERENCE_CORPUS, -counts[c], c))


def candidates(pairs, ref):
    """CANDIDATES, then corpus_<name> for each corpus but the reference, whose level capacity_gain carries."""
    return list(CANDIDATES) + [f'corpus_{c}' for c in sorted({p['corpus'] for p in pairs}) if c != ref]


def feature(p, term):
    """A term's feature, times log(rho): the law is 0 at rho = 1 (X-MoD with no routed layer is the dense model)."""
    if term == 'capacity_gain':
        f = -1.0
    elif term == 'stride_interaction':
        f = math.log(p['stride'] / S0)
    elif term == 'tokens_per_param':
        f = math.log(p['q'] / Q0)
    elif term == 'context_correction':
        f = math.log(p['T'] / T0)
    else:
        f = float(p['corpus'] == term[len('corpus_'):])
    # times log rho (docs/design.md): Delta vanishes at rho = 1, and a power law in total
    # parameters at fixed active compute is, to first order, linear in log rho
    return math.log(p['rho']) * f


def design(pairs, terms):
    """The features, (n_pairs, n_terms): Delta is linear in the coefficients."""
    return np.array([[feature(p, t) for t in terms] for p in pairs], dtype=np.float64).reshape(len(pairs), len(terms))


def identified(pairs, terms):
    """The terms, in order, that the pairs constrain: each one raises the rank of the design (a column that does
    not is zero or a mix of kept ones: its coefficient would be arbitrary)."""
    X, kept = design(pairs, terms), []
    for j, t in enumerate(terms):
        cols = [terms.index(k) for k in kept] + [j]
        if np.linalg.matrix_rank(X[:, cols], tol=1e-9) == len(cols):
            kept.append(t)
    return kept


def solve(pairs, terms):
    """Least squares, each pair weighing the same -> {term: coefficient} over the identified terms."""
    terms = identified(pairs, terms)
    if not terms:
        return {}
    coef = np.linalg.lstsq(design(pairs, terms), np.array([p['delta'] for p in pairs]), rcond=None)[0]
    return dict(zip(terms, coef.tolist()))


def predict(coef, pairs):
    """The law's Delta for each pair, (n_pairs,), from {term: coefficient}."""
    terms = list(coef)
    return design(pairs, terms) @ np.array([coef[t] for t in terms]) if terms else np.zeros(len(pairs))


def cv(pairs, terms):
    """Leave one configuration out -> (each pair's prediction, each pair's fold mean: the constant null's)."""
    # a configuration's seeds leave together: a sibling seed in the fit would test recall, not prediction
    pred, const = np.zeros(len(pairs)), np.zeros(len(pairs))
    for c in {p['config'] for p in pairs}:
        out = [i for i, p in enumerate(pairs) if p['config'] == c]
        rest = [p for p in pairs if p['config'] != c]
        pred[out] = predict(solve(rest, terms), [pairs[i] for i in out])
        const[out] = np.mean([p['delta'] for p in rest])    # the null, too, sees only the rest
    return pred, const


def rmse(obs, pred):
    return float(np.sqrt(np.mean((np.asarray(obs) - np.asarray(pred)) ** 2)))


def select(pairs, cands):
    """Backward elimination from BASE + every identified candidate, scored by the leave-one-configuration-out RMSE
    of Delta. -> (terms, history)."""
    obs = [p['delta'] for p in pairs]
    terms = list(BASE) + [t for t in cands if t in identified(pairs, list(BASE) + cands)]
    return backward_select(terms, lambda form, parent: rmse(obs, cv(pairs, form)[0]), keep=BASE)


def heldout_tests(pairs, terms, ref):
    """Each held-out test of the chosen form (see the module's docstring), against the two nulls."""
    obs = np.array([p['delta'] for p in pairs])
    tests = {'configuration': (np.ones(len(pairs), bool), *cv(pairs, terms))}
    q_max, T_max = max(p['q'] for p in pairs), max(p['T'] for p in pairs)
    # held-out pairs as (n_pairs,) masks; 1% slack: all pairs at the largest q, despite rounding
    masks = {'tokens_per_param': np.array([p['q'] >= q_max * 0.99 for p in pairs]),
             'context': np.array([p['T'] == T_max for p in pairs]),
             **{f'corpus_{c}': np.array([p['corpus'] == c for p in pairs])
                for c in sorted({p['corpus'] for p in pairs}) if c != ref}}
    for name, m in masks.items():
        rest = [p for p, held in zip(pairs, m) if not held]
        if m.all() or not m.any():                 # nothing to fit on, or nothing to predict
            continue
        pred = np.zeros(len(pairs))
        pred[m] = predict(solve(rest, terms), [p for p, held in zip(pairs, m) if held])
        tests[name] = (m, pred, np.full(len(pairs), np.mean([p['delta'] for p in rest])))
    out = {}
    for name, (m, pred, const) in tests.items():
        vs, beats = versus_nulls(obs[m], pred[m], const[m])
        out[name] = dict(n_pairs=int(m.sum()), rmse_delta=rmse(obs[m], pred[m]), vs_null=vs, beats_null=beats,
                         fitted_on=int((~m).sum()) if name != 'configuration' else int(m.sum()))
    return out


def trend(coef, corpus, ref, q):
    """Delta / log(rho) at T = T0, s = s0 on a corpus, at tokens per parameter q (an array)."""
    level = -coef.get('capacity_gain', 0.0) + (coef.get(f'corpus_{corpus}', 0.0) if corpus != ref else 0.0)
    return level + coef.get('tokens_per_param', 0.0) * np.log(np.asarray(q, float) / Q0)


def crossing_q(coef, corpus, ref):
    """q where the trend falls through 0 as q grows (X-MoD draws level with dense); inf when it does not fall."""
    b = coef.get('tokens_per_param', 0.0)
    if b >= 0:
        return math.inf
    e = -float(trend(coef, corpus, ref, Q0)) / b
    return Q0 * math.exp(e) if e < 700 else math.inf          # beyond exp's range: no crossing in any sense


def cluster_bootstrap(pairs, terms, n_boot, seed):
    """Refits of the form on configurations drawn with replacement, each with all its seeds (they share everything
    but the seed); draws that cannot constrain every term are dropped."""
    configs = sorted({p['config'] for p in pairs}, key=str)    # fixed order: a seed, its draws
    by_config = {c: [p for p in pairs if p['config'] == c] for c in configs}
    rng, samples = np.random.default_rng(seed), []
    for _ in range(n_boot):
        b = solve([p for i in rng.integers(0, len(configs), len(configs)) for p in by_config[configs[i]]], terms)
        if len(b) == len(terms):
            samples.append(b)
    return samples


def intervals(samples, terms):
    """{term: [2.5%, 97.5%]} over the cluster-bootstrap refits; None for each when no refit was valid."""
    return {t: [rank_quantile([s[t] for s in samples], 0.025), rank_quantile([s[t] for s in samples], 0.975)]
            if samples else None for t in terms}


def crossings(pairs, terms, ref, n_boot, seed):
    """Per corpus: the trend's slope, q*, Delta/log(rho) at the largest q measured and at REACH_Q, each with a 95%
    cluster-bootstrap interval, from the form with tokens_per_param in it (forced in where the selection dropped it)."""
    forced = 'tokens_per_param' not in terms
    terms = list(terms) + ['tokens_per_param'] * forced
    coef = solve(pairs, terms)
    samples = cluster_bootstrap(pairs, terms, n_boot, seed)
    out = {}
    for corpus in sorted({p['corpus'] for p in pairs}):
        q_meas = max(p['q'] for p in pairs if p['corpus'] == corpus)
        row = dict(q_max_measured=q_meas, reach_q=REACH_Q, slope=coef.get('tokens_per_param'),
                   q_cross=crossing_q(coef, corpus, ref),
                   at_q_max=float(trend(coef, corpus, ref, q_meas)), at_reach=float(trend(coef, corpus, ref, REACH_Q)))
        if samples:
            boot = dict(slope=[s['tokens_per_param'] for s in samples],
                        q_cross=[crossing_q(s, corpus, ref) for s in samples],
                        at_q_max=[float(trend(s, corpus, ref, q_meas)) for s in samples],
                        at_reach=[float(trend(s, corpus, ref, REACH_Q)) for s in samples])
            for k, v in boot.items():
                row[f'{k}_ci'] = [rank_quantile(v, 0.025), rank_quantile(v, 0.975)]
            # share of refits whose q* lies past what was measured and no further than the reach
            row['share_crossing_within_reach'] = float(np.mean([q_meas < q <= REACH_Q for q in boot['q_cross']]))
        out[corpus] = row
    return dict(terms=terms, coefficients=coef, coefficient_ci=intervals(samples, terms), forced=forced,
                n_boot=n_boot, n_valid=len(samples), corpora=out)


def verdict(cross):
    """One sentence per corpus: does Delta cross zero within reach? 'Established' needs the whole interval of
    Delta/log(rho) at REACH_Q below 0."""
    lines = []
    for corpus, c in cross['corpora'].items():
        q, ci = c['q_cross'], c.get('q_cross_ci')
        where = 'never: the trend does not fall as q grows' if math.isinf(q) else f'at q = {q:.3g}'
        span = f' (95% interval [{ci[0]:.3g}, {ci[1]:.3g}])' if ci else ''
        within = ('yes, established: the whole interval of Delta at the reach is below 0' if 'at_reach_ci' in c and
                  c['at_reach_ci'][1] < 0 else 'by the point estimate only, not established'
                  if c['q_max_measured'] < q <= REACH_Q else 'no')
        at = f"{c['at_reach']:+.4f}" + (f" [{c['at_reach_ci'][0]:+.4f}, {c['at_reach_ci'][1]:+.4f}]"
                                        if 'at_reach_ci' in c else '')
        lines.append(f'{corpus}: Delta crosses 0 {where}{span}; within reach (q <= {REACH_Q:g}): {within}. '
                     f'Delta/log(rho) at q = {REACH_Q:g}: {at}')
    return lines


def fit_regimes(runs, metric, n_boot, seed):
    """runs of any corpora and rates -> (regimes.json's result, the pairs), from each corpus's tuned runs."""
    tuned = []
    for corpus in sorted({r['dataset'] for r in runs}):
        tuned += tuned_runs([r for r in runs if r['dataset'] == corpus], metric)
    pair_runs(tuned)
    pairs = regime_pairs(tuned, metric)
    if len({p['config'] for p in pairs}) < 3:
        raise UserError(f'{len(pairs)} X-MoD pairs in {len({p["config"] for p in pairs})} configurations: the '
                        'regimes law needs at least 3 configurations with a FLOP-matched dense partner')
    ref = reference_corpus(pairs)
    cands = candidates(pairs, ref)
    terms, history = select(pairs, cands)
    coef = solve(pairs, terms)
    for p, pred in zip(pairs, predict(coef, pairs)):
        p['pred'] = float(pred)
    result = dict(metric=metric, n_runs=len(tuned), n_pairs=len(pairs), n_configs=len({p['config'] for p in pairs}),
                  reference_corpus=ref, q0=Q0, T0=T0, s0=S0, reach_q=REACH_Q, candidates=cands, terms=terms,
                  coefficients=coef, coefficient_ci=intervals(cluster_bootstrap(pairs, terms, n_boot, seed), terms),
                  selection=history, fit_rmse_delta=rmse([p['delta'] for p in pairs], predict(coef, pairs)),
                  heldout=heldout_tests(pairs, terms, ref), crossing=crossings(pairs, terms, ref, n_boot, seed))
    result['verdict'] = verdict(result['crossing'])
    return result, pairs


# -----------------------------------------------------------------------------
# what it found, for people: regimes.md and regimes.png

def config_rows(pairs):
    """One row per configuration: Delta over its seeds, and the law's prediction."""
    rows = []
    for c in sorted({p['config'] for p in pairs}, key=lambda c: (c[0], c[2], c[1], c[3], str(c[4:]))):
        ps = [p for p in pairs if p['config'] == c]
        t = t_interval([p['delta'] for p in ps])
        rows.append(dict(corpus=c[0], n_embd=c[1], T=c[2], tokens=c[3], stride=c[4], capacity=c[5], schedule=c[6],
                         rho=ps[0]['rho'], q=ps[0]['q'], n=len(ps), delta=t['mean'], se=t['se'], df=t['df'],
                         ci=None if t['lo'] is None else [t['lo'], t['hi']],
                         pred=float(np.mean([p['pred'] for p in ps]))))
    return rows


def summary_md(result, pairs, command):
    """regimes.md: the runs, the selection, the held-out tests against the two nulls, where Delta crosses 0."""
    ci = lambda v: '(no interval)' if v is None else f'[{v[0]:+.4f}, {v[1]:+.4f}]'
    lines = ['# Delta across regimes: corpora, contexts, tokens per active parameter', '', '```', command, '```', '',
             f"{result['n_pairs']} X-MoD runs paired by seed with their FLOP-matched dense partners, in "
             f"{result['n_configs']} configurations, from {result['n_runs']} tuned runs (each corpus's arms at their "
             f"best rate). Delta = X-MoD - dense, {result['metric']}; above 0, X-MoD is behind. q = tokens per "
             f"active parameter of the dense partner; q0 = {result['q0']:.3g}. Reference corpus: "
             f"{result['reference_corpus']}.", '', '## The runs', '',
             '| corpus | width | T | tokens | q | stride | c | schedule | rho | seeds | Delta (mean +- se) | 95% t '
             'interval (df) | law |', '|' + '---|' * 13]
    for r in config_rows(pairs):
        se = '-' if r['se'] is None else f"{r['se']:.4f}"
        tci = '-' if r['ci'] is None else f"[{r['ci'][0]:+.4f}, {r['ci'][1]:+.4f}] ({r['df']})"
        lines.append(f"| {r['corpus']} | {r['n_embd']} | {r['T']} | {r['tokens'] / 1e6:.3g}M | {r['q']:.3g} | "
                     f"{r['stride']} | {r['capacity']:.3g} | {r['schedule']} | {r['rho']:.2f} | {r['n']} | "
                     f"{r['delta']:+.4f} +- {se} | {tci} | {r['pred']:+.4f} |")
    lines += ['', '## The form, chosen by held-out error', '',
              f"Candidates: {', '.join(result['candidates'])}. Backward elimination by leave-one-configuration-out "
              f"RMSE of Delta (a candidate stays if leaving it out costs more than {SELECT_MARGIN:.0%}):", '']
    for h in result['selection']:
        step = f"drop {h['dropped']}" if 'dropped' in h else 'all candidates'
        lines.append(f"- {step}: CV RMSE {h['cv_rmse_delta']:.4f} ({', '.join(h['terms'])})")
    lines += ['', 'Chosen: Delta = log(rho) * (' + ' + '.join(
        f'{t}*{feature_name(t)}' if feature_name(t) else f'-{t}' for t in result['terms']) + ')', '',
        '| term | coefficient | 95% interval (configurations resampled) |', '|---|---|---|']
    for t in result['terms']:
        lines.append(f"| {t} | {result['coefficients'][t]:+.4f} | {ci(result['coefficient_ci'][t])} |")
    lines += ['', '## Held-out tests, against the two nulls', '',
              'Each is predicted by a fit without the pairs it names; a null is beaten when the paired bootstrap '
              'interval of (law - null) in squared error lies wholly below 0.', '',
              '| held out | pairs | law RMSE | constant-Delta RMSE | Delta=0 RMSE | beats both |', '|---|---|---|---|---|---|']
    for name, h in result['heldout'].items():
        v = h['vs_null']
        lines.append(f"| {name} | {h['n_pairs']} | {h['rmse_delta']:.4f} | {v['constant']['null_rmse_delta']:.4f}"
                     f"{' (beaten)' if v['constant']['beaten'] else ''} | {v['zero']['null_rmse_delta']:.4f}"
                     f"{' (beaten)' if v['zero']['beaten'] else ''} | {'yes' if h['beats_null'] else 'no'} |")
    x = result['crossing']
    lines += ['', '## Where Delta crosses zero', '',
              ('tokens_per_param was dropped by the selection; the trend below forces it back in, to read what the '
               'runs say about q, not what the law chose.' if x['forced'] else 'From the chosen form.'),
              f"Slope per e-fold of q (Delta/log rho): {x['coefficients']['tokens_per_param']:+.4f} "
              f"{ci(x['coefficient_ci']['tokens_per_param'])}; {x['n_valid']} of {x['n_boot']} cluster-bootstrap "
              f"refits. Reach: q <= {REACH_Q:g}.", '',
              '| corpus | largest q run | Delta/log(rho) there | q* (Delta = 0) | at q = reach | P(q* within reach) |',
              '|---|---|---|---|---|---|']
    for corpus, c in x['corpora'].items():
        qc = c.get('q_cross_ci')
        lines.append(f"| {corpus} | {c['q_max_measured']:.3g} | {c['at_q_max']:+.4f} {ci(c.get('at_q_max_ci'))} | "
                     f"{c['q_cross']:.3g}" + (f" [{qc[0]:.3g}, {qc[1]:.3g}]" if qc else '') +
                     f" | {c['at_reach']:+.4f} {ci(c.get('at_reach_ci'))} | "
                     f"{c.get('share_crossing_within_reach', float('nan')):.2f} |")
    lines += [''] + [f'- {v}' for v in result['verdict']] + ['']
    return '\n'.join(lines)


def feature_name(term):
    return {'capacity_gain': '', 'stride_interaction': 'log(s/s0)', 'tokens_per_param': 'log(q/q0)',
            'context_correction': 'log(T/T0)'}.get(term, f"[corpus is {term[len('corpus_'):]}]")


def plot(result, pairs, path):
    """Delta/log(rho) of each configuration (seed mean +- 1 se) against q, each corpus's trend with its 95% band."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    x = result['crossing']
    corpora = sorted({p['corpus'] for p in pairs})
    colors = dict(zip(corpora, ['tab:blue', 'tab:red', 'tab:green', 'tab:purple']))
    markers = {128: 'o', 256: 's', 512: '^'}
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for r in config_rows(pairs):
        lr = math.log(r['rho'])                    # per unit log rho: any rho on one axis
        ax.errorbar(r['q'], r['delta'] / lr, yerr=None if r['se'] is None else r['se'] / lr, ls='none',
                    marker=markers.get(r['T'], 'D'), color=colors[r['corpus']], alpha=0.8, capsize=2)
    q = np.geomspace(min(p['q'] for p in pairs) / 1.5, REACH_Q, 100)
    # the 95% band over at most 500 refits of its own (seed 1): its edges can differ a little from regimes.json's
    samples = cluster_bootstrap(pairs, x['terms'], min(x['n_boot'], 500), 1)
    ref = result['reference_corpus']
    for c in corpora:
        ax.plot(q, trend(x['coefficients'], c, ref, q), color=colors[c], label=f'{c}: trend at T={T0}, s={S0}')
        if samples:
            ax.fill_between(q, *percentile_ci(np.array([trend(s, c, ref, q) for s in samples])), color=colors[c],
                            alpha=0.12)
    for T, m in markers.items():
        if any(p['T'] == T for p in pairs):
            ax.plot([], [], ls='none', marker=m, color='gray', label=f'runs at T={T}')
    ax.axhline(0, color='black', lw=0.8)
    ax.axvline(max(p['q'] for p in pairs), color='gray', ls=':', lw=0.8)    # largest q measured
    ax.axvline(REACH_Q, color='gray', ls='--', lw=0.8, label=f'reach (q = {REACH_Q:g})')
    ax.set(xscale='log', xlabel='training tokens per active parameter, q', ylabel='Delta / log(rho)   (> 0: X-MoD behind)')
    ax.set_title('X-MoD against dense across regimes' + (' (trend: tokens_per_param forced in)' if x['forced'] else ''),
                 fontsize=10)
    ax.legend(fontsize=7, loc='best')
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -----------------------------------------------------------------------------
# the command line (configurator.py): RUNS... are bare arguments, run folders or globs of them, any corpora
out = ''                     # output directory (created); required
metric = 'val_loss_causal'   # the loss: val_loss_causal or val_loss
bootstrap = 200              # cluster-bootstrap resamples for the intervals
seed = 0                     # the resamples' seed
DEFAULTS = defaults_of(globals())


def run(argv):
    cfg = command_line(argv, DEFAULTS, __doc__, __file__, 'python -m law.regimes RUNS... --out DIR')
    result, pairs = fit_regimes(load_runs(cfg.runs, one_corpus=False), cfg.metric, cfg.bootstrap, cfg.seed)
    result['warnings'] = list(WARNINGS)
    command = ('python -m law.regimes ' + ' '.join(cfg.runs) + f' --out {cfg.out}'
               + (f' --bootstrap {cfg.bootstrap}' if cfg.bootstrap != bootstrap else ''))
    md = summary_md(result, pairs, command)
    write_outputs(cfg.out, {'regimes.json': to_json_text(dict(result, pairs=pairs)), 'regimes.md': md}, 'regimes.png',
                  lambda path: plot(result, pairs, path), md)
    return 0


def main(argv=None):
    return run_main('python -m law.regimes', run, argv)


if __name__ == '__main__':
    sys.exit(main())
