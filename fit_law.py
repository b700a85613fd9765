"""
Fit the X-MoD scaling law to a sweep's finished runs, or to a CSV of your own (docs/fit_law.md).

    python fit_law.py RUNS... --out DIR [--holdout FILTER]... [--metric val_loss_causal|val_loss] [--tuned] [--joint]

RUNS: run folders (train.py's run.json and log.csv), globs of them, folders with runs below them, or a CSV file with
one row per run (N, D, loss). Two laws (docs/design.md, "The law"):
1. Dense runs: Chinchilla's L(N, D) = E + A/N^alpha + B/D^beta, N = params_total (non-embedding), D = final tokens;
   a Huber loss on log L, L-BFGS from the best points of Chinchilla's grid, bootstrap intervals.
2. Each full X-MoD run against its FLOP-matched dense partner of the same seed: Delta = L_xmod - L_dense =
   log(rho) * (-g + tau*log(T/T0) + sigma*log(s/s0)) [+ candidate terms, law/terms.py], rho = params_total /
   params_active; least squares, each candidate kept only if leave-one-configuration-out error says so.
Held-out runs (--holdout) are left out of both fits and predicted. --out gets fit.json, summary.md and three plots.
Other analyses: python -m law.rates (--panel), law.regimes, law.isoflop, law.advise (after --joint), law.ladder.
"""

import functools
import math
import sys
from collections import Counter

import numpy as np
import torch
from tqdm import tqdm

import law.forms
import law.joint
import law.load
import law.rates
import law.report
from configurator import UserError, defaults_of, run_main
from law.load import METRICS, config_key, dense_shortfalls, pair_heldout, warn
from law.stats import bootstrap_intervals, versus_nulls
from law.terms import BASE_TERMS, D0, FORM, N0, S0, T0, TERMS, VARIABLES, backward_select, form_of

# -----------------------------------------------------------------------------
# the command line (configurator.py): RUNS... are bare arguments; --key=value or --key value
out = ''                     # output directory (created); required
holdout = []                 # runs to leave out of both fits and predict: KEY OP VALUE conditions joined by 'and' or ','
                             # (OP: = == != < <= > >=), e.g. 'stride==8', 'tokens==max_tokens_all'; give it again
metric = 'val_loss_causal'   # the loss to fit (causal routing), or val_loss; the other is fitted beside it
bootstrap = 200              # bootstrap resamples for the 95% intervals
seed = 0                     # bootstrap seed
tuned = False                # fit only each arm's runs at its best peak learning rate, all seeds (law/rates.py's rule)
joint = False                # also fit the joint law (law/joint.py, read by law.advise): minutes on a large sweep
DEFAULTS = defaults_of(globals())


# -----------------------------------------------------------------------------
# the dense law: L(N, D) = E + A/N^alpha + B/D^beta, theta = (a, alpha, b, beta, e)

DENSE_NAMES = ('a', 'alpha', 'b', 'beta', 'e')
DENSE_PARAMS = ('E', 'A', 'alpha', 'B', 'beta')
HUBER_DELTA = 1e-3                  # in log L: residuals past 0.1% of L count linearly (robust)
OBJ_SCALE = 1.0 / HUBER_DELTA ** 2  # measure the summed Huber loss in units of delta^2 so L-BFGS's tolerances bite


def dense_log_pred(theta, logN, logD):
    a, alpha, b, beta, e = theta
    return np.logaddexp(np.logaddexp(a - alpha * logN, b - beta * logD), e)


def dense_log_pred_torch(theta, logN, logD):
    a, alpha, b, beta, e = theta
    return torch.logsumexp(torch.stack([a - alpha * logN, b - beta * logD, e.expand_as(logN)]), dim=0)


def dense_objective(theta, logN, logD, logL, w):
    """Summed (weighted) Huber loss on log L, in torch so L-BFGS gets gradients."""
    r = dense_log_pred_torch(theta, logN, logD)
    return (w * torch.nn.functional.huber_loss(r, logL, reduction='none', delta=HUBER_DELTA)).sum()


