"""The compute ladder: law/ladder.py on synthetic runs with a planted Delta (the rate rule, the intervals, the slope
and the verdict), and sweeps/gpu_ladder.sh in its CPU smoke mode (every file it returns)."""
import json
import math
import os
import subprocess
import sys
import tarfile

import pytest

from conftest import ENV, ROOT
from law.ladder import analyse, chosen_rate, main, t975, to_markdown
from law.load import load_runs
from law_runs import make_run

WIDTHS = {128: 1e13, 256: 1e14, 512: 1e15}        # training FLOPs: one decade apart
RATES = (1e-3, 2e-3)


def ladder(root, delta_at, seeds=(0, 1, 2, 3), noise=0.002, rates=None):
    """Dense and X-MoD s4 runs at every width, rate and seed: X-MoD - dense = delta_at(flops) at each arm's better
    rate (2e-3 for both, by 0.02), plus a per-seed offset shared by the two arms and a small unshared one.
    rates: {width: its rates} where a width runs other rates than RATES; seeds may be such a dict too."""
    for w, flops in WIDTHS.items():
        for lr in (rates or {}).get(w, RATES):
            for s in (seeds[w] if isinstance(seeds, dict) else seeds):
                base = 2.0 - 0.1 * math.log10(flops) + 0.01 * s + (0.02 if lr == RATES[0] else 0)
                jitter = noise * ((s * 7 + w) % 5 - 2) / 2
                for model, loss, kw in (('dense', base, dict(n_layer=4)),
                                        ('xmod', base + delta_at(flops) + jitter,
                                         dict(n_layer=12, stride=4, capacity=0.125))):
                    make_run(root, f'{model}_d{w}_lr{lr:g}_seed{s}', model=model, seed=s, loss=loss, n_embd=w,
                             learning_rate=lr, tokens=2 ** 20, flops_per_token=flops / 3 / 2 ** 20, **kw)


def test_a_falling_delta_is_a_small_scale_effect(tmp_path):
    """Delta = +0.02 at 1e13 falling by 0.01 per decade: the slope is found with a bootstrap interval below 0, each
    width's Delta with a t-interval on n - 1 = 3 degrees of freedom, and the verdict says a compute term."""
    ladder(tmp_path, lambda f: 0.02 - 0.01 * (math.log10(f) - 13))
    a = analyse(load_runs([str(tmp_path)]))['arms']['xmod_s4']
    assert a['slope_per_decade'] == pytest.approx(-0.01, abs=0.002)
    assert a['slope_hi'] < 0 and a['slope_lo'] < a['slope_per_decade'] < a['slope_hi']
    assert [r['n'] for r in a['widths']] == [4, 4, 4] and {r['df'] for r in a['widths']} == {3}
    top = a['widths'][-1]
    assert top['lo'] < top['mean'] < top['hi'] and top['hi'] - top['mean'] == pytest.approx(3.182 * top['se'])
    assert 'small-scale effect' in a['verdict'] and 'compute term' in a['verdict']


def test_a_flat_deficit_does_not_pay(tmp_path):
    ladder(tmp_path, lambda f: 0.01)
    a = analyse(load_runs([str(tmp_path)]))['arms']['xmod_s4']
    assert abs(a['slope_per_decade']) <= 0.003 and a['top_delta'] == pytest.approx(0.01, abs=0.002)
    assert 'does not pay' in a['verdict']


def test_a_flat_small_delta_is_undecided(tmp_path):
    ladder(tmp_path, lambda f: 0.0)
    assert analyse(load_runs([str(tmp_path)]))['arms']['xmod_s4']['verdict'].startswith('undecided')


def test_the_rate_is_chosen_by_the_other_seeds():
    """Seed 0 alone prefers 1e-3; seeds 1 and 2 prefer 2e-3: seed 0's pair uses 2e-3 (its own loss does not
    choose), seed 1's uses 2e-3 too (seeds 0 and 2: mean 3.025 against 3.0), and a lone seed gets none."""
    by_lr = {1e-3: {0: 2.95, 1: 3.1, 2: 3.1}, 2e-3: {0: 3.0, 1: 3.0, 2: 3.0}}
    assert chosen_rate(by_lr, 0) == 2e-3 and chosen_rate(by_lr, 1) == 2e-3
    assert chosen_rate({1e-3: {0: 2.9}, 2e-3: {0: 3.0}}, 0) is None
    assert chosen_rate({1e-3: {0: 2.9, 1: 2.0}, 2e-3: {0: 3.0}}, 0) == 1e-3     # 2e-3 has no other seed to judge


