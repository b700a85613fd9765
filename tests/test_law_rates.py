"""
Tests for law/rates.py and fit_law.py --lr, its command line: the learning rate per arm (the lowest seed-0 loss, close
rates decided by their seeds' mean), Delta paired by seed at each arm's best rate and at each shared rate, and
fit_law.py --tuned, which fits the runs at their arm's best rate.
"""

import json

import numpy as np
import pytest

import fit_law
from conftest import assert_bad_input
from law import rates
from law.load import load_runs
from law_runs import N_EMBD, make_run, run_main

# a 12-layer X-MoD at stride 4 and capacity 0.125, FLOP-matched (+1%) to make_run's 4-layer dense model at T=128
XMOD = dict(model='xmod', n_layer=12, stride=4, capacity=0.125, params_total=3e6, params_active=1e6,
            flops_per_token=1.01 * (2.0 * 12 * 4 * N_EMBD ** 2 + 4 * 128 * N_EMBD * 4))


def test_lr_mode_tables_the_best_rates_and_both_deltas(tmp_path, capsys):
    """Two arms at three rates (seed 0), three seeds at each arm's best: the best rates (one at the grid's edge),
    Delta with each arm at its own best rate, paired by seed with its standard error, and at each shared rate."""
    dense = {1e-3: 3.10, 2e-3: 3.00, 4e-3: 3.05}
    sparse = {1e-3: 3.02, 2e-3: 2.99, 4e-3: 2.97}           # best at the top edge
    for lr, L in dense.items():
        make_run(tmp_path, f'dense_lr{lr:g}', loss=L, learning_rate=lr)
    for lr, L in sparse.items():
        make_run(tmp_path, f'xmod_lr{lr:g}', loss=L, learning_rate=lr, **XMOD)
    for s, (ld, ls) in enumerate([(3.01, 2.96), (2.99, 2.99)], start=1):
        make_run(tmp_path, f'dense_lr0.002_s{s}', loss=ld, learning_rate=2e-3, seed=s)
        make_run(tmp_path, f'xmod_lr0.004_s{s}', loss=ls, learning_rate=4e-3, seed=s, **XMOD)
    assert rates.main([str(tmp_path), '--out', str(tmp_path / 'out')]) == 0
    result = json.load(open(tmp_path / 'out' / 'lr.json'))
    arms = {a['variant']: a for a in result['arms']}
    assert arms['dense']['best_lr'] == 2e-3 and not arms['dense']['best_at_edge']
    assert arms['xmod']['best_lr'] == 4e-3 and arms['xmod']['best_at_edge']
    assert arms['xmod']['best_seeds'] == 3 and arms['xmod']['best_mean'] == pytest.approx((2.97 + 2.96 + 2.99) / 3)
    (d,) = result['deltas']
    deltas = [2.97 - 3.00, 2.96 - 3.01, 2.99 - 2.99]
    assert d['tuned']['n'] == 3 and d['tuned']['mean'] == pytest.approx(np.mean(deltas))
    assert d['tuned']['se'] == pytest.approx(np.std(deltas, ddof=1) / np.sqrt(3))
    assert d['shared']['0.002']['mean'] == pytest.approx(2.99 - 3.00) and d['shared']['0.002']['n'] == 1
    assert (tmp_path / 'out' / 'lr_vs_loss.png').stat().st_size > 0
    assert '(grid edge)' in (tmp_path / 'out' / 'lr.md').read_text()



def test_lr_mode_command_line(tmp_path, capsys):
    """python -m law.rates: --out DIR or --out=DIR, the runs as bare arguments; bad input is one line, exit 2; --help
    lists the keys; fit_law.py's old spelling names the command."""
    for args, needle in (([str(tmp_path)], 'give the runs and --out DIR (python -m law.rates RUNS'),
                         ([str(tmp_path), '--out', str(tmp_path / 'o'), '--metric', 'loss'],
                          "--metric='loss': expected val_loss_causal | val_loss"),
                         ([str(tmp_path), '--out'], '--out: overrides are --key=value'),
                         ([str(tmp_path), '--tuned', '--out', str(tmp_path / 'o')], 'unknown key')):
        code = rates.main(args)
        assert_bad_input(code, capsys.readouterr().err, needle)
    assert_bad_input(fit_law.main(['--lr', str(tmp_path), '--out', str(tmp_path / 'o')]), capsys.readouterr().err,
                     'python -m law.rates RUNS... --out DIR')
    with pytest.raises(SystemExit) as e:
        rates.main(['--help'])
    shown = capsys.readouterr().out
    assert e.value.code == 0 and 'python -m law.rates' in shown and 'lr.json' in shown and '--panel' in shown

