#!/usr/bin/env python3
"""Negative tests of grafana_check.py: the real dashboard passes, and each mutation of a copy (in a
temporary directory) is rejected with a message naming the problem. SIFT_PROMTOOL (environment)
is the promtool binary. Run: python3 tests/deploy/grafana_check_test.py
"""

import copy
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grafana_check  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAFANA = os.path.join(ROOT, "deploy", "grafana")
PROMTOOL = os.environ.get("SIFT_PROMTOOL", shutil.which("promtool") or "")


def panel_by_title(dash, title):
    for p in grafana_check.all_panels(dash):
        if p.get("title") == title:
            return p
    raise KeyError(title)


class GrafanaCheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.grafana = os.path.join(self.tmp.name, "grafana")
        shutil.copytree(GRAFANA, self.grafana)
        self.path = os.path.join(self.grafana, "dashboards", "sift.json")
        self.dash = json.loads(grafana_check.read_text(self.path))

    def tearDown(self):
        self.tmp.cleanup()

    def run_check(self, dash=None, extra=()):
        if dash is not None:
            grafana_check.write_text(self.path, json.dumps(dash))
        argv = ["--dashboard", self.path, "--promtool", PROMTOOL, *extra]
        problems, _ = grafana_check.check(grafana_check.parse_args(argv))
        return problems.items

    def assert_rejected(self, dash, needle, extra=()):
        problems = self.run_check(dash, extra)
        self.assertTrue(any(needle in p for p in problems),
                        f"expected a problem containing {needle!r}, got {problems}")

    def test_real_dashboard_passes(self):
        self.assertEqual(self.run_check(), [])

    def test_broken_expr(self):
        d = copy.deepcopy(self.dash)
        p = panel_by_title(d, "Rows per table")
        p["targets"][0]["expr"] = "sum by (table) (sift_ps_rows"
        self.assert_rejected(d, "unclosed left parenthesis")
        self.assert_rejected(d, "'Rows per table' target A: promtool")

    def test_duplicate_panel_id(self):
        d = copy.deepcopy(self.dash)
        panel_by_title(d, "Rows per table")["id"] = panel_by_title(d, "Memory per table")["id"]
        self.assert_rejected(d, "duplicate panel id")

    def test_unknown_metric(self):
        d = copy.deepcopy(self.dash)
        p = panel_by_title(d, "Rows per table")
        p["targets"][0]["expr"] = "sum by (table) (sift_ps_rowz)"
        self.assert_rejected(d, "metric 'sift_ps_rowz' is not exported by sift")

    def test_unknown_variable(self):
        d = copy.deepcopy(self.dash)
        p = panel_by_title(d, "Epoch")
        p["targets"][0]["expr"] = 'sift_job_epoch{job_id=~"$jobid"}'
        self.assert_rejected(d, "unknown variable $jobid")

    def test_overlap_and_outside_grid(self):
        d = copy.deepcopy(self.dash)
        panel_by_title(d, "Memory per table")["gridPos"] = dict(
            panel_by_title(d, "Rows per table")["gridPos"])
        self.assert_rejected(d, "overlaps panel")
        d = copy.deepcopy(self.dash)
        panel_by_title(d, "Memory per table")["gridPos"]["w"] = 9
        self.assert_rejected(d, "outside the 24-column grid")

    def test_missing_unit_refid_targets(self):
        d = copy.deepcopy(self.dash)
        del panel_by_title(d, "Epoch")["fieldConfig"]["defaults"]["unit"]
        self.assert_rejected(d, "unit is not set")
        d = copy.deepcopy(self.dash)
        panel_by_title(d, "Test AUC")["targets"][0]["refId"] = ""
        self.assert_rejected(d, "without refId")
        d = copy.deepcopy(self.dash)
        panel_by_title(d, "Test AUC")["targets"] = []
        self.assert_rejected(d, "no targets")

    def test_hard_coded_datasource(self):
        d = copy.deepcopy(self.dash)
        panel_by_title(d, "Epoch")["datasource"] = {"type": "prometheus", "uid": "abc123"}
        self.assert_rejected(d, "datasource must be")

    def test_top_level_and_variables(self):
        d = copy.deepcopy(self.dash)
        d["id"] = 7
        d["uid"] = "x"
        self.assert_rejected(d, "id must be null")
        self.assert_rejected(d, "uid must be")
        d = copy.deepcopy(self.dash)
        d["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "rank"]
        self.assert_rejected(d, "variable 'rank' is missing")
        d = copy.deepcopy(self.dash)
        for v in d["templating"]["list"]:
            if v["name"] == "job_id":
                v["query"]["query"] = "label_values(sift_worker_samples_total, job_id)"
        self.assert_rejected(d, "a sift_job_* series")

    def test_scraped_names(self):
        names = os.path.join(self.tmp.name, "names.txt")
        grafana_check.write_text(names, "sift_ps_rows\nsift_job_epoch\n")
        self.assert_rejected(None, "is not in the scraped names", ["--exported-names", names])

    def test_provisioning_interval(self):
        ds = os.path.join(self.grafana, "provisioning", "datasources", "prometheus.yaml")
        text = grafana_check.read_text(ds).replace("timeInterval: 15s", "timeInterval: 30s")
        grafana_check.write_text(ds, text)
        self.assert_rejected(None, "differs from prometheus.yml's scrape_interval")

    def test_metric_names_in(self):
        f = grafana_check.metric_names_in
        self.assertEqual(f('sum by (le, shard) (rate(a_bucket{x="b c",y=~"d"}[1m]))'), {"a_bucket"})
        self.assertEqual(f("x and on (instance) y{rank=~\".*\"} / on () group_left sum(z)"),
                         {"x", "y", "z"})
        self.assertEqual(f("histogram_quantile(0.99, sum(rate(h[5m] offset 1h))) > bool 1e3"),
                         {"h"})
        self.assertEqual(f("count by (version) (sift_build_info) == +Inf"), {"sift_build_info"})


if __name__ == "__main__":
    if not PROMTOOL:
        print("promtool not found (set SIFT_PROMTOOL)", file=sys.stderr)
        sys.exit(1)
    unittest.main(verbosity=2)
