#!/bin/bash
# Test AUC of W workers against 1 worker: `sift local` on the tiny preset, 3 epochs, global batch
# 2048, staleness 0, 2 embedding servers, for each model and seed; prints one line per run and
# the per-seed and mean differences. Usage (from the repository root, after `make build`):
#   scripts/scaleout-auc.sh [MODELS="din sim"] [SEEDS="1 2 3"] [WORKERS=2] [UPDATE=step]
# UPDATE is training.sparse_update (step or per_rank). Work files under ${OUT:-out/scaleout-auc}.
set -euo pipefail
SIFT=${SIFT:-build/sift}
OUT=${OUT:-out/scaleout-auc}
MODELS=${MODELS:-din sim}
SEEDS=${SEEDS:-1 2 3}
WORKERS=${WORKERS:-2}
UPDATE=${UPDATE:-step}
mkdir -p "$OUT"
DATA="$OUT/tiny"
[ -d "$DATA" ] || "$SIFT" data gen --preset tiny --seed 1 --out "$DATA" > /dev/null
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
declare -A auc
for model in $MODELS; do
  for seed in $SEEDS; do
    for w in 1 "$WORKERS"; do
      d="$OUT/$model-s$seed-w$w-$UPDATE"
      rm -rf "$d" && mkdir -p "$d"
      cat > "$d/job.yaml" <<EOY
dataset: $(realpath "$DATA")
model: {type: $model}
training: {epochs: 3, batch_size: 2048, staleness: 0, seed: $seed, sparse_update: $UPDATE}
cluster: {servers: 2, workers: $w}
results_dir: $(realpath "$d")/results
EOY
      "$SIFT" local "$d/job.yaml" --work-dir "$d/work" --progress off > "$d/out.txt" 2>&1
      a=$(grep -o '"test_auc": [0-9.]*' "$d"/results/job-*/log.json | tail -1 | awk '{print $2}')
      auc[$model,$seed,$w]=$a
      echo "$model seed $seed workers $w ($UPDATE): test AUC $a"
    done
  done
  python3 - "$model" "$WORKERS" "$SEEDS" ${auc[@]+"$(for k in "${!auc[@]}"; do echo "$k=${auc[$k]}"; done)"} <<'PY'
import sys
model, w, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split()
kv = dict(x.split('=') for x in sys.argv[4].split())
d = [float(kv[f"{model},{s},{w}"]) - float(kv[f"{model},{s},1"]) for s in seeds]
print(f"{model}: {w} workers - 1 worker per seed " + " ".join(f"{x:+.4f}" for x in d) +
      f", mean {sum(d)/len(d):+.4f}")
PY
done
