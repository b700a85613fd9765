"""
Tests for law/stats.py: Student's t quantiles and CDF against tabled values, the t interval of a mean over seeds,
and Holm's step-down adjustment.
"""

import numpy as np
import pytest

from law.stats import fmt_t, holm, t_cdf, t_interval, t_ppf


def test_t_quantiles_and_cdf_match_the_tables():
    """97.5% quantiles of t with 1, 2, 4 and 30 degrees of freedom (any statistics table), and the CDF inverts them."""
    for df, q in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (30, 2.0423)):
        assert t_ppf(0.975, df) == pytest.approx(q, abs=1e-4)
        assert t_cdf(q, df) == pytest.approx(0.975, abs=1e-5) and t_cdf(-q, df) == pytest.approx(0.025, abs=1e-5)
    assert t_cdf(0.0, 3) == 0.5


def test_t_interval_of_five_seeds_is_wider_than_two_standard_errors():
    """With 4 degrees of freedom a 95% interval is mean +- 2.776 SE; its p is two-sided; one value has none."""
    v = [0.010, 0.014, 0.006, 0.012, 0.008]
    t = t_interval(v)
    se = np.std(v, ddof=1) / np.sqrt(5)
    assert t['df'] == 4 and t['se'] == pytest.approx(se)
    assert t['hi'] - t['mean'] == pytest.approx(2.7764 * se, rel=1e-4) and t['lo'] > 0
    assert 0 < t['p'] < 0.05
    assert fmt_t(t).startswith('+0.0100 ± 0.0014, 95% t(4) [+0.0061, +0.0139]')
    one = t_interval([0.3])
    assert one['se'] is None and one['p'] is None and fmt_t(one) == '+0.3000'


def test_holm_multiplies_the_smallest_p_by_the_number_of_tests_and_keeps_the_order():
    """Holm: sorted ps times m, m - 1, ...; monotone (a larger p is never adjusted below a smaller one); capped at 1;
    None passes through."""
    assert holm([0.01, 0.04, 0.03, None, 0.5]) == pytest.approx([0.04, 0.09, 0.09, None, 0.5], abs=1e-12)
    assert holm([0.2, 0.6]) == [0.4, 0.6] and holm([0.9, 0.8]) == [1.0, 1.0]
