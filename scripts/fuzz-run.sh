#!/usr/bin/env bash
# Runs libFuzzer targets, each until it has used a CPU-time budget (not wall time: on a shared
# machine a wall-clock budget gives a fuzzer less than it says), FUZZ_JOBS targets at a time.
#
#   scripts/fuzz-run.sh BUILD_DIR WORK_DIR CPU_SECONDS JOBS TARGET...
#
# Each target runs on a fresh copy of tests/fuzz/corpus/<target> in WORK_DIR/<target>/corpus, with
# tests/fuzz/regressions/<target> as a second (read) corpus and tests/fuzz/dict/<target>.dict,
# under `nice -n 10`; its log is WORK_DIR/<target>/log, reproducers go to .../artifacts/. The
# fuzzer's own CPU time (utime + stime of /proc/PID/stat) is polled every 2 s and SIGINT ends it
# at the budget: libFuzzer then prints its final stats and exits 72. Prints one line per target
# (execs, exec/s, cov, corpus, peak RSS, CPU and wall seconds) and exits 1 when any target left a
# reproducer or exited otherwise.
set -u
[ $# -ge 5 ] || { echo "usage: $0 BUILD_DIR WORK_DIR CPU_SECONDS JOBS TARGET..." >&2; exit 2; }
build=$1 work=$2 budget=$3 jobs=$4
shift 4
root=$(cd "$(dirname "$0")/.." && pwd)
hz=$(getconf CLK_TCK)

cpu_seconds() {  # utime + stime of PID, in whole seconds (fields 14, 15 after the comm field)
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo -1; return; }
  stat=${stat##*) }
  set -- $stat
  echo $(( (${12} + ${13}) / hz ))
}

run_one() {
  local t=$1 w=$work/$1 extra= dict= start pid used=0 rc
  rm -rf "$w"; mkdir -p "$w/corpus" "$w/artifacts"
  cp "$root/tests/fuzz/corpus/$t/"* "$w/corpus/"
  [ -d "$root/tests/fuzz/regressions/$t" ] && extra=$root/tests/fuzz/regressions/$t
  [ -f "$root/tests/fuzz/dict/$t.dict" ] && dict=-dict=$root/tests/fuzz/dict/$t.dict
  start=$(date +%s)
  UBSAN_OPTIONS=print_stacktrace=1 nice -n 10 "$build/tests/fuzz/fuzz_$t" \
    -max_total_time=$((budget * 20)) -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$w/artifacts/" $dict "$w/corpus" $extra > "$w/log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    used=$(cpu_seconds "$pid")
    if [ "$used" -ge "$budget" ]; then kill -INT "$pid"; break; fi
    sleep 2
  done
  wait "$pid"; rc=$?
  local wall=$(( $(date +%s) - start ))
  local execs rate cov corpus rss
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$w/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$w/log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$w/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$w/log" | tail -1 | cut -d' ' -f2)
  corpus=$(grep -o 'corp: [0-9]*' "$w/log" | tail -1 | cut -d' ' -f2)
  local verdict=ok
  if { [ "$rc" != 0 ] && [ "$rc" != 72 ]; } || [ -n "$(ls "$w/artifacts")" ]; then verdict=FINDING; fi
  printf '%-20s %-7s execs %s  exec/s %s  cov %s  corpus %s  peak_rss_mb %s  cpu_s %s  wall_s %s  rc %s\n' \
    "$t" "$verdict" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${corpus:-?}" "${rss:-?}" "$used" "$wall" "$rc"
  if [ "$verdict" != ok ]; then
    grep -h -m 3 -E 'ERROR|SUMMARY|runtime error|invariant' "$w/log" | sed 's/^/  /'
    return 1
  fi
}

mkdir -p "$work"
echo "fuzz-run: ${#} targets, $budget CPU-s each, $jobs at a time; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
status=0 running=0
pids=()
for t in "$@"; do
  run_one "$t" > "$work/$t.summary" 2>&1 &
  pids+=($!)
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || status=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || status=1; running=$((running - 1)); done
for t in "$@"; do cat "$work/$t.summary"; done
[ "$status" = 0 ] && echo "fuzz-run: no findings" || echo "fuzz-run: findings (reproducers in $work/<target>/artifacts)"
exit "$status"
