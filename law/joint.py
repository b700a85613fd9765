"""
law/joint.py: one law for the absolute losses of dense and X-MoD runs together (fit_law.py calls it; fit.json's
`joint`). Its rho = 1 limit is the dense law, and sparsity can change both the size term and the data term, as in
the joint MoE laws (Ludziejewski et al. 2025, "Joint MoE Scaling Laws"), with rho in place of the expert count:

    L = exp(a + d_A) * N^-(alpha + d_alpha) + exp(b + d_B) * D^-(beta + d_beta) + exp(e)

N = active non-embedding parameters, D = training tokens, rho = total / active (1 for dense). Each candidate term
adds coefficient x feature to one of d_A, d_alpha, d_B, d_beta (TERMS); an exponent's features are multiplied by
log(N/N0) or log(D/D0), so that a term moves the slope without moving the level at the reference point. A dense run
has log(rho) = 0 and sees only the dense law (and 'context', the one term that is not scaled by log rho).

Fitted like the dense law (Huber on log L, L-BFGS from the dense fit). The form is chosen as the relative law's is
(law.terms.backward_select on the leave-one-configuration-out RMSE of Delta, in at most FOLDS folds). Three held-out
tests (joint.heldout.budget, .width, .configuration: the largest budget, the largest width, the cross-validation's
folds) each against a constant Delta and Delta = 0 (versus_nulls): a law is said to predict only where it beats both.
"""
import math

import numpy as np
import torch

from law.load import config_key
from law.stats import percentile_ci, versus_nulls
from law.terms import D0, N0, S0, SELECT_MARGIN, T0, backward_select  # the relative law's reference point

HUBER_DELTA = 1e-3       # in log L: residuals past 0.1% of L count linearly (robust)
FOLDS = 10               # cross-validation folds of X-MoD configurations (leave one out when there are fewer)
# name: (slot, feature); the feature is a function of a run's variables (arrays): log rho 'lr', log(T/T0) 'lt',
# log(s/s0) 'ls'. A slot's term adds to a, alpha, b or beta.
TERMS = {
    'size_rho': ('a', lambda v: v['lr']),                      # delta: the size term's level moves with rho
    'size_exp_rho': ('alpha', lambda v: v['lr']),              # gamma: the size exponent moves with rho
    'data_rho': ('b', lambda v: v['lr']),                      # omega: the data term's level moves with rho
    'data_exp_rho': ('beta', lambda v: v['lr']),               # zeta: the data exponent moves with rho
    'size_rho_context': ('a', lambda v: v['lr'] * v['lt']),    # longer contexts change what rho buys
    'size_rho_stride': ('a', lambda v: v['lr'] * v['ls']),     # the anchor stride changes what rho buys
    'context': ('a', lambda v: v['lt']),                       # every run, dense too: a longer context helps
}


def variables(runs):
    """The law's inputs, each (n_runs,): lN = log active parameters, lD = log tokens, lr = log rho, lt = log(T/T0),
    ls = log(stride/S0) (0 for dense)."""
    col = lambda f: np.array([f(r) for r in runs], dtype=np.float64)
    return dict(lN=col(lambda r: math.log(r['params_active'])), lD=col(lambda r: math.log(r['tokens'])),
                lr=col(lambda r: math.log(r['rho'])), lt=col(lambda r: math.log(r['T'] / T0)),
                ls=col(lambda r: math.log((r['stride'] or S0) / S0)))


def design(v, terms):
    """(n_runs, n_terms) features; an exponent slot's times -log(N/N0) or -log(D/D0) (N^-alpha: the minus)."""
    cols = []
    for t in terms:
        slot, f = TERMS[t]
        x = f(v)
        if slot == 'alpha':
            x = -x * (v['lN'] - math.log(N0))
        elif slot == 'beta':
            x = -x * (v['lD'] - math.log(D0))
        cols.append(x)
    return np.stack(cols, axis=1) if cols else np.zeros((len(v['lN']), 0))


