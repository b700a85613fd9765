"""The compute ladder: the window plan against issue 49's conditions (sweeps/gpu_ladder.py), its time model against
the first H200 window, the verdict rule simulated (law/ladder.py), the analysis on synthetic runs, and
sweeps/gpu_window.sh's CPU smoke mode twice in a row, the first's output the second's prior."""
import json
import math
import os
import runpy
import subprocess
import sys
import tarfile
from collections import Counter

import numpy as np
import pytest

from conftest import ENV, ROOT
from law.ladder import DETECT, analyse, main, slope_fit, verdict
from law.load import load_runs
from law_runs import make_run

LADDER = os.path.join(ROOT, 'sweeps', 'gpu_ladder.py')


def plan(monkeypatch, tmp_path, **env):
    """sweeps/gpu_ladder.py's globals as a GPU window reads it (runs read from an empty folder, no prior)."""
    for k in ('GPU_LADDER_SMOKE', 'GPU_LADDER_DATA', 'GPU_LADDER_PLAN'):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv('GPU_LADDER_RUNS', str(tmp_path / 'runs'))
    monkeypatch.setenv('GPU_LADDER_PRIOR', '')
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return runpy.run_path(LADDER)


def window_seconds():
    """What sweeps/gpu_window.sh leaves the ladder by default: 540 - 170 (speed rows) - 20 (packing) s."""
    text = open(os.path.join(ROOT, 'sweeps', 'gpu_window.sh')).read()
    assert 'BUDGET=${GPU_WINDOW_BUDGET:-540}; SPEED_S=${GPU_WINDOW_SPEED_S:-170}' in text
    assert 'LADDER_END=$(( START + BUDGET - SPEED_S - 20 ))' in text
    return 540 - 170 - 20


def test_the_window_plan_meets_the_issue(monkeypatch, tmp_path):
    """Three arms, 3 widths or more, 3 seeds or more, at least 10 tokens per active parameter at every rung and arm,
    no rung beyond the corpus's training split, FLOPs over 1.5 decades or more, and the estimated time on an H100 and
    an H200 inside what the window script gives the ladder (less 10 s of corpus preparation)."""
    g = plan(monkeypatch, tmp_path)
    rows = g['rung_table']()
    assert {r['arm'] for r in rows} == {'dense', 'xmod_s4', 'xmod_s2'}
    assert len({r['width'] for r in rows}) >= 3 and min(r['seeds'] for r in rows) >= 3
    assert min(r['tokens'] / r['active'] for r in rows) >= 10
    assert max(r['tokens'] for r in rows) <= g['CORPUS']['train_tokens'] and max(r['passes'] for r in rows) < 0.9
    assert math.log10(max(r['flops'] for r in rows) / min(r['flops'] for r in rows)) >= 1.5
    est = g['estimate']()
    assert set(est) == {'H100', 'H200'} and est['H200'] < est['H100'] < window_seconds() - 10, est
    # a run a seed waits for comes before it, and the names are what sweeps/sweep.py needs
    names = [r['name'] for r in g['runs']]
    assert len(names) == len(set(names)) == 3 * 3 * 2          # seed 0 at two rates; the seeds wait for them


