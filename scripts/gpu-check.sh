#!/usr/bin/env bash
# scripts/gpu-check.sh: the one command a session runs on the lent GPU machine (issue 6). Unpacks
# the carried sysroot (scripts/gpu-sysroot.sh), builds the SIFT_MINIMAL=ON + SIFT_CUDA=on
# configuration (Release, sm_80 + sm_90 from cmake/SiftCuda.cmake), runs the `gpu`
# tests and the host-side CUDA tests, generates the synthetic `books` dataset there and runs
# `sift bench train|inference` with the best backend the build offers (cuda once issue 6 lands,
# else cpu). Writes ONE summary, $OUT/gpu-check.json, and its logs ($OUT/*.log, 7 files at most),
# even when a stage fails or the internal deadline hits. See scripts/README.md for the device call.
#
#   scripts/gpu-check.sh                      (on the GPU machine: everything, ~4-6 min on 16 cores)
#   GPU_CHECK_QUICK=1 OUT=/tmp/out scripts/gpu-check.sh   (anywhere: tiny data, tiny batches)
#
# Environment (all optional):
#   OUT                     where the JSON and logs go (default: out/gpu-check in the repository)
#   GPU_CHECK_QUICK=1       tiny preset, batch 1024, 1 + 3 steps per benchmark (a smoke test)
#   GPU_CHECK_DEADLINE_S    the whole script's budget; stages are cut to fit it, optional
#                           benchmarks skipped (default 390; 3600 with GPU_CHECK_QUICK=1)
#   GPU_CHECK_BUILD_DIR     build directory (default: build-gpu-check in the repository)
#   GPU_CHECK_SYSROOT       the sysroot archive (default .gpu-sysroot/sysroot.tar.gz), or `none`
#                           to build against the system's packages
#   GPU_CHECK_SYSROOT_DIR   where the archive is unpacked (default: the archive's folder)
#   GPU_CHECK_PRESET, GPU_CHECK_USERS   dataset preset (books; tiny when quick) and a user count
#                           that overrides the preset's (a fraction of it)
#   GPU_CHECK_BACKEND       force a backend instead of detecting it (cuda, cpu, reference)
#   GPU_CHECK_MODELS        benchmarked models in order (default "sim din dien"; sim is required,
#                           the others run while the deadline allows)
#   GPU_CHECK_TRAIN_BATCH, GPU_CHECK_INFERENCE_BATCH   batch sizes (131072 and 65536, the
#                           reference's; 1024 when quick)
#   GPU_CHECK_STALENESS     --staleness of the benchmarks (default 1 on cuda: the copy stream
#                           overlaps the next step; 0 elsewhere)
#   GPU_CHECK_JOBS          build parallelism (default: every CPU)
#   GPU_CHECK_COMMIT        the commit to record when the tree has no .git (the device's copy)
# Exit status: 0 when every stage that ran passed; 1 when the sysroot, the configure, the build, a
# test or a benchmark failed or timed out (the JSON says which).
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
start_epoch=$(date +%s)
started_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)

quick=${GPU_CHECK_QUICK:-0}
[ "$quick" = 1 ] || quick=0
if [ "$quick" = 1 ]; then default_deadline=3600; else default_deadline=390; fi
deadline_s=${GPU_CHECK_DEADLINE_S:-$default_deadline}
out=${OUT:-$repo/out/gpu-check}
build_dir=${GPU_CHECK_BUILD_DIR:-$repo/build-gpu-check}
sysroot_archive=${GPU_CHECK_SYSROOT:-$repo/.gpu-sysroot/sysroot.tar.gz}
jobs=${GPU_CHECK_JOBS:-$(nproc)}
models=${GPU_CHECK_MODELS:-sim din dien}
if [ "$quick" = 1 ]; then
  preset=${GPU_CHECK_PRESET:-tiny}
else
  preset=${GPU_CHECK_PRESET:-books}
fi
users=${GPU_CHECK_USERS:-}