def lbfgs_fit(theta0, logN, logD, logL, w=None, scale=OBJ_SCALE, tolerance_grad=1e-12, tolerance_change=1e-14):
    """One L-BFGS run from theta0 -> (theta, summed Huber loss unscaled). With scale=1 and torch's default tolerances
    (1e-7, 1e-9) it stops far from the optimum (the Chinchilla pitfall): a step's change of a ~1e-4 loss is tiny."""
    t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64))
    logN, logD, logL = t(logN), t(logD), t(logL)
    w = torch.ones_like(logL) if w is None else t(w)
    theta = torch.tensor(np.asarray(theta0, dtype=np.float64), requires_grad=True)
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=2000, max_eval=2500, tolerance_grad=tolerance_grad,
                            tolerance_change=tolerance_change, history_size=50, line_search_fn='strong_wolfe')

    def closure():
        opt.zero_grad()
        loss = dense_objective(theta, logN, logD, logL, w) * scale
        loss.backward()
        return loss
    opt.step(closure)
    return theta.detach().numpy().copy(), float(dense_objective(theta.detach(), logN, logD, logL, w))


def fit_dense(N, D, L, w=None, starts=None, n_starts=8):
    """The best of L-BFGS runs from starts, by default the n_starts best points of Chinchilla's grid (one pass)."""
    logN, logD, logL = np.log(N), np.log(D), np.log(L)
    w = np.ones_like(logL) if w is None else np.asarray(w, dtype=np.float64)
    if starts is None:
        grid = np.array(np.meshgrid(np.arange(0, 30, 5.0), np.arange(0, 2.5, 0.5), np.arange(0, 30, 5.0),
                                    np.arange(0, 2.5, 0.5), np.arange(-1, 2, 0.5), indexing='ij')).reshape(5, -1).T
        r = np.abs(dense_log_pred(grid.T[:, :, None], logN[None], logD[None]) - logL[None])  # (n_grid, n_runs)
        huber = np.where(r < HUBER_DELTA, 0.5 * r ** 2, HUBER_DELTA * (r - 0.5 * HUBER_DELTA))
        starts = grid[np.argsort((huber * w[None]).sum(1), kind='stable')[:n_starts]]
    best = None
    for th0 in starts:
        th, f = lbfgs_fit(th0, logN, logD, logL, w)
        if np.all(np.isfinite(th)) and math.isfinite(f) and (best is None or f < best[1]):
            best = (th, f)
    return best


def dense_params(theta):
    a, alpha, b, beta, e = (float(x) for x in theta)
    return dict(E=math.exp(e), A=math.exp(a), alpha=alpha, B=math.exp(b), beta=beta, a=a, b=b, e=e)


def run_dense(runs, metric, n_boot, rng):
    fit_runs = [r for r in runs if r['model'] == 'dense' and not r['heldout']]
    N, D = np.array([r['params_total'] for r in fit_runs]), np.array([r['tokens'] for r in fit_runs])
    L = np.array([r['loss'][metric] for r in fit_runs])
    best = fit_dense(N, D, L)
    if best is None:
        raise UserError(f'the dense law fit failed from every start ({len(fit_runs)} dense runs)')
    theta, f = best
    out = dense_params(theta)
    resid = dense_log_pred(theta, np.log(N), np.log(D)) - np.log(L)
    out.update(form='L = E + A/N^alpha + B/D^beta', objective=f, rmse_log=float(np.sqrt(np.mean(resid ** 2))),
               n_runs=len(fit_runs), n_distinct_N=len(set(N)), n_distinct_D=len(set(D)))
    notes = dense_shortfalls(N, D)
    # is the law identified by these runs? the Gauss-Newton Jacobian of log L_pred with respect to theta
    logN, logD = torch.as_tensor(np.log(N)), torch.as_tensor(np.log(D))
    J = torch.autograd.functional.jacobian(lambda t: dense_log_pred_torch(t, logN, logD), torch.as_tensor(theta))
    sv = np.linalg.svd(J.numpy(), compute_uv=False)
    cond = float(sv.min() / sv.max()) if sv.max() > 0 else 0.0
    if cond < 1e-6 and not notes:
        notes.append(f'rank-deficient Jacobian (smallest/largest singular value {cond:.2g})')
    out.update(jacobian_sv_ratio=cond, ill_posed=bool(notes), notes=notes)
    if notes:  # a bootstrap of an unidentified fit only reports where L-BFGS stopped: no interval at all
        warn(f'the dense law is ill-posed on these runs ({"; ".join(notes)}): its parameters are not estimates, '
             f'and get no interval')
        n_boot = 0
    # bootstrap: resample dense runs; each resample starts from the full fit's optimum (speed)
    samples = []
    for _ in tqdm(range(n_boot), desc=f'bootstrap dense [{metric}]', delay=1.0, leave=False, disable=None):
        wb = np.bincount(rng.integers(0, len(L), len(L)), minlength=len(L)).astype(np.float64)
        b = fit_dense(N, D, L, w=wb, starts=[theta])
        if b is not None and all(abs(float(v)) < 700 for v in b[0]):   # a log-coefficient past exp's range: the
            samples.append([dense_params(b[0])[k] for k in DENSE_PARAMS])  # resample diverged, not kept (n_valid)
    out['ci'] = bootstrap_intervals(samples, DENSE_PARAMS, f'dense law [{metric}]', warn)
    out['bootstrap'] = dict(n=n_boot, n_valid=len(samples))
    return out