def test_close_rates_are_decided_by_their_seed_mean_and_arms_are_compared_with_xmod(tmp_path):
    """Two rates within 0.005 in seed 0: the seed-0 winner until both have seeds, then the lower seed mean. Every
    variant is also paired by seed with X-MoD (stride 4) at X-MoD's own best rate."""
    plain = dict(XMOD, gate='plain')
    for lr, L in ((2e-3, 3.10), (4e-3, 3.000), (8e-3, 3.003)):
        make_run(tmp_path, f'dense_lr{lr:g}', loss=L + 0.05, learning_rate=lr)
        make_run(tmp_path, f'xmod_lr{lr:g}', loss=L, learning_rate=lr, **XMOD)
        make_run(tmp_path, f'plain_lr{lr:g}', loss=L + 0.02, learning_rate=lr, **plain)

    def best():
        return {a['variant']: a['best_lr'] for a in rates.analyse(load_runs([str(tmp_path)]),
                                                                       'val_loss_causal')['arms']}
    assert best() == {'dense': 4e-3, 'xmod': 4e-3, 'xmod-plain': 4e-3}
    for s, (l4, l8) in enumerate([(3.02, 2.99), (3.01, 2.98)], start=1):    # 8e-3 is better on the seeds' mean
        make_run(tmp_path, f'xmod_lr0.004_s{s}', loss=l4, learning_rate=4e-3, seed=s, **XMOD)
        make_run(tmp_path, f'xmod_lr0.008_s{s}', loss=l8, learning_rate=8e-3, seed=s, **XMOD)
        make_run(tmp_path, f'plain_lr0.004_s{s}', loss=l4 + 0.03, learning_rate=4e-3, seed=s, **plain)
        make_run(tmp_path, f'dense_lr0.004_s{s}', loss=3.05, learning_rate=4e-3, seed=s)
    assert best() == {'dense': 4e-3, 'xmod': 8e-3, 'xmod-plain': 4e-3}   # plain has no seeds at 8e-3: seed 0 rules
    result = rates.analyse(load_runs([str(tmp_path)]), 'val_loss_causal')
    d = next(d for d in result['deltas'] if d['variant'] == 'xmod-plain')
    vs = [3.02 - 3.003, 3.05 - 2.99, 3.04 - 2.98]                        # plain at 4e-3 - X-MoD at 8e-3, by seed
    assert d['lr_xmod'] == 8e-3 and d['vs_xmod']['n'] == 3 and d['vs_xmod']['mean'] == pytest.approx(np.mean(vs))
    assert next(d for d in result['deltas'] if d['variant'] == 'xmod')['vs_xmod'] is None


def test_lr_mode_keeps_each_schedule_its_own_arm(tmp_path):
    """A WSD run (or branch) and a cosine run of the same budget, rate and seed are different arms, each paired with
    the dense run of its own schedule: Delta per schedule, never a WSD run against a cosine partner."""
    losses = {'cosine': (3.00, 3.02), 'wsd': (2.90, 2.95)}               # (dense, xmod)
    for schedule, (ld, ls) in losses.items():
        make_run(tmp_path, f'dense_{schedule}', loss=ld, learning_rate=4e-3, lr_schedule=schedule)
        make_run(tmp_path, f'xmod_{schedule}', loss=ls, learning_rate=4e-3, lr_schedule=schedule, **XMOD)
    assert rates.main([str(tmp_path), '--out', str(tmp_path / 'out')]) == 0
    result = json.load(open(tmp_path / 'out' / 'lr.json'))
    assert sorted((a['variant'], a['schedule']) for a in result['arms']) == [
        ('dense', 'cosine'), ('dense', 'wsd'), ('xmod', 'cosine'), ('xmod', 'wsd')]
    deltas = {d['schedule']: d['tuned']['mean'] for d in result['deltas']}
    assert deltas == pytest.approx({'cosine': 0.02, 'wsd': 0.05})
    assert '| xmod s4 c0.125 | 128 | 128 | 1,048,576 | wsd |' in (tmp_path / 'out' / 'lr.md').read_text()
    # another stride at the same width, budget and rate is another arm, against the same dense run
    make_run(tmp_path, 'xmod_s2_cosine', loss=2.99, learning_rate=4e-3, lr_schedule='cosine',
             **dict(XMOD, stride=2, n_layer=5, capacity=0.5))
    assert rates.main([str(tmp_path), '--out', str(tmp_path / 'out')]) == 0
    result = json.load(open(tmp_path / 'out' / 'lr.json'))
    deltas = {(d['stride'], d['schedule']): d['tuned']['mean'] for d in result['deltas']}
    assert deltas == pytest.approx({(4, 'cosine'): 0.02, (4, 'wsd'): 0.05, (2, 'cosine'): -0.01})