mkdir -p "$out" || exit 1
state=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 1
stages_tsv=$state/stages.tsv
: >"$stages_tsv"
# The logs that come back ($OUT holds at most 8 files: these 6 and the JSON).
log_setup=$out/setup.log     # versions, sysroot, configure
log_build=$out/build.log
log_tests=$out/tests.log
log_data=$out/data.log
log_bench=$out/bench.log
log_script=$out/gpu-check.log # this script's own lines (also on stdout)
: >"$log_setup"; : >"$log_build"; : >"$log_tests"; : >"$log_data"; : >"$log_bench"; : >"$log_script"

say() { echo "gpu-check: $*" | tee -a "$log_script"; }
elapsed() { echo $(($(date +%s) - start_epoch)); }
remaining() { echo $((deadline_s - $(elapsed))); }
kv() { printf '%s\t%s\n' "$1" "$2" >>"$state/kv.tsv"; }  # one key/value for the JSON

# run_stage NAME LIMIT_S LOG [optional|required] -- CMD...: runs CMD under `timeout`, cut to what the
# deadline leaves (minus 25 s for the summary; an optional stage runs only when its whole limit
# fits); records NAME, status, rc, seconds in stages.tsv.
# Returns 0 on success, 1 on failure or timeout, 2 when skipped for lack of time.
reserve_s=25
run_stage() {
  local name=$1 limit=$2 log=$3 kind=required
  shift 3
  case $1 in optional | required) kind=$1; shift ;; esac
  [ "$1" = -- ] && shift
  local left=$(($(remaining) - reserve_s))
  local min_s=10
  [ "$kind" = optional ] && min_s=$limit
  if [ "$left" -lt "$min_s" ]; then
    say "$name: skipped (${left}s left before the deadline, needs ${min_s}s)"
    printf '%s\tskipped\t\t0\t%s\t%s\t%s\n' "$name" "$(basename "$log")" "$kind" "$*" >>"$stages_tsv"
    return 2
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "$name: running (limit ${limit}s): $*"
  echo "==== $name: $* (limit ${limit}s)" >>"$log"
  local t0 rc status
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" "$@" >>"$log" 2>&1 </dev/null
  rc=$?
  local secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    *) status=failed ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$secs" "$(basename "$log")" "$kind" "$*" >>"$stages_tsv"
  say "$name: $status (rc $rc, ${secs}s)"
  if [ "$status" != ok ]; then
    echo "---- last lines of $(basename "$log"):"
    tail -n 30 "$log"
    echo "----"
    return 1
  fi
  return 0
}

