#!/usr/bin/env python3
"""The renderer of `sift report`: DIR/report.json (written by sift report) becomes DIR/report.md
and the plots DIR/plots/*.png, in the reference's order and naming (docs/report.md).

    python3 render_report.py DIR

sift embeds this file and writes it to DIR/render_report.py on every report, so a report can be
re-rendered from its directory alone. Statistics: numpy and scipy.stats.ks_2samp; plots: matplotlib
(Agg). The pure functions (mean_std, ks_test, roc_points, trapezoid_auc, the grouping helpers) are
tested in tests/report/render_test.py.
"""
import json
import math
import os
import sys

import numpy as np
from scipy import stats

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402

FP32 = "fp32"


# ---- statistics ----

def mean_std(values):
    """Mean and sample standard deviation (n - 1 in the denominator; 0 for one value)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def ks_test(a, b):
    """Two-sample Kolmogorov-Smirnov test (scipy's ks_2samp, two-sided): (statistic, p-value)."""
    r = stats.ks_2samp(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return float(r.statistic), float(r.pvalue)


def roc_points(scores, labels):
    """The ROC curve of `scores` against `labels` (> 0.5 positive): (fpr, tpr) arrays from (0, 0)
    to (1, 1), one point per distinct score (tied scores move both rates at once)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64) > 0.5
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    tp = np.cumsum(y)
    fp = np.cumsum(~y)
    # The last index of each group of equal scores.
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1] if s.size else np.array([], dtype=int)
    pos, neg = max(int(y.sum()), 1), max(int((~y).sum()), 1)
    fpr = np.r_[0.0, fp[last] / neg]
    tpr = np.r_[0.0, tp[last] / pos]
    return fpr, tpr


def trapezoid_auc(fpr, tpr):
    """Area under the curve by the trapezoid rule: with roc_points' tie groups this equals the
    rank AUC with average ranks for ties (sift's exact AUC)."""
    fpr = np.asarray(fpr, dtype=np.float64)
    tpr = np.asarray(tpr, dtype=np.float64)
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0))


# ---- grouping ----

def group_without(configs, axis):
    """Configurations grouped by every axis but `axis`: {key: {value of axis: config}}."""
    groups = {}
    for c in configs:
        key = tuple((a, v) for a, v in c["axes"].items() if a != axis)
        groups.setdefault(key, {})[c["axes"].get(axis)] = c
    return groups


def precision_pairs(configs):
    """(fp32 configuration, other configuration) for every pair that differs only in precision."""
    pairs = []
    for _, by_precision in group_without(configs, "precision").items():
        base = by_precision.get(FP32)
        if base is None:
            continue
        for p, c in by_precision.items():
            if p != FP32:
                pairs.append((base, c))
    return pairs


# ---- plotting ----

def style(i, n):
    """Colour and line style of series i of n: distinct for up to 20 series (tab10, then tab20),
    then the line style changes too."""
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    styles = ["-", "--", ":", "-."]
    return cmap(i % cmap.N), styles[(i // cmap.N) % len(styles)]


# ---- formatting ----

def fmt(x, digits=4):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}f}"


def fmt_int(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:,.0f}"


def fmt_p(p):
    return f"{p:.4g}"


def cell(value):
    """A table cell: pipes escaped, line breaks as spaces (messages come from logs)."""
    return " ".join(str(value).split("\n")).replace("|", "\\|")


def table(header, rows):
    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class Report:
    def __init__(self, out_dir):
        self.dir = out_dir
        with open(os.path.join(out_dir, "report.json")) as f:
            self.r = json.load(f)
        self.axes = self.r["axes"]
        self.configs = self.r["configs"]
        self.runs = self.r["runs"]
        self.plots = os.path.join(out_dir, "plots")
        os.makedirs(self.plots, exist_ok=True)

    def completed(self, config):
        """The completed runs of `config` (with a finite test AUC: sift report fails the others)."""
        return [r for r in self.runs if r.get("config") == config["index"]
                and r.get("state") == "completed" and finite(r.get("test_auc"))]

    def all_runs(self, config):
        return [r for r in self.runs if r.get("config") == config["index"]]

    def aucs(self, config):
        return [r["test_auc"] for r in self.completed(config)]

    def axis_cells(self, config, skip=()):
        return [config["axes"][a] for a in self.axes if a not in skip]

    def short_label(self, config, skip=()):
        return ", ".join(f"{a}={config['axes'][a]}" for a in self.axes if a not in skip)

    # ---- sections ----

    def header(self):
        m = self.r["machine"]
        gpus = ", ".join(m.get("gpus") or []) or "none"
        lines = [
            f"# {self.r['name']}",
            "",
            f"Generated by `sift report` on {m['date']} from `{self.r['matrix']}`: "
            f"{len(self.configs)} configuration(s), {len(self.runs)} run(s) "
            f"({self.r['launcher']}).",
            "",
            table(["machine", ""], [
                ["CPU", f"{m['cpu_model']} ({m['cpus']} CPUs)"],
                ["ISA", f"sift kernels {m['cpu_kernels_isa']}; oneDNN {m['onednn']}; "
                        f"bf16 {m['bf16']}; features {m['cpu_features']}"],
                ["GPU", gpus],
                ["sift", f"{m['sift_version']}, commit `{m['sift_commit']}`, {m['build_type']}"],
                ["host", m["hostname"]],
            ]),
        ]
        other = sorted({r["sift_commit"] for r in self.runs
                        if r.get("sift_commit") and r["sift_commit"] != m["sift_commit"]})
        if other:
            lines += ["", f"**Note**: some runs were made by another build of sift (commit "
                          f"{', '.join('`' + c + '`' for c in other)}), reused because their "
                          "specs are the same; delete their directories under `runs/` to redo "
                          "them with this build."]
        return "\n".join(lines)

    def settings(self):
        """Every configuration's settings as its runs used them (sift report resolves them)."""
        keys = ["workers", "servers", "backend", "precision", "threads_per_worker", "batch_size",
                "epochs", "recipe", "lr", "staleness", "sparse_update", "dataset"]
        rows = []
        for c in self.configs:
            s = c.get("settings") or {}
            rows.append([str(c["index"] + 1)] + [cell(s.get(k, "—")) for k in keys])
        return "\n".join([
            "## Settings",
            "",
            "Each configuration as it ran: the matrix's axes applied to its base job, with the "
            "job spec's defaults for what neither sets (precision `auto` shown as what it "
            "resolves to).",
            "",
            table(["config"] + [k.replace("_", " ") for k in keys], rows),
        ])

    def accuracy(self):
        rows = []
        for c in self.configs:
            done = self.completed(c)
            aucs = [r["test_auc"] for r in done]
            mean, std = mean_std(aucs)
            oracle = [r["test_auc"] / r["oracle_test_auc"] for r in done
                      if finite(r.get("oracle_test_auc")) and r["oracle_test_auc"] > 0]
            ttt = [r["time_to_train"] for r in done if finite(r.get("time_to_train"))]
            rows.append(self.axis_cells(c) + [
                f"{len(done)}/{len(self.all_runs(c))}",
                f"{fmt(mean)} ± {fmt(std)}",
                fmt(min(aucs)) if aucs else "—",
                fmt(max(aucs)) if aucs else "—",
                fmt(mean_std(oracle)[0]) if oracle else "—",
                fmt(mean_std(ttt)[0], 1) if ttt else "—",
            ])
        return "\n".join([
            "## Training accuracy",
            "",
            "Test AUC of the final model (exact, on the full test split) over the runs of each "
            "configuration; ± is the sample standard deviation (n − 1). Time to train: the DLLL "
            "`time_to_train` (training steps, evaluation excluded), mean over runs.",
            "",
            table(self.axes + ["runs", "test AUC mean ± std", "min", "max", "/ oracle",
                               "time to train (s)"], rows),
        ])

    def stability(self):
        fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(self.configs) + 2), 4.8))
        rng = np.random.default_rng(0)
        labels = []
        for i, c in enumerate(self.configs):
            aucs = self.aucs(c)
            labels.append(self.short_label(c).replace(", ", "\n"))
            if not aucs:
                continue
            x = i + rng.uniform(-0.12, 0.12, size=len(aucs))
            ax.scatter(x, aucs, s=36, alpha=0.8, zorder=3, color=style(i, len(self.configs))[0])
            mean = float(np.mean(aucs))
            ax.hlines(mean, i - 0.3, i + 0.3, colors="black", linewidth=1.5, zorder=4)
        ax.set_xticks(range(len(self.configs)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_xlabel("configuration")
        ax.set_ylabel("test AUC")
        ax.legend(handles=[
            plt.Line2D([], [], marker="o", linestyle="none", color="grey", label="one run"),
            plt.Line2D([], [], color="black", linewidth=1.5, label="mean of the runs"),
        ], fontsize=8, loc="best")
        ax.set_title("Training stability: test AUC of every run (bar: mean)")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(self.plots, "stability.png"), dpi=120)
        plt.close(fig)
        notes = []
        for c in self.configs:
            aucs = self.aucs(c)
            if len(aucs) < 2:
                continue
            if all(a == aucs[0] for a in aucs):
                notes.append(f"- {self.short_label(c)}: all {len(aucs)} runs give the identical "
                             f"test AUC {aucs[0]:.17g} (bit for bit)"
                             + (": deterministic, one seed repeated." if self.repeated_seed(c)
                                else "."))
            else:
                notes.append(f"- {self.short_label(c)}: the runs' test AUC spans "
                             f"{max(aucs) - min(aucs):.4f} (min {min(aucs):.4f}, "
                             f"max {max(aucs):.4f}).")
        return "\n".join(["## Training stability", "",
                          "![Test AUC of every run per configuration](plots/stability.png)", ""]
                         + notes)

    def repeated_seed(self, c):
        seeds = {r["seed"] for r in self.completed(c)}
        return len(seeds) == 1 and len(self.completed(c)) > 1

    def precision(self):
        pairs = precision_pairs(self.configs)
        if not pairs:
            return "\n".join(["## Impact of precision", "",
                              "No pair of configurations that differ only in precision with one of "
                              "them fp32 (add `precision: [fp32, bf16]` to the matrix)."])
        rows, sentences = [], []
        for base, other in pairs:
            a, b = self.aucs(base), self.aucs(other)
            ma, sa = mean_std(a)
            mb, sb = mean_std(b)
            if not a or not b:
                rows.append(self.axis_cells(base, skip=("precision",))
                            + [other["axes"]["precision"], f"{fmt(ma)} ± {fmt(sa)}",
                               f"{fmt(mb)} ± {fmt(sb)}", "—", "—", f"{len(a)} / {len(b)}"])
                continue
            d, p = ks_test(a, b)
            rows.append(self.axis_cells(base, skip=("precision",))
                        + [other["axes"]["precision"], f"{fmt(ma)} ± {fmt(sa)}",
                           f"{fmt(mb)} ± {fmt(sb)}", fmt(d), fmt_p(p), f"{len(a)} / {len(b)}"])
            who = self.short_label(base, skip=("precision",)) or "all runs"
            prec = other["axes"]["precision"]
            if p < 0.05:
                sentences.append(
                    f"- {who}: p = {fmt_p(p)} < 0.05: the test AUCs of fp32 and {prec} runs come "
                    f"from different distributions (mean difference {mb - ma:+.4f}).")
            else:
                sentences.append(
                    f"- {who}: p = {fmt_p(p)} ≥ 0.05: no evidence that {prec} changes the test AUC "
                    f"(mean difference {mb - ma:+.4f}); with {len(a)} and {len(b)} runs the test "
                    "can only detect a large shift.")
        return "\n".join([
            "## Impact of precision",
            "",
            "Two-sample Kolmogorov–Smirnov test (scipy.stats.ks_2samp, two-sided) between the test "
            "AUCs of the fp32 runs and the runs at another precision of the same configuration.",
            "",
            table([a for a in self.axes if a != "precision"]
                  + ["precision", "fp32 test AUC mean ± std", "test AUC mean ± std",
                     "KS statistic", "p-value", "runs fp32 / other"], rows),
            "",
        ] + sentences)

    def roc(self):
        n = len(self.configs)
        side = 6.4 if n <= 6 else 8.0
        fig, ax = plt.subplots(figsize=(side, side * 0.94))
        drawn = 0
        for i, c in enumerate(self.configs):
            run = next((r for r in self.completed(c) if r.get("predictions")), None)
            if run is None:
                continue
            scores, labels = read_predictions(run["predictions"])
            fpr, tpr = roc_points(scores, labels)
            colour, line = style(i, n)
            ax.plot(fpr, tpr, linewidth=1.3, color=colour, linestyle=line,
                    label=f"{self.short_label(c)}, seed {run['seed']} (AUC {run['test_auc']:.4f})")
            drawn += 1
        ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=0.8, label="chance")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title("ROC curves, test split (one run per configuration)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(self.plots, "roc.png"), dpi=120)
        plt.close(fig)
        return "\n".join(["## ROC curves", "",
                          f"The test-split ROC of the final model of one run per configuration "
                          f"({drawn} curves; the legend's AUC is the run's exact test AUC).", "",
                          "![ROC curves](plots/roc.png)"])

    def performance(self):
        warm = self.r.get("warmup_steps", 20)
        rate = {}
        for c in self.configs:
            rate[c["index"]] = mean_std([r["samples_per_s"] for r in self.completed(c)
                                         if finite(r.get("samples_per_s"))
                                         and r["samples_per_s"] > 0])
        def speedup(c, axis, base_value):
            group = group_without(self.configs, axis)
            key = tuple((a, v) for a, v in c["axes"].items() if a != axis)
            base = group.get(key, {}).get(base_value)
            if base is None or base is c or axis not in c["axes"]:
                return "—" if base is not c else "1.00×"
            b, x = rate[base["index"]][0], rate[c["index"]][0]
            return f"{x / b:.2f}×" if b and x and not math.isnan(b) and not math.isnan(x) else "—"
        rows = []
        for c in self.configs:
            mean, std = rate[c["index"]]
            rows.append(self.axis_cells(c) + [
                len(self.completed(c)), f"{fmt_int(mean)} ± {fmt_int(std)}",
                speedup(c, "workers", "1") if "workers" in self.axes else "—",
                speedup(c, "precision", FP32) if "precision" in self.axes else "—",
            ])
        lines = [
            "## Training performance",
            "",
            f"Samples/s of each run: its samples over its time after the first {warm} steps "
            f"(as the reference's benchmark computes it: at a constant batch, the harmonic mean of "
            f"the DLLL per-step `samples/s`; a run of at most {warm} steps excludes none); then "
            "mean ± std over runs. "
            "Speedup vs 1 worker is strong scaling (the same global batch); vs fp32 the same "
            "configuration at fp32.",
            "",
            table(self.axes + ["runs", "samples/s mean ± std", "speedup vs 1 worker",
                               "speedup vs fp32"], rows),
        ]
        benches = self.r.get("benchmarks") or []
        train = [b for b in benches if b.get("kind") == "train"]
        inference = [b for b in benches if b.get("kind") == "inference"]
        if train:
            lines += ["", "### Training benchmark", "",
                      "`sift bench train` (one process, the reference's benchmark mode: warm-up "
                      "steps excluded) per model, precision and batch size of the matrix; latency "
                      "is per step.", "",
                      table(["model", "backend", "precision", "batch size", "staleness",
                             "samples/s", "latency mean (ms)", "p90 (ms)", "p95 (ms)",
                             "p99 (ms)"], self.bench_rows(train, with_staleness=True))]
        if inference:
            lines += ["", "### Inference performance", "",
                      "`sift bench inference` (forward only, on the training split; warm-up steps "
                      "excluded) per batch size; latency is per batch.", "",
                      table(["model", "backend", "precision", "batch size", "samples/s",
                             "latency mean (ms)", "p90 (ms)", "p95 (ms)", "p99 (ms)"],
                            self.bench_rows(inference, with_staleness=False))]
            self.inference_plot(inference)
            lines += ["", "![Inference throughput per batch size](plots/inference.png)"]
        return "\n".join(lines)

    @staticmethod
    def bench_rows(benches, with_staleness):
        rows = []
        for b in benches:
            head = [b["model"], b["backend"], b["precision"], b["batch_size"]]
            if with_staleness:
                head.append(b.get("staleness", "—"))
            if b.get("state") != "completed":
                rows.append(head + ["failed", "—", "—", "—", "—"])
                continue
            j = b["bench"]
            rows.append(head + [fmt_int(j["throughput"]), fmt(j["latency_mean_ms"], 2),
                                fmt(j["latency_p90_ms"], 2), fmt(j["latency_p95_ms"], 2),
                                fmt(j["latency_p99_ms"], 2)])
        return rows

    def inference_plot(self, inference):
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        series = {}
        for b in inference:
            if b.get("state") == "completed":
                series.setdefault(f"{b['model']} {b['backend']} {b['precision']}", []).append(
                    (b["batch_size"], b["bench"]["throughput"]))
        for i, (name, pts) in enumerate(series.items()):
            pts.sort()
            colour, line = style(i, len(series))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colour,
                    linestyle=line, label=name)
        ax.set_xscale("log", base=2)
        sizes = sorted({p[0] for pts in series.values() for p in pts})
        ax.set_xticks(sizes)
        ax.set_xticklabels([f"{x:,}" for x in sizes], fontsize=8)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_ylim(bottom=0)
        ax.set_xlabel("batch size (samples)")
        ax.set_ylabel("samples/s")
        ax.set_title("Inference throughput")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(self.plots, "inference.png"), dpi=120)
        plt.close(fig)

    def failures(self):
        bad = [r for r in self.runs if r.get("state") != "completed"]
        bad_inf = [b for b in self.r.get("benchmarks") or [] if b.get("state") != "completed"]
        if not bad and not bad_inf:
            return "## Failed runs\n\nNone: every run completed."
        rows = [[r["name"], r.get("state", "?"), r.get("message", ""), f"`{r.get('log', '')}`"]
                for r in bad]
        rows += [[f"bench {b['kind']} {b['model']} {b['precision']} batch {b['batch_size']}",
                  b.get("state", "?"), b.get("message", ""), f"`{b.get('log', '')}`"]
                 for b in bad_inf]
        return "\n".join(["## Failed runs", "",
                          "Left out of every table above; rerun the same `sift report` command "
                          "to retry them.", "", table(["run", "state", "message", "log"], rows)])

    def commands(self):
        lines = ["## Commands", "", f"The report: `{self.r['command']}`", "",
                 "Every number above comes from one of these (each run's DLLL log is "
                 "`<dir>/results/<job id>/log.json`):", ""]
        for r in self.runs:
            if r.get("command"):
                lines.append(f"- `{r['command']}`")
        for b in self.r.get("benchmarks") or []:
            if b.get("command"):
                lines.append(f"- `{b['command']}`")
        lines += ["", "The matrix:", "", "```yaml", self.r.get("matrix_text", "").rstrip(), "```"]
        return "\n".join(lines)

    def render(self):
        parts = [self.header(), self.settings(), self.accuracy(), self.stability(), self.precision(), self.roc(),
                 self.performance(), self.failures(), self.commands()]
        text = "\n\n".join(parts) + "\n"
        tmp = os.path.join(self.dir, "report.md.tmp")
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.dir, "report.md"))


def read_predictions(path):
    """sift's test_predictions.csv (header score,label): (scores, labels) arrays."""
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    return data[:, 0], data[:, 1]


def main(argv):
    if len(argv) != 2:
        print("usage: render_report.py DIR (the directory of sift report's report.json)",
              file=sys.stderr)
        return 2
    Report(argv[1]).render()
    print(os.path.join(argv[1], "report.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
