"""
law/forms.py: the study's record of the relative law's forms, which fit_law.py writes into fit.json beside the law it
fits (docs/fit_law.md, "Besides the fits"): the selection's table, the ablations, the budget term's shapes, and the
held-out goals. Nothing here changes the fitted law. score(terms) is fit_law.form_scores on the fit's pairs.
"""

import itertools

import numpy as np

from law.report import fmt, form_sentence
from law.terms import BASE_TERMS, CANDIDATE_TERMS, D0, SELECT_MARGIN, TERMS


def selection_table(identified, kept, testable, score):
    """fit_law.select_terms's choice as fit.json records it: every form of the base terms plus some candidates, and
    each term's errors with and without it, against the kept form."""
    base, cands = [t for t in identified if t in BASE_TERMS], [t for t in identified if t in CANDIDATE_TERMS]
    forms = [score(base + list(c)) for n in range(len(cands) + 1) for c in itertools.combinations(cands, n)]
    terms = {}
    for t in identified:
        w, wo = score(set(kept) | {t}), score(set(kept) - {t})
        beats = None not in (w['cv_rmse'], wo['cv_rmse']) and wo['cv_rmse'] > (1 + SELECT_MARGIN) * w['cv_rmse']
        terms[t] = dict(base=t in BASE_TERMS, kept=t in kept, cv_testable=t in testable,
                        beats_removal=t in testable and beats,
                        cv_rmse_with=w['cv_rmse'], cv_rmse_without=wo['cv_rmse'],
                        heldout_rmse_with=w['heldout_rmse'], heldout_rmse_without=wo['heldout_rmse'])
    selection = dict(kept=kept, dropped=[t for t in identified if t not in kept], terms=terms)
    return dict(rule=f'a candidate term stays only if the leave-one-configuration-out RMSE of Delta without it '
                f'is more than {SELECT_MARGIN:.0%} worse than with it; base terms always stay',
                margin=SELECT_MARGIN, forms=forms, **selection, summary=form_sentence(selection))


def dropped_notes(selection):
    """Why each term the selection dropped is out, as fit.json's coefficients say it."""
    return {t: 'dropped: one configuration alone pins it down, so no held-out test' if not sel['cv_testable'] else
            f'dropped by the selection: CV RMSE {fmt(sel["cv_rmse_without"])} without it, {fmt(sel["cv_rmse_with"])} '
            f'with it' for t, sel in selection['terms'].items() if not sel['kept']}


def ablations(active, notes, score):
    """The law refitted without each of its terms (a term earns its place if the errors grow without it), and why
    each term it lacks is out."""
    out = {name: score(terms) for name, terms in [('full', active)] + [(f'no_{t}', [u for u in active if u != t])
                                                                       for t in active]}
    out.update({f'no_{t}': dict(note=notes[t]) for t in TERMS if t not in active})
    return out


SAT_BETAS = (0.25, 0.5, 1.0, 2.0)   # exponents tried for the saturating budget term


def budget_columns(pairs):
    """The budget term's candidate shapes, each one column beside the base terms: none; kappa0 log(D/D0), unbounded
    (the selection's budget_offset); and K ((D/D0)^-beta - 1) for each beta in SAT_BETAS, which saturates: Delta(D)
    -> Delta_inf as D grows, Delta(D0) unchanged (issue 16: Delta(D) = Delta_inf + K D^-beta)."""
    D = np.array([p['tokens'] for p in pairs], dtype=np.float64) / D0
    cols = {'none': np.zeros((len(pairs), 0)), 'log': np.log(D)[:, None]}
    cols.update({f'saturating beta={b:g}': (D ** -b - 1)[:, None] for b in SAT_BETAS})
    return cols


def budget_forms(fit, test, design):
    """Each budget shape's errors, the base terms' columns design(pairs) beside it, and the constant-Delta null's:
    RMSE and max |error| of Delta on the fitted pairs, leave-one-configuration-out, and on the held-out pairs."""
    y, y_test = np.array([p['delta'] for p in fit]), np.array([p['delta'] for p in test])
    groups = sorted({p['cfg_key'] for p in fit})
    rmse = lambda e: float(np.sqrt(np.mean(np.square(e)))) if len(e) else None
    worst = lambda e: float(np.max(np.abs(e))) if len(e) else None

    def scores(make):   # make(train, test) -> predictions on test, from a fit on train
        cv = np.concatenate([make([p for p in fit if p['cfg_key'] != g], [p for p in fit if p['cfg_key'] == g])
                             - np.array([p['delta'] for p in fit if p['cfg_key'] == g]) for g in groups]
                            ) if len(groups) > 1 else np.zeros(0)
        e_fit, e_test = make(fit, fit) - y, make(fit, test) - y_test
        return dict(fit_rmse=rmse(e_fit), cv_rmse=rmse(cv) if len(cv) else None, cv_max_abs=worst(cv),
                    heldout_rmse=rmse(e_test), heldout_max_abs=worst(e_test))

    def linear(shape):
        def make(train, at):
            X = lambda ps: np.hstack([design(ps), budget_columns(ps)[shape]])
            return X(at) @ np.linalg.lstsq(X(train), np.array([p['delta'] for p in train]), rcond=None)[0] \
                if len(at) else np.zeros(0)
        return make
    out = {'constant Delta (null)': scores(lambda train, at: np.full(len(at), np.mean([p['delta'] for p in train])))}
    out.update({f'base + {shape} budget term' if shape != 'none' else 'base terms alone': scores(linear(shape))
                for shape in budget_columns(fit)})
    return out


def heldout_goals(held, sd):
    """The held-out goals (docs/fit_law.md), each 'met', 'not met' or 'untestable', with its numbers (sd: the seed
    std of Delta): RMSE(Delta) <= max(0.01, 1.5 sd); the sign right on >= 90% of the pairs with abs(Delta) > 2 sd;
    R^2(Delta) >= 0.85 where the held-out Deltas span more than 3 sd."""
    if not held:
        return None
    verdict = lambda ok: 'met' if ok else 'not met'
    known = sd is not None
    limit = max(0.01, 1.5 * sd) if known else 0.01  # without seed noise only an RMSE under 0.01 can be judged
    r2_testable = known and held['r2'] is not None and held['delta_span'] > 3 * sd
    return dict(
        seed_std=sd,
        rmse=dict(value=held['rmse'], limit=limit,
                  status=verdict(held['rmse'] <= limit) if known or held['rmse'] <= limit else 'untestable'),
        sign=dict(value=held['sign_acc_big'], n=held['n_big'], limit=0.9,
                  status='untestable' if held['sign_acc_big'] is None else verdict(held['sign_acc_big'] >= 0.9)),
        r2=dict(value=held['r2'], span=held['delta_span'], span_needed=3 * sd if known else None, limit=0.85,
                status=verdict(held['r2'] >= 0.85) if r2_testable else 'untestable'))
