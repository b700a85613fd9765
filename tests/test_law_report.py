"""
Tests for law/report.py, what a fit says for people: Delta against training tokens and the router fixes (mean over
seeds +- 1 standard error), the form line, and summary.md's opening conclusion in words.
"""

import math

import numpy as np
import pytest

import fit_law
from law import report
from law.load import load_runs
from law_runs import make_run
from tools import fit_plots

# -----------------------------------------------------------------------------
# the tables over seeds

def test_delta_vs_tokens_mean_and_standard_error():
    """Two seeds of one configuration: Delta at the evaluations both runs of a pair logged, the mean over seeds and
    std/sqrt(n); an evaluation only one run of a pair has is passed over, a configuration with one seed left out."""
    def run(name, model, seed, tokens, causal, topk, partner=None, stride=4):
        log = dict(tokens=np.array(tokens, dtype=float), val_loss_causal=np.array(causal), val_loss=np.array(topk))
        return dict(name=name, model=model, variant=model, seed=seed, partner=partner, log=log, n_layer=12,
                    n_embd=128, T=128, stride=stride, capacity=0.125, tokens=tokens[-1],
                    config=dict(model=model, stride=stride, seed=seed))
    d0 = run('d0', 'dense', 0, [0, 100, 200], [3.0, 2.6, 2.2], [3.0, 2.6, 2.2])
    d1 = run('d1', 'dense', 1, [0, 100, 150, 200], [3.0, 2.5, 2.3, 2.1], [3.0, 2.5, 2.3, 2.1])
    runs = [d0, d1, run('x0', 'xmod', 0, [0, 100, 200], [3.0, 2.5, 2.0], [3.0, 2.4, 2.0], d0),
            run('x1', 'xmod', 1, [0, 100, 200], [3.0, 2.45, 2.05], [3.0, 2.45, 2.0], d1),
            run('y0', 'xmod', 0, [0, 100, 200], [3.0, 2.5, 2.0], [3.0, 2.5, 2.0], d0, stride=8)]
    table = report.delta_vs_tokens(runs)
    assert list(table) == ['xmod L12 s4 c0.125 T128 d128 0.0002M'] and table[list(table)[0]]['seeds'] == [0, 1]
    e = table[list(table)[0]]
    causal = [(r['tokens'], r['n'], r['mean'], r['se']) for r in e['val_loss_causal']]
    assert [c[:2] for c in causal] == [(0, 2), (100, 2), (200, 2)]
    assert causal[1][2:] == pytest.approx((-0.075, 0.025)) and causal[2][2:] == pytest.approx((-0.125, 0.075))
    assert [r['mean'] for r in e['val_loss']] == pytest.approx([0.0, -0.125, -0.15])


def test_fixes_are_paired_by_seed_with_full_xmod(tmp_path):
    """report.paired_fixes: L(fix) - L(X-MoD) of the same config and seed, mean and standard error over seeds; a fix
    without its full X-MoD run is not paired."""
    for seed, (ref, fix) in enumerate([(1.70, 1.69), (1.72, 1.70), (1.71, 1.71)]):
        make_run(tmp_path, f'ref{seed}', model='xmod', n_layer=12, stride=4, capacity=0.125, seed=seed, loss=ref)
        make_run(tmp_path, f'mom{seed}', model='xmod', n_layer=12, stride=4, capacity=0.125, seed=seed, loss=fix,
                 router_momentum=0.0)
    make_run(tmp_path, 'lonely', model='xmod', n_layer=12, stride=4, capacity=0.125, seed=7, loss=1.0, router_bce=1.0)
    table = report.paired_fixes(load_runs([str(tmp_path)]))
    assert len(table) == 1
    (e,) = table.values()
    d = [-0.01, -0.02, 0.0]
    assert e['fix'] == 'xmod-mom0' and e['seeds'] == [0, 1, 2]
    assert e['val_loss_causal']['mean'] == pytest.approx(np.mean(d))
    assert e['val_loss_causal']['se'] == pytest.approx(np.std(d, ddof=1) / math.sqrt(3))
    assert 'xmod-mom0' in report.fixes_md(table) and '-0.0100 +- 0.0058' in report.fixes_md(table)


# -----------------------------------------------------------------------------
# summary.md in words: the conclusion first, each term's sign, the form line

def test_the_form_line_never_contradicts_itself():
    term = lambda base, beats, testable=True: dict(base=base, beats_removal=beats, cv_testable=testable)
    sel = dict(kept=['capacity_gain', 'context_correction', 'stride_interaction'],
               dropped=['budget_correction', 'budget_offset'],
               terms={'capacity_gain': term(True, False), 'context_correction': term(True, False),
                      'stride_interaction': term(True, False), 'budget_correction': term(False, False),
                      'budget_offset': term(False, False, testable=False)})
    line = report.form_sentence(sel)
    assert line == ("Kept: the abstract's terms, which stay whatever their score (capacity_gain, context_correction, "
                    "stride_interaction; none of them beats its removal here). Dropped: budget_correction, not beating "
                    "its removal; no held-out test: budget_offset (one configuration alone pins it down).")
    sel['terms']['capacity_gain']['beats_removal'] = True
    sel['kept'].append('budget_correction')
    sel['dropped'].remove('budget_correction')
    sel['terms']['budget_correction']['beats_removal'] = True
    line = report.form_sentence(sel)
    assert ('of them, context_correction, stride_interaction do not beat their removal here), and budget_correction, '
            'beating its removal. Dropped: no held-out test: budget_offset') in line
    kept, dropped = line.split('. Dropped: ')
    assert all((t in kept) != (t in dropped) for t in sel['terms']), line     # each term kept or dropped, never both