def test_a_run_the_deadline_cut_does_not_count_against_its_rate():
    """The first H200 ladder's X-MoD s2 at width 256: the sweep's deadline cut seed 3's run at 2.83e-3. Seed 0's
    pair compares the two rates over the seeds both finished (1 and 2), where 2.83e-3 is better by 0.012, and takes
    it; counting the missing run as worse than any took 2e-3 and read Delta +0.0016 for what is -0.0078."""
    by_lr = {2e-3: {0: 1.5340, 1: 1.5322, 2: 1.5351, 3: 1.5428}, 2.83e-3: {0: 1.5264, 1: 1.5205, 2: 1.5264}}
    assert chosen_rate(by_lr, 0) == 2.83e-3 and chosen_rate(by_lr, 3) == 2.83e-3
    assert chosen_rate({1e-3: {0: 2.9, 1: 2.0}, 2e-3: {0: 3.0, 2: 1.0}}, 0) == 2e-3    # none shared: their own


def test_a_width_with_one_rate_uses_it(tmp_path):
    """One rate at the top width (the re-sized ladder): no choice there, so every seed gets a Delta, one seed alone
    included (no interval then), and the table says which rates each arm ran."""
    ladder(tmp_path, lambda f: 0.01, rates={512: (2e-3,)}, seeds={128: (0, 1, 2), 256: (0, 1, 2), 512: (0,)})
    result = analyse(load_runs([str(tmp_path)]))
    a = result['arms']['xmod_s4']
    top = a['widths'][-1]
    assert top['n'] == 1 and top['mean'] == pytest.approx(0.01, abs=0.002) and top['lo'] is None
    assert top['rates_run'] == dict(dense=[2e-3], sparse=[2e-3]) and top['rates'] == {'0': dict(dense=2e-3, sparse=2e-3)}
    assert [r['n'] for r in a['widths']] == [3, 3, 1] and a['slope_per_decade'] is not None
    assert '| 512 | 1e+15 | 0.002; 0.002 | 1 | +0.01' in to_markdown(result)


def test_t_quantiles():
    assert t975(1) == 12.706 and t975(3) == 3.182 and t975(17) == 2.131 and t975(100) == 1.96


def test_the_entry_point_writes_its_four_files(tmp_path, capsys):
    ladder(tmp_path / 'runs', lambda f: 0.01)
    assert main([str(tmp_path / 'runs'), '--out', str(tmp_path / 'out')]) == 0
    assert sorted(os.listdir(tmp_path / 'out')) == ['curves.png', 'delta.png', 'ladder.json', 'ladder.md']
    assert 'xmod_s4: depth routing as built does not pay' in capsys.readouterr().out


def test_gpu_ladder_script_smoke(corpus, tmp_path):
    """sweeps/gpu_ladder.sh in its CPU smoke mode: the sweep's 12 toy runs in its two phases (the widest width's one
    rate, then two rates at the other), the analysis, and OUT holds exactly the 6 files docs/ladder.md names, each
    with what it should hold."""
    out = tmp_path / 'ladder'
    env = dict(ENV, GPU_LADDER_SMOKE='1', GPU_LADDER_DATA=corpus, PYTHON=sys.executable)
    r = subprocess.run(['bash', os.path.join(ROOT, 'sweeps', 'gpu_ladder.sh'), str(out)], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ['curves.png', 'delta.png', 'ladder.json', 'ladder.md', 'runs.tar.gz',
                                       'sweep.txt']
    log = (out / 'sweep.txt').read_text()
    assert 'sweep top: exit code 0' in log and 'sweep rest: exit code 0' in log, log
    assert log.index('sweep top: exit code 0') < log.index('sweep rest: exit code 0') and 'analysis: exit code 0' in log
    result = json.loads((out / 'ladder.json').read_text())
    assert result['runs'] == 12 and result['widths'] == [24, 48]
    a = result['arms']['xmod_s4']
    assert [r['n'] for r in a['widths']] == [2, 2] and a['slope_per_decade'] is not None and a['verdict']
    assert [len(r['rates_run']['sparse']) for r in a['widths']] == [2, 1]
    assert 'xmod_s4 - dense' in (out / 'ladder.md').read_text()
    for png in ('delta.png', 'curves.png'):
        assert (out / png).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    with tarfile.open(out / 'runs.tar.gz') as tar:
        names = tar.getnames()
    assert len([n for n in names if n.endswith('/log.csv')]) == 12
    assert len([n for n in names if n.endswith('/run.json')]) == 12
    assert not [n for n in names if n.endswith('.pt')]
