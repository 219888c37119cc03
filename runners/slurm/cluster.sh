#!/usr/bin/env bash
# A throwaway Slurm cluster in Docker: controller (munge + slurmctld) and node1/node2 (munge +
# slurmd, 1 and 4 fake GPUs) on a private network. See runners/slurm/README.md.
#
#   runners/slurm/cluster.sh [--name N] [--shared-dir DIR] up
#   runners/slurm/cluster.sh [--name N] down|status|host-addr
#   runners/slurm/cluster.sh [--name N] exec <cmd...>     # on the controller, cwd /shared
#
# N defaults to $INFRADEV_SLURM_NAME or "infradev-slurm". `up` replaces any cluster of that name,
# waits until both nodes are idle and prints the controller container name on stdout.
# --shared-dir bind-mounts the host directory DIR at the same absolute path in every container.
# host-addr prints the IP address at which jobs reach processes listening on the host.
set -euo pipefail

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { printf 'cluster.sh: error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,12s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="${INFRADEV_SLURM_NAME:-infradev-slurm}"
cmd=""
shared_dir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --name) [ $# -ge 2 ] || die "--name needs a value"; name="$2"; shift 2 ;;
        --name=*) name="${1#--name=}"; shift ;;
        --shared-dir) [ $# -ge 2 ] || die "--shared-dir needs a value"; shared_dir="$2"; shift 2 ;;
        --shared-dir=*) shared_dir="${1#--shared-dir=}"; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option $1" ;;
        *) [ -z "$cmd" ] || die "unexpected argument $1"; cmd="$1"; shift
           if [ "$cmd" = exec ]; then break; fi ;;
    esac
done
[[ "$name" =~ ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ ]] || die "bad --name '$name'"
label="org.infradev.slurm-cluster=$name"
ctl="$name-ctl"
nodes=(node1 node2)

sh_ctl() { timeout "${T:-30}" docker exec -w /shared "$ctl" "$@"; }

down() {
    local ids
    ids="$(docker ps -aq --filter "label=$label")"
    if [ -n "$ids" ]; then
        # shellcheck disable=SC2086  # one id per word
        docker rm -f $ids >/dev/null
    fi
    docker network rm "$name-net" >/dev/null 2>&1 || true
    docker volume rm "$name-shared" >/dev/null 2>&1 || true
}

write_config() { # $1: directory
    cat >"$1/slurm.conf" <<'EOF'
ClusterName=infradev
SlurmctldHost=ctl
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
# Test-only: short credential lifetime + scheduler pass, so a requeued job restarts in ~11 s, not ~140 s.
AuthInfo=cred_expire=10
SchedulerParameters=sched_interval=5
MpiDefault=none
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmdTimeout=20
MinJobAge=3600
# Jobs are requeued after a node failure only when submitted with --requeue.
JobRequeue=0
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
SlurmdParameters=config_overrides
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
NodeName=node1 CPUs=4 RealMemory=2000 Gres=gpu:1 State=UNKNOWN
NodeName=node2 CPUs=4 RealMemory=2000 Gres=gpu:4 State=UNKNOWN
PartitionName=gpu Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$1/gres.conf" <<'EOF'
AutoDetect=off
NodeName=node1 Name=gpu File=/dev/fakegpu0
NodeName=node2 Name=gpu File=/dev/fakegpu[0-3]
EOF
    cat >"$1/entry.sh" <<'EOF'
#!/bin/sh
set -e
install -o munge -g munge -m 0400 /cluster/munge.key /etc/munge/munge.key
install -m 0644 /cluster/slurm.conf /cluster/gres.conf /etc/slurm/
install -d -o munge -g munge -m 0755 /run/munge
setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged
case "$1" in
  ctl)  exec /usr/sbin/slurmctld -D ;;
  node) for i in 0 1 2 3; do [ -e /dev/fakegpu$i ] || mknod /dev/fakegpu$i c 1 3; done
        # A restarted container (docker kill + start) lost its jobs, but a slurmctld that has not
        # yet timed the node out would keep them RUNNING forever: report the loss first.
        if [ -e /var/lib/slurm/slurmd/.started ]; then
          timeout 30 scontrol update nodename="$(hostname)" state=down reason="container restarted" || true
        fi
        touch /var/lib/slurm/slurmd/.started
        exec /usr/sbin/slurmd -D ;;
  *)    echo "entry.sh: unknown role $1" >&2; exit 2 ;;
