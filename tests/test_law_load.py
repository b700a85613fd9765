"""
Tests for law/load.py, what fit_law.py (its laws and its --lr table) reads: run folders found and checked against train.py's
contract, sparse runs paired with FLOP-matched dense partners, --holdout filters, the variants named, bad input
refused in one line (exit 2) or skipped with a warning. Mostly through fit_law.py's command line, as users meet it.
"""

import json
import os
import shutil

import pytest

from configurator import UserError
from law import rates, report
from law.load import config_key, load_runs, mark_heldout, pair_runs
from law_runs import cli, make_run, make_sweep, run_main, tiny_sweep

# -----------------------------------------------------------------------------
# pairing and held-out selection

def test_pairing_picks_closest_flops(tmp_path):
    make_run(tmp_path, 'd_a', flops_per_token=1e6, loss=3.0)
    make_run(tmp_path, 'd_b', flops_per_token=1.015e6, loss=3.1, n_head=8)  # a different config, same seed
    make_run(tmp_path, 'd_c', flops_per_token=1.012e6, loss=3.2, block_size=256)  # wrong context
    make_run(tmp_path, 'x', model='xmod', n_layer=12, stride=4, capacity=0.125, flops_per_token=1.012e6,
             params_total=3e6, params_active=1e6, loss=2.9)
    runs = load_runs([str(tmp_path)])
    pair_runs(runs)
    x = next(r for r in runs if r['model'] == 'xmod')
    assert x['partner']['name'] == 'd_b'


def test_pairing_prefers_the_same_learning_rate(tmp_path):
    """In a learning-rate sweep every dense run has the same FLOPs: each X-MoD run pairs with the dense run trained
    at its own rate, and a WSD run with the WSD one, whatever the names' order."""
    for lr, name in ((1e-3, 'd_z'), (4e-3, 'd_a')):
        make_run(tmp_path, name, flops_per_token=1e6, loss=3.0, learning_rate=lr)
        make_run(tmp_path, f'x_{lr:g}', model='xmod', n_layer=12, stride=4, capacity=0.125, flops_per_token=1.01e6,
                 params_total=3e6, params_active=1e6, loss=2.9, learning_rate=lr)
    make_run(tmp_path, 'd_wsd', flops_per_token=1e6, loss=3.0, learning_rate=4e-3, lr_schedule='wsd', seed=1)
    make_run(tmp_path, 'd_cos', flops_per_token=1e6, loss=3.0, learning_rate=4e-3, seed=1)
    make_run(tmp_path, 'x_wsd', model='xmod', n_layer=12, stride=4, capacity=0.125, flops_per_token=1.01e6,
             params_total=3e6, params_active=1e6, loss=2.9, learning_rate=4e-3, lr_schedule='wsd', seed=1)
    runs = load_runs([str(tmp_path)])
    pair_runs(runs)
    assert {r['name']: r['partner']['name'] for r in runs if r['model'] == 'xmod'} == {'x_0.001': 'd_z',
                                                                                     'x_0.004': 'd_a',
                                                                                     'x_wsd': 'd_wsd'}


def test_holdout_namespace(tmp_path):
    make_sweep(tmp_path, contexts=(128,), strides=(4, 8), ablations=False)
    runs = load_runs([str(tmp_path)])
    mark_heldout(['tokens==max_tokens_all'], runs)
    assert {r['name'] for r in runs if r['heldout']} == {f'dense_L{n}_D{2 ** 24}' for n in (2, 8, 16)}
    mark_heldout(["model == 'xmod' and stride >= 8 and rho > 1 and params_total > 1000", ], runs)
    assert sum(r['heldout'] for r in runs) == 4
    # a run is held out when it matches every condition of at least one --holdout
    mark_heldout(['model=xmod, stride=8, capacity=0.125', 'tokens==max_tokens_all'], runs)
    assert sum(r['heldout'] for r in runs) == 2 + 3