def test_an_moe_variant_is_an_arm_without_a_layout(tmp_path):
    """fit_law.py --lr reads a variant of the MoE (moe-cf1) as the MoE: no stride or capacity, paired with dense."""
    for lr, (ld, lm) in {2e-3: (3.0, 2.9), 4e-3: (3.1, 2.95)}.items():
        make_run(tmp_path, f'dense_lr{lr:g}', loss=ld, learning_rate=lr)
        make_run(tmp_path, f'moe_lr{lr:g}', model='moe', loss=lm, learning_rate=lr, expert_capacity_factor=1.0)
    runs = load_runs([str(tmp_path)])
    assert {r['variant'] for r in runs} == {'dense', 'moe-cf1'}
    (d,) = rates.analyse(runs, 'val_loss_causal')['deltas']
    assert d['variant'] == 'moe-cf1' and d['stride'] is None and d['tuned']['mean'] == pytest.approx(-0.1)


def test_tuned_fit_pairs_each_arm_at_its_own_best_rate(tmp_path, capsys):
    """fit_law.py --tuned keeps each arm's runs, all seeds, at its best rate (the lowest seed-0 loss) and pairs them:
    X-MoD at 4e-3 against dense at 2e-3, seed by seed, whatever the shared-rate pairs would say."""
    for lr, ld, ls in ((1e-3, 3.10, 3.20), (2e-3, 3.00, 3.10), (4e-3, 3.05, 2.98)):
        make_run(tmp_path / 'runs', f'dense_lr{lr:g}', loss=ld, learning_rate=lr)
        make_run(tmp_path / 'runs', f'xmod_lr{lr:g}', loss=ls, learning_rate=lr, **XMOD)
    make_run(tmp_path / 'runs', 'dense_lr0.002_s1', loss=3.02, learning_rate=2e-3, seed=1)
    make_run(tmp_path / 'runs', 'xmod_lr0.004_s1', loss=2.99, learning_rate=4e-3, seed=1, **XMOD)
    runs = rates.tuned_runs(load_runs([str(tmp_path / 'runs')]), 'val_loss_causal')
    assert sorted((r['model'], r['config']['learning_rate'], r['seed']) for r in runs) == [
        ('dense', 2e-3, 0), ('dense', 2e-3, 1), ('xmod', 4e-3, 0), ('xmod', 4e-3, 1)]
    code, err = run_main(capsys, str(tmp_path / 'runs'), '--out', str(tmp_path / 'out'), '--tuned', '--bootstrap',
                         '0')
    assert code == 0, err
    fj = json.load(open(tmp_path / 'out' / 'fit.json'))
    assert fj['inputs']['tuned'] and fj['inputs']['n_runs'] == 4 and fj['inputs']['n_off_best_rate'] == 4
    rows = {r['run']: r for r in fj['runs']}
    assert rows['xmod_lr0.004']['partner'] == 'dense_lr0.002' and rows['xmod_lr0.004_s1']['partner'] == 'dense_lr0.002_s1'
    assert rows['xmod_lr0.004']['delta']['val_loss_causal'] == pytest.approx(2.98 - 3.00)


