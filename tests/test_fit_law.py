"""
Tests for fit_law.py, the dense and the relative law, on synthetic run folders (tests/law_runs.py) and on the
committed results/cpu_small. Fast: the dense fits use few bootstrap resamples, and only a few tests go through a
subprocess. With tests/test_law_*.py (what law/ reads, the rates, the joint law, the report) they state what
fit_law.py accepts and refuses (docs/fit_law.md).
"""

import json
import math
import os

import numpy as np
import pytest

import fit_law
import law.forms
import law.load
from conftest import assert_bad_input
from law.load import load_runs
from law.stats import bootstrap_intervals
from law_runs import (
    N_EMBD,
    ROOT,
    TRUE_DENSE,
    TRUE_REL,
    cli,
    dense_loss,
    make_run,
    make_sweep,
    run_main,
    tiny_sweep,
    true_delta,
    xmod_shape,
)
from tools import fit_plots

# -----------------------------------------------------------------------------
# the dense law

def dense_grid_data(noise, seed=0, n_N=5, n_D=6):
    rng = np.random.default_rng(seed)
    N, D = [a.ravel() for a in np.meshgrid(np.geomspace(1e5, 1e8, n_N), np.geomspace(1e6, 1e9, n_D))]
    return N, D, dense_loss(N, D) * (1 + noise * rng.standard_normal(N.size))


@pytest.mark.parametrize('noise', [0.0, 0.001, 0.002])
def test_dense_law_recovers_known_parameters(noise):
    N, D, L = dense_grid_data(noise)
    p = fit_law.dense_params(fit_law.fit_dense(N, D, L)[0])
    assert abs(p['alpha'] - TRUE_DENSE['alpha']) < 0.03
    assert abs(p['beta'] - TRUE_DENSE['beta']) < 0.03
    # E's own sampling spread at 0.2% noise over this range is ~1.2% (seen over 30 noise draws): a 2% check on E
    # is a check on the fitter only up to ~0.1% noise, so it is made there (and exactly without noise)
    if noise <= 0.001:
        assert abs(p['E'] / TRUE_DENSE['E'] - 1) < (1e-4 if noise == 0 else 0.02)


def test_dense_fit_moves_from_a_poor_start():
    """The Chinchilla pitfall: a summed Huber loss of order 1e-4 with torch L-BFGS's default tolerances stops
    far from the optimum; the scaled objective with tight tolerances walks all the way from the same start."""
    N, D, L = dense_grid_data(0.002)
    logs = np.log(N), np.log(D), np.log(L)
    start = np.array([20.0, 1.0, 20.0, 1.0, 0.5])  # (a, alpha, b, beta, e): a point of Chinchilla's grid
    naive, f_naive = fit_law.lbfgs_fit(start, *logs, scale=1.0, tolerance_grad=1e-7, tolerance_change=1e-9)
    ours, f_ours = fit_law.lbfgs_fit(start, *logs)
    assert f_naive > 100 * f_ours and abs(naive[1] - TRUE_DENSE['alpha']) > 0.5  # the naive run stalled
    p = fit_law.dense_params(ours)
    assert abs(p['alpha'] - TRUE_DENSE['alpha']) < 0.03 and abs(p['beta'] - TRUE_DENSE['beta']) < 0.03
    assert np.abs(ours - start).max() > 1.0


# -----------------------------------------------------------------------------
# the relative law, end to end through main()

@pytest.fixture(scope='module')
def full_fit(tmp_path_factory):
    root = tmp_path_factory.mktemp('sweep')
    out = str(tmp_path_factory.mktemp('law'))
    make_sweep(root)
    # the joint law has its own end-to-end tests (test_law_joint.py): skipped here, it is most of this fit's time
    result = fit_law.run(fit_law.parse_args([os.path.join(str(root), '*'), '--out', out, '--holdout', 'stride==8',
                                             '--bootstrap', '20']))
    return result, out