def test_the_dry_run_says_what_a_prior_leaves(monkeypatch, tmp_path, capsys):
    """A prior window's runs.tar.gz whose runs are the plan's: --dry_run counts them done and estimates the rest on
    both GPUs; the seeds that waited for seed 0 get seed 0's better rate from the prior's run.json."""
    g = plan(monkeypatch, tmp_path)
    firsts = [r for r, needs, _ in g['plan']() if needs is None]
    window = tmp_path / 'windows' / 'one'
    os.makedirs(window / 'runs')
    for i, r in enumerate(firsts):
        os.makedirs(window / 'runs' / r['name'])
        final = dict(val_loss_causal=1.5 - 0.01 * (r['learning_rate'] > 0.5 * max(x['learning_rate'] for x in firsts
                                                                                   if x['n_embd'] == r['n_embd'])))
        json.dump(dict(finished=True, final=final), open(window / 'runs' / r['name'] / 'run.json', 'w'))
    with tarfile.open(window / 'runs.tar.gz', 'w:gz') as tar:
        tar.add(window / 'runs', arcname='runs')
    g = plan(monkeypatch, tmp_path, GPU_LADDER_PRIOR=str(window))
    assert g['dry_run']() == 0
    out = capsys.readouterr().out
    assert f'prior: {len(firsts)} of the plan\'s 36 runs finished in 1 earlier window(s)' in out, out
    assert 'left: 18 runs' in out and 'estimated on one H100: ' in out and 'estimated on one H200: ' in out
    g['PRIOR'].update(g['prior_runs']([str(window)]))
    seeds = [r for r, needs, _ in g['plan']() if needs is None and r['seed'] > 0]
    assert len(seeds) == 18 and all(r['name'].split('_lr')[1].startswith(f"{2 * g['base_rate'](r['n_embd']):.3g}")
                                    for r in seeds)


def test_the_full_plan_branches_from_kept_steps(monkeypatch, tmp_path):
    """GPU_LADDER_PLAN=full: five rungs, six seeds, seed 0 on four rates; each run keeps the steps its D/4 and D/2
    branches start from, and a branch is listed (first) only once its parent's step is kept on disk."""
    g = plan(monkeypatch, tmp_path, GPU_LADDER_PLAN='full')
    assert len(g['RUNGS']) == 5 and len(g['SEEDS']) == 6 and len(g['RATE_FACTORS']) == 4
    assert len(g['plan']()) == 5 * 3 * (4 + 5) * 3 and not [r for r in g['runs'] if 'init_from' in r]
    parent = g['runs'][0]
    steps = parent['save_steps'].split(',')
    os.makedirs(tmp_path / 'runs' / parent['name'])
    (tmp_path / 'runs' / parent['name'] / f'ckpt_{steps[0]}.pt').write_bytes(b'')
    g = plan(monkeypatch, tmp_path, GPU_LADDER_PLAN='full')
    first = g['runs'][0]
    assert first['init_from'].endswith(f"{parent['name']}/ckpt_{steps[0]}.pt") and first['name'].endswith('_branch')
    assert first['max_tokens'] == parent['max_tokens'] // 4 and 'save_steps' not in first


def test_the_time_model_reproduces_the_first_window(monkeypatch, tmp_path):
    """The model (sweeps/gpu_ladder.py: simulate, COST_US) on the first H200 window's own sweep (60 runs, widths 128,
    256 and 512 at 2M, 8M and 32M tokens, 20 at once, cut at 320 s): it finished 27 runs, all 4 dense width-512 runs
    at about 292 s, 21 of the 24 at width 256 and 2 dense runs at 128."""
    g = plan(monkeypatch, tmp_path)
    tokens, seeds, step = {128: 1998848, 256: 7995392, 512: 31981568}, {128: 4, 256: 4, 512: 2}, \
        {128: 4096, 256: 16384, 512: 65536}
    items = [(f'{arm}_{w}_{lr}_{s}', tokens[w] * g['cost_us'](arm, w, step[w]) * 1e-6, None)
             for w in (512, 256, 128) for s in range(seeds[w]) for lr in (0, 1) for arm in ('dense', 'xmod_s4', 'xmod_s2')]
    _, ends = g['simulate'](items, slots=20, deadline=320)
    by = Counter(n.split('_')[-3] for n in ends)
    assert 24 <= len(ends) <= 30 and 19 <= by['256'] <= 24 and by['128'] <= 4, ends
    assert all(280 <= t <= 320 for n, t in ends.items() if n.startswith('dense_512')) and by['512'] == 4