@pytest.mark.parametrize('filt, n', [('stride==8', 12), ('tokens==max_tokens_all', 3), ('block_size==512', 14),
                                     ("model=='xmod' and stride==8", 12), ("gate='plain'", 2),
                                     ('seed > 0 and model == "dense"', 3), ('model=xmod, stride!=8, capacity<0.2', 12 + 4)])
def test_readme_filters(tmp_path, filt, n):
    """The filters docs/fit_law.md and --help show, and the other operators."""
    make_sweep(tmp_path)
    runs = load_runs([str(tmp_path)])
    mark_heldout([filt], runs)
    assert sum(r['heldout'] for r in runs) == n


# -----------------------------------------------------------------------------
# bad input: exit 2 with a one-line message naming the file, or a warning and a skip

def test_missing_column_exits_2_via_cli(tmp_path):
    root = tiny_sweep(tmp_path / 'runs')
    log = os.path.join(root, 'dense_L4_T128_s0', 'log.csv')
    lines = open(log).read().splitlines()
    with open(log, 'w') as f:  # drop the val_loss_causal column
        f.write('\n'.join(','.join(c for i, c in enumerate(l.split(',')) if i != 8) for l in lines) + '\n')
    code, out, err = cli(root, '--out', str(tmp_path / 'out'))
    assert code == 2 and 'Traceback' not in err
    assert err.strip().count('\n') == 0 and log in err and 'val_loss_causal' in err


def test_malformed_json_exits_2_via_cli(tmp_path):
    root = tiny_sweep(tmp_path / 'runs')
    path = os.path.join(root, 'xmod_s4_c0.125_T128_s0', 'run.json')
    with open(path, 'a') as f:
        f.write('}{')
    code, out, err = cli(root, '--out', str(tmp_path / 'out'))
    assert code == 2 and 'Traceback' not in err and path in err and 'not valid JSON' in err


def test_bad_holdout_expressions_exit_2_via_cli(tmp_path):
    root = tiny_sweep(tmp_path / 'runs')
    code, out, err = cli(root, '--out', str(tmp_path / 'out'), '--holdout', "__import__('os').system('true')")
    assert code == 2 and 'Traceback' not in err and 'syntax error' in err


@pytest.mark.parametrize('expr, says', [('stride ==', 'syntax error'), ('no_such_key > 1', "unknown key 'no_such_key'"),
                                        ('().__class__', 'syntax error'), ('model == "dense"', 'no dense run'),
                                        ('strde == 8', "did you mean 'stride'?"), ('stride in (8,)', 'bad operator'),
                                        ('stride =< 8', "bad operator '=<'"), ('stride == 8,', 'syntax error'),
                                        ('model > 3', 'not supported between'), ('T < 0', "unknown key 'T'")])
def test_bad_holdout_expressions_exit_2(tmp_path, capsys, expr, says):
    code, err = run_main(capsys, tiny_sweep(tmp_path / 'runs'), '--out', str(tmp_path / 'out'), '--holdout', expr)
    assert code == 2 and says in err and err.count('error:') == 1


def corrupt(path, old, new):
    s = open(path).read()
    assert old in s
    with open(path, 'w') as f:
        f.write(s.replace(old, new))


def test_nan_exits_2(tmp_path, capsys):
    root = tiny_sweep(tmp_path / 'runs')
    log = os.path.join(root, 'xmod_s4_c0.125_T128_s0', 'log.csv')
    lines = open(log).read().splitlines()
    cells = lines[2].split(',')
    cells[7] = 'nan'  # val_loss of an intermediate evaluation
    lines[2] = ','.join(cells)
    with open(log, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'out'))
    assert code == 2 and log in err and 'val_loss' in err and 'line 3' in err


def test_final_disagreeing_with_log_exits_2(tmp_path, capsys):
    root = tiny_sweep(tmp_path / 'runs')
    path = os.path.join(root, 'dense_L4_T128_s0', 'run.json')
    meta = json.load(open(path))
    meta['final']['val_loss_causal'] += 0.01
    json.dump(meta, open(path, 'w'))
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'out'))
    assert code == 2 and 'disagrees' in err and 'log.csv' in err