def test_relative_law_recovers_known_effect(full_fit):
    result, _ = full_fit
    rel = result['relative']
    assert rel['form'] == fit_law.FORM and rel['n_pairs'] == 24 and rel['n_heldout_pairs'] == 12
    for t, true in TRUE_REL.items():
        c = rel['coefficients'][t]
        assert c['constrained'] and abs(c['value'] - true) < 0.005, (t, c)
        assert c['ci_low'] <= c['value'] <= c['ci_high']
    m = result['metrics']
    held = m['heldout']
    assert held['n'] == 12 and held['rmse'] < 0.005 and held['r2'] > 0.7
    assert held['sign_acc'] == 1.0 and held['sign_acc_big'] == 1.0
    assert held['L_rel_err_partner_mean'] < 1e-3 and held['L_rel_err_law_mean'] < 1e-2
    # every term earns its place: removing it makes the held-out and cross-validated errors worse
    for t in fit_law.BASE_TERMS:
        assert m['ablation'][f'no_{t}']['heldout_rmse'] > m['ablation']['full']['heldout_rmse']
        assert m['ablation'][f'no_{t}']['cv_rmse'] > m['ablation']['full']['cv_rmse']
    noise = m['seed_noise']
    assert 0.005 < noise['loss_std'] < 0.02 and noise['delta_std'] < 0.004  # L noisy across seeds, Delta not


def test_outputs_written(full_fit):
    result, out = full_fit
    with open(os.path.join(out, 'fit.json')) as f:
        fj = json.load(f)
    for k in ('E', 'A', 'alpha', 'B', 'beta', 'ci', 'rmse_log'):
        assert k in fj['dense']
    assert set(fj['dense']['ci']) == {'E', 'A', 'alpha', 'B', 'beta'}
    assert set(fj['relative']['coefficients']) == set(fit_law.TERMS)
    for c in fj['relative']['coefficients'].values():
        assert set(c) >= {'value', 'ci_low', 'ci_high'}
    for k in ('fit', 'heldout', 'cv', 'ablation', 'seed_noise', 'dense'):
        assert k in fj['metrics']
    assert set(fj['metrics']['seed_noise']) >= {'loss_std', 'delta_std'}
    assert set(fj['by_metric']) == {'val_loss', 'val_loss_causal'}
    # top-k routing reads the X-MoD gain larger in this sweep (its losses are 0.01 lower)
    gk = fj['by_metric']['val_loss']['relative']['coefficients']['capacity_gain']['value']
    assert gk > fj['relative']['coefficients']['capacity_gain']['value']
    assert len(fj['runs']) == 62
    md = open(os.path.join(out, 'summary.md')).read()
    assert 'capacity_gain' in md and '| run |' in md and 'xmod_s8_c0.125_T512_s1' in md
    opening = md.split('\n\n')[1]            # after the title, before any table: the conclusion in words
    assert opening.startswith('Read this first: all 62 runs share one peak learning rate')   # make_run's one rate
    assert 'Over all 24 fitted pairs Delta' in opening
    assert '|' not in opening and '| its sign |' in md
    for name in ('loss_vs_params', 'pred_vs_obs', 'delta_vs_logrho'):     # three plots; tools/fit_plots.py the rest
        assert os.path.getsize(os.path.join(out, f'{name}.png')) > 1000
    assert fit_plots.main([out]) == 0
    for name in ('loss_vs_flops', 'ablations', 'training_curves', 'delta_vs_tokens', 'routing_diagnostics'):
        assert os.path.getsize(os.path.join(out, f'{name}.png')) > 1000


def test_single_context_length_is_reported_not_fatal(tmp_path, capsys):
    root = make_sweep(tmp_path / 'runs', contexts=(256,), ablations=False, dense_grid=False)
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'out'), '--bootstrap', '5')
    assert code == 0
    fj = json.load(open(tmp_path / 'out' / 'fit.json'))
    cc = fj['relative']['coefficients']['context_correction']
    assert cc['value'] is None and not cc['constrained'] and 'single context length' in cc['note']
    assert fj['relative']['coefficients']['stride_interaction']['constrained']
    assert fj['dense']['ill_posed']  # two dense runs at one (N, D): said, not hidden


def test_tiny_sweep_degrades_gracefully(tmp_path, capsys):
    code, err = run_main(capsys, tiny_sweep(tmp_path / 'runs'), '--out', str(tmp_path / 'out'), '--bootstrap', '3')
    assert code == 0
    assert fit_plots.main([str(tmp_path / 'out')]) == 0
    for name in ('loss_vs_flops', 'loss_vs_params', 'pred_vs_obs', 'delta_vs_logrho', 'ablations',
                 'training_curves', 'delta_vs_tokens', 'routing_diagnostics'):
        assert os.path.exists(tmp_path / 'out' / f'{name}.png')
    assert os.path.exists(tmp_path / 'out' / 'summary.md')


