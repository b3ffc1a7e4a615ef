#!/usr/bin/env bash
# A throwaway two-node Slurm 22.05 cluster on this machine, for trying deploy/slurm/sift.sbatch
# and for its test (tests/deploy/slurm.cmake). Everything lives under one directory: a munge
# daemon with its own key and socket, slurmctld, and two slurmd (NodeName cpu1 in partition `cpu`,
# gpu1 in partition `gpu`; both on 127.0.0.1, non-default ports). No GPUs by default: submit
# sift.sbatch with SBATCH_GPUS_PER_TASK=0. With SIFT_SLURM_FAKE_GPUS=N (1-4), gpu1 gets N `gpu`
# GRES backed by harmless device files (/dev/null, /dev/zero, ...): GPU requests are scheduled and
# bound (CUDA_VISIBLE_DEVICES per task) as on a real GPU node, but there is no GPU behind them.
# Security: with sift at hand (SIFT_BIN, else `sift` on PATH) it also makes DIR/security, a site
# security directory as an administrator would (deploy/slurm/README.md, "Security"): a CA
# (ca/ca.key kept, for `sift certs issue`), the coordinator's and 2 x CPUS_PER_NODE servers'
# certificates and one for every worker (CN worker), all valid for this host's name, 127.0.0.1
# and localhost; tokens.csv with one admin token for you, in submit.token (keys and tokens 0600);
# env.sh exports SIFT_SECURITY_DIR=DIR/security. Without sift, or with SIFT_SECURITY=off, it makes
# none (sift.sbatch then makes one per job, or runs without TLS when SIFT_SECURITY=off).
#
# Usage:
#   [SIFT_SLURM_FAKE_GPUS=N] [SIFT_BIN=PATH] [SIFT_SECURITY=off] \
#   local-cluster.sh start DIR [CPUS_PER_NODE]   start (DIR must be empty or absent); prints the
#                                                line to source: `. DIR/env.sh` (sets SLURM_CONF,
#                                                SIFT_SECURITY_DIR)
#   local-cluster.sh stop DIR                    stop every daemon started in DIR (idempotent)
#
# Needs: Debian's slurmctld, slurmd, slurm-client, munge (22.05); run as root (slurmd launches
# the job steps as the submitting user), no systemd needed. Ports: three free TCP ports picked
# at start (override with SIFT_SLURM_BASE_PORT=P to use P, P+1, P+2).
set -euo pipefail