def test_duplicate_run_exits_2(tmp_path, capsys):
    root = tiny_sweep(tmp_path / 'runs')
    make_run(root, 'dense_again', n_layer=4, block_size=128, seed=0, tokens=2 ** 20, loss=3.3)
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'out'))
    assert code == 2 and 'duplicate run' in err and 'dense_again' in err and 'dense_L4_T128_s0' in err


def test_the_same_run_in_two_sweeps_is_read_once(tmp_path, capsys):
    """A configuration and seed that two sweeps both trained, to the same final numbers (training is deterministic),
    is one run, with a warning; the fit is the one without the copy."""
    root = tiny_sweep(tmp_path / 'runs')
    code, _ = run_main(capsys, root, '--out', str(tmp_path / 'one'), '--bootstrap', '0')
    other = tmp_path / 'other_sweep'
    shutil.copytree(os.path.join(root, 'dense_L4_T128_s0'), other / 'dense_L4_T128_s0')
    code2, err = run_main(capsys, root, str(other), '--out', str(tmp_path / 'two'), '--bootstrap', '0')
    assert code == code2 == 0 and 'read once' in err
    one, two = (json.load(open(tmp_path / d / 'fit.json')) for d in ('one', 'two'))
    assert two['inputs']['n_runs'] == one['inputs']['n_runs'] and two['dense'] == one['dense']


def test_runs_on_two_corpora_are_refused(tmp_path, capsys):
    """A law, a pairing or a rate table mixes no corpora: fit_law.py and its --lr table name both and their counts."""
    root = tiny_sweep(tmp_path / 'runs')
    make_run(root, 'dense_code', seed=7, dataset='pycode')
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'out'))
    assert code == 2 and 'runs on 2 corpora' in err and 'pycode: 1' in err and len(err.strip().splitlines()) == 1
    assert rates.main([root, '--out', str(tmp_path / 'lr')]) == 2
    assert 'pycode: 1' in capsys.readouterr().err and not (tmp_path / 'out').exists()


def test_same_directory_twice_is_not_a_duplicate(tmp_path, capsys):
    root = tiny_sweep(tmp_path / 'runs')
    code, err = run_main(capsys, root, os.path.join(root, 'dense_L4_T128_s0'), '--out', str(tmp_path / 'out'),
                         '--bootstrap', '0')
    assert code == 0


def test_unfinished_run_is_skipped_with_warning(tmp_path, capsys):
    root = tiny_sweep(tmp_path / 'runs')
    make_run(root, 'still_running', model='xmod', n_layer=20, stride=8, finished=False)
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'out'), '--bootstrap', '0')
    assert code == 0 and 'warning' in err and 'still_running' in err and 'unfinished' in err
    fj = json.load(open(tmp_path / 'out' / 'fit.json'))
    assert fj['inputs']['n_runs'] == 2 and any('unfinished' in w for w in fj['warnings'])


def test_run_without_partner_is_skipped_with_warning(tmp_path, capsys):
    root = tiny_sweep(tmp_path / 'runs')
    make_run(root, 'orphan', model='xmod', n_layer=12, stride=4, capacity=0.125, tokens=2 ** 21,
             params_total=3e6, params_active=1e6)
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'out'), '--bootstrap', '0')
    assert code == 0 and 'orphan' in err and 'no FLOP-matched dense partner' in err
    fj = json.load(open(tmp_path / 'out' / 'fit.json'))
    assert fj['relative']['n_pairs'] == 1
    assert next(r for r in fj['runs'] if r['run'] == 'orphan')['delta'] is None


def test_no_sparse_run_with_partner_exits_2(tmp_path, capsys):
    make_run(tmp_path, 'dense', loss=3.0)
    make_run(tmp_path, 'orphan', model='xmod', n_layer=12, stride=4, tokens=2 ** 21, params_total=3e6,
             params_active=1e6)
    code, err = run_main(capsys, str(tmp_path), '--out', str(tmp_path / 'out'))
    assert code == 2 and 'not one of the 1 sparse runs' in err