def dense_predict(dense, N, D):
    return float(np.exp(dense_log_pred([dense[k] for k in DENSE_NAMES], math.log(N), math.log(D))))


# -----------------------------------------------------------------------------
# the relative law: Delta = log(rho) * (-g + tau log(T/T0) + sigma log(s/s0) [+ candidates]), linear in its terms

def rel_design(pairs, terms):
    """(n_pairs, n_terms): each term's factor of log(rho), times log(rho); an OUTSIDE term's addend as it is."""
    col = lambda k: np.array([p[k] for p in pairs], dtype=np.float64)
    lr = np.log(col('rho'))
    cols = {'capacity_gain': -lr, 'context_correction': lr * np.log(col('T') / T0),
            'stride_interaction': lr * np.log(col('stride') / S0), 'budget_correction': lr * np.log(col('tokens') / D0),
            'size_correction': lr * np.log(col('N_act') / N0), 'budget_offset': np.log(col('tokens') / D0)}
    return np.stack([cols[t] for t in terms], 1) if terms else np.zeros((len(pairs), 0))


def full_rank(X, w=None):
    Xw = X * np.sqrt(np.ones(len(X)) if w is None else w)[:, None]
    norms = np.linalg.norm(Xw, axis=0)
    if X.shape[1] == 0 or X.shape[0] < X.shape[1] or np.any(norms < 1e-12):
        return X.shape[1] == 0
    sv = np.linalg.svd(Xw / norms, compute_uv=False)
    return bool(sv.min() > 1e-8 * sv.max())


def wls(X, y, w=None):
    sw = np.sqrt(np.ones(len(y)) if w is None else w)
    return np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)[0]


def identifiable_terms(pairs, terms=TERMS):
    """Add the terms in order while each one adds a rank; say why the others are left out. A term's variable must take
    two values more than 1% apart (the pairing's tolerance): else log(D/D0) at 2,000,896 tokens acts as an intercept."""
    active, notes, sparse = [], {}, [p for p in pairs if p['rho'] > 1 + 1e-12]
    single = lambda key: max(p[key] for p in sparse) <= 1.01 * min(p[key] for p in sparse)
    for t in terms:
        if sparse and t in VARIABLES and single(VARIABLES[t][1]):
            what, key, symbol = VARIABLES[t]
            notes[t] = f'a single {what} ({symbol}={sparse[0][key]:g}): not constrained'
        elif full_rank(rel_design(pairs, active + [t])):
            active.append(t)
        elif not sparse:
            notes[t] = 'no pair with rho > 1'
        else:
            notes[t] = 'collinear with the other terms in these runs: not constrained'
    return active, notes


def rmse(err):
    return float(np.sqrt(np.mean(np.square(err)))) if len(err) else None


def loco_cv(pairs, terms):
    """Leave one configuration (all its seeds) out; refit on the rest; RMSE of the left-out Deltas."""
    groups = sorted({p['cfg_key'] for p in pairs})
    if len(groups) < 2:
        return None
    errs = []
    for g in groups:
        train, test = [p for p in pairs if p['cfg_key'] != g], [p for p in pairs if p['cfg_key'] == g]
        act, _ = identifiable_terms(train, terms)
        coef = wls(rel_design(train, act), np.array([p['delta'] for p in train]))
        errs.extend(rel_design(test, act) @ coef - np.array([p['delta'] for p in test]))
    return rmse(errs)