usage() {
  sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

die() {
  echo "local-cluster.sh: $*" >&2
  exit 1
}

# Three distinct free TCP ports on 127.0.0.1 (bound together, then released).
free_ports() {
  python3 - <<'EOF'
import socket
socks = []
for _ in range(3):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Waits up to $2 seconds for `$1` (a command) to succeed.
wait_for() {
  local cmd=$1 secs=$2 i
  for ((i = 0; i < secs * 5; i++)); do
    if eval "$cmd" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

# DIR/security (see the top): the certificates and a token, as `sift certs` makes them.
make_security() {
  local dir=$1/security servers=$2 host=$3 sift token user
  sift=$(command -v "${SIFT_BIN:-sift}") || {
    echo "local-cluster.sh: no sift (SIFT_BIN, PATH): no security directory;" \
      "sift.sbatch makes one per job" >&2
    return 0
  }
  "$sift" certs init --out "$dir" --servers "$servers" --workers 0 --dns "$host" >/dev/null ||
    die "sift certs init --out $dir failed"
  "$sift" certs issue --ca "$dir/ca" --name worker --out "$dir/worker" --dns "$host" >/dev/null ||
    die "sift certs issue --name worker failed"
  token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  user=$(id -un)
  user=${user//[^A-Za-z0-9._@-]/_}
  (umask 077 && printf '%s\n' "$token" >"$dir/submit.token" &&
    printf '# token,user,role (local-cluster.sh)\n%s,%s,admin\n' "$token" "$user" >"$dir/tokens.csv") ||
    die "cannot write the tokens in $dir"
}

start() {
  local dir=$1 cpus=${2:-8}
  [[ $cpus =~ ^[1-9][0-9]*$ ]] || die "CPUS_PER_NODE must be a positive integer, got '$cpus'"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ -z $(ls -A "$dir") ]] || die "$dir is not empty (stop the old cluster and remove it first)"
  for tool in munged mungekey slurmctld slurmd sinfo scontrol; do
    command -v "$tool" >/dev/null || die "$tool not found (install munge slurmctld slurmd slurm-client)"
  done

  local ctld_port d1_port d2_port
  if [[ -n ${SIFT_SLURM_BASE_PORT:-} ]]; then
    ctld_port=$SIFT_SLURM_BASE_PORT
    d1_port=$((ctld_port + 1))
    d2_port=$((ctld_port + 2))
  else
    read -r ctld_port d1_port d2_port < <(free_ports)
  fi

  # Before any daemon starts: a failure here leaves nothing running.
  [[ ${SIFT_SECURITY:-on} == off ]] || make_security "$dir" $((2 * cpus)) "$(hostname)"

  # munge: its own key, socket, pid, log and seed; munged insists on private directories.
  mkdir -p "$dir/munge" "$dir/ctld" "$dir/spool" "$dir/log"
  chmod 0700 "$dir/munge"
  mungekey --create --keyfile="$dir/munge/munge.key" --bits=1024
  chmod 0400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" ||
    die "munged did not start (see $dir/log/munged.log)"

  local fake_gpus=${SIFT_SLURM_FAKE_GPUS:-0} gres="" gres_types=""
  [[ $fake_gpus =~ ^[0-4]$ ]] || die "SIFT_SLURM_FAKE_GPUS must be 0-4, got '$fake_gpus'"
  if [[ $fake_gpus -gt 0 ]]; then
    local files=(/dev/null /dev/zero /dev/full /dev/urandom) i
    gres=" Gres=gpu:$fake_gpus"
    gres_types="GresTypes=gpu"
    : >"$dir/gres.conf"
    for ((i = 0; i < fake_gpus; i++)); do
      echo "NodeName=gpu1 Name=gpu File=${files[i]}" >>"$dir/gres.conf"
    done
  fi

  local host user
  host=$(hostname)
  user=$(id -un)
  cat >"$dir/slurm.conf" <<EOF
# Generated by deploy/slurm/local-cluster.sh: a throwaway two-node cluster on $host.
ClusterName=siftlocal
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/spool/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Hetjobs are started by the backfill scheduler only: run it every second, not every 30 s.
SchedulerParameters=bf_interval=1
# sbatch --wait polls after 2 s, then every 4x longer while that is under MinJobAge/2 (10 s,
# 42 s, ...); MinJobAge=5 keeps it polling every 2 s (finished jobs stay visible for 5 s+).
MinJobAge=5
SlurmdParameters=config_overrides
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=cpu1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$d1_port CPUs=$cpus State=UNKNOWN
$gres_types
NodeName=gpu1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$d2_port CPUs=$cpus$gres State=UNKNOWN
PartitionName=cpu Nodes=cpu1 Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=gpu1 MaxTime=INFINITE State=UP
EOF
  cat >"$dir/env.sh" <<EOF
export SLURM_CONF=$dir/slurm.conf
EOF
  export SLURM_CONF=$dir/slurm.conf
  [[ ! -d $dir/security ]] || echo "export SIFT_SECURITY_DIR=$dir/security" >>"$dir/env.sh"

  slurmctld -f "$SLURM_CONF" || die "slurmctld did not start (see $dir/log/slurmctld.log)"
  mkdir -p "$dir/spool/cpu1" "$dir/spool/gpu1"
  slurmd -f "$SLURM_CONF" -N cpu1 || die "slurmd cpu1 did not start (see $dir/log/slurmd-cpu1.log)"
  slurmd -f "$SLURM_CONF" -N gpu1 || die "slurmd gpu1 did not start (see $dir/log/slurmd-gpu1.log)"

  # Ready when both nodes are idle (sinfo answers only once slurmctld listens).
  # shellcheck disable=SC2016  # expanded by wait_for's eval
  if ! wait_for '[[ $(sinfo -h -N -t idle -o %N | sort -u | tr "\n" " ") == "cpu1 gpu1 " ]]' 60; then
    sinfo -N >&2 || true
    die "the nodes did not become idle within 60 s (logs in $dir/log)"
  fi
  echo ". $dir/env.sh"
}

# Sends SIGTERM to the daemons whose pids are in the files "$@" (together: each takes ~2 s to
# exit), then waits; SIGKILL after 10 s.
stop_pidfiles() {
  local pidfile pid pids=() i
  for pidfile in "$@"; do
    [[ -f $pidfile ]] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] || continue
    kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  [[ ${#pids[@]} -gt 0 ]] || return 0
  for ((i = 0; i < 100; i++)); do
    kill -0 "${pids[@]}" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
}

stop() {
  local dir=$1
  [[ -d $dir ]] || return 0
  dir=$(cd "$dir" && pwd)
  # Jobs first (their steps die with slurmd otherwise, but cancel them properly while we can).
  if [[ -f $dir/slurm.conf && -f $dir/slurmctld.pid ]]; then
    export SLURM_CONF=$dir/slurm.conf
    timeout 10 scancel --full --quiet --user="$(id -un)" >/dev/null 2>&1 || true
    # shellcheck disable=SC2016  # expanded by wait_for's eval
    wait_for '[[ -z $(squeue -h -o %i) ]]' 30 || echo "local-cluster.sh: jobs still there" >&2
  fi
  stop_pidfiles "$dir/spool/slurmd-cpu1.pid" "$dir/spool/slurmd-gpu1.pid"
  stop_pidfiles "$dir/slurmctld.pid" "$dir/munge/munged.pid"
}

[[ $# -ge 2 ]] || usage
case $1 in
  start) start "$2" "${3:-}" ;;
  stop) stop "$2" ;;
  *) usage ;;
esac
