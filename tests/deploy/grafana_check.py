#!/usr/bin/env python3
"""Offline check of deploy/grafana: the dashboard JSON, its PromQL, its metric names, provisioning.

Structure: top-level fields (stable uid, id null, schemaVersion), the template variables
(`datasource`, `job_id`, `rank`), every panel (unique id, gridPos inside the 24-column grid and
not overlapping another panel, a unit, targets with unique refIds, the `${datasource}` variable).
PromQL: every expr (and every label_values() selector of a variable) after variable substitution
($__rate_interval -> 1m, $job_id -> job-1, $rank -> .*, ...) is written as a recording rule and
checked by `promtool check rules`. Metric names: every name a query uses must be one sift exports
(found in the C++ sources under server/, worker/, common/; with --exported-names also in that
list, e.g. the names a real Prometheus scraped) or one a recording rule of
deploy/prometheus/rules.yml defines. Provisioning: the datasource's jsonData.timeInterval equals
prometheus.yml's scrape interval and the dashboard provider reads files.

Exit status 0 when clean, 1 with one line per problem on stderr. --emit-queries FILE writes the
substituted queries as JSON ([{panel_id, title, ref_id, expr}]) for tests that run them.
Needs Python 3 and PyYAML (Debian python3-yaml, a dependency of yamllint; also in .venv).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

GRID_COLUMNS = 24
# Grafana's global variables, as a 15 s scrape interval and a 1 h range give them.
BUILTIN_VALUES = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
# Values of the dashboard's own variables unless --var overrides them ("All" = allValue .*).
DEFAULT_VALUES = {"job_id": "job-1", "rank": ".*", "datasource": "prometheus"}
REQUIRED_VARIABLES = ("datasource", "job_id", "rank")
DATASOURCE_REF = "${datasource}"
UID_RE = re.compile(r"^[A-Za-z0-9_-]{8,40}$")
VAR_RE = re.compile(r"\$\{(\w+)(?::[\w]+)?\}|\[\[(\w+)(?::[\w]+)?\]\]|\$(\w+)")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

# PromQL words that are not metric names: keywords, aggregation operators (which may be followed
# by `by (...)` instead of `(`), modifiers, literals.
PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "offset", "bool", "atan2", "inf", "nan", "sum", "min", "max", "avg", "group", "stddev",
    "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
}


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class Problems:
    """Collects problems; each names the file and the place."""

    def __init__(self):
        self.items = []

    def add(self, where, what):
        self.items.append(f"{where}: {what}")


# ---- metric names ---------------------------------------------------------------------------

def source_metric_names(source_dir):
    """Names sift exports, found in the C++ sources: string literals sift_*/grpc_server_*, with
    _bucket/_sum/_count for the ones registered by BuildHistogram()."""
    names, histograms = set(), set()
    name_re = re.compile(r'"((?:sift|grpc_server)_[a-z0-9_]+)"')
    hist_re = re.compile(r'BuildHistogram\(\)\s*\.Name\("([a-z0-9_]+)"\)')
    for sub in ("server", "worker", "common"):
        for root, _, files in os.walk(os.path.join(source_dir, sub)):
            for f in files:
                if not f.endswith((".cc", ".h")):
                    continue
                text = read_text(os.path.join(root, f))
                names.update(name_re.findall(text))
                histograms.update(hist_re.findall(text))
    # Literals that are not metric names (data source kinds, ...) are harmless here: a query that
    # used one would still fail against a real scrape (--exported-names).
    for h in histograms:
        names.update(h + s for s in HISTOGRAM_SUFFIXES)
    return names, histograms


def recording_rule_names(rules_path):
    doc = yaml.safe_load(read_text(rules_path))
    out = {}
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            if "record" in rule:
                out[rule["record"]] = rule["expr"]
    return out


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def metric_names_in(expr):
    """Metric names an expr selects: identifiers outside {...} and [...], not a function or
    aggregation (followed by '('), not a keyword, not inside by/without/on/ignoring/group_*(...)."""
    text = strip_strings(expr)
    names = set()
    i, n = 0, len(text)
    depth_brace = depth_bracket = 0
    skip_paren = False
    while i < n:
        c = text[i]
        if c == "{":
            depth_brace += 1
        elif c == "}":
            depth_brace -= 1
        elif c == "[":
            depth_bracket += 1
        elif c == "]":
            depth_bracket -= 1
        elif skip_paren and c == ")":
            skip_paren = False
        elif depth_brace == 0 and depth_bracket == 0 and not skip_paren and (
                c.isalpha() or c in "_:"):
            m = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*").match(text, i)
            word = m.group(0)
            j = m.end()
            while j < n and text[j].isspace():
                j += 1
            follows_paren = j < n and text[j] == "("
            # A number like 1e3 or a duration like 5m starts with a digit: never reached here.
            if word.lower() in PROMQL_KEYWORDS:
                if word in ("by", "without", "on", "ignoring", "group_left", "group_right") \
                        and follows_paren:
                    skip_paren = True
                    i = j + 1
                    continue
            elif not follows_paren:
                names.add(word)
            i = m.end()
            continue
        elif c.isdigit() or c == ".":
            m = re.compile(r"[0-9.]+(?:[eE][+-]?[0-9]+)?[a-zA-Z]*").match(text, i)
            i = m.end()
            continue
        i += 1
    return names


# ---- variables ------------------------------------------------------------------------------

def substitute(expr, values, where, problems):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in values:
            return values[name]
        problems.add(where, f"unknown variable ${name} in {expr!r}")
        return m.group(0)
    return VAR_RE.sub(repl, expr)


def variable_query(var):
    q = var.get("query")
    if isinstance(q, dict):
        q = q.get("query")
    return q if isinstance(q, str) else None


def check_variables(dash, where, problems):
    variables = dash.get("templating", {}).get("list")
    if not isinstance(variables, list):
        problems.add(where, "templating.list is missing")
        return []
    seen = set()
    for v in variables:
        name = v.get("name")
        vw = f"{where}: variable {name!r}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name):
            problems.add(vw, "name is not an identifier")
            continue
        if name in seen:
            problems.add(vw, "duplicate variable name")
        seen.add(name)
        if v.get("type") == "datasource":
            if v.get("query") != "prometheus":
                problems.add(vw, "a datasource variable must have query 'prometheus'")
            continue
        if v.get("type") != "query":
            problems.add(vw, f"type {v.get('type')!r}: expected 'query' or 'datasource'")
            continue
        if v.get("datasource") != {"type": "prometheus", "uid": DATASOURCE_REF}:
            problems.add(vw, f"datasource must be {{type: prometheus, uid: {DATASOURCE_REF}}}")
        q = variable_query(v)
        if not q or not re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q.strip()):
            problems.add(vw, f"query {q!r} is not label_values(SELECTOR, LABEL)")
        if v.get("includeAll") and not v.get("allValue"):
            problems.add(vw, "includeAll without an allValue (All would expand to a value list)")
        if v.get("refresh") not in (1, 2):
            problems.add(vw, "refresh must be 1 (on load) or 2 (on time range change)")
    for name in REQUIRED_VARIABLES:
        if name not in seen:
            problems.add(where, f"variable {name!r} is missing")
    job = next((v for v in variables if v.get("name") == "job_id"), None)
    if job is not None:
        q = variable_query(job) or ""
        if not re.match(r"label_values\(sift_job_\w+", q):
            problems.add(f"{where}: variable 'job_id'", "must be label_values of a sift_job_* series")
    return variables


# ---- panels ---------------------------------------------------------------------------------

def all_panels(dash):
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []) if p.get("type") == "row" else [])
    return out


def check_panels(dash, where, problems):
    panels = all_panels(dash)
    if not panels:
        problems.add(where, "no panels")
    ids = {}
    cells = {}
    for p in panels:
        pid = p.get("id")
        pw = f"{where}: panel {pid} {p.get('title')!r}"
        if not isinstance(pid, int) or isinstance(pid, bool):
            problems.add(pw, "id is not an integer")
        elif pid in ids:
            problems.add(pw, f"duplicate panel id (also {ids[pid]!r})")
        else:
            ids[pid] = p.get("title")
        if not p.get("title"):
            problems.add(pw, "no title")
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) and not isinstance(g.get(k), bool)
                   for k in ("x", "y", "w", "h")):
            problems.add(pw, f"gridPos {g} needs integer x, y, w, h")
        else:
            if g["x"] < 0 or g["y"] < 0 or g["w"] < 1 or g["h"] < 1 or \
                    g["x"] + g["w"] > GRID_COLUMNS:
                problems.add(pw, f"gridPos {g} is outside the {GRID_COLUMNS}-column grid")
            for x in range(max(g["x"], 0), min(g["x"] + g["w"], GRID_COLUMNS)):
                for y in range(g["y"], g["y"] + g["h"]):
                    if (x, y) in cells:
                        problems.add(pw, f"gridPos overlaps panel {cells[(x, y)]} at x={x} y={y}")
                        break
                    cells[(x, y)] = pid
                else:
                    continue
                break
        if p.get("type") == "row":
            if p.get("targets"):
                problems.add(pw, "a row has no targets")
            if g.get("w") != GRID_COLUMNS or g.get("h") != 1:
                problems.add(pw, "a row spans the whole width with height 1")
            continue
        if not p.get("type"):
            problems.add(pw, "no type")
        if p.get("datasource") != {"type": "prometheus", "uid": DATASOURCE_REF}:
            problems.add(pw, f"datasource must be {{type: prometheus, uid: {DATASOURCE_REF}}}")
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if not isinstance(unit, str) or not unit:
            problems.add(pw, "fieldConfig.defaults.unit is not set")
        targets = p.get("targets")
        if not isinstance(targets, list) or not targets:
            problems.add(pw, "no targets")
            continue
        refs = set()
        for t in targets:
            ref = t.get("refId")
            if not isinstance(ref, str) or not ref:
                problems.add(pw, "a target without refId")
            elif ref in refs:
                problems.add(pw, f"duplicate refId {ref}")
            refs.add(ref)
            if not isinstance(t.get("expr"), str) or not t["expr"].strip():
                problems.add(pw, f"target {ref}: empty expr")
            if "datasource" in t and t["datasource"] != p.get("datasource"):
                problems.add(pw, f"target {ref}: datasource differs from the panel's")
    return panels


def queries(dash, variables, values, where, problems):
    """[(panel_id, title, ref_id, substituted expr)] of every panel target and variable query."""
    out = []
    for p in all_panels(dash):
        for t in p.get("targets", []) or []:
            if isinstance(t.get("expr"), str) and t["expr"].strip():
                pw = f"{where}: panel {p.get('id')} {p.get('title')!r} target {t.get('refId')}"
                out.append((p.get("id"), p.get("title"), t.get("refId"),
                            substitute(t["expr"], values, pw, problems)))
    for v in variables:
        q = variable_query(v) or ""
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q.strip())
        if m:
            vw = f"{where}: variable {v.get('name')!r}"
            out.append((None, f"variable {v.get('name')}", "query",
                        substitute(m.group(1), values, vw, problems)))
    return out


def promtool_check(promtool, exprs, where, problems):
    """Writes every expr as a recording rule; `promtool check rules` parses them."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dashboard_rules.yml")
        lines = ["groups:", "  - name: dashboard", "    rules:"]
        for i, (_, _, _, expr) in enumerate(exprs):
            lines.append(f"      - record: grafana:query_{i}")
            lines.append(f"        expr: {json.dumps(expr)}")
        write_text(path, "\n".join(lines) + "\n")
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
        if r.returncode != 0:
            report = (r.stdout + r.stderr).strip()
            for line in report.splitlines():
                m = re.search(r"rule (\d+),", line)
                if m and 1 <= int(m.group(1)) <= len(exprs):
                    pid, title, ref, expr = exprs[int(m.group(1)) - 1]
                    problems.add(f"{where}: panel {pid} {title!r} target {ref}",
                                 f"promtool: {line.split(': ', 2)[-1]} in {expr!r}")
            if not any("promtool" in p for p in problems.items):
                problems.add(where, f"promtool check rules failed: {report}")


