"""
law/terms.py: the relative law's terms, what each multiplies, and the reference point at which they are read.
fit_law.py fits them, law/report.py draws and words them, law/joint.py reads its own terms at the same reference
point: all three import them from here, since neither of the last two may import fit_law.py (it imports them).
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
