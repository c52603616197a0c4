#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for development and CI.
#
#   slurm/dev_cluster.sh start    install Debian's slurm-wlm + munge if absent, write slurm.conf, start
#                                 munged, slurmctld and slurmd, wait until the node is idle
#   slurm/dev_cluster.sh status   the daemons this script started (pids) and `sinfo`; exit 0 when the
#                                 cluster answers, 3 when it does not
#   slurm/dev_cluster.sh stop     stop the daemons this script started (by their recorded pids only)
#
# Idempotent: `start` on a running cluster changes nothing; a daemon that was already running (started
# by someone else) is used but never recorded, so `stop` leaves it alone. Needs root (apt, daemons).
# One partition, `debug`, holds the node. Facts behind the settings: ../shared/notes/slurm-local.md.
#
# Environment:
#   LEDGERWRIGHT_SLURM_STATE  where the pid file lives (default /run/ledgerwright-slurm)
#   SLURM_CONF                the slurm.conf to write/use (default /etc/slurm/slurm.conf); an existing
#                             file is replaced only if this script wrote it (it carries MARKER)
#   DEV_CLUSTER_PARTITION     partition name (default debug)
set -euo pipefail

STATE_DIR="${LEDGERWRIGHT_SLURM_STATE:-/run/ledgerwright-slurm}"
PID_FILE="$STATE_DIR/pids"
CONF="${SLURM_CONF:-/etc/slurm/slurm.conf}"
PARTITION="${DEV_CLUSTER_PARTITION:-debug}"
MARKER="# written by ledgerwright slurm/dev_cluster.sh"
PACKAGES=(munge slurmctld slurmd slurm-client)
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
MUNGE_PID=/run/munge/munged.pid
export SLURM_CONF="$CONF"

