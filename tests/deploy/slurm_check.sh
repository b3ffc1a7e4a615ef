#!/usr/bin/env bash
# Runs deploy/slurm/sift.sbatch for real: starts a throwaway two-node Slurm cluster
# (deploy/slurm/local-cluster.sh), generates the tiny dataset, submits a 2-server, 2-worker job as
# a heterogeneous Slurm job with `sbatch --wait` (GPU request off: SBATCH_GPUS_PER_TASK=0; no GPUs
# here) and checks: sbatch exits 0, the job's log (printed by the script) and its DLLL log.json
# carry a test AUC, the workers ran with --threads = the component's --cpus-per-task (4), the
# Prometheus targets file (file_sd) lists the 5 roles' /metrics at the ports they report and
# passes `promtool check config` with deploy/prometheus/prometheus.yml, its live copy
# (SIFT_PROMETHEUS_TARGETS_DIR) is removed at the end, the Slurm job is gone and no process of
# this test is left. The coordinator port is the default 0 (any free port), except in `gpu` mode
# (an explicit one). With `small` it runs deploy/slurm/sift-small.sbatch (one node group)
# instead; with `gpu` the script as it is (its --gpus-per-task=1 on) on a cluster whose gpu1 has
# 2 fake GPUs (SIFT_SLURM_FAKE_GPUS: device files, no GPU), checking each worker task got its own
# one (CUDA_VISIBLE_DEVICES); the spec's workers stay on the CPU backend. The cluster is torn
# down on every path. Needs root (slurmd starts the job steps).
# Security is on in every mode, as shipped: TLS with mutual authentication on every gRPC endpoint
# and users' tokens on the coordinator. `hetjob` and `gpu` use the security directory sift.sbatch
# makes for the job (sift certs init for the job's nodes, a token for the user), `small` the
# site directory local-cluster.sh makes (a generic `worker` certificate, SIFT_SECURITY_DIR from
# its env.sh). Each checks that every role ran with its own certificate (the coordinator's and
# servers' own start-up lines, the worker tasks' lines), that the job COMPLETED with nothing
# refused, and the files' modes (0600, the job's CA key removed). `hetjob` also checks that a key
# readable by others is refused before anything starts (exit 2, naming the file) and that
# SIFT_SECURITY=off runs without TLS; `small` that a reader's token cannot submit (the
# coordinator refuses it: exit 2, "role reader").
# Usage: slurm_check.sh SIFT_BINARY DEPLOY_DIR [hetjob|small|gpu] [PROMTOOL]
set -euo pipefail