# -----------------------------------------------------------------------------
# the law's other axes (budget, active size), the form chosen by held-out error, the held-out goals

def make_axes_sweep(root, kappa=0.0, omega=0.0, offset=0.0, budgets=(2 ** 19, 2 ** 20, 2 ** 21), depths=(3, 4, 6)):
    """Full X-MoD pairs at T=128 for strides 2/4/8 (c=0.125), 2 seeds, at several budgets D and against dense
    partners of several depths (N_act): Delta = TRUE_REL's + log(rho) * (kappa log(D/D0) + omega log(N_act/N0))."""
    rng = np.random.default_rng(7)
    for tk in budgets:
        for depth in depths:
            N = 12 * depth * N_EMBD ** 2
            fpt = 2.0 * N + 4 * 128 * N_EMBD * depth
            for sd in (0, 1):
                Ld = dense_loss(N, tk) + 0.01 * rng.standard_normal()
                make_run(root, f'dense_L{depth}_D{tk}_s{sd}', n_layer=depth, seed=sd, tokens=tk, loss=Ld)
                for s in (2, 4, 8):
                    L_tot, L_act = xmod_shape(s, 0.125, depth)
                    rho = L_tot / L_act
                    d = (true_delta(rho, 128, s) + math.log(rho) * (kappa * math.log(tk / fit_law.D0)
                                                                    + omega * math.log(N / fit_law.N0))
                         + offset * math.log(tk / fit_law.D0))
                    make_run(root, f'xmod_s{s}_L{depth}_D{tk}_s{sd}', model='xmod', n_layer=L_tot, stride=s,
                             capacity=0.125, seed=sd, tokens=tk, params_total=12 * L_tot * N_EMBD ** 2,
                             params_active=int(12 * L_act * N_EMBD ** 2), flops_per_token=fpt * 1.01,
                             loss=Ld + d + 0.002 * rng.standard_normal(), loss_topk=Ld + d - 0.01)
    return str(root)


@pytest.mark.parametrize('kappa, omega, offset', [(0.03, 0.0, 0.0), (0.0, -0.02, 0.0), (0.0, 0.0, 0.02),
                                                  (0.0, 0.0, 0.0)])
def test_selection_keeps_the_terms_that_are_there(tmp_path, capsys, kappa, omega, offset):
    """A budget or active-size term that is in the data is kept and recovered within its interval; one that is not
    is dropped by the selection, with its errors with and without it in fit.json."""
    out = tmp_path / 'out'
    code, err = run_main(capsys, make_axes_sweep(tmp_path / 'runs', kappa, omega, offset), '--out', str(out),
                         '--holdout', 'tokens==max_tokens_all', '--bootstrap', '20')
    assert code == 0, err
    fj = json.load(open(out / 'fit.json'))
    coefs, sel = fj['relative']['coefficients'], fj['metrics']['selection']
    for t, true in (('budget_correction', kappa), ('size_correction', omega), ('budget_offset', offset)):
        assert coefs[t]['constrained'] and sel['terms'][t]['cv_testable']
        if true:
            assert t in fj['relative']['active_terms'] and sel['terms'][t]['beats_removal']
            assert coefs[t]['ci_low'] <= true <= coefs[t]['ci_high'] and abs(coefs[t]['value'] - true) < 0.005
            assert sel['terms'][t]['heldout_rmse_without'] > sel['terms'][t]['heldout_rmse_with']
        else:
            assert t in sel['dropped'] and coefs[t]['value'] is None and 'dropped by the selection' in coefs[t]['note']
            assert sel['terms'][t]['cv_rmse_without'] <= 1.05 * sel['terms'][t]['cv_rmse_with']
    assert len(sel['forms']) == 8 and fj['relative']['form'] == fit_law.form_of(fj['relative']['active_terms'])
    assert coefs['stride_interaction']['value'] == pytest.approx(TRUE_REL['stride_interaction'], abs=0.005)
    assert 'Form selection' in open(out / 'summary.md').read() and sel['summary'] in open(out / 'summary.md').read()
    # every budget but the largest is fitted, and the largest one predicted
    goals = fj['metrics']['goals']
    assert fj['relative']['n_heldout_pairs'] == 18 and goals['rmse']['status'] == 'met'
    assert len(fj['delta_vs_tokens']) == 27