def form_scores(fit, test, terms):
    """One form's RMSE of Delta: on the fitted pairs, leave-one-configuration-out, and on the held-out pairs."""
    c = wls(rel_design(fit, terms), np.array([p['delta'] for p in fit]))
    err = lambda ps: rel_design(ps, terms) @ c - np.array([p['delta'] for p in ps])
    return dict(terms=terms, fit_rmse=rmse(err(fit)), cv_rmse=loco_cv(fit, terms), heldout_rmse=rmse(err(test)))


def cv_testable(pairs, terms):
    """The terms that stay identified whichever configuration is left out. A term one configuration alone pins down
    (one pair at 4M tokens) drops out of the folds without it and fits it exactly in the others: it is never tested."""
    groups = {p['cfg_key'] for p in pairs}
    folds = [identifiable_terms([p for p in pairs if p['cfg_key'] != g], terms)[0] for g in groups]
    return [t for t in terms if all(t in f for f in folds)]


def select_terms(fit, test, identified):
    """Choose the form by leave-one-configuration-out error (not the --holdout pairs): the untestable candidates go,
    then backward elimination; the base terms stay. -> (kept terms, fit.json's record of the choice, law/forms.py)."""
    scored = functools.cache(lambda key: form_scores(fit, test, list(key)))   # each form is scored once
    score = lambda terms: scored(tuple(t for t in identified if t in terms))
    testable = cv_testable(fit, identified)
    kept, _ = backward_select([t for t in identified if t in testable or t in BASE_TERMS],
                              lambda form, parent: score(form)['cv_rmse'], keep=BASE_TERMS)
    return kept, law.forms.selection_table(identified, kept, testable, score)


def run_relative(runs, metric, dense, delta_std, n_boot, rng):
    pairs = [dict(run=r, rho=r['rho'], T=r['T'], stride=r['stride'], tokens=r['tokens'], heldout=pair_heldout(r),
                  N_act=r['partner']['params_total'], cfg_key=config_key(r['config'], with_seed=False),
                  delta=r['loss'][metric] - r['partner']['loss'][metric])
             for r in runs if r['variant'] == 'xmod' and r['partner'] is not None]
    fit, test = [p for p in pairs if not p['heldout']], [p for p in pairs if p['heldout']]
    sparse_fit = [p for p in fit if p['rho'] > 1 + 1e-12]
    rel = dict(form=FORM, T0=T0, s0=S0, D0=D0, N0=N0, selection="model=='xmod' and gate=='variance' and balance>0, "
               'paired by seed with its FLOP-matched dense partner', n_pairs=len(fit), n_heldout_pairs=len(test),
               n_configs=len({p['cfg_key'] for p in fit}), contexts=sorted({p['T'] for p in sparse_fit}),
               strides=sorted({p['stride'] for p in sparse_fit}), budgets=sorted({p['tokens'] for p in sparse_fit}),
               active_sizes=sorted({p['N_act'] for p in sparse_fit}),
               rho_range=[min(p['rho'] for p in fit), max(p['rho'] for p in fit)] if fit else None)
    metrics = dict(fit=None, heldout=None, cv=None, ablation={}, selection=None, goals=None, budget_forms=None)
    identified, notes = identifiable_terms(fit)
    if not fit or not identified:
        rel.update(fitted=False, note='every full X-MoD pair is held out' if pairs and not fit else
                   'no full X-MoD pair with rho > 1 to fit',
                   coefficients={t: dict(value=None, ci_low=None, ci_high=None, constrained=False,
                                         note=notes.get(t, 'not fitted')) for t in TERMS})
        return rel, metrics, pairs
    active, metrics['selection'] = select_terms(fit, test, identified)
    base = [t for t in identified if t in BASE_TERMS]
    metrics['budget_forms'] = law.forms.budget_forms(fit, test, lambda ps: rel_design(ps, base))
    notes.update(law.forms.dropped_notes(metrics['selection']))
    y, X = np.array([p['delta'] for p in fit]), rel_design(fit, active)
    coef = wls(X, y)
    # bootstrap: resample pairs (runs) with replacement = integer weights on the exact least-squares solve
    samples = []
    for _ in range(n_boot):
        wb = np.bincount(rng.integers(0, len(fit), len(fit)), minlength=len(fit)).astype(np.float64)
        if full_rank(X, wb):
            samples.append(wls(X, y, wb))
    ci = bootstrap_intervals(samples, active, f'relative law [{metric}]', warn)
    rel['coefficients'] = {t: dict(value=float(coef[active.index(t)]) if t in active else None,
                                   ci_low=ci[t][0] if t in active and ci[t] else None,
                                   ci_high=ci[t][1] if t in active and ci[t] else None,
                                   constrained=t in identified, note=notes.get(t, '')) for t in TERMS}
    rel.update(form=form_of(active), fitted=True, active_terms=active, bootstrap=dict(n=n_boot, n_valid=len(samples)))
    for p in pairs:
        p['pred'] = float((rel_design([p], active) @ coef)[0])
    metrics['fit'] = pair_metrics(fit, metric, dense, delta_std)
    if test:      # and against a constant Delta (the fitted pairs' mean) and Delta = 0 (law.stats.versus_nulls)
        metrics['heldout'] = pair_metrics(test, metric, dense, delta_std)
        metrics['heldout']['vs_null'], metrics['heldout']['beats_null'] = versus_nulls(
            [p['delta'] for p in test], [p['pred'] for p in test], np.mean([p['delta'] for p in fit]))
    metrics['goals'] = law.forms.heldout_goals(metrics['heldout'], delta_std)
    metrics['cv'] = dict(delta_rmse=loco_cv(fit, active), scheme='leave one configuration (all seeds) out')
    metrics['ablation'] = law.forms.ablations(active, notes, lambda terms: form_scores(fit, test, terms))
    return rel, metrics, pairs