def conclusion_inputs(deltas_ref, deltas_other, gain, null_cv, law_cv, seeds=None, gain_ci=None):
    """A fit's result and runs as report.conclusion reads them: X-MoD pairs at the reference configuration (one a
    seed, or seeds[i]) and elsewhere (stride 8)."""
    m = 'val_loss_causal'
    dense = dict(params_total=787_584, loss={m: 1.60})
    seeds = seeds or list(range(len(deltas_ref + deltas_other)))
    runs = [dict(variant='xmod', heldout=False, stride=4 if i < len(deltas_ref) else 8, T=128, tokens=2_000_000,
                 seed=seeds[i], partner=dense, loss={m: 1.60 + d}, config={})
            for i, d in enumerate(deltas_ref + deltas_other)]
    runs.append(dict(variant='dense', heldout=False, partner=None, loss={m: 1.60}, config={}))
    metrics = dict(seed_noise=dict(delta_std=0.01), cv=dict(delta_rmse=law_cv),
                   budget_forms={'constant Delta (null)': dict(cv_rmse=null_cv)})
    lo, hi = gain_ci or (None, None)
    rel = dict(coefficients={'capacity_gain': dict(value=gain, ci_low=lo, ci_high=hi)},
               active_terms=list(fit_law.BASE_TERMS), n_pairs=len(runs) - 1)
    result = dict(metric=m, relative=dict(s0=4, T0=128, D0=2_000_000, N0=787_584), inputs=dict(tuned=False),
                  by_metric={m: dict(metrics=metrics, relative=rel)})
    return result, runs


def test_summary_opens_with_its_conclusion_in_words():
    """X-MoD behind at the reference pair by the mean over seeds ± one standard error with its t interval, the mean
    over all pairs, the gain's sign read out, and whether any term beats a constant Delta left out; ahead and an
    interval that includes zero said so."""
    result, runs = conclusion_inputs([0.008, 0.012, 0.010], [0.02], gain=-0.009, null_cv=0.011, law_cv=0.015,
                                     gain_ci=(-0.012, -0.006))
    text = report.conclusion(result, runs)
    assert ('X-MoD is behind its FLOP-matched dense model by 0.0100 (Delta = +0.0100 ± 0.0012, 95% t(2) '
            '[+0.0050, +0.0150]') in text
    assert 'from 3 pairs in 3 seeds (one pair per seed), seeds 0, 1, 2' in text and 'includes zero' not in text
    assert 'Over all 4 fitted pairs Delta averages +0.0125' in text
    assert 'capacity_gain is -0.009 (95% bootstrap [-0.012, -0.006]): negative, so X-MoD is behind' in text
    assert 'No term beats a constant Delta held out' in text and 'RMSE 0.0110, the fitted law' in text
    result, runs = conclusion_inputs([-0.004, 0.001], [], gain=0.002, null_cv=0.02, law_cv=0.01)
    text = report.conclusion(result, runs)
    assert 'ahead of its FLOP-matched dense model by 0.0015 (Delta = -0.0015' in text
    assert 'the interval includes zero' in text and 'positive, so X-MoD is ahead' in text
    assert 'capacity_gain is +0.002 (no interval' in text
    assert 'predicts left-out configurations better than a constant Delta: RMSE 0.0100 against 0.0200' in text


def test_the_headline_says_how_much_evidence_it_rests_on():
    """One pair: its difference, no interval and no verdict. Pairs that share a seed (WSD branches reuse the seeds of
    the cosine runs) are one unit: the interval is over seed means, with the seeds' degrees of freedom."""
    result, runs = conclusion_inputs([0.0072], [], gain=-0.007, null_cv=0.011, law_cv=0.015)
    text = report.conclusion(result, runs)
    assert 'there is one pair (seed 0)' in text and 'no interval' in text and 'behind' not in text.split('.')[0]
    deltas, seeds = [0.010, 0.014, 0.006, 0.002, 0.008], [0, 1, 2, 0, 1]
    result, runs = conclusion_inputs(deltas, [], gain=-0.007, null_cv=0.011, law_cv=0.015, seeds=seeds)
    text = report.conclusion(result, runs)
    means = [np.mean([0.010, 0.002]), np.mean([0.014, 0.008]), 0.006]
    assert f'by {np.mean(means):.4f}' in text and '95% t(2)' in text
    assert 'from 5 pairs in 3 seeds (2 pair(s) share a seed with another' in text


def test_a_delta_vs_tokens_panel_of_one_point_says_why():
    """A configuration whose pairs share only their last evaluation is drawn as one point, and its panel says so."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    series = lambda *tokens: [dict(tokens=t, n=2, mean=0.01, se=0.002) for t in tokens]
    table = {'xmod a': dict(seeds=[0, 1], val_loss_causal=series(0, 5, 10), val_loss=series(0, 5, 10)),
             'xmod b': dict(seeds=[0, 1], val_loss_causal=series(0, 10), val_loss=series(0, 10))}
    fig, axes = plt.subplots(1, 2)
    fit_plots.plot_delta_vs_tokens(list(axes), table)
    titles = [ax.get_title() for ax in axes]
    plt.close(fig)
    assert 'one point' not in titles[0] and 'one point: the pairs share no other evaluation step' in titles[1]