log() { echo "dev_cluster: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

pid_from() { # pid in a pid file, if its process is alive
  local p
  [ -r "$1" ] || return 1
  p="$(tr -dc '0-9' <"$1")"
  alive "$p" && echo "$p"
}

comm_of() { cat "/proc/$1/comm" 2>/dev/null || true; }

record() { # name pid
  mkdir -p "$STATE_DIR"
  echo "$1 $2" >>"$PID_FILE"
  log "started $1 (pid $2)"
}

recorded() { # lines "name pid" of recorded daemons still alive with the expected command name
  [ -r "$PID_FILE" ] || return 0
  local name pid
  while read -r name pid; do
    [ -n "${pid:-}" ] || continue
    if alive "$pid" && [ "$(comm_of "$pid")" = "$name" ]; then
      echo "$name $pid"
    fi
  done <"$PID_FILE"
}

cluster_answers() { command -v sinfo >/dev/null && timeout 10 sinfo -h >/dev/null 2>&1; }

install_packages() {
  local missing=()
  command -v munged >/dev/null || missing+=(munge)
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  [ "${#missing[@]}" -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "Slurm is not installed and installing needs root (apt-get install ${PACKAGES[*]})"
  command -v apt-get >/dev/null || die "Slurm is not installed and apt-get is not available"
  log "installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null; then
    apt-get update -q >/dev/null || die "apt-get update failed (is the Debian mirror reachable?)"
    apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null || die "apt-get install ${PACKAGES[*]} failed"
  fi
}

write_conf() {
  local host topo cpus boards sockets cores threads mem real
  host="$(hostname -s)"
  if [ -e "$CONF" ] && ! grep -qF "$MARKER" "$CONF"; then
    log "using the existing $CONF (not written by this script; left as it is)"
    return 0
  fi
  topo="$(slurmd -C 2>/dev/null | head -n1)"
  field() { sed -n "s/.*\b$1=\([0-9]*\).*/\1/p" <<<"$topo"; }
  cpus="$(field CPUs)"
  boards="$(field Boards)"
  sockets="$(field SocketsPerBoard)"
  cores="$(field CoresPerSocket)"
  threads="$(field ThreadsPerCore)"
  mem="$(field RealMemory)"
  cpus="${cpus:-$(nproc)}"
  real=$((${mem:-4000} * 90 / 100))
  local node="NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus"
  if [ -n "$boards" ] && [ -n "$sockets" ] && [ -n "$cores" ] && [ -n "$threads" ]; then
    node+=" Boards=$boards SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads"
  fi
  node+=" RealMemory=$real State=UNKNOWN"
  mkdir -p "$(dirname "$CONF")"
  cat >"$CONF.tmp" <<EOF
$MARKER (a single-node development cluster; see slurm/dev_cluster.sh)
ClusterName=localcluster
SlurmctldHost=$host(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
DependencyParameters=kill_invalid_depend
EnforcePartLimits=ALL
ReturnToService=2
MinJobAge=600
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AccountingStorageType=accounting_storage/none
$node
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    return 0 # a munged answers already (ours or not)
  fi
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 600 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  chmod 755 /run/munge
  rm -f "$MUNGE_PID"
  runuser -u munge -- munged
  local pid="" i
  for i in $(seq 50); do
    pid="$(pid_from "$MUNGE_PID" || true)"
    [ -n "$pid" ] && break
    sleep 0.1
  done
  [ -n "$pid" ] || die "munged did not start"
  record munged "$pid"
  for i in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "munge does not answer (munge -n | unmunge)"
}

start_daemon() { # name pidfile
  local name="$1" pidfile="$2" pid i
  if pid="$(pid_from "$pidfile")" && [ "$(comm_of "$pid")" = "$name" ]; then
    return 0 # already running
  fi
  rm -f "$pidfile"
  "$name"
  for i in $(seq 100); do
    if pid="$(pid_from "$pidfile")"; then
      record "$name" "$pid"
      return 0
    fi
    sleep 0.1
  done
  die "$name did not start (see /var/log/slurm/$name.log)"
}

node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -n1; }

cmd_start() {
  install_packages
  if [ "$(id -u)" -ne 0 ]; then
    cluster_answers && { log "a cluster answers already; nothing to do"; exit 0; }
    die "starting the daemons needs root"
  fi
  write_conf
  mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm "$STATE_DIR"
  chown slurm:slurm /var/spool/slurmctld /var/log/slurm
  start_munge
  start_daemon slurmctld "$CTLD_PID"
  start_daemon slurmd "$SLURMD_PID"
  local i state="" host
  host="$(hostname -s)"
  for i in $(seq 150); do
    state="$(node_state || true)"
    case "$state" in
    idle | mixed | allocated | completing) break ;;
    down* | drain* | drained*)
      scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
      ;;
    esac
    sleep 0.2
  done
  case "$state" in
  idle | mixed | allocated | completing) ;;
  *) die "the node did not become idle (state '${state:-none}'; see /var/log/slurm/)" ;;
  esac
  log "cluster up: partition $PARTITION, node $host ($state)"
}

cmd_stop() {
  local lines name pid i
  lines="$(recorded)"
  if [ -z "$lines" ]; then
    log "nothing to stop (no daemon started by this script is running)"
    rm -f "$PID_FILE"
    return 0
  fi
  # slurmd, slurmctld, then munged: reverse order of starting
  for name in slurmd slurmctld munged; do
    pid="$(awk -v n="$name" '$1 == n {print $2}' <<<"$lines" | tail -n1)"
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then
      log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $name (pid $pid)"
    case "$name" in
    slurmctld) rm -f "$CTLD_PID" ;; # slurmctld runs as slurm and cannot remove it itself
    slurmd) rm -f "$SLURMD_PID" ;;
    munged) rm -f "$MUNGE_PID" ;;
    esac
  done
  rm -f "$PID_FILE"
}

cmd_status() {
  local lines
  lines="$(recorded)"
  if [ -n "$lines" ]; then
    echo "started by dev_cluster.sh:"
    sed 's/^/  /' <<<"$lines"
  else
    echo "started by dev_cluster.sh: none"
  fi
  if cluster_answers; then
    sinfo
    return 0
  fi
  echo "no Slurm cluster answers"
  return 3
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
  echo "usage: $0 start|stop|status" >&2
  exit 2
  ;;
esac