# ---- provisioning ---------------------------------------------------------------------------

def scrape_interval(prometheus_yml):
    doc = yaml.safe_load(read_text(prometheus_yml))
    return doc.get("global", {}).get("scrape_interval", "1m")


def check_provisioning(grafana_dir, prometheus_dir, problems):
    ds_path = os.path.join(grafana_dir, "provisioning", "datasources", "prometheus.yaml")
    db_path = os.path.join(grafana_dir, "provisioning", "dashboards", "sift.yaml")
    try:
        ds = yaml.safe_load(read_text(ds_path))
        db = yaml.safe_load(read_text(db_path))
    except (OSError, yaml.YAMLError) as e:
        problems.add(grafana_dir, f"provisioning: {e}")
        return
    interval = scrape_interval(os.path.join(prometheus_dir, "prometheus.yml"))
    if ds.get("apiVersion") != 1:
        problems.add(ds_path, "apiVersion must be 1")
    sources = [d for d in ds.get("datasources", []) if d.get("type") == "prometheus"]
    if len(sources) != 1:
        problems.add(ds_path, "expected exactly one datasource of type prometheus")
    for d in sources:
        if d.get("jsonData", {}).get("timeInterval") != interval:
            problems.add(ds_path, f"jsonData.timeInterval {d.get('jsonData', {}).get('timeInterval')!r}"
                         f" differs from prometheus.yml's scrape_interval {interval!r}")
        for key in ("name", "uid", "url", "access"):
            if not d.get(key):
                problems.add(ds_path, f"datasource {key} is not set")
    if db.get("apiVersion") != 1:
        problems.add(db_path, "apiVersion must be 1")
    providers = db.get("providers", [])
    if not providers:
        problems.add(db_path, "no providers")
    for p in providers:
        if p.get("type") != "file" or not p.get("options", {}).get("path") or not p.get("name"):
            problems.add(db_path, f"provider {p.get('name')!r} needs name, type: file, options.path")