esac
EOF
    chmod 0755 "$1/entry.sh"
    head -c 128 /dev/urandom >"$1/munge.key"
}

up() {
    local image start c host role
    local -a mounts=(-v "$name-shared:/shared") caps=()
    start=$SECONDS
    if [ -n "$shared_dir" ]; then
        # The same absolute path inside as outside, so a path the server writes is the path a
        # job reads (bundle_dir == node_bundle_dir).
        case "$shared_dir" in /*) ;; *) shared_dir="$PWD/$shared_dir" ;; esac
        mkdir -p "$shared_dir"
        [[ "$shared_dir" != *:* ]] || die "--shared-dir must not contain ':' ($shared_dir)"
        mounts+=(-v "$shared_dir:$shared_dir")
    fi
    image="$("$here/build-image.sh")"
    down
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT  # holds the munge key
    write_config "$tmp"
    docker network create --internal --label "$label" "$name-net" >/dev/null
    docker volume create --label "$label" "$name-shared" >/dev/null
    for host in ctl "${nodes[@]}"; do
        c="$name-$host"; role=node; caps=()
        # Nodes: `infradev job run --executor local` runs as root and calls
        # unshare(CLONE_NEWNET), which needs CAP_SYS_ADMIN, then brings the new namespace's
        # loopback up, which needs CAP_NET_ADMIN (Docker's default set already has
        # SETUID/SETGID for dropping to nobody; setsid/setrlimit lowering need none).
        if [ "$host" = ctl ]; then role=ctl; else caps=(--cap-add SYS_ADMIN --cap-add NET_ADMIN); fi
        docker create --name "$c" --hostname "$host" --label "$label" --init \
            --network "$name-net" --network-alias "$host" "${mounts[@]}" "${caps[@]}" \
            "$image" /cluster/entry.sh "$role" >/dev/null
        docker cp "$tmp/." "$c:/cluster/" >/dev/null
    done
    rm -rf "$tmp"
    # Start all three at once: slurmctld resolves every NodeName at start-up, and on an --internal
    # network a name that is not up yet costs a ~5 s DNS timeout.
    local pids=()
    for host in "${nodes[@]}" ctl; do docker start "$name-$host" >/dev/null & pids+=($!); done
    for p in "${pids[@]}"; do wait "$p" || die "docker start failed"; done
    log "waiting for node1 and node2 to be idle"
    local states=""
    for _ in $(seq 120); do
        states="$(T=3 sh_ctl sinfo -h -N -o '%N=%t' 2>/dev/null | sort -u | tr '\n' ' ' || true)"
        [ "$states" = "node1=idle node2=idle " ] && break
        sleep 0.5
    done
    if [ "$states" != "node1=idle node2=idle " ]; then
        docker logs --tail 20 "$ctl" >&2 || true
        die "nodes not idle after 60 s (sinfo: ${states:-no answer}); 'cluster.sh --name $name down' cleans up"
    fi
    log "up in $((SECONDS - start)) s: $states"
    printf '%s\n' "$ctl"
}

status() {
    docker ps -a --filter "label=$label" --format '{{.Names}}\t{{.Status}}'
    if [ "$(docker inspect -f '{{.State.Running}}' "$ctl" 2>/dev/null)" = true ]; then
        T=10 sh_ctl sinfo -N -o '%N %P %t %G %C' || true
        T=10 sh_ctl squeue || true
    else
        log "controller $ctl is not running"
        return 1
    fi
}

host_addr() {
    # The bridge's gateway is the host's own address on the cluster network. --internal only
    # stops forwarding beyond the bridge; packets to the gateway IP are delivered to the host
    # (iptables INPUT), so a host process listening on 0.0.0.0 (or on this IP) is reachable.
    local gw
    gw="$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$name-net" 2>/dev/null)" ||
        die "no network $name-net (is the cluster up?)"
    [ -n "$gw" ] || die "network $name-net has no gateway address"
    printf '%s\n' "$gw"
}

case "$cmd" in
    up) up ;;
    host-addr) host_addr ;;
    down) down; log "cluster $name removed" ;;
    status) status ;;
    exec) [ $# -gt 0 ] || die "exec needs a command"
          exec docker exec -i -w /shared "$ctl" "$@" ;;
    "") usage; exit 2 ;;
    *) die "unknown command '$cmd' (up|down|status|host-addr|exec)" ;;
esac