# The summary: every run ends here (trap), so the JSON exists whatever failed.
# shellcheck disable=SC2317  # reached through the EXIT trap
finalize() {
  trap - EXIT INT TERM
  kv wall_s "$(elapsed)"
  kv finished_utc "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # Logs over the 16 MiB a file may bring back keep their tail.
  local f
  for f in "$out"/*.log; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -gt 16000000 ]; then
      tail -c 15000000 "$f" >"$f.tmp" && mv "$f.tmp" "$f"
    fi
  done
  local status=1
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$state" "$out/gpu-check.json" <<'PY'
import json, os, sys, xml.etree.ElementTree as ET

state, dest = sys.argv[1], sys.argv[2]
kv = {}
if os.path.exists(os.path.join(state, "kv.tsv")):
    for line in open(os.path.join(state, "kv.tsv"), encoding="utf-8", errors="replace"):
        k, _, v = line.rstrip("\n").partition("\t")
        kv[k] = v.replace("\\n", "\n")

def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None

stages = []
for line in open(os.path.join(state, "stages.tsv"), encoding="utf-8", errors="replace"):
    p = line.rstrip("\n").split("\t")
    if len(p) < 7:
        continue
    stages.append({"name": p[0], "status": p[1], "rc": int(p[2]) if p[2] else None,
                   "seconds": num(p[3]), "log": p[4],
                   "kind": p[5],
                   "note": "skipped: not enough time before the deadline" if p[1] == "skipped" else None,
                   "command": p[6]})
by_name = {s["name"]: s for s in stages}

def junit_counts(path):
    c = {"total": 0, "passed": 0, "failed": 0, "skipped": 0, "failed_names": [], "skipped_names": []}
    if not os.path.exists(path):
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        c["error"] = "unreadable junit: %s" % e
        return c
    for tc in root.iter("testcase"):
        c["total"] += 1
        name = tc.get("name")
        st = tc.get("status", "")
        if tc.find("failure") is not None or tc.find("error") is not None or st == "fail":
            c["failed"] += 1; c["failed_names"].append(name)
        elif tc.find("skipped") is not None or st in ("skipped", "notrun", "disabled"):
            c["skipped"] += 1; c["skipped_names"].append(name)
        else:
            c["passed"] += 1
    return c

tests = {}
for label in ("gpu", "cuda_host", "gpu_training"):
    stage = by_name.get("tests_" + label)
    c = junit_counts(os.path.join(state, "junit_%s.xml" % label))
    tests[label] = {"stage_status": stage["status"] if stage else "not run",
                    "command": stage["command"] if stage else None}
    if c:
        tests[label].update(c)

benchmarks = []
bench_order = kv.get("bench_order", "").split()
for name in bench_order:
    stage = by_name.get("bench_" + name)
    b = {"name": name, "status": stage["status"] if stage else "not run",
         "command": stage["command"] if stage else None,
         "seconds": stage["seconds"] if stage else None}
    path = os.path.join(state, "bench_%s.json" % name)
    if os.path.exists(path):
        try:
            j = json.load(open(path))
            b.update({"model": j.get("model"), "mode": j.get("benchmark"),
                      "backend": j.get("backend"), "precision": j.get("precision"),
                      "batch_size": j.get("batch_size"),
                      "threads": j.get("threads"), "steps": j.get("steps"),
                      "staleness": j.get("staleness"),
                      "samples_per_s": j.get("throughput"),
                      "latency_mean_ms": j.get("latency_mean_ms"),
                      "latency_p99_ms": j.get("latency_p99_ms"),
                      "gflops": j.get("gflops"), "sift_command": j.get("command"),
                      "result": j})
        except (OSError, ValueError) as e:
            b["error"] = "unreadable bench JSON: %s" % e
    benchmarks.append(b)

backend = kv.get("backend")
gpu_name = kv.get("gpu_name", "")
# docs/benchmarks.md, Targets.
targets = []
for what, bench, target, ref_batch in (
        ("GPU training, 1x H200, SIM default dims, batch 131,072", "train_sim", 1500000, 131072),
        ("GPU inference, 1x H200", "inference_sim", 4000000, None)):
    b = next((x for x in benchmarks if x["name"] == bench), None)
    measured = b.get("samples_per_s") if b else None
    reasons = []
    if backend != "cuda":
        reasons.append("backend %s, not cuda" % backend)
    if "H200" not in gpu_name:
        reasons.append("GPU %r, not an H200" % (gpu_name or "none"))
    if ref_batch and b and b.get("batch_size") != ref_batch:
        reasons.append("batch %s, not %d" % (b.get("batch_size"), ref_batch))
    if kv.get("quick") == "1":
        reasons.append("quick mode")
    targets.append({"what": what, "source": "docs/benchmarks.md (Targets)", "benchmark": bench,
                    "target_samples_per_s": target, "measured_samples_per_s": measured,
                    "ratio": (measured / target) if measured else None,
                    "comparable": not reasons, "not_comparable_because": reasons})

failures = [s["name"] for s in stages
            if s["status"] in ("failed", "timeout") or
            (s["status"] == "skipped" and s["kind"] == "required")]
if kv.get("interrupted"):
    failures.append("interrupted by %s" % kv["interrupted"])
for label, t in tests.items():
    if t.get("failed"):
        failures.append("tests_%s: %d failed" % (label, t["failed"]))
ok = not failures

def text(k):
    v = kv.get(k)
    return v if v not in (None, "") else None

summary = {
    "schema": "sift-gpu-check/1",
    "ok": ok,
    "exit_code": 0 if ok else 1,
    "failures": failures,
    "quick": kv.get("quick") == "1",
    "started_utc": text("started_utc"), "finished_utc": text("finished_utc"),
    "wall_s": num(kv.get("wall_s")), "deadline_s": num(kv.get("deadline_s")),
    "git": {"commit": text("git_commit"), "dirty": kv.get("git_dirty") == "1"},
    "machine": {
        "hostname": text("hostname"), "cpu_model": text("cpu_model"), "cpus": num(kv.get("cpus")),
        "mem_gib": num(kv.get("mem_gib")), "os": text("os"), "glibc": text("glibc"),
        "gpu_name": text("gpu_name"), "gpu_memory": text("gpu_memory"),
        "driver": text("driver"), "cuda_driver_version": text("cuda_driver_version"),
        "nvidia_smi_L": text("nvidia_smi_L"), "nvcc": text("nvcc"), "cmake": text("cmake"),
        "ninja": text("ninja"), "gcc": text("gcc"), "sift_device": text("sift_device"),
    },
    "build": {
        "dir": text("build_dir"), "type": "Release", "options": text("cmake_options"),
        "cuda_architectures": text("cuda_architectures"), "cuda_enabled": text("cuda_enabled"),
        "sass_archs_in_sift": text("sass_archs"),
        "targets": text("build_targets"), "jobs": num(kv.get("jobs")),
        "configure_seconds": by_name.get("configure", {}).get("seconds"),
        "build_seconds": by_name.get("build", {}).get("seconds"),
        "warnings": num(kv.get("build_warnings")),
        "sysroot": text("sysroot"),
    },
    "tests": tests,
    "data": {"preset": text("preset"), "users": text("users"), "seed": 1,
             "seconds": by_name.get("data_gen", {}).get("seconds"),
             "summary": text("data_summary")},
    "backend": backend, "backend_reason": text("backend_reason"),
    "benchmarks": benchmarks,
    "targets": targets,
    "stages": stages,
    "logs": sorted(f for f in os.listdir(os.path.dirname(dest)) if f.endswith(".log")),
}
tmp = dest + ".tmp"
with open(tmp, "w") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")
os.replace(tmp, dest)

# The short table last: the device call's reply carries the end of the output.
print("gpu-check: summary (%s)" % dest)
for s in stages:
    print("  %-22s %-8s %7ss" % (s["name"], s["status"], s["seconds"]))
for label, t in tests.items():
    if "total" in t:
        print("  tests %-16s %d passed, %d failed, %d skipped of %d" %
              (label, t["passed"], t["failed"], t["skipped"], t["total"]))
for b in benchmarks:
    if b.get("samples_per_s") is not None:
        print("  bench %-16s %12.0f samples/s  (%s, batch %s)" %
              (b["name"], b["samples_per_s"], b.get("backend"), b.get("batch_size")))
for t in targets:
    if t["ratio"] is not None:
        print("  target %-15s %.4f of %d%s" % (t["benchmark"], t["ratio"], t["target_samples_per_s"],
              "" if t["comparable"] else " (not comparable: %s)" % "; ".join(t["not_comparable_because"])))
print("gpu-check: %s in %ss" % ("OK" if ok else "FAILED: " + ", ".join(failures), kv.get("wall_s")))
sys.exit(0 if ok else 1)
PY
    status=$?
  else
    # No python3: a minimal JSON so that something still comes back.
    printf '{"schema": "sift-gpu-check/1", "ok": false, "failures": ["python3 missing: no full summary"]}\n' \
      >"$out/gpu-check.json"
    cat "$stages_tsv"
  fi
  rm -rf "$state"
  exit "$status"
}
trap finalize EXIT
trap 'say "interrupted (SIGINT)"; kv interrupted SIGINT; exit 130' INT
trap 'say "interrupted (SIGTERM)"; kv interrupted SIGTERM; exit 143' TERM

kv started_utc "$started_utc"
kv quick "$quick"
kv deadline_s "$deadline_s"
kv preset "$preset"
kv users "${users:-}"
kv build_dir "$build_dir"
kv jobs "$jobs"
# The device machine's copy of the tree may have no .git: the caller can name the commit.
kv git_commit "${GPU_CHECK_COMMIT:-$(git -C "$repo" rev-parse HEAD 2>/dev/null)}"
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]; then kv git_dirty 1; fi
say "start: quick=$quick deadline=${deadline_s}s out=$out build=$build_dir preset=$preset"

# ---- 1. The machine and the tools -----------------------------------------------------------
one_line() { tr '\n' ' ' | sed 's/ *$//'; }
kv hostname "$(hostname 2>/dev/null)"
kv cpus "$(nproc)"
kv cpu_model "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
kv mem_gib "$(awk '/^MemTotal/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)"
# shellcheck disable=SC1091
kv os "$( (. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-}"))"
kv glibc "$(ldd --version 2>/dev/null | head -n 1)"
{
  echo "==== versions"
  uname -a
  if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 30 nvidia-smi -L
    timeout 30 nvidia-smi
  else
    echo "nvidia-smi: not found"
  fi
} >>"$log_setup" 2>&1
if command -v nvidia-smi >/dev/null 2>&1; then
  kv nvidia_smi_L "$(timeout 30 nvidia-smi -L 2>&1 | one_line)"
  q=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
  kv gpu_name "$(echo "$q" | cut -d, -f1 | sed 's/^ *//')"
  kv driver "$(echo "$q" | cut -d, -f2 | sed 's/^ *//')"
  kv gpu_memory "$(echo "$q" | cut -d, -f3 | sed 's/^ *//')"
  kv cuda_driver_version "$(timeout 30 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)"
else
  kv nvidia_smi_L "nvidia-smi not found"
fi
nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
if [ -n "$nvcc_bin" ]; then
  kv nvcc "$("$nvcc_bin" --version 2>&1 | grep -i release | one_line)"
else
  kv nvcc "nvcc not found"
fi
kv cmake "$(cmake --version 2>/dev/null | head -n 1)"
kv ninja "$(ninja --version 2>/dev/null)"
kv gcc "$(gcc --version 2>/dev/null | head -n 1)"
{
  echo "nvcc: ${nvcc_bin:-not found}"; [ -n "$nvcc_bin" ] && "$nvcc_bin" --version
  cmake --version | head -n 1; echo "ninja $(ninja --version)"; gcc --version | head -n 1
  ldd --version | head -n 1
} >>"$log_setup" 2>&1
grep -E '^GPU [0-9]' "$log_setup" | head -n 4 | sed 's/^/gpu-check:   /' | tee -a "$log_script"
awk -F'\t' '$1 ~ /^(nvidia_smi_L|driver|cuda_driver_version|nvcc|cmake|ninja|gcc|glibc|os)$/ { print "gpu-check:   " $1 ": " $2 }' \
  "$state/kv.tsv" | tee -a "$log_script"

# ---- 2. The sysroot and the build -------------------------------------------------------------
cmake_prefix=()
if [ "$sysroot_archive" = none ]; then
  kv sysroot "none (the system's packages)"
  say "sysroot: none, the system's packages"
else
  sysroot_dir=${GPU_CHECK_SYSROOT_DIR:-$(dirname "$sysroot_archive")}
  mkdir -p "$sysroot_dir"
  if [ ! -f "$sysroot_archive" ]; then
    say "sysroot: $sysroot_archive is missing (carry .gpu-sysroot/sysroot.tar.gz; scripts/gpu-sysroot.sh makes it)"
    printf 'sysroot\tfailed\t1\t0\tsetup.log\trequired\ttest -f %s\n' "$sysroot_archive" >>"$stages_tsv"
    exit 1
  fi
  run_stage sysroot 120 "$log_setup" -- tar -C "$sysroot_dir" -xzf "$sysroot_archive" || exit 1
  S=$sysroot_dir/root
  kv sysroot "$S (from $sysroot_archive)"
  # scripts/README.md: the build needs these too (gtest_discover_tests runs each test binary;
  # oneDNN and its OpenCL loader come from the sysroot).
  export LD_LIBRARY_PATH=$S/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  cmake_prefix=(-DCMAKE_PREFIX_PATH="$S/usr")
fi

cmake_opts=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DSIFT_MINIMAL=ON -DSIFT_CUDA=on
            -DSIFT_WERROR=OFF "${cmake_prefix[@]}")