def pair(cfg, rho=3.0, T=128, stride=4, tokens=2e6, N_act=787_584, delta=0.0):
    return dict(cfg_key=cfg, rho=rho, T=T, stride=stride, tokens=tokens, N_act=N_act, delta=delta)


def test_a_term_one_configuration_pins_is_dropped():
    """cpu_small's single 4M pair: the budget term would fit it exactly and never be tested on it, so it is dropped
    however much the cross-validated error falls with it."""
    fit = [pair(f'c{i}', rho=1.5 + i / 4, stride=(2, 4, 8)[i % 3], delta=-0.01 * i) for i in range(6)]
    fit.append(pair('4M', tokens=4e6, delta=0.05))
    identified, _ = fit_law.identifiable_terms(fit)
    assert 'budget_correction' in identified and fit_law.cv_testable(fit, identified) == [
        t for t in identified if t != 'budget_correction']
    kept, sel = fit_law.select_terms(fit, [], identified)
    assert 'budget_correction' not in kept and sel['dropped'] == ['budget_correction']
    assert 'no held-out test: budget_correction' in sel['summary']


def test_budget_forms_tell_a_saturating_budget_from_a_log_one():
    """Pairs whose Delta saturates with the budget, Delta(D) = Delta(D0) + K ((D/D0)^-0.5 - 1): the saturating form of
    that beta predicts left-out configurations and the held-out largest budget better than kappa0 log(D/D0), the
    base terms alone and the constant-Delta null; on pairs with no budget trend, no budget form beats the base."""
    rng = np.random.default_rng(0)
    budgets = (0.5e6, 1e6, 2e6, 4e6, 8e6)

    def pairs(K):
        out = []
        for i, (rho, stride) in enumerate([(1.5, 2), (2.0, 4), (3.0, 4), (2.5, 8)]):
            for D in budgets:
                d = -0.02 * math.log(rho) + K * ((D / fit_law.D0) ** -0.5 - 1) + 0.0005 * rng.standard_normal()
                out.append(pair(f'c{i}_{D:g}', rho=rho, stride=stride, tokens=D, delta=d))
        return [p for p in out if p['tokens'] < 8e6], [p for p in out if p['tokens'] == 8e6]
    fit, test = pairs(0.03)
    base = lambda ps: fit_law.rel_design(ps, ['capacity_gain', 'stride_interaction'])
    forms = law.forms.budget_forms(fit, test, base)
    sat = forms['base + saturating beta=0.5 budget term']
    for name, f in forms.items():
        if name != 'base + saturating beta=0.5 budget term':
            assert f['cv_rmse'] > 2 * sat['cv_rmse'] and f['heldout_rmse'] > 2 * sat['heldout_rmse'], name
    assert sat['cv_rmse'] < 0.002 and sat['heldout_max_abs'] < 0.003
    flat = law.forms.budget_forms(*pairs(0.0), base)
    assert flat['base terms alone']['cv_rmse'] < 0.001
    assert flat['constant Delta (null)']['cv_rmse'] > 5 * flat['base terms alone']['cv_rmse']


def test_heldout_goals():
    held = dict(rmse=0.012, r2=0.9, sign_acc_big=0.8, n_big=5, delta_span=0.05)
    g = law.forms.heldout_goals(held, 0.01)  # limits: RMSE 0.015, sign over abs(Delta) > 0.02, R^2 if span > 0.03
    assert (g['rmse']['status'], g['sign']['status'], g['r2']['status']) == ('met', 'not met', 'met')
    assert g['rmse']['limit'] == pytest.approx(0.015) and g['r2']['span_needed'] == pytest.approx(0.03)
    g = law.forms.heldout_goals(dict(held, rmse=0.011, delta_span=0.01, sign_acc_big=None, n_big=0), 0.004)
    assert (g['rmse']['status'], g['sign']['status'], g['r2']['status']) == ('not met', 'untestable', 'untestable')
    assert law.forms.heldout_goals(None, 0.01) is None


# -----------------------------------------------------------------------------
# degenerate fits: refused when no law can be read, else fitted with no interval where the runs give none

