#!/usr/bin/env bash
# scripts/bench-vs-openblas.sh: the CPU backend before issue 15 (OpenBLAS GEMMs, one -march=native
# build of the kernels) against this tree's (oneDNN, per-ISA kernel variants, fused recurrences
# and attention layer), in one session on one machine: `sift bench train` alternating between the
# two binaries, so the machine's drift hits both alike; prints every run and the median ratio.
#
#   scripts/bench-vs-openblas.sh [DATASET] [ROUNDS] [-- extra `sift bench train` flags]
#     DATASET  a sift dataset (default out/bench/tiny, generated when missing)
#     ROUNDS   alternations (default 3)
#   environment: NEW_SIFT (default build/sift), OLD_COMMIT (default 53f4019, the last OpenBLAS
#   commit), OLD_DIR (default .bench-openblas: a git worktree of it and its build, made once)
#
# Needs libopenblas-dev to build the old binary (Debian; `apt-get install libopenblas-dev`), and
# the old commit in this clone's history. Builds only `sift` there (SIFT_CUDA=off, ~4 min on 2
# cores). The new binary must exist (`make build BUILD_TARGET=sift`).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dataset=${1:-$repo/out/bench/tiny}
rounds=${2:-3}
shift $(($# >= 2 ? 2 : $#)) || true
[ "${1:-}" = "--" ] && shift
extra=("$@")
new=${NEW_SIFT:-$repo/build/sift}
old_commit=${OLD_COMMIT:-53f4019}
old_dir=${OLD_DIR:-$repo/.bench-openblas}

[ -x "$new" ] || { echo "bench-vs-openblas: $new is missing (make build BUILD_TARGET=sift)" >&2; exit 1; }
if [ ! -x "$old_dir/build/sift" ]; then
  dpkg-query -W -f='${Status}' libopenblas-dev 2>/dev/null | grep -q 'install ok installed' || {
    echo "bench-vs-openblas: the old binary needs libopenblas-dev (apt-get install libopenblas-dev)" >&2
    exit 1
  }
  [ -d "$old_dir/src" ] || git -C "$repo" worktree add --detach "$old_dir/src" "$old_commit"
  echo "bench-vs-openblas: building sift at $old_commit in $old_dir/build"
  cmake -S "$old_dir/src" -B "$old_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSIFT_CUDA=off -DSIFT_BUILD_TESTS=OFF >/dev/null
  cmake --build "$old_dir/build" --target sift -j "$(nproc)" >/dev/null
fi
old=$old_dir/build/sift
if [ ! -f "$dataset/feature_spec.yaml" ]; then
  "$new" data gen --preset tiny --seed 1 --out "$dataset" >/dev/null
fi

flags=(--dataset "$dataset" --model sim --batch-size 2048 --warmup-steps 10 --benchmark-steps 30
       --threads "$(nproc)" "${extra[@]}")
echo "bench-vs-openblas: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
echo "  new: $new ($("$new" device | sed -n 2p))"
echo "  old: $old (commit $old_commit, OpenBLAS: $(OPENBLAS_VERBOSE=2 "$old" device 2>&1 | grep -m1 'Core:' || echo 'core not printed'))"
echo "  sift bench train ${flags[*]}"
throughput() { "$@" bench train "${flags[@]}" 2>/dev/null | awk '/throughput:/ {print $2}'; }
ratios=()
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then o=$(throughput "$old"); n=$(throughput "$new"); else n=$(throughput "$new"); o=$(throughput "$old"); fi
  ratio=$(awk -v n="$n" -v o="$o" 'BEGIN { printf "%.3f", n / o }')
  ratios+=("$ratio")
  echo "  round $r: old $o samples/s, new $n samples/s, new/old $ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
echo "bench-vs-openblas: median new/old $median over $rounds rounds"