# -----------------------------------------------------------------------------
# held-out prediction and seed noise

def pair_metrics(pairs, metric, dense, delta_std):
    obs, pred = np.array([p['delta'] for p in pairs]), np.array([p['pred'] for p in pairs])
    ss_tot = float(np.sum((obs - obs.mean()) ** 2))
    out = dict(n=len(obs), rmse=rmse(pred - obs),
               r2=float(1 - np.sum((pred - obs) ** 2) / ss_tot) if len(obs) > 1 and ss_tot > 0 else None)
    L = np.array([p['run']['loss'][metric] for p in pairs])
    Lpart = np.array([p['run']['partner']['loss'][metric] for p in pairs])
    Llaw = np.array([dense_predict(dense, p['run']['partner']['params_total'], p['run']['partner']['tokens'])
                     for p in pairs])
    rel_law, rel_part = np.abs(Llaw + pred - L) / L, np.abs(Lpart + pred - L) / L
    sign = np.sign(pred) == np.sign(obs)
    big = np.abs(obs) > 2 * delta_std if delta_std else None
    out.update(L_rel_err_law_mean=float(rel_law.mean()), L_rel_err_law_max=float(rel_law.max()),
               L_rel_err_partner_mean=float(rel_part.mean()), L_rel_err_partner_max=float(rel_part.max()),
               sign_acc=float(sign.mean()), delta_span=float(obs.max() - obs.min()),
               sign_acc_big=float(sign[big].mean()) if big is not None and big.any() else None,
               n_big=int(big.sum()) if big is not None else None)
    return out


def pooled_std(groups):
    """Pooled std over groups with >= 2 members: sqrt(sum (n_i - 1) var_i / sum (n_i - 1))."""
    groups = [np.array(g) for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in groups)
    return (float(math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof)) if groups else None), len(groups)


def seed_noise(runs, metric):
    by_cfg, by_pair = {}, {}
    for r in runs:
        k = config_key(r['config'], with_seed=False)
        by_cfg.setdefault(k, []).append(r['loss'][metric])
        if r['partner'] is not None:
            by_pair.setdefault(k, []).append(r['loss'][metric] - r['partner']['loss'][metric])
    (loss_std, n_l), (delta_std, n_d) = pooled_std(by_cfg.values()), pooled_std(by_pair.values())
    return dict(loss_std=loss_std, delta_std=delta_std, n_loss_configs=n_l, n_delta_configs=n_d)


# -----------------------------------------------------------------------------
# one metric end to end, and the command line