[[ $# -ge 2 ]] || {
  echo "usage: $0 SIFT_BINARY DEPLOY_DIR [hetjob|small|gpu] [PROMTOOL]" >&2
  exit 2
}
sift=$(realpath "$1")
deploy=$(realpath "$2")
mode=${3:-hetjob}
promtool=${4:-promtool}
case $mode in hetjob | small | gpu) ;; *) echo "unknown mode '$mode'" >&2; exit 2 ;; esac
[[ -x $sift ]] || { echo "FAIL: $sift is not executable" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || {
  echo "FAIL: needs root: the local Slurm cluster's slurmd runs as root to start job steps" \
    "(run the DeploySlurm tests as root, as CI does)" >&2
  exit 1
}
command -v "$promtool" >/dev/null || { echo "FAIL: promtool '$promtool' not found" >&2; exit 1; }

# Short path: munge's socket path must stay under 108 bytes.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sift-slurm.XXXXXX")
cluster=$tmp/cluster

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# This test's own `sift` processes: those whose environment holds this test's SIFT_WORK_DIR
# (exported below; sbatch and srun pass it to every task), or whose command line names $tmp.
# Never a port: another test running at the same time may reuse a port number this job freed,
# and its processes must not be touched (a ClusterTest worker was once killed that way).
our_processes() {
  local proc pid cmd
  for proc in /proc/[0-9]*; do
    pid=${proc#/proc/}
    [[ $pid != "$$" && $pid != "$BASHPID" ]] || continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$proc/cmdline") || continue
    [[ $cmd == *"$sift "* ]] || continue
    if [[ $cmd == *"$tmp"* ]] || tr '\0' '\n' 2>/dev/null <"$proc/environ" | grep -qxF "SIFT_WORK_DIR=$tmp/work"; then
      echo "$pid $cmd"
    fi
  done
}

# The workers end by themselves once the job finished (--exit-after-jobs 1: they ask the
# coordinator for the job's state), not stopped by the script; the Kubernetes worker Job
# completes that way.
check_workers_ended() { # $1: the run, for the message
  local i log
  for i in 0 1; do
    log=$tmp/work/logs/worker-$i.log
    { grep -Eq '^sift worker: job-[0-9]+ COMPLETED; 1 of 1 job\(s\) finished$' "$log" &&
      grep -qx "\[sift.sbatch\] worker task $i: exit 0" "$log"; } ||
      fail "$1: worker $i did not end by itself after the job (--exit-after-jobs 1):" \
        "$(tail -n 3 "$log")"
  done
}

coordinator_port=""
cleanup() {
  local rc=$? pid
  set +e
  "$deploy/slurm/local-cluster.sh" stop "$cluster"
  # Only on a failed path can something of ours still run: stop it by pid.
  for pid in $(our_processes | cut -d' ' -f1); do kill -KILL "$pid" 2>/dev/null; done
  if [[ $rc -ne 0 ]]; then
    echo "--- kept for inspection: $tmp" >&2
    for f in "$cluster"/log/slurmctld.log "$tmp"/work/logs/*.log; do
      [[ -f $f ]] && { echo "--- $f (tail)" >&2; tail -n 20 "$f" >&2; }
    done
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

t0=$SECONDS
fake_gpus=0
[[ $mode == gpu ]] && fake_gpus=2
# The submitter's own settings must not leak into the job (sbatch exports the environment).
unset SIFT_TLS_DIR SIFT_TOKENS_FILE SIFT_TOKEN_FILE SIFT_TLS_SERVER_NAME SIFT_SECURITY SIFT_SECURITY_DIR
SIFT_BIN=$sift SIFT_SLURM_FAKE_GPUS=$fake_gpus "$deploy/slurm/local-cluster.sh" start "$cluster" 8 >/dev/null
# shellcheck disable=SC1091
. "$cluster/env.sh"
echo "cluster up in $((SECONDS - t0)) s: $(sinfo -h -o '%P %N %t' | tr '\n' ';')"
[[ ${SIFT_SECURITY_DIR:-} == "$cluster/security" && -f $cluster/security/worker/tls.key ]] ||
  fail "local-cluster.sh made no security directory (SIFT_SECURITY_DIR=${SIFT_SECURITY_DIR:-})"
# hetjob and gpu: the directory sift.sbatch makes for the job; small: the site's (env.sh).
if [[ $mode == small ]]; then
  secdir=$cluster/security worker_cert=worker
else
  unset SIFT_SECURITY_DIR
  secdir=$tmp/work/security worker_cert=worker-N
fi

"$sift" data gen --preset tiny --seed 1 --out "$tmp/data" --threads 2 >/dev/null
cat >"$tmp/job.yaml" <<'EOF'
name: slurm-check
dataset: data
model:
  type: sim
training:
  epochs: 1
  batch_size: 256
  max_steps_per_epoch: 4
  train_eval_samples: 1024
  staleness: 0
  seed: 1
cluster:
  servers: 2
  workers: 2
  backend: cpu
  threads_per_worker: 1
results_dir: results
EOF

export SIFT_BIN=$sift SIFT_JOB=job.yaml SIFT_WORK_DIR=$tmp/work SIFT_PROMETHEUS_TARGETS_DIR=$tmp/live
export SIFT_SERVER_ARGS="--threads 1"
unset SIFT_COORDINATOR_PORT SIFT_WORKER_THREADS SIFT_WORKER_CPUS_PER_TASK
if [[ $mode == gpu ]]; then
  coordinator_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export SIFT_COORDINATOR_PORT=$coordinator_port
fi
cd "$tmp"
t1=$SECONDS
if [[ $mode == small ]]; then
  SIFT_SLURM_SCRIPT=$deploy/slurm/sift.sbatch timeout 150 sbatch --wait --parsable --ntasks=4 \
    --output="$tmp/slurm-%j.out" "$deploy/slurm/sift-small.sbatch" >"$tmp/sbatch.out" && rc=0 || rc=$?
elif [[ $mode == gpu ]]; then
  timeout 150 sbatch --wait --parsable --output="$tmp/slurm-%j.out" \
    "$deploy/slurm/sift.sbatch" >"$tmp/sbatch.out" && rc=0 || rc=$?
else
  SBATCH_GPUS_PER_TASK=0 timeout 150 sbatch --wait --parsable --output="$tmp/slurm-%j.out" \
    "$deploy/slurm/sift.sbatch" >"$tmp/sbatch.out" && rc=0 || rc=$?
fi
job=$(head -n 1 "$tmp/sbatch.out" | cut -d';' -f1)
out=$tmp/slurm-$job.out
echo "sbatch --wait ($mode, job $job): exit $rc after $((SECONDS - t1)) s"
[[ -f $out ]] && cat "$out"
[[ $rc -eq 0 ]] || fail "sbatch --wait exited $rc (expected 0: the job COMPLETED)"

layout=hetjob
[[ $mode == small ]] && layout=single
grep -q "^\[sift.sbatch .*\] job $job ($layout)" "$out" || fail "the script did not run as a $layout job"
grep -Eq 'job job-[0-9]+ COMPLETED' "$out" || fail "no COMPLETED job in the output"
grep -Eq 'epoch 1: train AUC [0-9.]+ loss [0-9.]+, test AUC 0\.[0-9]+' "$out" ||
  fail "no test AUC in the job log (sift logs) printed by the script"
# The coordinator writes each job's results to <results_dir>/<job id>/.
grep -Eq '"type": "LOG", "step": \[\], "data": \{.*"test_auc": 0\.[0-9]+' "$tmp"/results/job-*/log.json ||
  fail "no final test_auc record in $tmp/results/job-*/log.json"
grep -q 'done: exit code 0' "$out" || fail "the script did not finish cleanly"

# The coordinator's port: the explicit one, or the free one it picked (its port file).
read -r got_port got_metrics_port <"$tmp/work/coordinator.port"
[[ -z $coordinator_port || $got_port == "$coordinator_port" ]] ||
  fail "the coordinator listened on $got_port, not on SIFT_COORDINATOR_PORT=$coordinator_port"
grep -q "coordinator 127.0.0.1:$got_port;" "$out" || fail "the log does not name coordinator 127.0.0.1:$got_port"
coordinator_port=$got_port

# Worker threads: the hetjob's worker component has --cpus-per-task=4; one group: the spec's.
threads=$(sed -n 's/^\[sift.sbatch\] worker task .*, threads: //p' "$tmp"/work/logs/worker-*.log | tr '\n' ' ')
if [[ $mode == small ]]; then expected="default default "; else expected="4 4 "; fi
[[ $threads == "$expected" ]] || fail "worker threads were '$threads', expected '$expected'"

# Prometheus: targets.json (file_sd) names each role's /metrics at the port the role reported
# (coordinator: its port file; servers: their port files; workers: their logs), labels role and
# index as deploy/prometheus/rules.yml expects; the real prometheus.yml accepts it.
targets=$tmp/work/prometheus/targets.json
[[ -f $targets ]] || fail "no $targets"
want="127.0.0.1:$got_metrics_port coordinator 0"
for i in 0 1; do
  read -r _ mport <"$tmp/work/ports/server-$i.port"
  want+=$'\n'"127.0.0.1:$mport embedding-server $i"
  addr=$(sed -n 's|^sift worker: registered with .* metrics \(.*\)/metrics$|\1|p' "$tmp/work/logs/worker-$i.log")
  want+=$'\n'"$addr worker $i"
done
got=$(python3 - "$targets" "$job" <<'EOF'
import json, sys
groups = json.load(open(sys.argv[1]))
for g in groups:
    assert set(g) == {"targets", "labels"}, g
    assert g["labels"]["slurm_job_id"] == sys.argv[2], g
    for t in g["targets"]:
        print(t, g["labels"]["role"], g["labels"]["index"])
EOF
) || fail "$targets is not valid file_sd JSON: $(cat "$targets")"
[[ $(sort <<<"$got") == $(sort <<<"$want") ]] ||
  fail "targets in $targets:"$'\n'"$got"$'\n'"expected:"$'\n'"$want"
mkdir -p "$tmp/prom/targets"
cp "$deploy/prometheus/prometheus.yml" "$deploy/prometheus/rules.yml" "$tmp/prom/"
cp "$targets" "$tmp/prom/targets/slurm.json"
"$promtool" check config "$tmp/prom/prometheus.yml" >"$tmp/promtool.out" 2>&1 ||
  fail "promtool check config with the job's targets: $(cat "$tmp/promtool.out")"
grep -q "prometheus: 5 targets in $targets and $tmp/live/sift-slurm-$job.json" "$out" ||
  fail "the live targets file was not written with all 5 targets"
[[ ! -e $tmp/live/sift-slurm-$job.json ]] || fail "the live targets file is still there after the job"

# The workers' GPUs: one each (fake ones) in gpu mode, none otherwise.
gpus=$(sed -n 's/^\[sift.sbatch\] worker task .*, GPUs: \([^,]*\),.*/\1/p' "$tmp"/work/logs/worker-*.log | sort | tr '\n' ' ')
if [[ $mode == gpu ]]; then expected="0 1 "; else expected="none none "; fi
[[ $gpus == "$expected" ]] || fail "worker GPUs (CUDA_VISIBLE_DEVICES) were '$gpus', expected '$expected'"

# Security: every role with its own certificate, nothing refused, the files private.
what="$mode job with TLS and tokens"
grep -q "security: TLS on, certificates in $secdir" "$out" || fail "the script did not run with TLS from $secdir"
[[ $mode == small ]] || grep -q "certificates in $secdir (made for this job)" "$out" ||
  fail "the script did not make the job's security directory"
grep -q "TLS on ($secdir/coordinator), tokens $secdir/tokens.csv" "$tmp/work/logs/coordinator.log" ||
  fail "the coordinator did not run with TLS and the tokens file: $(head -n 3 "$tmp/work/logs/coordinator.log")"
for i in 0 1; do
  grep -q "^sift embedding-server: shard $i of 2 .*, TLS on ($secdir/server-$i)" "$tmp/work/logs/server-$i.log" ||
    fail "embedding server $i did not run with TLS from $secdir/server-$i"
  want=$secdir/${worker_cert/N/$i}
  grep -qx "\[sift.sbatch\] worker task $i: TLS $want" "$tmp/work/logs/worker-$i.log" ||
    fail "worker $i did not run with TLS from $want"
done
refused=$(grep -h 'refused' "$tmp"/work/logs/coordinator.log "$tmp"/work/logs/server-*.log | sort | uniq -c || true)
[[ -z $refused ]] || fail "calls of the job's own members and of this script were refused:"$'\n'"$refused"
check_workers_ended "$what"
for f in "$secdir"/*/tls.key "$secdir/tokens.csv" "$secdir/submit.token"; do
  [[ $(stat -c %a "$f") == 600 ]] || fail "$f is mode $(stat -c %a "$f"), not 0600"
done
if [[ $mode != small ]]; then
  [[ ! -e $secdir/ca/ca.key ]] || fail "the job's CA key $secdir/ca/ca.key was kept"
  grep -Eq "^[0-9a-f]{64},$(id -un),admin$" "$secdir/tokens.csv" || fail "no admin token in $secdir/tokens.csv"
fi

# Nothing left: the Slurm job is gone and no sift process of this test runs.
[[ -z $(squeue -h -j "$job" -t PENDING,RUNNING,SUSPENDED,CONFIGURING -o %i 2>/dev/null) ]] ||
  fail "job $job is still in squeue"
left=$(our_processes)
[[ -z $left ]] || fail "processes left running: $left"
# Failure paths (hetjob mode): a spec that does not match the task counts is refused before
# anything starts (exit 2), and servers or workers that die fail the job (exit 1) without leaving
# anything.
if [[ $mode == hetjob ]]; then
  export SBATCH_GPUS_PER_TASK=0
  sbatch --wait --parsable --ntasks=3 --output="$tmp/mismatch.out" : --ntasks=2 \
    "$deploy/slurm/sift.sbatch" >/dev/null && rc=0 || rc=$?
  cat "$tmp/mismatch.out"
  [[ $rc -eq 2 ]] || fail "a 3-server allocation for a 2-server spec: sbatch exited $rc, expected 2"
  grep -q 'asks for cluster.servers=2 and cluster.workers=2, but this heterogeneous job has 3 server and 2 worker tasks' \
    "$tmp/mismatch.out" || fail "no size-mismatch message"

  SIFT_SERVER_ARGS="--no-such-flag" sbatch --wait --parsable --output="$tmp/dies.out" \
    "$deploy/slurm/sift.sbatch" >/dev/null && rc=0 || rc=$?
  cat "$tmp/dies.out"
  [[ $rc -eq 1 ]] || fail "embedding servers that cannot start: sbatch exited $rc, expected 1"
  grep -q 'error: the embedding-server step ended before the job finished' "$tmp/dies.out" ||
    fail "no message naming the failed step"
  left=$(our_processes)
  [[ -z $left ]] || fail "processes left running after the failed job: $left"

  SIFT_WORKER_ARGS="--no-such-flag" sbatch --wait --parsable --output="$tmp/workers-die.out" \
    "$deploy/slurm/sift.sbatch" >/dev/null && rc=0 || rc=$?
  cat "$tmp/workers-die.out"
  [[ $rc -eq 1 ]] || fail "workers that cannot start: sbatch exited $rc, expected 1"
  grep -Eq 'error: the worker step ended \(exit [0-9]+\) before the job finished' "$tmp/workers-die.out" ||
    fail "no message naming the failed worker step"
  left=$(our_processes)
  [[ -z $left ]] || fail "processes left running after the failed job: $left"

  # A server key that others can read: refused before anything starts, naming the file.
  cp -a "$secdir" "$tmp/sec-open"
  chmod 0644 "$tmp/sec-open/server-1/tls.key"
  SIFT_SECURITY_DIR=$tmp/sec-open sbatch --wait --parsable --output="$tmp/open-key.out" \
    "$deploy/slurm/sift.sbatch" >/dev/null && rc=0 || rc=$?
  cat "$tmp/open-key.out"
  [[ $rc -eq 2 ]] || fail "a key of mode 0644: sbatch exited $rc, expected 2"
  grep -q "$tmp/sec-open/server-1/tls.key is mode 0644: .*chmod 600 $tmp/sec-open/server-1/tls.key" \
    "$tmp/open-key.out" || fail "no message naming the key of mode 0644"
  ! grep -q 'coordinator .* logs in' "$tmp/open-key.out" || fail "the coordinator started with a key of mode 0644"

  # Security off: plaintext, no tokens, the job completes.
  SIFT_SECURITY=off sbatch --wait --parsable --output="$tmp/off.out" "$deploy/slurm/sift.sbatch" \
    >/dev/null && rc=0 || rc=$?
  [[ $rc -eq 0 ]] || { cat "$tmp/off.out"; fail "SIFT_SECURITY=off: sbatch exited $rc, expected 0"; }
  grep -q 'security: off (SIFT_SECURITY=off' "$tmp/off.out" || fail "SIFT_SECURITY=off: the script did not say so"
  grep -Eq 'job job-[0-9]+ COMPLETED' "$tmp/off.out" || fail "SIFT_SECURITY=off: no COMPLETED job"
  grep -q 'TLS off, tokens none' "$tmp/work/logs/coordinator.log" || fail "SIFT_SECURITY=off: the coordinator ran with TLS"
  grep -q '^sift embedding-server: shard 0 .*, TLS off$' "$tmp/work/logs/server-0.log" ||
    fail "SIFT_SECURITY=off: the servers ran with TLS"
  check_workers_ended "SIFT_SECURITY=off"
  left=$(our_processes)
  [[ -z $left ]] || fail "processes left running after the SIFT_SECURITY=off job: $left"
fi

# One group: a user whose token has role reader may watch but not submit; the coordinator
# (its tokens file re-read at start) refuses the submission, and the script exits 2.
if [[ $mode == small ]]; then
  reader_token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077 && echo "$reader_token" >"$tmp/reader.token")
  echo "$reader_token,reader-user,reader" >>"$secdir/tokens.csv"
  SIFT_TOKEN_FILE=$tmp/reader.token SIFT_SLURM_SCRIPT=$deploy/slurm/sift.sbatch sbatch --wait \
    --parsable --ntasks=4 --output="$tmp/reader.out" "$deploy/slurm/sift-small.sbatch" >/dev/null &&
    rc=0 || rc=$?
  cat "$tmp/reader.out"
  [[ $rc -eq 2 ]] || fail "a reader's token: sbatch exited $rc, expected 2 (the submission refused)"
  grep -q 'user reader-user has role reader' "$tmp/reader.out" || fail "no refusal naming the reader's role"
  grep -q 'refused SubmitJob from user reader-user (reader)' "$tmp/work/logs/coordinator.log" ||
    fail "the coordinator did not log the refused submission"
  left=$(our_processes)
  [[ -z $left ]] || fail "processes left running after the refused submission: $left"
fi

echo "PASS: $mode job completed ($(grep -Eo 'test AUC 0\.[0-9]+' "$out" | head -n 1)), nothing left running, $((SECONDS - t0)) s in all"