def log_pred_torch(theta, v, X, which):
    """log L for each run, (n_runs,), differentiable in theta = (a, alpha, b, beta, e, one per term); tensors: v the
    variables, X = design(v, terms) (n_runs, n_terms), which: each term's (size 0, data 1)."""
    a, alpha, b, beta, e = theta[:5]
    c = theta[5:]
    size = a - alpha * v['lN'] + (X[:, which == 0] @ c[which == 0] if (which == 0).any() else 0)
    data = b - beta * v['lD'] + (X[:, which == 1] @ c[which == 1] if (which == 1).any() else 0)
    # log(size term + data term + exp(e)), computed in logs so that no term overflows
    return torch.logsumexp(torch.stack([size, data, e.expand_as(size)]), dim=0)


def inputs(runs, terms):
    """The law's inputs as tensors: the variables, the terms' features, which of the size (0) or data (1) term each
    changes."""
    v = variables(runs)
    which = torch.tensor([0 if TERMS[t][0] in ('a', 'alpha') else 1 for t in terms], dtype=torch.long)
    return {k: torch.as_tensor(x) for k, x in v.items()}, torch.as_tensor(design(v, terms)), which


def fit(runs, metric, terms, start, w=None, max_iter=500):
    """Huber on log L over the runs, L-BFGS from start (5 dense parameters + one per term). Returns theta or None."""
    v, X, which = inputs(runs, terms)
    logL = torch.as_tensor(np.log([r['loss'][metric] for r in runs]))
    w = torch.ones_like(logL) if w is None else torch.as_tensor(np.asarray(w, dtype=np.float64))
    theta = torch.tensor(np.asarray(start, dtype=np.float64), requires_grad=True)
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=max_iter, tolerance_grad=1e-12, tolerance_change=1e-14,
                            history_size=50, line_search_fn='strong_wolfe')

    def closure():
        opt.zero_grad()
        r = log_pred_torch(theta, v, X, which)
        # w: a bootstrap's count of each run; in units of delta^2, so that L-BFGS's tolerances bite
        loss = (w * torch.nn.functional.huber_loss(r, logL, reduction='none', delta=HUBER_DELTA)).sum() / HUBER_DELTA ** 2
        loss.backward()
        return loss
    opt.step(closure)
    th = theta.detach().numpy().copy()
    # exp overflows float64 past ~709: a parameter that large is a fit that ran away, not a fit
    return th if np.all(np.isfinite(th)) and np.all(np.abs(th) < 700) else None


def predict(runs, terms, theta):
    """The law's loss L for each run, (n_runs,); theta (5 + n_terms,)."""
    v, X, which = inputs(runs, terms)
    with torch.no_grad():
        return np.exp(log_pred_torch(torch.as_tensor(theta), v, X, which).numpy())


def delta_pred(pairs, terms, theta):
    """Delta of each (xmod run, dense partner) pair as the law predicts both."""
    return predict([p for p, _ in pairs], terms, theta) - predict([d for _, d in pairs], terms, theta)


def start_from(dense_theta, terms, prev=None):
    """The dense fit's parameters and zero for every term (or a previous fit's values for the terms it had)."""
    if prev is None:
        return list(dense_theta) + [0.0] * len(terms)
    prev_terms, prev_theta = prev
    return list(prev_theta[:5]) + [prev_theta[5 + prev_terms.index(t)] if t in prev_terms else 0.0 for t in terms]


def errors(obs, pred):
    """How far predicted Delta is from observed: n, the RMSE, the largest |error|, the share of signs right."""
    e = np.asarray(pred) - np.asarray(obs)
    return dict(n=len(e), rmse_delta=float(np.sqrt(np.mean(e ** 2))) if len(e) else None,
                max_abs_delta=float(np.max(np.abs(e))) if len(e) else None,
                sign_right=float(np.mean(np.sign(pred) == np.sign(obs))) if len(e) else None)