def simulate_verdicts(slope, sd=0.0074, draws=10_000, seeds=3, xs=(11.973, 13.064, 13.975), rng=0):
    """The verdict rule on `draws` synthetic ladders: each rung's `seeds` Deltas drawn from a normal with mean
    slope x log10 FLOPs and SD sd (the CPU panel's seed spread of Delta), at the window plan's FLOPs."""
    r = np.random.default_rng(rng)
    x = np.repeat(xs, seeds)
    out = Counter()
    for _ in range(draws):
        y = slope * (x - x.mean()) + 0.01 + r.normal(0, 1, len(x)) * (sd if np.isscalar(sd) else np.repeat(sd, seeds))
        out[verdict(slope_fit(x, y))[0]] += 1
    return {k: v / draws for k, v in out.items()}


def test_the_verdict_rule_errs_at_most_5_percent_without_a_slope():
    """No true slope: 'falls' or 'grows' at most 5% of the time (10,000 draws: 5% + 2 SE at most), also when the
    widest rung's seeds spread twice as wide as the narrowest's."""
    for sd in (0.0074, (0.005, 0.0074, 0.010)):
        rates = simulate_verdicts(0.0, sd=sd)
        assert rates.get('falls', 0) + rates.get('grows', 0) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 10_000), rates


def test_the_verdict_rule_detects_the_slope_it_claims():
    """A true slope of -DETECT per decade (the size docs/ladder.md says the window ladder detects) is called 'falls'
    at least 80% of the time, +DETECT 'grows'; never the other way."""
    falls, grows = simulate_verdicts(-DETECT, draws=4000), simulate_verdicts(DETECT, draws=4000, rng=1)
    assert falls.get('falls', 0) >= 0.8 and 'grows' not in falls, falls
    assert grows.get('grows', 0) >= 0.8 and 'falls' not in grows, grows


WIDTHS = {32: 1e12, 64: 1e13, 112: 1e14}        # training FLOPs: one decade apart


def ladder(root, delta_at, seeds=(0, 1, 2), noise=0.002):
    """The window plan's shape: dense and X-MoD s4 at every width; seed 0 at two rates (2r better by 0.02 for both
    arms), seeds 1+ at 2r; X-MoD - dense = delta_at(flops) plus a small unshared per-seed offset."""
    for w, flops in WIDTHS.items():
        for lr, ss in ((1e-3, seeds[:1]), (2e-3, seeds)):
            for s in ss:
                base = 2.0 - 0.1 * math.log10(flops) + 0.01 * s + (0.02 if lr == 1e-3 else 0)
                jitter = noise * ((s * 7 + w) % 5 - 2) / 2
                for model, loss, kw in (('dense', base, dict(n_layer=4)),
                                        ('xmod', base + delta_at(flops) + jitter,
                                         dict(n_layer=12, stride=4, capacity=0.125))):
                    make_run(root, f'{model}_d{w}_lr{lr:g}_seed{s}', model=model, seed=s, loss=loss, n_embd=w,
                             learning_rate=lr, tokens=2 ** 20, flops_per_token=flops / 3 / 2 ** 20, **kw)


def test_a_falling_delta_falls(tmp_path):
    """Delta = +0.02 at 1e12 falling by 0.01 per decade: the rate chosen on seed 0 (2e-3 for both), each width's Delta
    on 3 seeds with df 2, the slope's t-interval below 0 on 9 - 2 = 7 degrees of freedom, the verdict 'falls'; the
    core curve has a point per width and arm, each on its frontier."""
    ladder(tmp_path, lambda f: 0.02 - 0.01 * (math.log10(f) - 12))
    result = analyse(load_runs([str(tmp_path)]))
    a = result['arms']['xmod_s4']
    assert [r['n'] for r in a['widths']] == [3, 3, 3] and {r['df'] for r in a['widths']} == {2}
    assert {(r['rates']['dense'], r['rates']['sparse']) for r in a['widths']} == {(2e-3, 2e-3)}
    assert a['slope']['slope'] == pytest.approx(-0.01, abs=0.002) and a['slope']['df'] == 7
    assert a['slope']['hi'] < 0 and a['verdict'] == 'falls'
    assert all(r['later']['n'] == 2 for r in a['widths'])                  # seeds 1+ without the seed that chose
    assert [len(result['curves'][arm]) for arm in ('dense', 'xmod_s4')] == [3, 3]
    assert all(p['frontier'] for p in result['curves']['dense'])


