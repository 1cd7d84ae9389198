#!/bin/bash
# A one-node Slurm cluster on this machine, to try `ablate.py --launcher=slurm` and to test it
# (pytest -m slurm): munge, slurmctld, slurmd and, unless --no-accounting, MariaDB + slurmdbd so that
# sacct answers. Needs root and Debian's packages (installed when missing); no systemd.
#
#   bash .ci/slurm_start.sh                  # the partition is 'debug'; sinfo, squeue, sacct work
#   bash .ci/slurm_start.sh --no-accounting  # as small clusters often run: sacct fails
#   bash .ci/slurm_stop.sh                   # stops what this script started, by pid
#
# Idempotent: a second run installs nothing, starts only what is not running, and rewrites a config
# (restarting the daemons that read it) only when it changes, e.g. from accounting on to off. The
# daemons it starts are listed with their pids in $STATE, which slurm_stop.sh reads.
set -euo pipefail
ACCOUNTING=1
[ "${1:-}" = --no-accounting ] && ACCOUNTING=0
STATE=/run/lengthgen-slurm/started
HOST=$(hostname -s)
T0=$SECONDS
note() { echo "[slurm_start ${SECONDS}s] $*"; }
fail() { echo "slurm_start: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (it installs packages and starts daemons)"
mkdir -p "$(dirname "$STATE")"; touch "$STATE"

alive() {   # alive NAME PIDFILE: the pid in PIDFILE runs a process called NAME
  [ -s "$2" ] && [ "$(cat "/proc/$(cat "$2")/comm" 2>/dev/null)" = "$1" ]
}
started() {  # started NAME PIDFILE: note a daemon this script started, for slurm_stop.sh
  for _ in $(seq 100); do alive "$1" "$2" && break; sleep 0.1; done
  alive "$1" "$2" \
    || fail "$1 did not start: see /var/log/slurm/ or /var/log/munge/$(errors_in "/var/log/slurm/$1.log" '; its log says: ')"
  echo "$1 $(cat "$2")" >> "$STATE"
  note "started $1 ($(cat "$2"))"
}
stop_for_new_config() {  # stop_for_new_config NAME PIDFILE: it reads a config that just changed
  alive "$1" "$2" || return 0
  local pid; pid=$(cat "$2"); kill "$pid"
  for _ in $(seq 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  sed -i "/^$1 $pid\$/d" "$STATE"
}
errors_in() {  # errors_in LOG [PREFIX]: PREFIX and its last 2 distinct error lines, without their times, on one line
  local e; e=$(grep -iE 'error|fatal' "$1" 2>/dev/null | sed 's/^\[[^]]*\] //' | tac | awk '!seen[$0]++' | head -n 2 | tac)
  [ -z "$e" ] || printf '%s%s' "${2:-}" "$(printf '%s' "$e" | sed -z 's/\n/; /g')"
}
write_if_changed() {  # write_if_changed FILE TEXT: -> 0 if the file changed
  [ "$(cat "$1" 2>/dev/null)" = "$2" ] && return 1
  printf '%s\n' "$2" > "$1"
}

# packages: Debian's slurm-wlm (22.05 on bookworm) and munge; slurmdbd and MariaDB for accounting
want="slurm-wlm munge"; [ $ACCOUNTING = 1 ] && want="$want slurmdbd mariadb-server"
missing=""; for p in $want; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  note "installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q $missing >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q $missing >/dev/null 2>&1; } \
    || fail "could not install$missing with apt-get"
fi
getent hosts "$HOST" >/dev/null || echo "127.0.0.1 $HOST" >> /etc/hosts

# munge: every Slurm message is signed with its key; munged runs as the munge user, which owns the key
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
alive munged /run/munge/munged.pid || { runuser -u munge -- /usr/sbin/munged; started munged /run/munge/munged.pid; }
for _ in $(seq 50); do munge -n </dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done

install -d -o slurm -g slurm /var/spool/slurmctld /var/log/slurm /run/slurm
install -d /var/spool/slurmd

# accounting: slurmdbd keeps the jobs in MariaDB, and sacct reads them back
if [ $ACCOUNTING = 1 ]; then
  if ! alive mariadbd /run/mysqld/mysqld.pid; then
    /etc/init.d/mariadb start >/dev/null 2>&1 || fail "MariaDB did not start"
    started mariadbd /run/mysqld/mysqld.pid
  fi
  # a user and database of its own, so that a Slurm accounting this host ran before keeps its password
  # and jobs; ALTER USER: a user left from an earlier setup may have another password, and slurmdbd
  # then only logs 'Access denied' and retries
  mysql -u root -e "CREATE DATABASE IF NOT EXISTS lengthgen_acct_db;
    CREATE USER IF NOT EXISTS 'lengthgen'@'localhost'; ALTER USER 'lengthgen'@'localhost' IDENTIFIED BY 'lengthgen';
    GRANT ALL ON lengthgen_acct_db.* TO 'lengthgen'@'localhost'; FLUSH PRIVILEGES;" \
    || fail "MariaDB refused the accounting user (mysql -u root, error above): fix that and rerun"
  if write_if_changed /etc/slurm/slurmdbd.conf "AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=/run/slurm/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=lengthgen_acct_db
StorageUser=lengthgen
StoragePass=lengthgen"; then
    stop_for_new_config slurmdbd /run/slurm/slurmdbd.pid
  fi
  chown slurm:slurm /etc/slurm/slurmdbd.conf && chmod 0600 /etc/slurm/slurmdbd.conf
  if ! alive slurmdbd /run/slurm/slurmdbd.pid; then
    slurmdbd
    started slurmdbd /run/slurm/slurmdbd.pid
  fi
  # slurmdbd listens only once it reached MariaDB; until then it retries every 5 s and logs why
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/6819) 2>/dev/null && break; sleep 0.2; done
  (exec 3<>/dev/tcp/127.0.0.1/6819) 2>/dev/null \
    || fail "slurmdbd does not answer: fix what /var/log/slurm/slurmdbd.log says and rerun$(errors_in /var/log/slurm/slurmdbd.log '; it says: ')"
  accounting="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost"
else
  accounting="AccountingStorageType=accounting_storage/none"
fi

# the cluster: one node with this machine's CPUs (each a unit a job can take: CR_CPU) and 90% of its
# memory, one partition 'debug';
# MinJobAge 300: scontrol keeps an ended job that long, which is how a launcher without sacct sees it end
cpus=$(getconf _NPROCESSORS_ONLN); mem=$(( $(awk '/^MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
if write_if_changed /etc/slurm/slurm.conf "ClusterName=lengthgen
SlurmctldHost=$HOST
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$accounting
ReturnToService=2
MinJobAge=300
KillWait=10
InactiveLimit=0
NodeName=$HOST CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$(( mem / cpus ))"; then
  note "wrote /etc/slurm/slurm.conf"
  stop_for_new_config slurmd /run/slurm/slurmd.pid
  stop_for_new_config slurmctld /run/slurm/slurmctld.pid
fi
if [ $ACCOUNTING = 1 ] && ! sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx lengthgen; then
  sacctmgr -i add cluster lengthgen >/dev/null || fail "sacctmgr could not add cluster lengthgen: see /var/log/slurm/slurmdbd.log"
fi
alive slurmctld /run/slurm/slurmctld.pid || { slurmctld; started slurmctld /run/slurm/slurmctld.pid; }
alive slurmd /run/slurm/slurmd.pid || { slurmd; started slurmd /run/slurm/slurmd.pid; }

# the node up, and a first job through it
for _ in $(seq 120); do
  case "$(sinfo -h -n "$HOST" -o %t 2>/dev/null)" in
    idle*|mix*|alloc*) break ;;
    down*|drain*) scontrol update nodename="$HOST" state=resume 2>/dev/null || true ;;
  esac
  sleep 0.25
done
sinfo -h -n "$HOST" -o %t | grep -qE '^(idle|mix|alloc)' || fail "node $HOST is not up: see /var/log/slurm/"
[ "$(srun -N1 -t 1 hostname)" = "$HOST" ] || fail "a test job did not run: see /var/log/slurm/"
note "cluster up in $(( SECONDS - T0 ))s: partition debug on $HOST, $cpus CPUs, accounting $([ $ACCOUNTING = 1 ] && echo on || echo off)"
