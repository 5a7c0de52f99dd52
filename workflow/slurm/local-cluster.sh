#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for CI and for trying `snakemake --profile slurm` on a laptop:
# installs Debian's slurm-wlm and munge if missing, writes slurm.conf and gres.conf for this host (one partition,
# a GPU generic resource backed by /dev/null so that jobs asking for a GPU schedule on a machine without one,
# two job slots per core, accounting off), starts munged, slurmctld and slurmd, and waits until the node is idle.
#   sudo workflow/slurm/local-cluster.sh          # start (idempotent)
#   sudo workflow/slurm/local-cluster.sh stop
# With accounting off, `sacct` fails: the profile tells the executor plugin to poll `squeue` instead.
set -euo pipefail

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

if [ "${1:-start}" = stop ]; then
    $SUDO pkill -x slurmd || true
    $SUDO pkill -x slurmctld || true
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

HOST=$(hostname -s)
# two job slots per core (config_overrides: slurmd takes them as written): a test pipeline's jobs are each a few
# seconds of Python starting up, and Snakemake's polling leaves a core idle between them
CPUS=$(( $(nproc) * 2 ))
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
CONF_DIR=/etc/slurm
STATE=/var/spool/slurm

$SUDO mkdir -p "$CONF_DIR" "$STATE/ctld" "$STATE/d" /var/log/slurm /run/munge
$SUDO tee "$CONF_DIR/slurm.conf" >/dev/null <<CONF
# Written by workflow/slurm/local-cluster.sh: one node, one partition, a GPU gres, no accounting.
ClusterName=rnnsearch
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmdParameters=config_overrides
# a finished job's record kept for an hour (Slurm's default: 5 min): the Slurm tests read them after long runs
MinJobAge=3600
KillWait=30
SchedulerType=sched/backfill
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:1 State=UNKNOWN
PartitionName=main Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
echo "Name=gpu File=/dev/null" | $SUDO tee "$CONF_DIR/gres.conf" >/dev/null

if [ ! -s /etc/munge/munge.key ]; then
    $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
$SUDO chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
$SUDO chmod 0400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
    if [ -z "$SUDO" ]; then runuser -u munge -- /usr/sbin/munged || /usr/sbin/munged --force
    else sudo -u munge /usr/sbin/munged || sudo /usr/sbin/munged --force; fi
fi
pgrep -x slurmctld >/dev/null || $SUDO /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || $SUDO /usr/sbin/slurmd

for _ in $(seq 60); do
    if sinfo -h -N -o "%T" 2>/dev/null | grep -qE "^idle|^mixed|^allocated"; then
        sinfo -N -o "%N %T %c %m %G"
        exit 0
    fi
    sleep 1
done
echo "local-cluster.sh: the node did not become idle; see /var/log/slurm/" >&2
sinfo -N -l >&2 || true
tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