def test_a_flat_deficit_is_flat_and_behind(tmp_path):
    ladder(tmp_path, lambda f: 0.01, noise=0.001)
    a = analyse(load_runs([str(tmp_path)]))['arms']['xmod_s4']
    assert a['verdict'] == 'flat' and 'behind dense at the widest rung' in a['sentence']


def test_the_entry_point_writes_its_four_files_and_the_windows(tmp_path, capsys):
    ladder(tmp_path / 'runs', lambda f: 0.01)
    os.makedirs(tmp_path / 'w1')
    json.dump(dict(date='2026-12-07 01:00 UTC', device='NVIDIA H100', git_commit='abc123', git_dirty=False,
                   git_diff_sha256='', runs=['a', 'b']), open(tmp_path / 'w1' / 'window.json', 'w'))
    assert main([str(tmp_path / 'runs'), '--out', str(tmp_path / 'out'), '--windows', str(tmp_path / 'w1')]) == 0
    assert sorted(os.listdir(tmp_path / 'out')) == ['curves.png', 'delta.png', 'ladder.json', 'ladder.md']
    md = capsys.readouterr().out
    assert '| w1 | 2026-12-07 01:00 UTC | NVIDIA H100 | abc123 | False | - | 2 |' in md
    assert 'abc123 not recorded not recorded' in md        # runs from before run.json said git_dirty


def window(corpus, out, prior):
    env = dict(ENV, GPU_WINDOW_SMOKE='1', GPU_LADDER_DATA=corpus, GPU_LADDER_PRIOR=prior, PYTHON=sys.executable)
    r = subprocess.run(['bash', os.path.join(ROOT, 'sweeps', 'gpu_window.sh'), str(out)], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    return json.loads((out / 'window.json').read_text()), json.loads((out / 'ladder.json').read_text())


def test_gpu_window_smoke_twice(corpus, tmp_path):
    """sweeps/gpu_window.sh in its CPU smoke mode: the first call trains the plan's 12 toy runs and returns the 8 files
    docs/ladder.md names; the second, with the first's output as its prior, trains nothing and gives the same
    table."""
    one, two = tmp_path / 'one', tmp_path / 'two'
    w1, l1 = window(corpus, one, '')
    files = ['curves.png', 'delta.png', 'ladder.json', 'ladder.md', 'runs.tar.gz', 'speed.md', 'window.json',
             'window.txt']
    assert sorted(os.listdir(one)) == files
    assert len(w1['runs']) == 12 and not w1['cut'] and w1['prior_runs'] == 0 and w1['corpus_sha256']['train']
    assert l1['arms']['xmod_s4']['slope'] is not None and [r['n'] for r in l1['arms']['xmod_s4']['widths']] == [2, 2]
    with tarfile.open(one / 'runs.tar.gz') as tar:
        names = tar.getnames()
        meta = json.load(tar.extractfile(next(n for n in names if n.endswith('/run.json'))))
    assert meta['config']['out_dir'].startswith('W/runs/')       # the machine's temporary folder written W
    assert str(one) not in (one / 'window.txt').read_text()      # and OUT
    assert len([n for n in names if n.startswith('runs/') and n.endswith('/run.json')]) == 12
    assert not [n for n in names if n.endswith('.pt')]
    assert '| 24 | dense | eager |' in (one / 'speed.md').read_text()
    w2, l2 = window(corpus, two, str(one))
    assert w2['runs'] == [] and w2['prior_runs'] == 12 and sorted(os.listdir(two)) == files
    assert l2['arms'] == l1['arms'] and l2['curves'] == l1['curves']
    assert [w['name'] for w in l2['windows']] == ['one', 'two']
    assert 'left: 0 runs' in (two / 'window.txt').read_text()
