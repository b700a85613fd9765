"""
law/advise.py: which routing configuration to train, from a fit's joint law (law/joint.py; fit_law.py --joint).

    python -m law.advise FIT --flops=C [--block_size=T] [--n_embd=W] [--dense_layers=L] [--json]

FIT is a fit folder (or its fit.json) whose joint law was fitted: the committed one is results/cpu_tuned (each arm at
its tuned rate; results/cpu_settle's runs share one untuned rate). The answer: each X-MoD configuration the fit saw,
FLOP-matched to the dense model of this budget, context and shape, its predicted loss and Delta against dense with a
95% interval over the fit's bootstrap; where the law did not beat both nulls in every held-out test, it says so
first and labels the intervals as conditional on the law.
"""
import json as jsonlib  # `json` is a key (--json)
import os
import sys

import numpy as np
import torch

from configurator import UserError, configure, defaults_of, run_main
from law.joint import predict
from law.report import md_table, to_json
from law.stats import percentile_ci
from xmod import GPT, GPTConfig, flops_per_token, layout_string, match_flops

# -----------------------------------------------------------------------------
# the command line (configurator.py): FIT is the bare argument
flops = 0.0                  # the training FLOPs, > 0 (3 x forward FLOPs/token x tokens, as run.json); required
block_size = 128             # context T
n_embd = 128                 # the dense model's width
dense_layers = 4             # the dense model's depth
n_head = 4                   # attention heads
vocab_size = 84              # vocabulary (84: char-level Shakespeare)
json = False                 # print the answer as JSON
DEFAULTS = defaults_of(globals())


def advise(fit, flops, block_size, n_embd, dense_layers, n_head=4, vocab_size=84, tol=0.02):
    """Which X-MoD configuration the fit's joint law predicts best at this budget, context and dense shape, and
    whether any beats the FLOP-matched dense model. Candidates: the (stride, capacity) configurations the fit saw,
    FLOP-matched to this dense model, inside the fit's range of tokens, active parameters, context and rho
    (ValueError names the axis). Delta's 95% interval: percentiles over the fit's bootstrap samples, conditional on
    the law's form. -> dict(dense, candidates, skipped, best, null_tests, beats_nulls, verdict)."""
    j = fit.get('joint') or {}
    if not j.get('fitted'):
        raise ValueError(f"the fit's joint law was not fitted ({j.get('note', 'fit_law.py without --joint')}): "
                         "refit with fit_law.py --joint, or ask results/cpu_tuned")
    samples = (j.get('bootstrap') or {}).get('samples')
    if not samples:
        raise ValueError("the fit has no bootstrap samples of the joint law: refit with fit_law.py --joint "
                         "--bootstrap 20 or more")
    terms = j['terms']
    theta = np.array([j['coefficients'][n]['value'] for n in ['a', 'alpha', 'b', 'beta', 'e'] + terms])
    # what the joint law saw of fit.json's runs (dense and full X-MoD, not held out): each axis's (low, high)
    rows = [r for r in fit['runs'] if not r['heldout'] and (r['model'] == 'dense' or r['variant'] == 'xmod')]
    seen = {k: (min(r[k] for r in rows), max(r[k] for r in rows)) for k in ('tokens', 'params_active', 'T', 'rho')}
    configs = sorted({(r['stride'], r['capacity']) for r in rows if r['variant'] == 'xmod' and r['rho'] > 1 + 1e-12})

    def inside(axis, value, what):
        lo, hi = seen[axis]
        if not lo * (1 - 1e-9) <= value <= hi * (1 + 1e-9):
            raise ValueError(f"{what} gives {axis} = {value:.4g}, outside the fit's range {lo:.4g} to {hi:.4g}: "
                             f"the law is not asked to extrapolate")

    def shape(cfg):
        """A config's law inputs at this budget (training FLOPs = 3 x forward FLOPs per token x tokens)."""
        with torch.device('meta'):
            m = GPT(cfg)
        fpt = flops_per_token(cfg)
        return dict(params_active=float(m.num_active_params()), rho=m.num_params() / m.num_active_params(),
                    fpt=fpt, tokens=flops / (3 * fpt), T=block_size)

    dense_cfg = GPTConfig(model='dense', n_layer=dense_layers, n_embd=n_embd, n_head=n_head, block_size=block_size,
                          vocab_size=vocab_size)
    dense = dict(shape(dense_cfg), stride=None, layout=layout_string(dense_cfg))
    inside('T', block_size, f'--block_size={block_size}')
    inside('params_active', dense['params_active'], f'--n_embd={n_embd} --dense_layers={dense_layers}')
    inside('tokens', dense['tokens'], f'--flops={flops:g}')
    cands, skipped = [], []
    for stride, capacity in configs:
        try:
            cfg = match_flops(dense_cfg, 'xmod', stride=stride, capacity=capacity, tol=tol)
        except ValueError as e:
            skipped.append(dict(stride=stride, capacity=capacity, why=str(e)))
            continue
        c = dict(shape(cfg), stride=stride, capacity=cfg.capacity, n_layer=cfg.n_layer, layout=layout_string(cfg))
        lo, hi = seen['rho']
        if not lo <= c['rho'] <= hi or any(abs(c['capacity'] - x['capacity']) < 1e-9 and c['n_layer'] == x['n_layer']
                                           and c['stride'] == x['stride'] for x in cands):
            skipped.append(dict(stride=stride, capacity=capacity, why=f"rho {c['rho']:.3g} outside the fit's "
                                f"{lo:.3g} to {hi:.3g}" if not lo <= c['rho'] <= hi else 'the same model as another'))
            continue
        cands.append(c)
    if not cands:
        raise ValueError("no X-MoD configuration the fit saw FLOP-matches this dense model inside the fit's range of "
                         "rho: nothing to compare")
    rows = [dense] + cands
    point = predict(rows, terms, theta)
    boot = np.array([predict(rows, terms, np.array(th)) for th in samples])    # (n_samples, 1 + candidates)
    for i, c in enumerate(cands, start=1):
        d = boot[:, i] - boot[:, 0]
        c.update(loss=float(point[i]), delta=float(point[i] - point[0]),
                 delta_ci=[float(x) for x in percentile_ci(d)])
    dense['loss'] = float(point[0])
    winners = [c for c in cands if c['delta_ci'][1] < 0]
    best = min(winners, key=lambda c: c['delta']) if winners else None
    # the intervals are over refits of one form: they hold only if the form does, as its held-out tests show
    tests = {name: v['beats_null'] for name, v in j.get('heldout', {}).items() if 'beats_null' in v}
    beats = bool(tests) and all(tests.values())
    verdict = (f"xmod stride {best['stride']}, capacity {best['capacity']:.4f} ({best['layout']}): Delta "
               f"{best['delta']:+.4f} [{best['delta_ci'][0]:+.4f}, {best['delta_ci'][1]:+.4f}]" if best else
               'dense: no routing configuration is predicted to beat it')
    if not beats:
        verdict = f'if the law holds (it did not beat its nulls held out): {verdict}'
    return dict(flops=flops, block_size=block_size, n_embd=n_embd, dense_layers=dense_layers, metric=fit.get('metric'),
                terms=terms, n_samples=len(samples), dense=dense, candidates=cands, skipped=skipped, best=best,
                null_tests=tests, beats_nulls=beats, verdict=verdict)