kv cmake_options "${cmake_opts[*]}"
run_stage configure 180 "$log_setup" -- cmake -S "$repo" -B "$build_dir" "${cmake_opts[@]}" || exit 1
# What nvcc is asked for (HOPPER.md: without sm_90 no Hopper instructions).
kv cuda_architectures "$(grep -o 'arch=compute_[0-9a-z]*,code=[^ ]*' "$build_dir/build.ninja" 2>/dev/null | sort -u | one_line)"
kv cuda_enabled "$(grep -o 'CUDA [A-Z]*, sanitizer' "$log_setup" | tail -n 1 | cut -d' ' -f2 | tr -d ,)"

# Only what this check runs: the binary, the gpu tests, the host-side CUDA tests
# (tests/cuda_host) and the caching-allocator unit test. The rest builds and runs in CI.
targets=(sift)
for f in tests/gpu/*_test.cc; do [ -e "$f" ] && targets+=("gpu_$(basename "$f" .cc)"); done
for f in tests/cuda_host/*_test.cc tests/unit/cuda_*_test.cc; do
  [ -e "$f" ] && targets+=("unit_$(basename "$f" .cc)")
done
kv build_targets "${targets[*]}"
run_stage build 300 "$log_build" -- cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
build_rc=$?
kv build_warnings "$(grep -c 'warning:' "$log_build")"
[ "$build_rc" = 0 ] || exit 1
sift=$build_dir/sift
# The machine code in the binary (cuobjdump is on the GPU machine, not always beside nvcc).
cuobjdump_bin=$(command -v cuobjdump || { [ -n "$nvcc_bin" ] && [ -x "$(dirname "$nvcc_bin")/cuobjdump" ] && echo "$(dirname "$nvcc_bin")/cuobjdump"; } || true)
if [ -n "$cuobjdump_bin" ]; then
  kv sass_archs "$(timeout 60 "$cuobjdump_bin" --list-elf "$sift" 2>&1 | grep -o 'sm_[0-9]*a\?' | sort -u | one_line)"
else
  kv sass_archs "cuobjdump not found"
fi

# ---- 3. Tests ------------------------------------------------------------------------------------
# gpu: every test of the label (GTEST_SKIP without a device); cuda_host: the host-side CUDA checks
# and the caching allocator (labelled unit). --no-tests=error: a check that ran nothing fails.
# The tiny-preset training comparison (a CPU run too) waits until after the benchmarks.
run_stage tests_gpu 180 "$log_tests" -- ctest --test-dir "$build_dir" -L gpu -E CudaTrainingTest \
  --no-tests=error -j 4 --timeout 120 --output-on-failure --output-junit "$state/junit_gpu.xml"
run_stage tests_cuda_host 90 "$log_tests" -- ctest --test-dir "$build_dir" -LE gpu \
  -R '^(Cuda|CachingAllocator|DeviceBuffer)' --no-tests=error -j "$jobs" --timeout 60 \
  --output-on-failure --output-junit "$state/junit_cuda_host.xml"

# ---- 4. Data and benchmarks ------------------------------------------------------------------------
"$sift" device >>"$log_bench" 2>&1
kv sift_device "$("$sift" device 2>&1 | one_line)"
backends=$("$sift" bench train --help 2>/dev/null | sed -n 's/.*--backend TEXT:{\([^}]*\)}.*/\1/p' | head -n 1)
if [ -n "${GPU_CHECK_BACKEND:-}" ]; then
  backend=$GPU_CHECK_BACKEND
  kv backend_reason "GPU_CHECK_BACKEND=$backend (the build offers: $backends)"
