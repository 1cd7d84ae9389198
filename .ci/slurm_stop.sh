#!/bin/bash
# Stop the daemons .ci/slurm_start.sh started, each by the pid it noted (and only if that pid still
# runs the daemon it named): a cluster someone else started is left alone. Jobs still queued or
# running are cancelled first.
set -uo pipefail
STATE=/run/lengthgen-slurm/started
[ -s "$STATE" ] || { echo "slurm_stop: nothing to stop (.ci/slurm_start.sh started no daemon)"; exit 0; }
if grep -q '^slurmctld ' "$STATE"; then
  jobs=$(squeue -h -o %i 2>/dev/null)
  [ -n "$jobs" ] && scancel $jobs && echo "cancelled jobs: $(echo $jobs)"
  for _ in $(seq 60); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
fi
# the reverse of the order they started in: slurmd, slurmctld, slurmdbd, mariadbd, munged
tac "$STATE" | while read -r name pid; do
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
    kill "$pid"
    for _ in $(seq 150); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    [ -d "/proc/$pid" ] && { kill -9 "$pid"; echo "$name ($pid) ignored SIGTERM: killed"; }
    echo "stopped $name ($pid)"
  fi
done
rm -f "$STATE"