@pytest.mark.parametrize('budgets', [(2 ** 20,), (2 ** 19, 2 ** 20, 2 ** 21, 2 ** 22, 2 ** 23)])
def test_dense_law_alone_on_one_size_is_refused(tmp_path, capsys, budgets):
    """A single dense run, or dense runs of a single N: the dense law is all there is to fit, and they cannot pin it
    down, so there is nothing to print."""
    for tk in budgets:
        make_run(tmp_path / 'runs', f'dense_D{tk}', tokens=tk, loss=dense_loss(12 * 4 * N_EMBD ** 2, tk))
    code, err = run_main(capsys, str(tmp_path / 'runs'), '--out', str(tmp_path / 'out'))
    assert code == 2 and err.count('\n') == 1
    assert 'the dense law needs dense runs at >= 2 model sizes N and >= 2 token budgets D' in err
    assert f'got {len(budgets)} run(s) at 1 N and {len(set(budgets))} D' in err
    assert not os.path.exists(tmp_path / 'out' / 'fit.json')


def test_dense_law_alone_when_the_pair_is_held_out_is_refused(tmp_path, capsys):
    code, err = run_main(capsys, tiny_sweep(tmp_path / 'runs'), '--out', str(tmp_path / 'out'), '--holdout',
                         'model=xmod')
    assert code == 2 and 'no full X-MoD pair (not held out)' in err


def test_partial_fit_prints_no_interval(tmp_path):
    """One dense run and one X-MoD pair: the pair measures capacity_gain, which is printed, but neither law gets an
    interval (the dense law is not identified; one pair for one term is an exact solve, every resample the same),
    and each says so instead of showing a zero-width one."""
    root = tiny_sweep(tmp_path / 'runs')
    code, out, err = cli(root, '--out', str(tmp_path / 'out'), '--bootstrap', '20')
    assert code == 0, err
    fj = json.load(open(tmp_path / 'out' / 'fit.json'))
    assert fj['dense']['ill_posed'] and set(fj['dense']['ci'].values()) == {None}
    gain = fj['relative']['coefficients']['capacity_gain']
    assert gain['value'] is not None and gain['ci_low'] is None and gain['ci_high'] is None
    assert 'the dense law is ill-posed' in err and 'every bootstrap resample gives the same capacity_gain' in err
    assert sum('no interval' in w for w in fj['warnings']) == 3  # the dense law, the relative law for each metric
    dense_line = next(line for line in out.splitlines() if 'dense: L =' in line)
    rel_line = next(line for line in out.splitlines() if 'relative (1 pairs)' in line)
    assert 'ILL-POSED' in dense_line and 'no intervals' in dense_line
    assert 'capacity_gain' in rel_line and '(no interval)' in rel_line and '[' not in rel_line.split(':', 1)[1]
    md = open(tmp_path / 'out' / 'summary.md').read()
    assert '(no interval)' in md and '[-, -]' not in md


def test_zero_width_bootstrap_interval_is_dropped():
    law.load.WARNINGS.clear()
    ci = bootstrap_intervals([[1.0, 2.0], [1.0, 2.5], [1.0, 3.0]], ('a', 'b'), 'test', fit_law.warn)
    assert ci['a'] is None and ci['b'][0] < ci['b'][1]
    assert law.load.WARNINGS == ['test: every bootstrap resample gives the same a: no interval']


def test_a_diverged_bootstrap_resample_is_not_kept(tmp_path, monkeypatch):
    """A resample whose L-BFGS run leaves exp's range (a log-coefficient of 800) is dropped, counted in n_valid,
    and no interval is made of what is left; the fit itself stands."""
    make_sweep(tmp_path, contexts=(128,), strides=(4,), ablations=False)
    runs = load_runs([str(tmp_path)])
    real = fit_law.fit_dense
    calls = []

    def fake(N, D, L, w=None, starts=None):
        calls.append(w)
        best = real(N, D, L, w=w, starts=starts)
        return best if w is None else (np.array([800.0, 0.3, 1.0, 0.3, 0.0]), best[1])
    monkeypatch.setattr(fit_law, 'fit_dense', fake)
    out = fit_law.run_dense(runs, 'val_loss_causal', 5, np.random.default_rng(0))
    assert len(calls) == 6 and out['bootstrap'] == dict(n=5, n_valid=0)
    assert all(v is None for v in out['ci'].values()) and math.isfinite(out['E'])


# -----------------------------------------------------------------------------
# the committed results