elif [[ ",$backends," == *,cuda,* ]] && "$sift" device 2>/dev/null | grep -q '^gpu [0-9]'; then
  backend=cuda
  kv backend_reason "sift bench train offers {$backends} and sift device lists a GPU"
else
  backend=cpu
  if [[ ",$backends," == *,cuda,* ]]; then
    kv backend_reason "sift bench train offers {$backends} but sift device lists no GPU"
  else
    kv backend_reason "sift bench train offers {$backends}: no cuda backend in this build yet (issue 6)"
  fi
fi
kv backend "$backend"
say "backend: $backend (bench train --backend {$backends})"

# Sizes. The reference's batch sizes (docs/benchmarks.md): 131,072 for training, 65,536 for
# inference on one GPU. On the CPU backend a step at those sizes takes seconds (and ~25 GB for
# SIM/DIEN), so it gets few steps; on cuda the default 20 warm-up steps and more measured ones.
if [ "$quick" = 1 ]; then
  train_batch=1024; infer_batch=1024; warmup=1; train_steps=3; infer_steps=3
  bench_limit=120; bench_optional_limit=120
elif [ "$backend" = cuda ]; then
  train_batch=131072; infer_batch=65536; warmup=20; train_steps=60; infer_steps=100
  bench_limit=120; bench_optional_limit=75
