"""
lr_sweep.py: the peak learning rate per arm and width, and Delta at tuned and at shared rates, from the runs of a
learning-rate sweep (sweeps/cpu_lr.py).

    python lr_sweep.py results/cpu_lr/runs --out results/cpu_lr        # lr.json, lr.md, lr_vs_loss.png

It reads a sweep's finished runs (sweep.py runs them). What an arm is, how its best rate is chosen and how Delta is
paired: law/rates.py, which does the analysis; this file is its command line.
"""
import argparse
import json
import os
import sys

from configurator import run_main
from law.load import METRICS, load_runs
from law.rates import analyse, plot, to_markdown


def lr_sweep(argv):
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('runs', nargs='+', help='run folders or globs (each holding run.json and log.csv)')
    p.add_argument('--out', required=True, help='folder for lr.json, lr.md and lr_vs_loss.png')
    p.add_argument('--metric', default='val_loss_causal', choices=METRICS)
    cfg = p.parse_args(argv)
    result = analyse(load_runs(cfg.runs), cfg.metric)
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
