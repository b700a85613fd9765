"""
Tests for law/joint.py: the joint law of dense and X-MoD losses (fit.json's `joint`), whose rho = 1 limit is the
dense law, its held-out tests against a constant and a zero Delta, and the adviser (python -m law.advise).
"""

import json
import math
import os

import numpy as np
import pytest

from law import advise
from law.stats import versus_nulls
from law_runs import ROOT, make_run, run_main

# -----------------------------------------------------------------------------
# the joint law: dense and X-MoD losses in one law whose rho = 1 limit is the dense law

def joint_sweep(root, omega=-0.08, noise=0.0):
    """Dense runs on a grid of sizes and budgets from a dense law, and X-MoD runs at three rho per (size, budget),
    each FLOP-matched to a dense run, whose data term's coefficient moves with rho: b + omega log rho."""
    rng = np.random.default_rng(7)
    a, alpha, b, beta, e = math.log(60.0), 0.43, math.log(35.0), 0.26, math.log(0.75)
    law = lambda N, D, rho: (math.exp(a) * N ** -alpha + math.exp(b + omega * math.log(rho)) * D ** -beta
                             + math.exp(e)) * (1 + noise * rng.standard_normal())
    for width, N in ((64, 2e5), (128, 8e5), (192, 1.8e6)):
        for D in (2 ** 19, 2 ** 20, 2 ** 21, 2 ** 22):
            fpt = 6.0 * N
            make_run(root, f'dense_w{width}_D{D}', params_total=N, params_active=N, flops_per_token=fpt,
                     tokens=D, loss=law(N, D, 1.0), n_embd=width)
            for stride, rho in ((2, 1.5), (4, 3.0), (8, 6.0)):
                make_run(root, f'xmod_s{stride}_w{width}_D{D}', model='xmod', n_layer=12, stride=stride,
                         capacity=0.125, params_total=N * rho, params_active=N, flops_per_token=fpt * 1.01,
                         tokens=D, loss=law(N, D, rho), n_embd=width)
    return str(root)


def test_joint_law_finds_a_data_term_that_moves_with_rho(tmp_path, capsys):
    """Runs made from a joint law whose data term scales with rho^omega (0.1% noise on L), through fit_law.py: the
    selection keeps data_rho, recovers omega inside its bootstrap interval, and fit.json's joint.heldout.budget and
    joint.heldout.width predict the largest budget's and the largest width's Delta far better than a constant Delta
    does."""
    joint_sweep(tmp_path / 'runs', noise=0.001)
    code, err = run_main(capsys, str(tmp_path / 'runs'), '--out', str(tmp_path / 'fit'), '--bootstrap', '20',
                         joint=True)
    assert code == 0, err
    summary = (tmp_path / 'fit' / 'summary.md').read_text()
    assert '## Joint law' in summary and '`val_loss_causal`: joint (48 runs, 36 pairs): terms data_rho' in summary
    fit = json.load(open(tmp_path / 'fit' / 'fit.json'))
    out = fit['joint']
    assert fit['by_metric']['val_loss']['joint']['fitted']
    assert out['fitted'] and 'data_rho' in out['terms']
    assert out['coefficients']['data_rho']['value'] == pytest.approx(-0.08, abs=0.01)
    lo, hi = out['coefficients']['data_rho']['ci']
    assert lo <= -0.08 <= hi
    for name, n in (('budget', 9), ('width', 12)):
        h = out['heldout'][name]
        assert h['n'] == n and h['rmse_delta'] < 0.004 and h['null_rmse_delta'] > 5 * h['rmse_delta'], (name, h)
        assert h['goal_met'] and h['sign_right'] == 1.0
    # and it beats both nulls at 95% in every held-out test, leave-one-configuration-out included
    for name in ('budget', 'width', 'configuration'):
        h = out['heldout'][name]
        assert h['beats_null'] and h['vs_null']['constant']['ci'][1] < 0 and h['vs_null']['zero']['ci'][1] < 0
    assert 'beats both nulls (95%)' in summary and 'no better than a constant' not in summary.split('## Joint')[1]
    assert out['fit']['rmse_delta'] < 0.003


def test_a_law_is_judged_against_a_constant_and_a_zero_delta():
    """versus_nulls: a law that predicts the held-out Deltas beats both nulls; one that predicts a constant is no
    better than the constant; a constant-Delta null beats a zero null only when Delta is away from 0."""
    rng = np.random.default_rng(0)
    obs = 0.01 + 0.02 * rng.standard_normal(30)
    vs, beats = versus_nulls(obs, obs + 0.001 * rng.standard_normal(30), 0.01)
    assert beats and vs['constant']['null_rmse_delta'] == pytest.approx(np.sqrt(np.mean((obs - 0.01) ** 2)))
    vs, beats = versus_nulls(obs, np.full(30, obs.mean()), obs.mean())
    assert not beats and not vs['constant']['beaten'] and vs['constant']['mean_sq_diff'] == pytest.approx(0)
    assert vs['constant']['ci'][0] <= 0 <= vs['constant']['ci'][1]
    assert vs == versus_nulls(obs, np.full(30, obs.mean()), obs.mean())[0]     # a fixed bootstrap seed


# -----------------------------------------------------------------------------
# the adviser: python -m law.advise