def same_numbers(new, old, where='fit.json'):
    """new has old's keys and numbers (to 1e-6), bootstrap intervals aside; keys added since (the candidate terms,
    the selection, the held-out goals, Delta against tokens) may come with them. The selection's `summary` is its
    kept and dropped terms in words, which are compared as lists: its wording may change."""
    if isinstance(old, dict):
        assert set(new) >= set(old), where
        for k in old:
            if k not in ('ci', 'ci_low', 'ci_high', 'bootstrap', 'summary'):
                same_numbers(new[k], old[k], f'{where}.{k}')
    elif isinstance(old, list):
        assert len(new) == len(old), where
        for i, (a, b) in enumerate(zip(new, old)):
            same_numbers(a, b, f'{where}[{i}]')
    elif isinstance(old, float):
        assert new == pytest.approx(old, rel=1e-6, abs=1e-12), where
    else:
        assert new == old, where


@pytest.mark.parametrize('fit, holdout', [('results/cpu_small', 'stride==8'),
                                          ('results/cpu_small/holdout_budget', 'tokens==max_tokens_all')])
def test_committed_fit_is_reproduced(tmp_path, capsys, monkeypatch, fit, holdout):
    """docs/results.md's commands on the committed runs give the committed fit.json (its intervals need the 200-resample
    bootstrap: minutes, so they are left out here)."""
    monkeypatch.chdir(ROOT)  # fit.json records the run directories as given
    code, err = run_main(capsys, 'results/cpu_small/runs', '--out', str(tmp_path), '--holdout', holdout,
                         '--bootstrap', '0')
    assert code == 0, err
    same_numbers(json.load(open(tmp_path / 'fit.json')), json.load(open(os.path.join(ROOT, fit, 'fit.json'))))


# -----------------------------------------------------------------------------
# the order of the arguments, seed noise

def test_fit_does_not_depend_on_the_order_of_its_arguments(tmp_path, capsys):
    """The same runs given as two folders in either order, or as one glob, give the same fit.json, bootstrap
    intervals included: the runs are sorted canonically before the resamples are drawn."""
    make_sweep(tmp_path / 'a', contexts=(128, 256), strides=(4, 8), capacities=(0.125,), seeds=(0, 1),
               ablations=False, dense_grid=True)
    for name in sorted(os.listdir(tmp_path / 'a'))[::2]:         # half the runs in another folder
        os.makedirs(tmp_path / 'b', exist_ok=True)
        os.rename(tmp_path / 'a' / name, tmp_path / 'b' / name)
    fits = []
    for args in ([str(tmp_path / 'a'), str(tmp_path / 'b')], [str(tmp_path / 'b'), str(tmp_path / 'a')],
                 [str(tmp_path / '*')]):
        out = tmp_path / f'fit{len(fits)}'
        code, err = run_main(capsys, *args, '--out', str(out), '--bootstrap', '20')
        assert code == 0, err
        fits.append((out / 'fit.json').read_text())
    assert fits[0] == fits[1] == fits[2]


def test_pooled_seed_noise():
    std, n = fit_law.pooled_std([[1.0, 3.0], [2.0, 2.0, 2.0], [5.0]])
    assert n == 2 and abs(std - math.sqrt(2 / 3)) < 1e-12


# -----------------------------------------------------------------------------
# the command line (configurator.py, as every script's)

def test_command_line_takes_both_forms_and_repeats_holdout(capsys):
    """--key value and --key=value, flags alone, --holdout once per filter, the runs as bare arguments; bad input is
    one line and exit 2; --help lists every key with what it does."""
    cfg = fit_law.parse_args(['a', '--out', 'D', '--holdout', 'stride==8', 'b', '--holdout=n_embd==192', '--tuned',
                              '--bootstrap', '5', '--metric=val_loss'])
    assert cfg.runs == ['a', 'b'] and cfg.out == 'D' and cfg.holdout == ['stride==8', 'n_embd==192']
    assert (cfg.tuned, cfg.bootstrap, cfg.metric, cfg.joint) == (True, 5, 'val_loss', False)
    for args, needle in ((['a', '--out', 'D', '--metric', 'val_los'], "--metric='val_los': expected val_loss_causal"),
                         (['a', '--out', 'D', '--bootstrap=-1'], '--bootstrap must be >= 0'),
                         (['a'], 'give the runs and --out DIR'),
                         (['a', '--out'], '--out: overrides are --key=value'),
                         (['a', '--outt', 'D'], 'did you mean --out?')):
        code, err = run_main(capsys, *args, joint=True)
        assert_bad_input(code, err, needle)
    with pytest.raises(SystemExit) as e:
        fit_law.main(['--help'])
    shown = capsys.readouterr().out
    lines = {line.split()[0].split('=')[0]: line for line in shown.splitlines() if line.startswith('  --')}
    assert e.value.code == 0 and set(lines) == {f'--{k}' for k in fit_law.DEFAULTS} and 'docs/fit_law.md' in shown
    assert all(len(line.split(None, 1)) == 2 for line in lines.values()), 'a key without its comment'
    assert 'give it again' in lines['--holdout'] and 'law/joint.py' in lines['--joint']


