"""
law/terms.py: the relative law's terms, what each multiplies, the reference point at which they are read, and the one
rule that chooses a law's terms (backward_select: fit_law.py's relative law, law/joint.py and law/regimes.py use it).
fit_law.py fits the terms, law/report.py draws and words them, law/joint.py reads its own terms at the same reference
point: all import them from here, since none of the others may import fit_law.py (it imports them).
"""

# the reference point: g reads as the gain per unit log rho at T=T0, s=S0, D=D0, N=N0
T0 = 128
S0 = 4
D0 = 2_000_000               # training tokens of the reference pair
N0 = 787_584                 # params_total of the reference dense model (4 layers, width 128)

BASE_TERMS = ('capacity_gain', 'context_correction', 'stride_interaction')  # the abstract's three: always in
CANDIDATE_TERMS = ('budget_correction', 'size_correction', 'budget_offset')  # in when they beat their removal
TERMS = BASE_TERMS + CANDIDATE_TERMS
OUTSIDE = ('budget_offset',)   # added to Delta, not scaling log(rho): a budget trend that sparsity does not set
# each term's factor of log(rho) in the form (or, for OUTSIDE, its addend), and the variable a term other than the
# gain needs two values of
FACTORS = {'capacity_gain': '-capacity_gain', 'context_correction': 'context_correction*log(T/T0)',
           'stride_interaction': 'stride_interaction*log(s/s0)', 'budget_correction': 'budget_correction*log(D/D0)',
           'size_correction': 'size_correction*log(N_act/N0)', 'budget_offset': 'budget_offset*log(D/D0)'}
VARIABLES = {'context_correction': ('context length', 'T', 'T'), 'stride_interaction': ('stride', 'stride', 's'),
             'budget_correction': ('budget', 'tokens', 'D'), 'size_correction': ('active size', 'N_act', 'N_act'),
             'budget_offset': ('budget', 'tokens', 'D')}


def form_of(terms):
    """The law with these terms, as fit.json writes it: the terms inside multiply log(rho), OUTSIDE ones add."""
    inside = [FACTORS[t] for t in terms if t not in OUTSIDE]
    return 'delta = log(rho) * (' + ' + '.join(inside) + ')' + ''.join(f' + {FACTORS[t]}' for t in terms
                                                                        if t in OUTSIDE)


FORM = form_of(BASE_TERMS)


SELECT_MARGIN = 0.05   # a term stays only if leaving it out makes the held-out RMSE of Delta > 5% worse (docs/design.md)


def backward_select(terms, score, keep=(), margin=SELECT_MARGIN):
    """Backward elimination by held-out error, the rule of every law here. score(form, parent) -> the
    leave-one-configuration-out RMSE of Delta of the form (a list of terms), or None where it cannot be scored;
    parent is the form it is one term short of (None for the first). While some term outside `keep` can go at a cost
    of at most `margin`, drop the one whose removal leaves the lowest score (ties: the first in order).
    -> (the kept terms, history: the first form and each drop, each with its score)."""
    terms = list(terms)
    current = score(terms, None)
    history = [dict(terms=list(terms), cv_rmse_delta=current)]
    while current is not None:
        trials = [(s, t) for t in terms if t not in keep
                  for s in [score([u for u in terms if u != t], terms)] if s is not None]
        if not trials:
            break
        without, t = min(trials, key=lambda x: x[0])
        if without > current * (1 + margin):     # every term beats its own removal
            break
        terms.remove(t)
        current = without
        history.append(dict(dropped=t, terms=list(terms), cv_rmse_delta=current))
    return terms, history