def cv_predictions(fit_runs, pairs, metric, terms, theta0):
    """Leave X-MoD configurations (all seeds of each) out, FOLDS folds at most, refit, predict their Delta. ->
    (observed, predicted, the constant null's) Delta per pair, or None (under 2 configurations, or a fit failed)."""
    # a configuration's seeds leave together: a sibling seed in the fit would test recall, not prediction
    keys = sorted({config_key(p['config'], with_seed=False) for p, _ in pairs})
    if len(keys) < 2:
        return None
    k_folds = min(FOLDS, len(keys))
    obs, pred, const = [], [], []
    for fold in range(k_folds):
        chosen = set(keys[fold::k_folds])           # every k_folds-th configuration, sorted
        out = {id(p) for p, _ in pairs if config_key(p['config'], with_seed=False) in chosen}
        th = fit([r for r in fit_runs if id(r) not in out], metric, terms, theta0)
        if th is None:
            return None
        held = [(p, d) for p, d in pairs if id(p) in out]
        obs += [p['loss'][metric] - d['loss'][metric] for p, d in held]
        pred += list(delta_pred(held, terms, th))
        # the constant null sees only what the law saw: the mean Delta of the pairs this fold kept
        const += [np.mean([p['loss'][metric] - d['loss'][metric] for p, d in pairs if id(p) not in out])] * len(held)
    return np.array(obs), np.array(pred), np.array(const)


def testable(pairs, terms):
    """Terms whose feature takes two values over the pairs."""
    if not pairs:
        return []
    X = design(variables([p for p, _ in pairs]), list(TERMS))
    return [t for t, col in zip(TERMS, X.T) if np.ptp(col) > 1e-9 and t in terms]


def select(fit_runs, pairs, metric, dense_theta):
    """Backward elimination from every testable term, each form fitted from the one it is a term short of, scored
    by the leave-one-configuration-out RMSE of Delta. -> (terms, history)."""
    terms = testable(pairs, list(TERMS))
    if 'context' not in terms and len({p['T'] for p in fit_runs}) > 1:
        terms.append('context')                     # dense runs at several contexts pin it even without pairs
    thetas = {tuple(terms): fit(fit_runs, metric, terms, start_from(dense_theta, terms))}
    if thetas[tuple(terms)] is None:
        return [], [dict(step='all candidates', note='the fit failed')]

    def score(form, parent):
        if parent is not None:
            thetas[tuple(form)] = fit(fit_runs, metric, form,
                                      start_from(dense_theta, form, (parent, thetas[tuple(parent)])))
        got = None if thetas[tuple(form)] is None else cv_predictions(fit_runs, pairs, metric, form,
                                                                       thetas[tuple(form)])
        return None if got is None else errors(*got[:2])['rmse_delta']
    return backward_select(terms, score)


