#!/bin/bash
# scripts/compare-runs.sh OLD_SIFT NEW_SIFT [WORK_DIR]: are two sift binaries the same model?
# Runs 12 short fixed-seed trainings (2 epochs of 6 steps, seed 3, 2 threads) with each binary —
# SIM, DIEN, DIN on `small`; SIM with dropout; hard search N = 2,000 with and without the time
# embedding and soft + time at N = 90 on `lifelong`; the streamed soft search at N = 5,000 in one
# and in two chunks, with and without time; SIM and DIEN on the reference backend — and compares
# every DLLL record's losses and AUCs (the timing fields left out) to the last digit. Prints SAME
# or DIFF per variant; exits 1 if any differs or fails. For a refactor that must change no
# number (docs/benchmarks.md): build the old commit's sift, copy it away, build the new one.
set -euo pipefail
old=$1 new=$2 work=${3:-$(mktemp -d)}
mkdir -p "$work"
"$new" data gen --preset small --seed 1 --out "$work/small" > /dev/null
"$new" data gen --preset lifelong --seed 1 --out "$work/lifelong" > /dev/null
variants=(
  "sim|--dataset $work/small --model sim --batch-size 512"
  "dien|--dataset $work/small --model dien --batch-size 512"
  "din|--dataset $work/small --model din --batch-size 512"
  "sim_dropout|--dataset $work/small --model sim --batch-size 512 --dropout 0.2"
  "hard|--dataset $work/lifelong --model sim --gsu hard --long-seq-length 2000 --top-k 50 --batch-size 256"
  "hard_time|--dataset $work/lifelong --model sim --gsu hard --long-seq-length 2000 --top-k 50 --time-embedding --batch-size 256"
  "soft_time|--dataset $work/lifelong --model sim --time-embedding --batch-size 256"
  "streamed|--dataset $work/lifelong --model sim --long-seq-length 5000 --batch-size 128"
  "streamed_time|--dataset $work/lifelong --model sim --long-seq-length 5000 --time-embedding --batch-size 128"
  "streamed_one_chunk|--dataset $work/lifelong --model sim --long-seq-length 5000 --time-embedding --batch-size 64"
  "sim_reference|--dataset $work/small --model sim --batch-size 256 --backend reference"
  "dien_reference|--dataset $work/small --model dien --batch-size 256 --backend reference"
)
# The records' results, one line each, without the fields that time the run.
curve() {
  python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("DLLL"):
        continue
    r = json.loads(line[4:].strip())
    data = {k: v for k, v in r.get("data", {}).items()
            if not any(s in k for s in ("samples/s", "time", "throughput", "latency"))}
    if data:
        print(json.dumps([r.get("step"), data], sort_keys=True))
PY
}
status=0
for v in "${variants[@]}"; do
  name=${v%%|*} args=${v#*|}
  for side in old new; do
    bin=$old; [[ $side == new ]] && bin=$new
    out="$work/$name-$side"
    rm -rf "$out"
    # shellcheck disable=SC2086  # args is a list of flags
    if ! "$bin" train $args --epochs 2 --max-steps-per-epoch 6 --train-eval-samples 2048 \
        --threads 2 --seed 3 --progress off --results-dir "$out" > "$out.log" 2>&1; then
      echo "FAIL $name ($side): see $out.log"; status=1; continue 2
    fi
    curve "$out/log.json" > "$out.curve"
  done
  if cmp -s "$work/$name-old.curve" "$work/$name-new.curve"; then
    echo "SAME $name ($(wc -l < "$work/$name-new.curve") records)"
  else
    echo "DIFF $name"; status=1
  fi
done
exit $status
