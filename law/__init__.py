"""
law/: what fit_law.py, the script at the root, is made of.

    load.py     the finished runs of a sweep, read and checked, sparse runs paired with dense partners, --holdout
    terms.py    the relative law's terms and its reference point, defined once for fit_law.py, joint.py, report.py
    joint.py    the joint law of dense and X-MoD losses (fit.json's `joint`) and fit_law.py --advise
    stats.py    what a mean over a few seeds may claim: t intervals, paired t tests, Holm's adjustment
    rates.py    the best peak learning rate per arm, Delta at tuned and at shared rates (--lr, --panel, --tuned)
    report.py   what a fit says for people: summary.md, the plots, the printed lines
    regimes.py  fit_law.py --regimes: one law of Delta across corpora, contexts and tokens per active parameter
    isoflop.py  fit_law.py --isoflop: each arm's optimum at one training budget, and Delta at the optima
    ladder.py   the compute ladder (sweeps/gpu_ladder.py): Delta per rung at seed 0's rates, the core curve, the
                slope per decade of FLOPs and a verdict from its interval (python -m law.ladder)

The dense and relative laws themselves are fitted in fit_law.py, which a reader of the tutorial (chapter 11) reads
top to bottom.
"""