def test_the_old_modes_name_their_new_commands(tmp_path, capsys):
    """fit_law.py --lr, --panel, --regimes, --isoflop, --advise and --skip_joint, the spellings of the modes that
    moved to law/: one line naming the command that does it now, exit 2, nothing written."""
    for flag, needle in (('--lr', 'python -m law.rates RUNS... --out DIR'), ('--panel', 'law.rates RUNS... --panel'),
                         ('--regimes', 'python -m law.regimes'), ('--isoflop=True', 'python -m law.isoflop'),
                         ('--advise', 'python -m law.advise FIT --flops=C'), ('--skip_joint', '--joint')):
        code, err = run_main(capsys, 'runs', flag, '--out', str(tmp_path / 'o'))
        assert_bad_input(code, err, needle)
        assert f'{flag.split("=")[0]} is no longer a mode of fit_law.py' in err
    assert not os.path.exists(tmp_path / 'o')


# -----------------------------------------------------------------------------
# a plain CSV of runs (docs/fit_law.md)

def write_csv(path, rows, columns=('run', 'model', 'N', 'N_active', 'D', 'T', 'stride', 'partner', 'loss')):
    with open(path, 'w') as f:
        f.write(','.join(columns) + '\n')
        f.writelines(','.join(str(r.get(c, '')) for c in columns) + '\n' for r in rows)
    return str(path)


def known_law_rows():
    """Dense runs on a 4 x 3 grid of (N, D) from TRUE_DENSE, and six X-MoD runs paired with the dense run at (3e6,
    3e8) whose Delta follows TRUE_REL exactly, at three strides and three contexts."""
    rows = [dict(run=f'dense_{N:g}_{D:g}', N=N, D=D, loss=dense_loss(N, D))
            for N in (1e6, 3e6, 1e7, 3e7) for D in (1e8, 3e8, 1e9)]
    for i, (T, s, rho) in enumerate(((128, 4, 2.9), (128, 2, 1.5), (128, 8, 3.5), (256, 4, 2.8), (128, 4, 1.45),
                                     (64, 4, 2.2))):
        rows.append(dict(run=f'xmod_{i}', model='xmod', N=3e6 * rho, N_active=3e6, D=3e8, T=T, stride=s,
                         partner='dense_3e+06_3e+08', loss=dense_loss(3e6, 3e8) + true_delta(rho, T, s)))
    return rows


def test_a_plain_csv_of_runs_fits_a_known_law(tmp_path, capsys):
    """One row per run, N, D and the loss, and for X-MoD the columns that pair it with its dense partner: the fit
    recovers the Chinchilla parameters the rows were made from, and the relative law's three terms, exactly."""
    path = write_csv(tmp_path / 'runs.csv', known_law_rows())
    code, err = run_main(capsys, path, '--out', str(tmp_path / 'out'), '--bootstrap', '0')
    assert code == 0, err
    fj = json.load(open(tmp_path / 'out' / 'fit.json'))
    for k, v in TRUE_DENSE.items():
        assert fj['dense'][k] == pytest.approx(v, rel=1e-3), k
    coef = fj['relative']['coefficients']
    for k, v in TRUE_REL.items():
        assert coef[k]['value'] == pytest.approx(v, abs=1e-9), k
    assert fj['inputs']['variants'] == {'dense': 12, 'xmod': 6} and fj['relative']['n_pairs'] == 6
    assert {r['run']: r['partner'] for r in fj['runs']}['xmod_3'] == 'dense_3e+06_3e+08'
    assert 'Read this first' not in open(tmp_path / 'out' / 'summary.md').read()   # no rate: no such claim
    assert fit_plots.main([str(tmp_path / 'out')]) == 0       # a CSV has no logs: the panels say so, none fails


