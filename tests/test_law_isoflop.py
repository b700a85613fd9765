"""
Tests for law/isoflop.py (python -m law.isoflop): each arm's optimum from a parabola in log N through its seed means
at one budget, found where the synthetic runs put it; seeds resampled together for the intervals; an optimum at an
edge of the sizes said to be open; runs at another budget left out.
"""

import json
import math

import numpy as np
import pytest

from law import isoflop
from law_runs import make_run

BUDGET = 1.0e13


def iso_sweep(root, opt_dense, opt_xmod, widths=(64, 96, 128, 192, 256), seeds=(0, 1, 2), noise=0.002):
    """Dense and X-MoD (stride 4) at five sizes each, every run on BUDGET FLOPs: loss = L* + 0.05 (log N - log N*)^2
    plus seed noise shared by both arms of a seed, so the optima lie at N* = opt_dense, opt_xmod."""
    rng = np.random.default_rng(3)
    for s in seeds:
        common = noise * rng.standard_normal()
        for w in widths:
            n = 12 * 4 * w ** 2                      # the dense model's N, X-MoD's active N
            for arm, opt, base, N in (('dense', opt_dense, 1.70, n), ('xmod', opt_xmod, 1.71, 3 * n)):
                L = base + 0.05 * (math.log(N) - math.log(opt)) ** 2 + common + 0.0005 * rng.standard_normal()
                kw = dict(model='dense', n_layer=4) if arm == 'dense' else dict(model='xmod', n_layer=12, stride=4,
                                                                                 capacity=0.125)
                make_run(root, f'{arm}_d{w}_s{s}', seed=s, n_embd=w, tokens=int(BUDGET / (6 * n)), params_total=N,
                         params_active=n, flops_per_token=2.0 * n, loss=L, **kw)
    return str(root)


def test_isoflop_finds_each_arms_optimum_and_delta_at_the_optima(tmp_path, capsys):
    """The vertex of each arm's parabola is its N*, inside the sizes, with a seed-bootstrap interval around it;
    Delta at the optima is the difference of the minima (0.01 here); a run at another budget is left out."""
    n_d, n_x = 12 * 4 * 128 ** 2, 3 * 12 * 4 * 160 ** 2
    root = iso_sweep(tmp_path / 'runs', n_d, n_x)
    make_run(tmp_path / 'runs', 'dense_other_budget', tokens=2 ** 20, loss=2.0)       # another budget: left out
    assert isoflop.main([root, '--out', str(tmp_path / 'out'), '--bootstrap', '50']) == 0
    res = json.load(open(tmp_path / 'out' / 'isoflop.json'))
    d, x = res['arms']['dense'], res['arms']['xmod']
    assert d['N_opt'] == pytest.approx(n_d, rel=0.1) and x['N_opt'] == pytest.approx(n_x, rel=0.1)
    assert d['where'] == x['where'] == 'inside'
    assert d['N_opt_ci'][0] <= d['N_opt'] <= d['N_opt_ci'][1]
    assert res['delta_opt'] == pytest.approx(0.01, abs=0.002)
    assert res['delta_opt_ci'][0] <= res['delta_opt'] <= res['delta_opt_ci'][1]
    assert res['seeds'] == [0, 1, 2] and len(d['sizes']) == 5
    assert any('from the budget' in w for w in res['warnings'])
    md = (tmp_path / 'out' / 'isoflop.md').read_text()
    assert 'Delta at the optima' in md and '95% t(2)' in md and (tmp_path / 'out' / 'isoflop.png').stat().st_size


def test_isoflop_reports_delta_measured_paired_by_seed(tmp_path, capsys):
    """Beside the parabolas, Delta as measured: X-MoD - dense at each width and between each arm's best measured
    size, paired by seed (the seed noise both arms share cancels), with its t interval on n - 1 df."""
    root = iso_sweep(tmp_path / 'runs', 12 * 4 * 96 ** 2, 3 * 12 * 4 * 64 ** 2, noise=0.02)
    assert isoflop.main([root, '--out', str(tmp_path / 'out'), '--bootstrap', '0']) == 0
    res = json.load(open(tmp_path / 'out' / 'isoflop.json'))
    b = res['delta_best_measured']
    assert (b['dense'], b['xmod']) == (96, 64)
    runs = {(arm, s): json.load(open(tmp_path / 'runs' / f'{arm}_d{w}_s{s}' / 'run.json'))
            for arm, w in (('dense', 96), ('xmod', 64)) for s in (0, 1, 2)}
    ds = [runs['xmod', s]['final']['val_loss_causal'] - runs['dense', s]['final']['val_loss_causal'] for s in (0, 1, 2)]
    assert b['delta']['mean'] == pytest.approx(np.mean(ds)) and b['delta']['df'] == 2
    assert b['delta']['se'] < 0.002             # paired: the shared seed noise (0.02) is gone
    assert [r['n_embd'] for r in res['delta_by_width']] == [64, 96, 128, 192, 256]
    md = (tmp_path / 'out' / 'isoflop.md').read_text()
    assert 'between the best measured sizes (X-MoD width 64, dense width 96)' in md
    # the synthetic arms: X-MoD's optimum is at a smaller width, so Delta falls as tokens per parameter grow
    assert res['delta_slope_log_q']['hi'] < 0 and res['delta_slope_log_q']['df'] == 2
    assert "Delta's slope per e-fold of tokens per active parameter" in md


def test_an_optimum_beyond_the_sizes_is_open(tmp_path, capsys):
    """X-MoD's optimum far above the largest size: clipped to the edge, said to be open, Delta called a bound."""
    root = iso_sweep(tmp_path / 'runs', 12 * 4 * 128 ** 2, 3 * 12 * 4 * 2000 ** 2)
    assert isoflop.main([root, '--out', str(tmp_path / 'out'), '--bootstrap', '20']) == 0
    res = json.load(open(tmp_path / 'out' / 'isoflop.json'))
    assert res['arms']['xmod']['where'] == 'above' and res['arms']['dense']['where'] == 'inside'
    assert res['arms']['xmod']['N_opt'] == pytest.approx(3 * 12 * 4 * 256 ** 2)
    md = (tmp_path / 'out' / 'isoflop.md').read_text()
    assert 'open above' in md and 'a bound, not an estimate' in md


def test_isoflop_needs_both_arms(tmp_path, capsys):
    root = tmp_path / 'runs'
    for w in (64, 128, 192):
        make_run(root, f'dense_d{w}', n_embd=w, params_total=12 * 4 * w ** 2, loss=2.0)
    code = isoflop.main([str(root), '--out', str(tmp_path / 'out')])
    assert code == 2 and 'needs both arms' in capsys.readouterr().err
