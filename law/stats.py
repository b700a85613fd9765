"""
law/stats.py: every interval the law's scripts print. What a mean over a few seeds may claim: Student's t interval
with its degrees of freedom, a paired t test's two-sided p, and Holm's adjustment where one table makes several
comparisons; and what a bootstrap may: percentile intervals, and a law's held-out error against two nulls. numpy and
math only (the project does not depend on scipy); the t distribution's CDF is the regularized incomplete beta
function's.
"""

import math

import numpy as np


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz's method)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    # the fraction converges fast for x < (a + 1) / (a + b + 2); past it, the symmetry I_x(a, b) = 1 - I_1-x(b, a)
    if x > (a + 1) / (a + b + 2):
        return 1.0 - betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom."""
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))     # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def t_ppf(p, df):
    """The p quantile of Student's t with df degrees of freedom (bisection on t_cdf: monotone, 1e-12 close)."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def t_interval(values, level=0.95):
    """The mean of values (seeds, or seed clusters), its standard error and the t interval around it with n - 1
    degrees of freedom, and the two-sided p of a t test that the mean is 0 (for a paired Delta: that the two arms
    are equal). -> dict(mean, se, n, df, lo, hi, p); se, df, lo, hi and p are None for a single value."""
    v = np.asarray(values, dtype=float)
    n, m = len(v), float(v.mean())
    if n < 2:
        return dict(mean=m, se=None, n=n, df=None, lo=None, hi=None, p=None)
    se = float(v.std(ddof=1) / math.sqrt(n))
    half = t_ppf(0.5 + level / 2, n - 1) * se
    p = 2 * (1 - t_cdf(abs(m) / se, n - 1)) if se > 0 else (0.0 if m != 0 else 1.0)
    return dict(mean=m, se=se, n=n, df=n - 1, lo=m - half, hi=m + half, p=float(p))


def holm(ps):
    """Holm's step-down adjustment of p values (None kept as None): the family-wise error stays below the level
    when each adjusted p is compared with it. -> the adjusted ps, in the order given."""
    idx = sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: ps[i])
    out, running, k = list(ps), 0.0, len(idx)
    for rank, i in enumerate(idx):
        # the smallest p is multiplied by k, the next by k - 1, ...; the max keeps the order monotone
        running = max(running, min(1.0, (k - rank) * ps[i]))
        out[i] = running
    return out


def fmt_t(d, digits=4):
    """'+0.0097 ± 0.0033, 95% t(4) [+0.0005, +0.0190]' for a t_interval dict; the mean alone for one value."""
    if d is None:
        return '-'
    s = f"{d['mean']:+.{digits}f}"
    if d.get('se') is None:
        return s
    return s + f" ± {d['se']:.{digits}f}, 95% t({d['df']}) [{d['lo']:+.{digits}f}, {d['hi']:+.{digits}f}]"


def percentile_ci(samples):
    """The 95% percentile interval of bootstrap samples along their first axis: (2.5%, 97.5%) arrays."""
    return np.percentile(samples, [2.5, 97.5], axis=0)


def bootstrap_intervals(samples, names, what='', warn=None):
    """{name: [2.5%, 97.5%]} of samples (n_samples, n_names); None for every name with fewer than 2 samples, and for
    a name every sample gives one value (a zero-width interval would look precise; warn(message) is told)."""
    if len(samples) < 2:
        return {k: None for k in names}
    ci = {}
    for k, lo, hi in zip(names, *percentile_ci(samples)):
        ci[k] = [float(lo), float(hi)] if hi - lo > 1e-9 * max(abs(lo), abs(hi)) else None
        if ci[k] is None and warn:
            warn(f'{what}: every bootstrap resample gives the same {k}: no interval')
    return ci


def rank_quantile(x, p):
    """A percentile that keeps inf as a value (law/regimes.py: no crossing): the sample at rank p, no interpolation."""
    x = np.sort(np.asarray(x, float))
    return float(x[min(len(x) - 1, max(0, int(math.floor(p * len(x)))))])


NULL_BOOT = 2000         # paired bootstrap resamples of the held-out pairs (versus_nulls)


def versus_nulls(obs, pred, const, n_boot=NULL_BOOT):
    """A law's held-out error beside two nulls that know nothing of the configuration: a constant Delta (the fitted
    pairs' mean; per pair where each fold has its own) and Delta = 0 (X-MoD is its dense partner). For each: the
    null's RMSE, and the mean over held-out pairs of (law's squared error - null's) with a 95% paired bootstrap
    interval (the pairs resampled, a fixed seed: the same result every time). The law beats a null when the whole
    interval is below 0. -> (vs_null, beats_null: it beats both)."""
    obs, pred = np.asarray(obs, float), np.asarray(pred, float)
    law = (pred - obs) ** 2
    # one set of resamples for both nulls; law and null are scored on the same resampled pairs
    # (paired), so the interval is of their difference and what is hard for both cancels
    idx = np.random.default_rng(0).integers(0, len(obs), (n_boot, len(obs)))    # (n_boot, n_pairs)
    vs = {}
    for name, null in (('constant', np.broadcast_to(const, obs.shape)), ('zero', np.zeros_like(obs))):
        diff = law - (null - obs) ** 2
        lo, hi = percentile_ci(diff[idx].mean(1))
        vs[name] = dict(null_rmse_delta=float(np.sqrt(np.mean((null - obs) ** 2))), mean_sq_diff=float(diff.mean()),
                        ci=[float(lo), float(hi)], beaten=bool(hi < 0))
    return vs, all(v['beaten'] for v in vs.values())