@pytest.mark.parametrize('edit, says', [
    (lambda m: m.pop('params_total'), 'missing key "params_total"'),
    (lambda m: m['config'].pop('block_size'), 'config is missing key "block_size"'),
    (lambda m: m['config'].update(model='transformer'), "unknown model 'transformer'"),
    (lambda m: m.update(params_active=1e12), 'params_active'),
    (lambda m: m.update(flops_per_token=float('nan')), 'flops_per_token'),
    (lambda m: m.update(seed='0'), 'seed must be an integer'),
    (lambda m: m['config'].update(capacity=0.0), 'capacity'),  # a config xmod.GPTConfig refuses
    (lambda m: m.update(model_config=dict(m['config'], model='transformer')), "unknown model 'transformer'"),
])
def test_bad_run_json_exits_2(tmp_path, capsys, edit, says):
    root = tiny_sweep(tmp_path / 'runs')
    path = os.path.join(root, 'xmod_s4_c0.125_T128_s0', 'run.json')
    meta = json.load(open(path))
    edit(meta)
    json.dump(meta, open(path, 'w'))
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'out'))
    assert code == 2 and path in err and says in err


def test_nothing_found_exits_2(tmp_path, capsys):
    code, err = run_main(capsys, str(tmp_path / 'nope*'), '--out', str(tmp_path / 'out'))
    assert code == 2 and 'matches no file' in err
    os.makedirs(tmp_path / 'empty')
    code, err = run_main(capsys, str(tmp_path / 'empty'), '--out', str(tmp_path / 'out'))
    assert code == 2 and 'no run.json' in err


# -----------------------------------------------------------------------------
# a run's model and variant, read through xmod.py

def test_null_gate_and_balance_mean_the_family_default(tmp_path, capsys):
    """train.py may write its raw config, where gate/depth_balance None mean the family default (xmod.py)."""
    root = tiny_sweep(tmp_path / 'runs')
    path = os.path.join(root, 'xmod_s4_c0.125_T128_s0', 'run.json')
    meta = json.load(open(path))
    meta['config'].update(gate=None, depth_balance=None)
    json.dump(meta, open(path, 'w'))
    code, err = run_main(capsys, root, '--out', str(tmp_path / 'out'), '--bootstrap', '0', '--holdout',
                         "gate == 'plain' and model == 'xmod'")
    assert code == 0 and 'selects no run' in err
    fj = json.load(open(tmp_path / 'out' / 'fit.json'))
    assert fj['relative']['n_pairs'] == 1  # counted as full X-MoD


def test_model_is_read_through_xmod(tmp_path):
    """run.json's model_config, as xmod.GPTConfig resolves it, wins over config; GPTConfig gives the layout (MoD
    alternates whatever its stride says) and passes over keys it does not know."""
    make_run(tmp_path, 'mod', model='mod', n_layer=6, stride=4, capacity=0.25, gate=None, depth_balance=None)
    path = os.path.join(make_run(tmp_path, 'x', model='xmod', n_layer=12, stride=4, capacity=0.125), 'run.json')
    meta = json.load(open(path))
    meta['model_config'] = dict(meta['config'], gate='plain', depth_balance=0.0, a_future_field=1)
    json.dump(meta, open(path, 'w'))
    runs = {r['name']: r for r in load_runs([str(tmp_path)])}
    # a run.json from before bce_logits (first router_bce) existed trained MoD's router on centred logits: not MoD as
    # published
    assert runs['mod']['stride'] == 2 and runs['mod']['variant'] == 'mod-centred'
    assert runs['mod']['config']['gate'] == 'plain' and runs['mod']['config']['bce_logits'] == 'centred'
    assert runs['x']['stride'] == 4 and runs['x']['variant'] == 'xmod-plain-nobal'
    assert runs['x']['config']['gate'] == 'plain'  # what --holdout sees
    make_run(tmp_path, 'b', model='xmod', n_layer=12, stride=4, capacity=0.125, depth_balance=0.5)
    assert {r['name']: r['variant'] for r in load_runs([str(tmp_path)])}['b'] == 'xmod-bal0.5'   # not X-MoD itself


