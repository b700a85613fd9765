"""
tools/plot_run.py: one run's curves in one picture, from its run folder's log.csv and run.json.

    python tools/plot_run.py out-xmod                    # out-xmod/curves.png (train.py's default folder)
    python tools/plot_run.py out-xmod --out=run.png      # somewhere else (or --out run.png)

Four panels, against tokens seen:
  1. loss: train (top-k routing, as trained), val with top-k routing and val with causal routing (the honest one);
  2. the learning rate;
  3. each routed layer's causal selection rate (causal_rate_<layer>) against the capacity it was built for;
     a model without routed layers says so in the panel;
  4. tokens/s.
It reads log.csv as it is, so it works on a run still training: a row being written (cut mid-line) is left out.
RUN is one run folder (train.py --out_dir), the bare argument.
"""
import csv
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository root
sys.path.insert(0, ROOT)
from configurator import UserError, configure, defaults_of, run_main  # noqa: E402
from run_folder import log_rows  # noqa: E402

# -----------------------------------------------------------------------------------------------------------------
# the command line (configurator.py): RUN is the bare argument; --key=value or --key value
out = ''                    # the PNG to write (default: RUN/curves.png)
# -----------------------------------------------------------------------------------------------------------------
DEFAULTS = defaults_of(globals())

PANELS = ('loss', 'learning rate', 'causal selection rate per routed layer', 'tokens/s')


def read_log(run_dir):
    """{column: [float or None per row]} of run_dir/log.csv; rows of the wrong length (one being written) dropped."""
    header, rows = log_rows(os.path.join(run_dir, 'log.csv'))
    if header is None:
        return None
    rows = [r for r in rows if len(r) == len(header)]
    return {name: [float(r[i]) if r[i] != '' else None for r in rows] for i, name in enumerate(header)}


def series(log, x, y):
    """The (x, y) points of column y where it has a value."""
    pts = [(a, b) for a, b in zip(log[x], log.get(y, [])) if a is not None and b is not None]
    return [a for a, _ in pts], [b for _, b in pts]


def lr_schedule(info):
    """(tokens, lr) at every step of the run's schedule, from run.json's config (run_folder.get_lr, train.py's schedule): log.csv has the
    rate at its evaluations only, which would draw a 100-step warmup as a ramp over the first eval interval. None
    without a run.json."""
    if not info.get('config') or not info.get('n_iters'):
        return None
    from types import SimpleNamespace

    from run_folder import get_lr
    cfg = SimpleNamespace(**info['config'])
    steps = range(info['n_iters'] + 1)
    return [s * info['tokens_per_iter'] for s in steps], [get_lr(cfg, s, info['n_iters']) for s in steps]


def draw(run_dir, path):
    """Draw run_dir's curves into path; returns the panels' titles, in order."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    log = read_log(run_dir)
    if log is None or not log.get('step'):
        raise ValueError(f"{run_dir} has no log.csv rows yet (train.py writes one at each evaluation)")
    info = {}
    if os.path.isfile(os.path.join(run_dir, 'run.json')):
        with open(os.path.join(run_dir, 'run.json')) as f:
            info = json.load(f)
    mcfg = info.get('model_config', {})
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax_loss, ax_lr, ax_rate, ax_speed = axes.flat
    for col, label in (('train_loss', 'train (top-k routing)'), ('val_loss', 'val, top-k routing'),
                       ('val_loss_causal', 'val, causal routing')):
        xs, ys = series(log, 'tokens', col)
        if xs:
            ax_loss.plot(xs, ys, marker='.' if len(xs) < 50 else None, label=label)
    ax_loss.set_ylabel('cross-entropy (nats/token)')
    ax_loss.legend(fontsize=8)
    curve = lr_schedule(info)
    ax_lr.plot(*(curve or series(log, 'tokens', 'lr')))
    ax_lr.set_ylabel('learning rate')
    rates = [c for c in log if c.startswith('causal_rate_')]
    for col in sorted(rates, key=lambda c: int(c.rsplit('_', 1)[1])):
        ax_rate.plot(*series(log, 'tokens', col), label=f"layer {col.rsplit('_', 1)[1]}")
    if rates:
        if mcfg.get('capacity') is not None:
            ax_rate.axhline(mcfg['capacity'], color='k', ls='--', lw=1, label=f"capacity {mcfg['capacity']:.3g}")
        ax_rate.set_ylabel('share of tokens taken (causal)')
        ax_rate.legend(fontsize=7, ncol=2)
    else:
        ax_rate.text(0.5, 0.5, f"no routed layers ({mcfg.get('model', 'this model')})", ha='center', va='center',
                     transform=ax_rate.transAxes)
    ax_speed.plot(*series(log, 'tokens', 'tokens_per_s'))
    ax_speed.set_ylabel('tokens/s')
    for ax, title in zip(axes.flat, PANELS):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel('tokens')
        ax.grid(alpha=0.3)
    state = 'finished' if info.get('finished') else 'still training, or stopped'
    layout = f", {info['layout']}" if info.get('layout') else ''
    fig.suptitle(f"{os.path.basename(os.path.abspath(run_dir))} ({mcfg.get('model', '?')}{layout}; {state}; "
                 f"{len(log['step'])} rows of log.csv)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [ax.get_title() for ax in axes.flat]


def plot_run(argv):
    runs = []
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=runs)
    if not runs:
        raise UserError('give a run folder (python tools/plot_run.py RUN [--out PNG])')
    if len(runs) > 1:
        raise UserError(f"one run folder at a time, not {len(runs)}: {' '.join(runs)}")
    run = runs[0]
    path = cfg.out or os.path.join(run, 'curves.png')
    try:
        draw(run, path)
    except (ValueError, csv.Error) as e:
        raise UserError(e) from None
    print(f"wrote {path}")
    return 0


def main(argv=None):
    return run_main('tools/plot_run.py', plot_run, argv)      # bad input: one line on stderr, exit 2


if __name__ == '__main__':
    sys.exit(main())
