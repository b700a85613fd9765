"""
lr_sweep.py: the peak learning rate per arm and width, and Delta at tuned and at shared rates, from the runs of a
learning-rate sweep (sweeps/cpu_lr.py).

    python lr_sweep.py results/cpu_lr/runs --out results/cpu_lr        # lr.json, lr.md, lr_vs_loss.png

RUNS... are run folders or globs of them, each holding run.json and log.csv: a sweep's finished runs (sweep.py runs
them). What an arm is, how its best rate is chosen and how Delta is
paired: law/rates.py, which does the analysis; this file is its command line.
"""
import json
import os
import sys

from configurator import UserError, configure, defaults_of, run_main
from law.load import METRICS, load_runs
from law.rates import analyse, plot, to_markdown

# -----------------------------------------------------------------------------------------------------------------
# the command line (configurator.py): RUNS... are bare arguments; --key=value or --key value
out = ''                    # folder for lr.json, lr.md and lr_vs_loss.png (required)
metric = 'val_loss_causal'  # the loss that picks each arm's rate and gives Delta: val_loss_causal or val_loss
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())


def lr_sweep(argv):
    runs = []
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=runs)
    if not runs or not cfg.out:
        raise UserError('give the runs of a learning-rate sweep and --out DIR (python lr_sweep.py RUNS... --out DIR)')
    if cfg.metric not in METRICS:
        raise UserError(f"--metric={cfg.metric!r}: expected {' | '.join(METRICS)}")
    result = analyse(load_runs(runs), cfg.metric)
    os.makedirs(cfg.out, exist_ok=True)
    with open(os.path.join(cfg.out, 'lr.json'), 'w') as f:
        json.dump(result, f, indent=1, default=str)
    md = to_markdown(result)
    with open(os.path.join(cfg.out, 'lr.md'), 'w') as f:
        f.write(md)
    plot(result, os.path.join(cfg.out, 'lr_vs_loss.png'))
    print(md)
    print(f"wrote {cfg.out}/lr.json, lr.md, lr_vs_loss.png")
    return 0


def main(argv=None):
    return run_main('lr_sweep.py', lr_sweep, argv)       # bad input: one line on stderr, exit 2 (as fit_law.py)


if __name__ == '__main__':
    sys.exit(main())