def fit_metric(runs, metric, n_boot, seed_, dense_cache, joint=False):
    noise = seed_noise(runs, metric)
    # dense runs have val_loss == val_loss_causal, so the second metric's dense fit is usually the first one's
    key = tuple(r['loss'][metric] for r in runs if r['model'] == 'dense' and not r['heldout'])
    if key not in dense_cache:
        dense_cache[key] = run_dense(runs, metric, n_boot, np.random.default_rng([seed_, 0]))
    dense = dense_cache[key]
    rel, metrics, pairs = run_relative(runs, metric, dense, noise['delta_std'], n_boot,
                                       np.random.default_rng([seed_, 1]))

    def dense_err(held):
        rs = [r for r in runs if r['model'] == 'dense' and r['heldout'] == held]
        e = [abs(dense_predict(dense, r['params_total'], r['tokens']) - r['loss'][metric]) / r['loss'][metric]
             for r in rs]
        return dict(n=len(rs), L_rel_err_mean=float(np.mean(e)), L_rel_err_max=float(np.max(e))) if rs else None
    metrics['dense'] = dict(rmse_log=dense['rmse_log'], fit=dense_err(False), heldout=dense_err(True))
    metrics['seed_noise'] = noise
    out = dict(dense=dense, relative=rel, metrics=metrics)
    if joint:     # opt-in: its form selection refits it tens of times
        out['joint'] = law.joint.joint_fit(runs, metric, [dense[k] for k in DENSE_NAMES], noise['delta_std'], n_boot,
                                           np.random.default_rng([seed_, 2]))
    return out, pairs


def fitted_law(res):
    """One metric's fitted laws as functions for law/report.py's plots: L(N, D) and Delta(rho, T, s, D=D0, N_act=N0)."""
    terms = res['relative'].get('active_terms', [])
    coef = np.array([res['relative']['coefficients'][t]['value'] for t in terms])
    return (lambda N, D: dense_predict(res['dense'], N, D),
            lambda rho, T, s, D=D0, N_act=N0: float((rel_design([dict(rho=rho, T=T, stride=s, tokens=D, N_act=N_act)],
                                                                terms) @ coef)[0]))


def parse_args(argv):
    """The command line -> its config, the runs (bare arguments) as cfg.runs; refuses what cannot be run."""
    return law.load.command_line(argv, DEFAULTS, __doc__ + '\nWhat fit_law.py accepts and refuses: docs/fit_law.md.',
                                 __file__, 'python fit_law.py RUNS... --out DIR')


def run(cfg):
    law.load.WARNINGS.clear()
    loaded = law.load.load_runs(cfg.runs)
    runs = law.rates.tuned_runs(loaded, cfg.metric) if cfg.tuned else loaded
    law.load.pair_runs(runs)
    law.load.mark_heldout(cfg.holdout, runs)
    law.load.check_fittable(runs, cfg.runs)
    torch.set_num_threads(1)  # tiny problems: threads cost more than they give
    by_metric, pairs_by_metric, dense_cache = {}, {}, {}
    for m in (cfg.metric, *[x for x in METRICS if x != cfg.metric]):
        by_metric[m], pairs_by_metric[m] = fit_metric(runs, m, cfg.bootstrap, cfg.seed, dense_cache, joint=cfg.joint)
    variants = dict(sorted(Counter(r['variant'] for r in runs).items(),
                           key=lambda kv: (law.report.rank(kv[0]), kv[0])))
    holdout = ' or '.join(cfg.holdout) if cfg.holdout else None  # a run matching one filter or another is held out
    result = dict(metric=cfg.metric,
                  inputs=dict(n_runs=len(runs), variants=variants, holdout=holdout, tuned=cfg.tuned,
                              n_off_best_rate=len(loaded) - len(runs),
                              n_heldout=sum(r['heldout'] for r in runs), bootstrap=cfg.bootstrap, seed=cfg.seed),
                  warnings=list(law.load.WARNINGS), **by_metric[cfg.metric], by_metric=by_metric,
                  delta_vs_tokens=law.report.delta_vs_tokens(runs),
                  fixes=law.report.paired_fixes(runs), runs=[law.report.run_row(r) for r in runs])
    law.report.write(cfg.out, {'fit.json': law.report.to_json_text(result),
                               'summary.md': law.report.summary_md(result, runs)})
    n_plots = len(law.report.make_plots(cfg.out, runs, pairs_by_metric[cfg.metric], by_metric[cfg.metric],
                                        cfg.metric, fitted_law(by_metric[cfg.metric])))
    law.report.print_summary(result, runs, cfg.out, n_plots)
    return result


def main(argv=None):
    return run_main('fit_law.py', lambda argv: run(parse_args(argv)) and 0, argv)


if __name__ == '__main__':
    sys.exit(main())
