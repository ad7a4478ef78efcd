#!/usr/bin/env bash
# A one-machine Slurm (Debian's slurm-wlm + munge) for the tests marked `slurm`. As root:
#   .ci/slurm.sh start   write /etc/slurm/slurm.conf from `slurmd -C`, start munged, slurmctld and
#                        slurmd, wait until `sinfo` shows the node idle
#   .ci/slurm.sh stop    cancel the jobs left, stop by PID the daemons that `start` started
# No cgroups, no accounting, no CPU binding: what a one-machine Slurm in a container can run.
set -euo pipefail
STATE=${DFLOW_SLURM_STATE:-/tmp/dflow-slurm}  # PID files, spool directories and logs
CONF=/etc/slurm/slurm.conf
MARK="# written by dflow's .ci/slurm.sh"  # a slurm.conf without it is someone else's: left alone

say() { echo "slurm.sh: $*" >&2; }

write_conf() {
    local node
    node=$(slurmd -C | head -n 1)  # NodeName=vm CPUs=2 ... RealMemory=24105: this machine
    cat > "$CONF" <<EOF
$MARK
ClusterName=dflow
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# no cgroups in containers: track job processes by their parent, bind no CPUs
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
$node NodeAddr=127.0.0.1 State=UNKNOWN
# OverSubscribe: 1 PS + 2 workers of one core each must run at once on a 2-core machine
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

start_munged() {
    if munge -n > /dev/null 2>&1; then
        say "munged already runs: using it"
        return
    fi
    mkdir -p /run/munge && chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
    cp /run/munge/munged.pid "$STATE/munged.pid"  # ours: `stop` ends it
}

wait_idle() {
    for _ in $(seq 60); do
        if [ "$(sinfo -h -o %T 2> /dev/null)" = idle ]; then
            return
        fi
        sleep 1
    done
    say "the node is not idle after 60 s: $(sinfo -h -o '%T %E' 2>&1 || true); logs in $STATE"
    return 1
}

start() {
    if scontrol ping > /dev/null 2>&1; then  # (sinfo would retry a dead controller for ~9 s)
        say "a Slurm controller already answers: using it, starting nothing"
        return
    fi
    if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
        say "$CONF exists and was not written here; move it away or start that Slurm yourself"
        return 1
    fi
    mkdir -p "$STATE/slurmctld" "$STATE/slurmd"
    write_conf
    start_munged
    slurmctld  # each daemon forks into the background and writes its PID file
    slurmd
    wait_idle
    say "Slurm is up: $(sinfo -h -o '%N %c CPUs %m MB %T')"
}

stop_pid() {  # stop_pid NAME: end the daemon whose PID file `start` left, then forget it
    local file="$STATE/$1.pid" pid
    [ -f "$file" ] || return 0
    pid=$(cat "$file")
    if kill "$pid" 2> /dev/null; then
        for _ in $(seq 20); do kill -0 "$pid" 2> /dev/null || break; sleep 0.5; done
        kill -0 "$pid" 2> /dev/null && kill -KILL "$pid"
        say "stopped $1 ($pid)"
    fi
    rm -f "$file"
}

stop() {
    [ -f "$STATE/slurmctld.pid" ] || { say "no Slurm started here: nothing to stop"; return; }
    # a job's processes outlive slurmd (slurmstepd holds them): cancel the jobs first
    squeue -h -o %i 2> /dev/null | xargs -r scancel || true
    for _ in $(seq 20); do [ -z "$(squeue -h 2> /dev/null)" ] && break; sleep 0.5; done
    stop_pid slurmd
    stop_pid slurmctld
    stop_pid munged
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) say "usage: $0 start|stop"; exit 2 ;;
esac
