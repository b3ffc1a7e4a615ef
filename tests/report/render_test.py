#!/usr/bin/env python3
"""The report renderer's statistics (cli/report_render.py) against independent computations:
scipy's ks_2samp on fixed inputs, a direct threshold sweep for ROC points, the rank AUC with ties,
Python's statistics module for mean and std. Run by ctest with Debian's python3."""
import itertools
import os
import statistics
import sys
import unittest

try:
    import numpy as np
    from scipy import stats
    import matplotlib  # noqa: F401  (the renderer needs it)
except ImportError as e:  # ctest reports a skip (SKIP_RETURN_CODE), naming what is missing
    print(f"skipped: {e}: install python3-numpy python3-scipy python3-matplotlib (make deps)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cli"))
import report_render as rr  # noqa: E402


def roc_by_sweep(scores, labels):
    """(fpr, tpr) at every threshold t (predict positive when score >= t), t over the distinct
    scores from high to low, plus (0, 0): the definition, no sorting tricks."""
    pos = sum(1 for y in labels if y > 0.5)
    neg = len(labels) - pos
    pts = [(0.0, 0.0)]
    for t in sorted(set(scores), reverse=True):
        tp = sum(1 for s, y in zip(scores, labels) if s >= t and y > 0.5)
        fp = sum(1 for s, y in zip(scores, labels) if s >= t and y <= 0.5)
        pts.append((fp / neg, tp / pos))
    return pts


def rank_auc(scores, labels):
    """Mann-Whitney: P(score_pos > score_neg) + 0.5 P(equal), over all pairs."""
    pos = [s for s, y in zip(scores, labels) if y > 0.5]
    neg = [s for s, y in zip(scores, labels) if y <= 0.5]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


class RenderStatsTest(unittest.TestCase):
    def test_ks_equals_scipy_on_fixed_inputs(self):
        cases = [
            ([0.8337, 0.8341, 0.8329], [0.8331, 0.8335, 0.8338]),
            ([0.80, 0.81, 0.82, 0.83, 0.84], [0.90, 0.91, 0.92]),
            ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
            (list(np.linspace(0.8, 0.9, 10)), list(np.linspace(0.85, 0.95, 10))),
        ]
        for a, b in cases:
            expected = stats.ks_2samp(a, b)
            d, p = rr.ks_test(a, b)
            self.assertEqual(d, float(expected.statistic))
            self.assertEqual(p, float(expected.pvalue))
        # Disjoint samples of 5 and 3: D = 1 and the exact two-sided p-value 2 / C(8, 3).
        d, p = rr.ks_test([0.80, 0.81, 0.82, 0.83, 0.84], [0.90, 0.91, 0.92])
        self.assertEqual(d, 1.0)
        self.assertAlmostEqual(p, 2.0 / 56.0, places=12)

    def test_mean_and_sample_std(self):
        v = [0.8337, 0.8341, 0.8329, 0.8350]
        m, s = rr.mean_std(v)
        self.assertAlmostEqual(m, statistics.mean(v), places=15)
        self.assertAlmostEqual(s, statistics.stdev(v), places=15)
        self.assertEqual(rr.mean_std([0.5]), (0.5, 0.0))

    def test_roc_points_equal_a_threshold_sweep_with_ties(self):
        rng = np.random.default_rng(7)
        for n in (5, 40, 300):
            # Few distinct values: many ties.
            scores = list(np.round(rng.normal(size=n), 1))
            labels = list((rng.uniform(size=n) < 0.4).astype(float))
            labels[0], labels[1] = 1.0, 0.0
            fpr, tpr = rr.roc_points(scores, labels)
            sweep = roc_by_sweep(scores, labels)
            self.assertEqual(len(fpr), len(sweep))
            for (x, y), (ex, ey) in zip(zip(fpr, tpr), sweep):
                self.assertAlmostEqual(x, ex, places=12)
                self.assertAlmostEqual(y, ey, places=12)
            self.assertAlmostEqual(rr.trapezoid_auc(fpr, tpr), rank_auc(scores, labels), places=12)

    def test_table_cells_escape_pipes_and_line_breaks(self):
        self.assertEqual(rr.table(["a"], [["x|y\nz"]]).splitlines()[2], "| x\\|y z |")

    def test_precision_pairs_and_groups(self):
        configs = [
            {"index": 0, "axes": {"model": "sim", "precision": "fp32"}},
            {"index": 1, "axes": {"model": "sim", "precision": "bf16"}},
            {"index": 2, "axes": {"model": "din", "precision": "bf16"}},
        ]
        pairs = rr.precision_pairs(configs)
        self.assertEqual([(a["index"], b["index"]) for a, b in pairs], [(0, 1)])


if __name__ == "__main__":
    unittest.main()
