"""
law/: what fit_law.py is made of, and the study's other analyses, each a command (python -m law.NAME --help).

    load.py     runs read and checked (run folders or a CSV), sparse runs paired with dense partners, --holdout
    terms.py    the relative law's terms, its reference point, and the one rule that selects a law's terms
    stats.py    every interval: t intervals, paired t tests, Holm's adjustment, bootstrap percentiles, the nulls
    report.py   what a fit says for people: summary.md, the plots, the printed lines, fit.json's rows
    forms.py    the study's record of the relative law's forms in fit.json: the selection's table, the ablations,
                the budget term's shapes, the held-out goals
    joint.py    the joint law of dense and X-MoD losses (fit_law.py --joint)
    advise.py   python -m law.advise: which routing configuration to train, from a fit's joint law
    rates.py    python -m law.rates: the best peak learning rate per arm, Delta at tuned and shared rates (--panel)
    regimes.py  python -m law.regimes: one law of Delta across corpora, contexts and tokens per active parameter
    isoflop.py  python -m law.isoflop: each arm's optimum at one training budget, and Delta at the optima
    ladder.py   python -m law.ladder: the compute ladder (sweeps/gpu_ladder.py), Delta per rung, the core curve, the
                slope per decade of FLOPs and a verdict from its interval
    tokens_delta.py  python -m law.tokens_delta: Delta against tokens per parameter from sweeps/study/cpu_tokens.py
"""