def synthetic_fit(size_rho, beats_nulls=True):
    """A fit.json whose joint law is known: the dense law plus size_rho * log(rho) on the size term (negative: more
    total parameters help), fitted (as it were) on dense and X-MoD runs of three layouts at widths 64-192, T=128,
    1-4M tokens, with 50 bootstrap samples scattered 1% around it; its held-out test beat both nulls or not."""
    import torch

    import xmod
    rows = []
    for width in (64, 128, 192):
        dense = xmod.GPTConfig(model='dense', n_layer=4, n_embd=width, n_head=4, block_size=128, vocab_size=84)
        for cfg in [dense] + [xmod.match_flops(dense, 'xmod', stride=s, capacity=c)
                              for s, c in ((2, 0.5), (4, 0.125), (8, 0.25))]:
            with torch.device('meta'):
                m = xmod.GPT(cfg)
            for tokens in (1e6, 4e6):
                rows.append(dict(model=cfg.model, variant=cfg.model, heldout=False, n_embd=width, T=128,
                                 stride=cfg.stride if cfg.model == 'xmod' else None,
                                 capacity=cfg.capacity if cfg.model == 'xmod' else None, tokens=tokens,
                                 params_active=float(m.num_active_params()),
                                 rho=m.num_params() / m.num_active_params()))
    theta = [math.log(60.0), 0.43, math.log(35.0), 0.26, math.log(0.75), size_rho]
    rng = np.random.default_rng(0)
    samples = [list(np.array(theta) + 0.01 * np.abs(theta) * rng.standard_normal(6)) for _ in range(50)]
    names = ['a', 'alpha', 'b', 'beta', 'e', 'size_rho']
    return dict(metric='val_loss_causal', runs=rows, joint=dict(
        fitted=True, terms=['size_rho'], coefficients={n: dict(value=v) for n, v in zip(names, theta)},
        bootstrap=dict(n=50, n_valid=50, samples=samples), heldout=dict(configuration=dict(beats_null=beats_nulls))))


def test_the_adviser_picks_the_configuration_the_law_favours(tmp_path, capsys):
    """With size_rho < 0 the law rewards total parameters at fixed active ones: the layout with the largest rho wins,
    its interval below 0. With size_rho > 0 nothing beats dense, and the answer says so. A budget outside the fit's
    tokens is refused, naming the axis."""
    (tmp_path / 'good').mkdir()
    (tmp_path / 'bad').mkdir()
    json.dump(synthetic_fit(-0.2), open(tmp_path / 'good' / 'fit.json', 'w'))
    json.dump(synthetic_fit(+0.2), open(tmp_path / 'bad' / 'fit.json', 'w'))
    (tmp_path / 'null').mkdir()
    json.dump(synthetic_fit(-0.2, beats_nulls=False), open(tmp_path / 'null' / 'fit.json', 'w'))
    flops = 3 * 1.86e6 * 2e6                                 # the 4-layer dense model at width 128 for 2M tokens
    assert advise.main([str(tmp_path / 'good'), f'--flops={flops}', '--json']) == 0
    out = json.loads(capsys.readouterr().out)
    cands = out['candidates']
    assert {c['stride'] for c in cands} == {2, 4, 8} and out['dense']['layout'] == 'DDDD'
    top = max(cands, key=lambda c: c['rho'])
    assert out['best']['stride'] == top['stride'] and out['best']['delta'] == min(c['delta'] for c in cands) < 0
    assert all(c['delta_ci'][0] <= c['delta'] <= c['delta_ci'][1] < 0 for c in cands)
    assert 1.9e6 < out['dense']['tokens'] < 2.1e6
    assert advise.main([str(tmp_path / 'bad'), f'--flops={flops}']) == 0
    text = capsys.readouterr().out
    assert text.strip().endswith('best: dense: no routing configuration is predicted to beat it')
    assert '| xmod s4 | 0.1250 | DrrrDrrrDrrr |' in text
    # a law that did not beat its nulls held out: said first, and its intervals labelled conditional on it
    assert advise.main([str(tmp_path / 'null'), f'--flops={flops}']) == 0
    text = capsys.readouterr().out
    assert text.startswith(f'{tmp_path / "null" / "fit.json"}: the joint law did not beat its nulls')
    assert '(configuration: no)' in text
    assert 'Delta against dense [95%, if the law holds]' in text and 'best: if the law holds' in text
    code = advise.main([str(tmp_path / 'good'), f'--flops={flops * 100}'])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and 'tokens' in err and 'outside' in err
    code = advise.main([str(tmp_path / 'good'), f'--flops={flops}', '--n_embd=512'])
    err = capsys.readouterr().err
    assert code == 2 and 'params_active' in err and '--n_embd=512' in err


def test_the_adviser_says_what_it_needs_and_which_fit_to_ask(tmp_path, capsys):
    """Bare python -m law.advise names the fit and the budget it needs; a fit without a joint law (fit_law.py without
    --joint, as results/cpu_small) says how to get one and names the committed fit that has one, results/cpu_tuned,
    which it then answers from."""
    for args in ([], [str(tmp_path)], ['--flops=1e13']):
        code = advise.main(args)
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert 'give the fit to advise from and the training FLOPs: python -m law.advise FIT --flops=C' in err
    json.dump(dict(metric='val_loss_causal', runs=[]), open(tmp_path / 'fit.json', 'w'))
    code = advise.main([str(tmp_path), '--flops=1e13'])
    err = capsys.readouterr().err
    assert code == 2 and "the fit's joint law was not fitted" in err and 'fit_law.py --joint' in err
    assert 'results/cpu_tuned' in err
    assert advise.main([os.path.join(ROOT, 'results', 'cpu_tuned'), '--flops=2e13']) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith('best: ')