else
  train_batch=131072; infer_batch=65536; warmup=1; train_steps=4; infer_steps=8
  bench_limit=120; bench_optional_limit=75
fi

train_batch=${GPU_CHECK_TRAIN_BATCH:-$train_batch}
infer_batch=${GPU_CHECK_INFERENCE_BATCH:-$infer_batch}

data_dir=$state/data/$preset
gen_cmd=("$sift" data gen --preset "$preset" --seed 1 --out "$data_dir")
[ -n "$users" ] && gen_cmd+=(--users "$users")
order=()
for m in $models; do order+=("train_$m" "inference_$m"); done
# On cuda the benchmarks run at the default precision (auto = bf16 GEMMs) with staleness 1 (the
# next step is loaded, pulled and uploaded on the copy stream while this one computes); one more
# SIM training run in fp32 shows what the tensor-core GEMMs buy, and one at staleness 0 what the
# overlap buys.
staleness=0
if [ "$backend" = cuda ]; then
  staleness=1
  order+=(train_sim_fp32 train_sim_k0)
fi
staleness=${GPU_CHECK_STALENESS:-$staleness}
kv bench_order "${order[*]}"
if run_stage data_gen 90 "$log_data" -- "${gen_cmd[@]}"; then
  kv data_summary "$(grep -E '^(users|samples|test AUC|took)' "$log_data" | one_line)"
  for m in $models; do
    kind=optional; limit=$bench_optional_limit
    if [ "$m" = sim ]; then kind=required; limit=$bench_limit; fi
    for mode in train inference; do
      if [ "$mode" = train ]; then b=$train_batch; n=$train_steps; else b=$infer_batch; n=$infer_steps; fi
      run_stage "bench_${mode}_$m" "$limit" "$log_bench" "$kind" -- "$sift" bench "$mode" \
        --dataset "$data_dir" --model "$m" --backend "$backend" --batch-size "$b" \
        --warmup-steps "$warmup" --benchmark-steps "$n" --staleness "$staleness" --progress off \
        --json "$state/bench_${mode}_$m.json"
      if [ -f "$state/bench_${mode}_$m.json" ]; then
        say "  $mode $m: $(sed -n 's/^ *"throughput": *\([0-9.]*\).*/\1/p' "$state/bench_${mode}_$m.json" | cut -d. -f1) samples/s"
      fi
    done
  done
  if [ "$backend" = cuda ]; then
    run_stage tests_gpu_training 120 "$log_tests" optional -- ctest --test-dir "$build_dir" -L gpu \
      -R CudaTrainingTest --no-tests=error --timeout 110 --output-on-failure \
      --output-junit "$state/junit_gpu_training.xml"
    run_stage bench_train_sim_fp32 "$bench_optional_limit" "$log_bench" optional -- "$sift" bench \
      train --dataset "$data_dir" --model sim --backend cuda --precision fp32 \
      --batch-size "$train_batch" --warmup-steps "$warmup" --benchmark-steps "$train_steps" \
      --staleness "$staleness" --progress off --json "$state/bench_train_sim_fp32.json"
    run_stage bench_train_sim_k0 "$bench_optional_limit" "$log_bench" optional -- "$sift" bench \
      train --dataset "$data_dir" --model sim --backend cuda --staleness 0 \
      --batch-size "$train_batch" --warmup-steps "$warmup" --benchmark-steps "$train_steps" \
      --progress off --json "$state/bench_train_sim_k0.json"
  fi
fi
exit 0
