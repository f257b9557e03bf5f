#!/usr/bin/env bash
# Hand-over latency of blocked acquires in a three-node cluster: on the
# leader (the waiters and the releases on the leader's port) and through a
# follower (both on a follower's port: its clients wait in the leader's
# queue over the bus, and its releases are proxied to the leader), measured
# by examples/handover_latency.rs as bench/handover.sh measures a single
# node (from sending LEASE.RELEASE to the woken client's reply). The
# cluster runs with its defaults (the Raft log fsynced before a write is
# acknowledged); the driver waits, before each release, until the node's
# INFO blocked_clients counts every waiter (on a follower that is when its
# client blocked, which may be just before the leader has queued it).
#
#   bench/handover_cluster.sh [options]
#
#   --waiters LIST      blocked clients per measurement (1,100)
#   --handovers N       hand-overs kept per round (500)
#   --warmup N          hand-overs per round before those kept (100)
#   --rounds R          rounds per target and waiter count (3)
#   --port P            the nodes on P+1..P+3 (16700), their buses on
#                       P+11..P+13
#   --no-build          use the binaries in target/release as they are
#   --leased BIN        the leased binary to measure (implies --no-build)
#   --driver BIN        the examples/handover_latency binary to use
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

WAITERS=1,100
HANDOVERS=500
WARMUP=100
ROUNDS=3
PORT=16700
BUILD=1
DRIVER_BIN=""
while (($#)); do
    case $1 in
    --waiters) WAITERS=$2; shift 2 ;;
    --handovers) HANDOVERS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --leased) LEASED_BIN=$2; BUILD=0; shift 2 ;;
    --driver) DRIVER_BIN=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
[[ $PORT =~ ^[1-9][0-9]*$ ]] && ((PORT + 13 <= 65535)) || die "--port: at most 65522"

need redis-cli || die "redis-cli is needed (apt-get install redis-tools)"
if [[ -n $DRIVER_BIN ]]; then
    DRIVER=$DRIVER_BIN
    [[ -x $LEASED_BIN ]] || die "$LEASED_BIN missing"
else
    build_driver handover_latency
fi
bench_init

start_cluster "$PORT" 10

# The leader's port, and a follower's, once every node names the leader.
leader="" follower=""
for _ in $(seq 100); do
    leader="" follower=""
    for i in 1 2 3; do
        case $(redis-cli -p $((PORT + i)) ROLE 2>/dev/null | head -n 1) in
        master) leader=$((PORT + i)) ;;
        slave) follower=$((PORT + i)) ;;
        esac
    done
    [[ -n $leader && -n $follower ]] && break
    sleep 0.1
done
[[ -n $leader && -n $follower ]] || die "no leader within 10 s (logs in $WORK)"

print_setup
for target in leader follower; do
    port=$leader
    [[ $target == follower ]] && port=$follower
    printf '\n## %s (port %s)\n' "$target" "$port"
    "$DRIVER" handover --leased-port "$port" --waiters "$WAITERS" --handovers "$HANDOVERS" \
        --warmup "$WARMUP" --rounds "$ROUNDS"
done