def test_the_panel_switches_name_their_variants(tmp_path):
    """MoD as published is 'mod'; random routing, the other router BCE, the active-depth init and the MoE's capacity
    factor are each their own variant, so no law or table mixes them with the family's default recipe."""
    x = dict(model='xmod', n_layer=12, stride=4, capacity=0.125)
    make_run(tmp_path, 'mod', model='mod', n_layer=6, stride=2, capacity=0.25, gate=None, bce_logits='raw')
    make_run(tmp_path, 'random', router='random', bce_logits='centred', **x)
    make_run(tmp_path, 'raw', bce_logits='raw', **x)
    make_run(tmp_path, 'active', resid_init='active', bce_logits='centred', **x)
    make_run(tmp_path, 'full', router='learned', bce_logits='centred', resid_init='layers', **x)
    make_run(tmp_path, 'moe1', model='moe', expert_capacity_factor=1.0)
    make_run(tmp_path, 'moe', model='moe', expert_capacity_factor=1.25, seed=1)
    variants = {r['name']: r['variant'] for r in load_runs([str(tmp_path)])}
    assert variants == {'mod': 'mod', 'random': 'xmod-random', 'raw': 'xmod-raw', 'active': 'xmod-active',
                        'full': 'xmod', 'moe1': 'moe-cf1', 'moe': 'moe'}


def test_router_knob_ablations_are_named_and_kept_out_of_the_law(tmp_path):
    """A run with a router knob away from its default is its own variant (never fitted as full X-MoD)."""
    make_run(tmp_path, 'ref', model='xmod', n_layer=12, stride=4, capacity=0.125)
    for name, knob in (('mom', dict(router_momentum=0.0)), ('bce', dict(router_bce=1.0)),
                       ('z', dict(router_zloss=0.01))):
        make_run(tmp_path, name, model='xmod', n_layer=12, stride=4, capacity=0.125, **knob)
    runs = {r['name']: r['variant'] for r in load_runs([str(tmp_path)])}
    assert runs == {'ref': 'xmod', 'mom': 'xmod-mom0', 'bce': 'xmod-bce1', 'z': 'xmod-z0.01'}


def test_config_key_keeps_the_committed_order_and_old_names_are_unknown(tmp_path):
    """The canonical run order (the bootstrap draws in it) sorts the four renamed keys where their names of before
    stood, so committed sweeps refit to the same numbers; a --holdout by a name of before is an unknown key."""
    key = json.loads(config_key({'batch_size': 1, 'depth_balance': 0.1, 'moe_balance': 0.01, 'model': 'xmod',
                                 'router_bce': 0.1, 'bce_logits': 'raw', 'router_momentum': 0.9}))
    assert list(key) == ['depth_balance', 'batch_size', 'model', 'moe_balance', 'router_bce', 'bce_logits',
                         'router_momentum']
    make_run(tmp_path, 'x', model='xmod', n_layer=12, stride=4, capacity=0.125)
    runs = load_runs([str(tmp_path)])
    with pytest.raises(UserError, match="unknown key 'balance'"):
        mark_heldout(['balance==0'], runs)


def test_a_run_from_before_a_knob_existed_groups_with_one_at_its_default(tmp_path):
    """Old run.json files lack router_zloss; they are the same configuration as new runs that leave it at 0."""
    for seed in (0, 1):
        make_run(tmp_path, f'd{seed}', seed=seed, loss=1.80, flops_per_token=1e6)
        extra = {} if seed == 0 else dict(router_zloss=0.0)
        make_run(tmp_path, f'x{seed}', model='xmod', n_layer=12, stride=4, capacity=0.125, seed=seed, loss=1.79,
                 flops_per_token=1e6, params_total=3e6, params_active=1e6, **extra)
    runs = load_runs([str(tmp_path)])
    pair_runs(runs)
    table = report.delta_vs_tokens(runs)
    assert len(table) == 1 and next(iter(table.values()))['seeds'] == [0, 1]