def test_a_model_flop_matched_by_its_tokens_meets_the_dense_run_of_that_budget(tmp_path):
    """MoD at c 0.125 is FLOP-matched by its token budget (1.8M tokens at 1.11x dense's FLOPs per token): its Delta
    is against the 2M-token dense run of the same seed and FLOPs, and against X-MoD at those FLOPs; never against a
    dense run of its own token count, which is not FLOP-matched."""
    fpt = 2.0 * 12 * 4 * N_EMBD ** 2 + 4 * 128 * N_EMBD * 4
    mod = dict(model='mod', n_layer=8, stride=2, capacity=0.125, params_total=2e6, params_active=1e6,
               flops_per_token=fpt * 2.0 / 1.8, tokens=1_800_000, bce_logits='raw')
    for s in range(3):
        make_run(tmp_path, f'dense_s{s}', loss=3.00 + 0.01 * s, learning_rate=4e-3, seed=s, tokens=2_000_000)
        make_run(tmp_path, f'dense_short_s{s}', loss=3.30, learning_rate=4e-3, seed=s, tokens=1_800_000)
        make_run(tmp_path, f'xmod_s{s}', loss=3.01 + 0.01 * s, learning_rate=4e-3, seed=s, tokens=2_000_000, **XMOD)
        make_run(tmp_path, f'mod_s{s}', loss=3.02 + 0.01 * s, learning_rate=4e-3, seed=s, **mod)
    result = rates.analyse(load_runs([str(tmp_path)]), 'val_loss_causal')
    d = next(d for d in result['deltas'] if d['variant'] == 'mod')
    assert d['dense_tokens'] == 2_000_000 and d['tuned']['mean'] == pytest.approx(0.02) and d['tuned']['n'] == 3
    assert d['vs_xmod']['mean'] == pytest.approx(0.01)
    assert d['unscreened']['seeds'] == [1, 2]       # seed 0 chose the rates: Delta without it beside


def test_the_panel_labels_its_arms_and_holm_adjusts_its_comparisons(tmp_path):
    """panel.md names each arm in words (the calibrated gate at both strides, MoD at its capacity), gives every
    Delta its t interval, a paired p and the Holm-adjusted p over the table's comparisons."""
    rng = np.random.default_rng(0)
    arms = {'xmod': XMOD, 'calgate': dict(XMOD, gate='calibrated'),
            'calgate2': dict(XMOD, gate='calibrated', stride=2, n_layer=6, capacity=0.367),
            'moe': dict(model='moe', expert_capacity_factor=1.0)}
    shift = {'xmod': 0.01, 'calgate': 0.009, 'calgate2': 0.0, 'moe': -0.05}
    for s in range(5):
        make_run(tmp_path, f'dense_s{s}', loss=3.0 + 0.01 * rng.standard_normal(), learning_rate=4e-3, seed=s)
        for name, kw in arms.items():
            make_run(tmp_path, f'{name}_s{s}', loss=3.0 + shift[name] + 0.01 * rng.standard_normal(),
                     learning_rate=4e-3, seed=s, **kw)
    runs = load_runs([str(tmp_path)])
    by_metric = {m: rates.analyse(runs, m) for m in ('val_loss_causal', 'val_loss')}
    res = by_metric['val_loss_causal']
    tests = [d[k] for d in res['deltas'] for k in ('tuned', 'vs_xmod') if d[k]]
    assert res['n_comparisons'] == len(tests) == 7
    ps = sorted(t['p'] for t in tests)
    assert min(t['p_holm'] for t in tests) == pytest.approx(min(1, 7 * ps[0]))
    md = rates.panel_md(by_metric, 'python fit_law.py --lr RUNS --panel --out DIR')
    for name in ('| X-MoD (stride 4) |', '| X-MoD, calibrated gate |', "| MoD's layout, calibrated gate |",
                 '| MoE, FLOP-matched |', '95% t(4) [', ', Holm ', '## val_loss: width 128'):
        assert name in md, name
    assert md.index('| X-MoD (stride 4) |') < md.index('| MoE, FLOP-matched |')


def test_the_routers_table_reads_the_gate_slope_where_runs_logged_it(tmp_path):
    """gate_slope_l at the end, lowest and highest over layers, averaged over seeds; '-' for runs from before it."""
    cols = 'step,router_acc_1,gate_1,gate_mean_1,gate_slope_1,router_acc_2,gate_2,gate_mean_2,gate_slope_2\n'
    new, old = tmp_path / 'new', tmp_path / 'old'
    for d, rows in ((new, ['1,0.9,1.0,0.9,0.10,0.9,1.0,0.8,0.20', '2,0.95,1.0,0.9,0.02,0.95,1.0,0.8,0.06']),
                    (old, ['1,0.9,1.0,0.9,,0.9,1.0,0.8,', '2,0.95,1.0,0.9,,0.95,1.0,0.8,'])):
        d.mkdir()
        (d / 'log.csv').write_text(cols + '\n'.join(rows) + '\n')
    g = rates.routing([str(new)])
    assert (g['slope_final_min'], g['slope_final_max']) == pytest.approx((0.02, 0.06))
    g = rates.routing([str(old)])
    assert g['slope_final_min'] is None
    arm = dict(variant='xmod', stride=4, capacity=0.125, n_embd=128, T=128, tokens=2e6, schedule='cosine', routing=g)
    assert rates.routers_md([arm])[-1].endswith('| 0.9500 | - |')