def run(argv):
    fits = []
    cfg, _ = configure(argv, DEFAULTS, doc=__doc__, source=__file__, positional=fits)
    if len(fits) != 1 or cfg.flops <= 0:
        raise UserError('give the fit to advise from and the training FLOPs: python -m law.advise FIT --flops=C '
                        '(FIT: a fit folder with a joint law, e.g. results/cpu_tuned)')
    path = fits[0] if fits[0].endswith('.json') else os.path.join(fits[0], 'fit.json')
    try:
        with open(path) as f:
            out = advise(jsonlib.load(f), cfg.flops, cfg.block_size, cfg.n_embd, cfg.dense_layers, cfg.n_head,
                         cfg.vocab_size)
    except (OSError, ValueError) as e:      # unreadable, not JSON (a ValueError too), or a question the fit refuses
        raise UserError(f'{path}: {e}')
    if cfg.json:
        print(jsonlib.dumps(to_json(out), indent=1))
        return 0
    d = out['dense']
    tests = ', '.join(f"{k}: {'yes' if v else 'no'}" for k, v in out['null_tests'].items()) or 'none run'
    if not out['beats_nulls']:
        # said before any number: what follows assumes a law the runs did not bear out
        print(f"{path}: the joint law did not beat its nulls (a constant Delta and Delta = 0) held out ({tests}): "
              f"the intervals below are conditional on the law, not evidence for a configuration")
    print(f"{path}: the joint law of {out['metric']} (terms: {', '.join(out['terms']) or 'none, the dense law'}), "
          f"{out['n_samples']} bootstrap samples")
    print(f"budget {out['flops']:.3g} FLOPs, T={out['block_size']}, dense {d['layout']} at width {out['n_embd']}: "
          f"{d['tokens'] / 1e6:.3g}M tokens, predicted loss {d['loss']:.4f}")
    rows = [[f"xmod s{c['stride']}", f"{c['capacity']:.4f}", c['layout'], f"{c['rho']:.2f}",
             f"{c['tokens'] / 1e6:.3g}M", f"{c['loss']:.4f}",
             f"{c['delta']:+.4f} [{c['delta_ci'][0]:+.4f}, {c['delta_ci'][1]:+.4f}]"] for c in out['candidates']]
    print(md_table(['config', 'capacity', 'layout', 'rho', 'tokens', 'predicted loss',
                    'Delta against dense [95%' + ('' if out['beats_nulls'] else ', if the law holds')
                    + ']'], rows))
    for s_ in (s_ for s_ in out['skipped'] if s_['why'] != 'the same model as another'):
        print(f"not asked: xmod stride {s_['stride']}, capacity {s_['capacity']:g}: {s_['why']}")
    print(f"best: {out['verdict']}")
    return 0


def main(argv=None):
    return run_main('python -m law.advise', run, argv)


if __name__ == '__main__':
    sys.exit(main())
