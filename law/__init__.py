"""
law/: what fit_law.py and lr_sweep.py, the scripts at the root, are made of.

    load.py     the finished runs of a sweep, read and checked, sparse runs paired with dense partners, --holdout
    terms.py    the relative law's terms and its reference point, defined once for fit_law.py, joint.py, report.py
    joint.py    the joint law of dense and X-MoD losses (fit.json's `joint`) and fit_law.py --advise
    rates.py    the best peak learning rate per arm, Delta at tuned and at shared rates (lr_sweep.py, --tuned)
    report.py   what a fit says for people: summary.md, the plots, the printed lines
    regimes.py  fit_law.py --regimes: one law of Delta across corpora, contexts and tokens per active parameter
    ladder.py   the compute ladder (sweeps/gpu_ladder.py): Delta per width at leave-one-seed-out rates, its slope
                per decade of FLOPs (python -m law.ladder)

The dense and relative laws themselves are fitted in fit_law.py, which a reader of the tutorial (chapter 11) reads
top to bottom.
"""