# ---- main -----------------------------------------------------------------------------------

def check(args):
    problems = Problems()
    where = args.dashboard
    try:
        dash = json.loads(read_text(args.dashboard))
    except (OSError, ValueError) as e:
        problems.add(where, f"not valid JSON: {e}")
        return problems, []
    if not isinstance(dash.get("uid"), str) or not UID_RE.match(dash["uid"]):
        problems.add(where, "uid must be 8-40 characters [A-Za-z0-9_-] (stable: URL, provisioning)")
    if "id" not in dash or dash["id"] is not None:
        problems.add(where, "id must be null in a file that is provisioned or imported")
    if not isinstance(dash.get("schemaVersion"), int):
        problems.add(where, "schemaVersion is not an integer")
    if not dash.get("title"):
        problems.add(where, "no title")
    variables = check_variables(dash, where, problems)
    check_panels(dash, where, problems)
    values = dict(BUILTIN_VALUES)
    values.update(DEFAULT_VALUES)
    for kv in args.var or []:
        k, _, v = kv.partition("=")
        values[k] = v
    values = {k: v for k, v in values.items()
              if k in BUILTIN_VALUES or any(x.get("name") == k for x in variables)}
    exprs = queries(dash, variables, values, where, problems)
    if args.promtool:
        promtool_check(args.promtool, exprs, where, problems)

    rules = recording_rule_names(os.path.join(args.prometheus_dir, "rules.yml"))
    src_names, histograms = source_metric_names(args.sources)
    if len(histograms) < 1 or not any(n.startswith("sift_worker_") for n in src_names):
        problems.add(args.sources, f"found only {sorted(src_names)} in the C++ sources: "
                     "the metric name scan is broken")
    exported = None
    if args.exported_names:
        exported = {l.strip() for l in read_text(args.exported_names).splitlines() if l.strip()}
    for pid, title, ref, expr in exprs:
        for name in sorted(metric_names_in(expr)):
            pw = f"{where}: panel {pid} {title!r} target {ref}"
            if name in rules:
                continue
            if name not in src_names:
                problems.add(pw, f"metric {name!r} is not exported by sift (C++ sources) "
                             "nor defined by a recording rule")
            elif exported is not None and name not in exported:
                problems.add(pw, f"metric {name!r} is not in the scraped names "
                             f"({args.exported_names})")
    # The recording rules the dashboard relies on must read series sift exports.
    for record, expr in rules.items():
        for name in sorted(metric_names_in(expr)):
            if name not in src_names and name not in rules:
                problems.add(f"rules.yml: {record}", f"metric {name!r} is not exported by sift")
    check_provisioning(args.grafana_dir, args.prometheus_dir, problems)
    return problems, exprs


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dashboard",
                    default=os.path.join(root, "deploy", "grafana", "dashboards", "sift.json"))
    ap.add_argument("--grafana-dir", default=None, help="default: the dashboard's ../")
    ap.add_argument("--prometheus-dir", default=os.path.join(root, "deploy", "prometheus"))
    ap.add_argument("--sources", default=root, help="repository root (server/, worker/, common/)")
    ap.add_argument("--promtool", default=None, help="promtool binary (skip the PromQL check if unset)")
    ap.add_argument("--exported-names", default=None,
                    help="file with the metric names a real scrape returned, one per line")
    ap.add_argument("--var", action="append", help="NAME=VALUE for a dashboard variable")
    ap.add_argument("--emit-queries", default=None, help="write the substituted queries (JSON)")
    args = ap.parse_args(argv)
    if args.grafana_dir is None:
        args.grafana_dir = os.path.dirname(os.path.dirname(os.path.abspath(args.dashboard)))
    return args


def main(argv):
    args = parse_args(argv)
    problems, exprs = check(args)
    if args.emit_queries:
        out = [{"panel_id": p, "title": t, "ref_id": r, "expr": e} for p, t, r, e in exprs]
        with open(args.emit_queries, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    for p in problems.items:
        print(p, file=sys.stderr)
    if problems.items:
        print(f"FAILED: {len(problems.items)} problem(s)", file=sys.stderr)
        return 1
    names = sorted({n for _, _, _, e in exprs for n in metric_names_in(e)})
    print(f"OK: {args.dashboard}: {len(exprs)} queries, metrics: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
