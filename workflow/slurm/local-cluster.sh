#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for CI and for trying `snakemake --profile slurm` on a laptop,
# configured as clusters are: accounting through slurmdbd (on a local MariaDB), so that `sacct`, which the executor
# plugin polls, answers; memory a consumable resource, and a job over its request killed. It installs Debian's
# slurm-wlm, slurmdbd, munge and mariadb-server if missing, writes slurm.conf, gres.conf and slurmdbd.conf for this
# host (one partition, a GPU generic resource backed by /dev/null so that jobs asking for a GPU schedule on a
# machine without one, two job slots per core), starts MariaDB, munged, slurmdbd, slurmctld and slurmd, each with
# its pid file in /run/rnnsearch-slurm, and waits until the node is idle.
#   sudo workflow/slurm/local-cluster.sh          # start (idempotent)
#   sudo workflow/slurm/local-cluster.sh stop     # stop what it started, by those pid files
set -euo pipefail

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
RUN=/run/rnnsearch-slurm
DAEMONS="slurmd slurmctld slurmdbd munged mariadb"  # in the order they stop

running() { [ -s "$RUN/$1.pid" ] && $SUDO kill -0 "$($SUDO cat "$RUN/$1.pid")" 2>/dev/null; }

say() { echo "local-cluster.sh: $*" >&2; }

apt_get() {  # apt-get "$@", waiting at most 10 minutes while another apt-get or dpkg holds its lock; a line every
             # 30 s while it runs (an install takes minutes, its own output is kept back)
    local start deadline err ticker status=0
    start=$(date +%s)
    deadline=$(( start + 600 ))
    say "apt-get $*"
    ( while sleep 30; do say "apt-get $1: still running after $(( $(date +%s) - start )) s"; done ) &
    ticker=$!
    while ! err=$($SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=60 "$@" 2>&1 >/dev/null); do
        if ! grep -q "Could not get lock" <<<"$err" || [ "$(date +%s)" -ge "$deadline" ]; then
            echo "$err" >&2
            status=1
            break
        fi
        say "waiting for another package manager: $(grep -m1 'Could not get lock' <<<"$err")"
        sleep 5
    done
    kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
    [ "$status" = 0 ] && say "apt-get $1: done in $(( $(date +%s) - start )) s"
    return "$status"
}

if [ "${1:-start}" = stop ]; then
    for d in $DAEMONS; do
        if running "$d"; then
            pid=$($SUDO cat "$RUN/$d.pid")
            $SUDO kill "$pid"
            for _ in $(seq 30); do $SUDO kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        fi
        $SUDO rm -f "$RUN/$d.pid"
    done
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v munged >/dev/null \
        || ! command -v mariadbd >/dev/null; then
    say "installing Debian's slurm-wlm, slurmdbd, munge and mariadb-server (minutes the first time)"
    apt_get update -qq
    apt_get install -y -qq slurm-wlm slurmdbd munge mariadb-server
fi
say "configuring Slurm in /etc/slurm, then starting MariaDB, munged, slurmdbd, slurmctld and slurmd"

HOST=$(hostname -s)
# two job slots per core (config_overrides: slurmd takes them as written): a test pipeline's jobs are each a few
# seconds of Python starting up, and Snakemake's polling leaves a core idle between them
CPUS=$(( $(nproc) * 2 ))
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
CONF_DIR=/etc/slurm
STATE=/var/spool/slurm

$SUDO mkdir -p "$CONF_DIR" "$STATE/ctld" "$STATE/d" /var/log/slurm /run/munge /run/mysqld "$RUN"
$SUDO tee "$CONF_DIR/slurm.conf" >/dev/null <<CONF
# Written by workflow/slurm/local-cluster.sh: one node, one partition, a GPU gres, accounting by slurmdbd, memory
# a consumable resource (a job over its --mem is killed: OverMemoryKill, sampled every 2 s).
ClusterName=rnnsearch
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=2
JobAcctGatherParams=OverMemoryKill
JobCompType=jobcomp/none
ReturnToService=2
SlurmdParameters=config_overrides
# a finished job's record kept in slurmctld for an hour (Slurm's default: 5 min): the Slurm tests read them
MinJobAge=3600
KillWait=30
SchedulerType=sched/backfill
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:1 State=UNKNOWN
PartitionName=main Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
echo "Name=gpu File=/dev/null" | $SUDO tee "$CONF_DIR/gres.conf" >/dev/null
$SUDO tee "$CONF_DIR/slurmdbd.conf" >/dev/null <<CONF
# Written by workflow/slurm/local-cluster.sh: the accounting daemon on this host's MariaDB.
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=rnnsearch-local
StorageLoc=slurm_acct_db
CONF
$SUDO chmod 0600 "$CONF_DIR/slurmdbd.conf"

# MariaDB, on its socket only
owned_pid_file() { $SUDO touch "$RUN/$1.pid"; $SUDO chown "$2" "$RUN/$1.pid"; }  # a daemon not run as root
if ! running mariadb; then
    $SUDO chown mysql:mysql /run/mysqld
    owned_pid_file mariadb mysql
    $SUDO sh -c "nohup /usr/sbin/mariadbd --user=mysql --skip-networking --pid-file=$RUN/mariadb.pid \
        >/var/log/slurm/mariadb.log 2>&1 &"
    for _ in $(seq 60); do $SUDO mariadb-admin ping >/dev/null 2>&1 && break; sleep 1; done
fi
$SUDO mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'rnnsearch-local';
                  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

if [ ! -s /etc/munge/munge.key ]; then
    $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
$SUDO chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
$SUDO chmod 0400 /etc/munge/munge.key
if ! running munged; then
    owned_pid_file munged munge
    if [ -z "$SUDO" ]; then runuser -u munge -- /usr/sbin/munged --pid-file="$RUN/munged.pid" \
        || /usr/sbin/munged --force --pid-file="$RUN/munged.pid"
    else sudo -u munge /usr/sbin/munged --pid-file="$RUN/munged.pid" \
        || sudo /usr/sbin/munged --force --pid-file="$RUN/munged.pid"; fi
fi
running slurmdbd || $SUDO /usr/sbin/slurmdbd
for _ in $(seq 60); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 1; done
sacctmgr -n show cluster format=cluster | grep -qw rnnsearch || $SUDO sacctmgr -i add cluster rnnsearch >/dev/null
running slurmctld || $SUDO /usr/sbin/slurmctld
running slurmd || $SUDO /usr/sbin/slurmd

say "waiting for the node to be idle"
for _ in $(seq 60); do
    if sinfo -h -N -o "%T" 2>/dev/null | grep -qE "^idle|^mixed|^allocated"; then
        sinfo -N -o "%N %T %c %m %G"
        exit 0
    fi
    sleep 1
done
echo "local-cluster.sh: the node did not become idle; see /var/log/slurm/" >&2
sinfo -N -l >&2 || true
tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log /var/log/slurm/slurmdbd.log >&2 || true
exit 1