def joint_fit(runs, metric, dense_theta, delta_std, n_boot, rng):
    """The joint law on the runs not held out, its form, intervals and held-out tests (fit.json's `joint`).
    dense_theta: the dense law's (a, alpha, b, beta, e)."""
    # X-MoD runs with rho > 1 only: at rho = 1 (log rho = 0) every rho term is zero
    use = lambda r: r['model'] == 'dense' or (r['variant'] == 'xmod' and r['rho'] > 1 + 1e-12)
    fit_runs = [r for r in runs if use(r) and not r['heldout']]
    pairs = [(r, r['partner']) for r in fit_runs if r['model'] != 'dense' and r['partner'] is not None
             and not r['partner']['heldout']]
    out = dict(form='L = exp(a + d_A) N^-(alpha + d_alpha) + exp(b + d_B) D^-(beta + d_beta) + exp(e)',
               N='params_active', reference=dict(T0=T0, s0=S0, D0=D0, N0=N0), n_runs=len(fit_runs),
               n_pairs=len(pairs), candidates=list(TERMS))
    if len(pairs) < 2 or len(fit_runs) < 8:
        out.update(fitted=False, note=f'{len(pairs)} full X-MoD pairs and {len(fit_runs)} runs: too few to fit')
        return out
    terms, history = select(fit_runs, pairs, metric, dense_theta)
    theta = fit(fit_runs, metric, terms, start_from(dense_theta, terms))
    if theta is None:
        out.update(fitted=False, note='the fit failed')
        return out
    samples = []
    for _ in range(n_boot):
        # a bootstrap over runs: each run weighted by how often the resample drew it, (n_runs,)
        wb = np.bincount(rng.integers(0, len(fit_runs), len(fit_runs)), minlength=len(fit_runs))
        th = fit(fit_runs, metric, terms, theta, w=wb, max_iter=200)
        if th is not None:
            samples.append(th)
    names = ['a', 'alpha', 'b', 'beta', 'e'] + terms
    ci = percentile_ci(samples).T.tolist() if len(samples) >= 2 else [None] * len(names)
    obs = [p['loss'][metric] - d['loss'][metric] for p, d in pairs]
    resid = np.log(predict(fit_runs, terms, theta)) - np.log([r['loss'][metric] for r in fit_runs])
    out.update(fitted=True, terms=terms, selection=history, selection_margin=SELECT_MARGIN,
               coefficients={n: dict(value=float(x), ci=c) for n, x, c in zip(names, theta, ci)},
               bootstrap=dict(n=n_boot, n_valid=len(samples), samples=[list(map(float, th)) for th in samples]),
               fit=dict(rmse_log=float(np.sqrt(np.mean(resid ** 2))), **errors(obs, delta_pred(pairs, terms, theta))),
               cv=dict(rmse_delta=history[-1]['cv_rmse_delta'],
                       scheme=f'X-MoD configurations left out, {FOLDS} folds (one each when fewer)'),
               seed_std_delta=delta_std, heldout={})
    paired = [r for r in runs if use(r) and r['model'] != 'dense' and r['partner'] is not None]
    for name, key in (('budget', 'tokens'), ('width', 'n_embd')):     # the largest of each, held out
        out['heldout'][name] = heldout_test([r for r in runs if use(r)], metric, terms, dense_theta, key,
                                            max(r[key] for r in paired), delta_std)
    loco = cv_predictions(fit_runs, pairs, metric, terms, theta)
    if loco is not None:
        obs, pred, const = loco
        vs, beats = versus_nulls(obs, pred, const)
        out['heldout']['configuration'] = dict(
            errors(obs, pred), held_out='each X-MoD configuration in turn (the cross-validation folds)',
            null_rmse_delta=vs['constant']['null_rmse_delta'], vs_null=vs, beats_null=beats)
    return out


def heldout_test(runs, metric, terms, dense_theta, key, value, delta_std):
    """Refit the form without the runs whose `key` is `value` and predict those pairs' Delta, against the nulls."""
    inside = [r for r in runs if r[key] != value]
    held = [(r, r['partner']) for r in runs if r[key] == value and r['model'] != 'dense' and r['partner'] is not None]
    kept = {id(r) for r in inside}
    fitted = [(r, r['partner']) for r in inside if r['model'] != 'dense' and r['partner'] is not None
              and id(r['partner']) in kept]
    if not held or not fitted:
        return dict(held_out=f'{key}=={value:g}', note='nothing to hold out or nothing left to fit', n=len(held))
    th = fit(inside, metric, terms, start_from(dense_theta, terms))
    if th is None:
        return dict(held_out=f'{key}=={value:g}', note='the fit failed', n=len(held))
    obs = np.array([p['loss'][metric] - d['loss'][metric] for p, d in held])
    null = np.mean([p['loss'][metric] - d['loss'][metric] for p, d in fitted])
    pred = delta_pred(held, terms, th)
    res = errors(obs, pred)
    # the held-out goals of docs/fit_law.md: RMSE(Delta) <= max(0.01, 1.5 sigma), sigma the seed
    # std of Delta; the sign is judged only where |Delta| > 2 sigma, which noise seldom flips
    limit = max(0.01, 1.5 * delta_std) if delta_std else 0.01
    big = np.abs(obs) > 2 * delta_std if delta_std else np.zeros(len(obs), bool)
    vs, beats = versus_nulls(obs, pred, null)
    res.update(held_out=f'{key}=={value:g}', null_rmse_delta=float(np.sqrt(np.mean((obs - null) ** 2))),
               vs_null=vs, beats_null=beats,
               null_delta=float(null), rmse_over_seed_std=res['rmse_delta'] / delta_std if delta_std else None,
               goal=limit, goal_met=bool(res['rmse_delta'] <= limit),
               sign_right_big=float(np.mean(np.sign(pred[big]) == np.sign(obs[big]))) if big.any() else None,
               n_big=int(big.sum()))
    return res
