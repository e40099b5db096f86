#!/usr/bin/env bash
# A one-node SLURM cluster on this machine from Debian's packages, and the smoke pipeline run
# through Snakemake's SLURM executor on it (docs/pipeline.md#slurm).
#
#   workflows/slurm/single_node.sh setup   # root: install slurm-wlm + munge, write slurm.conf, start the daemons
#   workflows/slurm/single_node.sh smoke   # run the smoke profile as SLURM jobs (workflows/profiles/slurm-smoke)
#   workflows/slurm/single_node.sh stop    # stop the daemons
#   workflows/slurm/single_node.sh remove  # stop them and purge the packages setup installed
#
# Stopped is not gone: with SLURM's client tools installed and no controller answering, every
# Snakemake call waits ~9 s, because the SLURM executor plugin runs `scontrol show config` (a
# 10-s timeout) whenever Snakemake loads its plugins (`snakemake -n` of the smoke profile: 17.8 s
# instead of 6.3 s; `make test` makes dozens of such calls). `remove` restores the machine.
#
# The cluster: Debian's slurm-wlm (22.05 on bookworm) with munge, one node with every core and
# all but 1 GiB of memory, one partition `cpu`; proctrack/linuxproc and task/none (no cgroups
# needed), select/cons_tres with cores and memory consumable, jobacct_gather/linux and no
# accounting database (accounting_storage/none): sacct has nothing to read, so the smoke
# profile polls with squeue, and MinJobAge=3600 keeps a finished job listed for it (an hour:
# the whole smoke run, so that its evidence can be read at the end).
set -euo pipefail
cd "$(dirname "$0")/../.."

NODE=$(hostname -s)
CONF=/etc/slurm/slurm.conf
STATE=/var/spool/slurmctld
SPOOL=/var/spool/slurmd
LOGS=/var/log/slurm

need_root() {
    [[ $(id -u) == 0 ]] || { echo "$1 needs root (it installs packages and starts system daemons)" >&2; exit 2; }
}

setup() {
    need_root setup
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        echo "installing slurm-wlm and munge from Debian's packages ..."
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null
    fi
    local cpus mem_mb
    cpus=$(nproc)
    mem_mb=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
    mkdir -p /etc/slurm "$STATE" "$SPOOL" "$LOGS" /run/munge /var/lib/munge /var/log/munge
    cat > "$CONF" <<EOF
# Written by workflows/slurm/single_node.sh: one node, this machine.
ClusterName=vtoken
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
MinJobAge=3600
ReturnToService=2
SchedulerType=sched/backfill
NodeName=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    # munge: a key once, then the daemon (as root: this is a throwaway single-node cluster)
    [[ -s /etc/munge/munge.key ]] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
    chown root:root /etc/munge/munge.key /var/lib/munge /var/log/munge /run/munge
    chmod 400 /etc/munge/munge.key
    pgrep -x munged >/dev/null || munged --force
    if pgrep -x slurmctld >/dev/null; then scontrol reconfigure; else slurmctld; fi
    pgrep -x slurmd >/dev/null || slurmd
    for _ in $(seq 30); do
        if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
            sinfo
            return 0
        fi
        scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
        sleep 1
    done
    echo "the node did not come up: see $LOGS/slurmctld.log and $LOGS/slurmd.log" >&2
    sinfo >&2 || true
    exit 1
}

smoke() {
    sinfo -h >/dev/null 2>&1 || { echo "no SLURM controller answers (run '$0 setup' first)" >&2; exit 2; }
    local start end
    start=$(date +%s)
    # The venv's snakemake and python on every job (sbatch exports the submit environment).
    PATH="$PWD/.venv/bin:$PATH" snakemake --profile workflows/profiles/slurm-smoke "$@"
    end=$(date +%s)
    echo "slurm smoke: $(( end - start )) s wall"
    # Evidence while the jobs are still within MinJobAge: what SLURM ran and how it ended.
    squeue --states=all -h -o '%i %j %T %M %C %m' | sort -n
}

stop() {
    need_root stop
    pkill -x slurmd || true
    pkill -x slurmctld || true
    pkill -x munged || true
}

remove() {
    need_root remove
    stop
    # slurmctld's prerm cancels jobs (scancel, which needs the controller) while this pid file exists.
    rm -f /run/slurmctld.pid /run/slurmd.pid
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -q slurm-wlm slurm-client slurmctld slurmd \
        slurm-wlm-basic-plugins munge >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get autoremove -y -q >/dev/null
    command -v scontrol >/dev/null && { echo "scontrol is still installed" >&2; exit 1; }
    echo "SLURM removed"
}

case "${1:-}" in
    setup) setup ;;
    smoke) shift; smoke "$@" ;;
    stop) stop; echo "daemons stopped; while SLURM stays installed, each Snakemake call waits ~9 s for scontrol (\`$0 remove\`)" ;;
    remove) remove ;;
    *) echo "usage: $0 setup|smoke [snakemake args]|stop|remove" >&2; exit 2 ;;
esac