def test_a_csv_of_dense_runs_alone_needs_three_columns(tmp_path, capsys):
    """N, D, loss and nothing else: the dense law, the relative law said to be not fitted."""
    rows = [r for r in known_law_rows() if 'model' not in r]
    code, err = run_main(capsys, write_csv(tmp_path / 'd.csv', rows, ('N', 'D', 'loss')), '--out',
                         str(tmp_path / 'out'), '--bootstrap', '0')
    assert code == 0, err
    fj = json.load(open(tmp_path / 'out' / 'fit.json'))
    assert fj['dense']['alpha'] == pytest.approx(TRUE_DENSE['alpha'], rel=1e-3) and not fj['relative']['fitted']


@pytest.mark.parametrize('row, needle', [
    (dict(N=1e6, loss=3.0), 'line 14: needs N, D, loss'),
    (dict(run='x', model='xmod', N=2e6, D=1e8, loss=3.0), 'needs N, D, loss, run, N_active, T, stride, partner'),
    (dict(run='x', model='mod', N=2e6, D=1e8, loss=3.0), "model 'mod': expected dense or xmod"),
    (dict(run='x', model='xmod', N=2e6, N_active=3e6, D=1e8, T=128, stride=4, partner='dense_1e+06_1e+08', loss=3),
     'N_active (3e+06) > N (2e+06)'),
    (dict(run='x', model='xmod', N=2e6, N_active=1e6, D=1e8, T=128, stride=4, partner='nobody', loss=3.0),
     "its partner 'nobody' is not a dense run here"),
    (dict(N=1e6, D=1e8, loss='nan'), 'must be positive numbers'),
    (dict(N=1e6, D=1e8, loss='three'), 'not a number')])
def test_a_bad_csv_row_is_one_line(tmp_path, capsys, row, needle):
    rows = [r for r in known_law_rows() if 'model' not in r] + [row]
    code, err = run_main(capsys, write_csv(tmp_path / 'bad.csv', rows), '--out', str(tmp_path / 'out'))
    assert_bad_input(code, err, needle)
    assert not os.path.exists(tmp_path / 'out')


# -----------------------------------------------------------------------------
# what a fit of runs at one shared, untuned rate rests on (the classroom sweep's)

def test_runs_at_one_shared_rate_say_what_their_delta_rests_on(tmp_path, capsys):
    """Every run at one peak rate, untuned per arm: summary.md opens with it and the printed lines end with it
    (at tuned rates the study's X-MoD does not beat dense); runs at their arms' tuned rates do not get it."""
    root = tiny_sweep(tmp_path / 'runs')
    assert fit_law.main([root, '--out', str(tmp_path / 'out'), '--bootstrap', '0']) == 0
    printed = capsys.readouterr().out
    summary = open(tmp_path / 'out' / 'summary.md').read()
    opening = summary.split('\n\n')[1]
    for text in (opening, printed.strip().splitlines()[-1]):
        assert text.startswith('Read this first: all 2 runs share one peak learning rate (0.001), not tuned')
        assert "at each arm's own tuned rate the study's X-MoD does not beat its FLOP-matched dense model" in text
    make_run(tmp_path / 'runs', 'dense_lr2e-3', learning_rate=2e-3, loss=9.0)       # a second rate, worse: tuned
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'tuned'), '--bootstrap', '0', '--tuned')
    assert code == 0, err
    assert 'Read this first' not in open(tmp_path / 'tuned' / 'summary.md').read()


def test_the_classroom_sweep_ends_with_what_its_result_rests_on(monkeypatch, capsys):
    """sweeps/classroom.py's last line, once its runs are done, says that they share one untuned rate and that at
    tuned rates the study's X-MoD does not beat dense; a dry run prints only the plan."""
    import runpy
    import sys
    import types
    calls = []
    monkeypatch.setitem(sys.modules, 'sweep', types.SimpleNamespace(main=lambda argv: calls.append(argv) or 0))
    for argv, said in ((['--jobs=2'], True), (['--dry_run'], False)):
        monkeypatch.setattr(sys, 'argv', ['sweeps/classroom.py', *argv])
        with pytest.raises(SystemExit) as e:
            runpy.run_path(os.path.join(ROOT, 'sweeps', 'classroom.py'), run_name='__main__')
        last = (capsys.readouterr().out.strip().splitlines() or [''])[-1]
        assert e.value.code == 0 and calls[-1][1:] == argv
        assert last.startswith('classroom: every run shares one peak learning rate, 0.002, untuned per arm') == said
        assert ("at each arm's tuned rate X-MoD does not beat dense" in last) == said
