#!/usr/bin/env bash
# Hand-over latency: how long a client blocked on a held run waits once
# the holder releases it, on leased (LEASE.ACQUIRE ... BLOCK 0 woken by
# LEASE.RELEASE) against Redis's own hand-over (BLPOP woken by LPUSH),
# measured the same way by examples/handover_latency.rs, with 1 and with
# 1,000 blocked clients. For each mode it starts a fresh leased and a fresh
# redis-server, both with the log on (AOF, the same appendfsync) and Redis
# without RDB snapshots, runs the rounds alternating the servers, and
# prints the driver's Markdown tables: p50/p90/p99/max per server and the
# ratio of leased's p99 to Redis's.
#
#   bench/handover.sh [options]
#
#   --modes LIST        appendfsync modes, comma-separated (everysec)
#   --appendonly yes|no the log (AOF) on both servers (yes)
#   --waiters LIST      blocked clients per measurement (1,1000)
#   --handovers N       hand-overs kept per round (1000)
#   --warmup N          hand-overs per round before those kept (200)
#   --rounds R          rounds per server and waiter count (5)
#   --pin none|split|same
#                       where the processes run (taskset): none, as the
#                       scheduler likes; split, both servers on CPU 1 and
#                       the driver on CPU 0; same, all three on CPU 1. On a
#                       VM a wake-up across CPUs can cost tens of µs, which
#                       both servers pay alike; "same" leaves it out
#   --leased BIN        the leased binary to measure (target/release/leased)
#   --leased-port P     (16483)   --redis-port P   (16383)
#   --no-build          use the binaries in target/release as they are
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODES=everysec
WAITERS=1,1000
HANDOVERS=1000
WARMUP=200
ROUNDS=5
LEASED_PORT=16483
REDIS_PORT=16383
PIN=none
BUILD=1
while (($#)); do
    case $1 in
    --modes) MODES=$2; shift 2 ;;
    --appendonly) APPENDONLY=$2; shift 2 ;;
    --waiters) WAITERS=$2; shift 2 ;;
    --handovers) HANDOVERS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --pin) PIN=$2; shift 2 ;;
    --leased) LEASED_BIN=$2; BUILD=0; shift 2 ;;
    --leased-port) LEASED_PORT=$2; shift 2 ;;
    --redis-port) REDIS_PORT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
IFS=, read -ra MODE_LIST <<<"$MODES"
for mode in "${MODE_LIST[@]}"; do
    [[ $mode =~ ^(always|everysec|no)$ ]] || die "unknown appendfsync mode $mode"
done
[[ $APPENDONLY =~ ^(yes|no)$ ]] || die "--appendonly yes or no"
DRIVER_CPU=()
case $PIN in
none) ;;
split | same)
    need taskset || die "--pin needs taskset (util-linux)"
    (($(nproc) >= 2)) || die "--pin needs two CPUs"
    SERVER_PREFIX=(taskset -c 1)
    if [[ $PIN == split ]]; then DRIVER_CPU=(taskset -c 0); else DRIVER_CPU=(taskset -c 1); fi
    ;;
*) die "--pin none, split or same" ;;
esac

ensure_redis
build_driver handover_latency
bench_init

print_setup
for mode in "${MODE_LIST[@]}"; do
    printf '\n## appendonly %s, appendfsync %s, pin %s\n' "$APPENDONLY" "$mode" "$PIN"
    start_leased "$LEASED_PORT" "$mode"
    leased_pid=$STARTED_PID
    start_redis "$REDIS_PORT" "$mode"
    redis_pid=$STARTED_PID
    "${DRIVER_CPU[@]}" "$DRIVER" handover --leased-port "$LEASED_PORT" --redis-port "$REDIS_PORT" \
        --waiters "$WAITERS" --handovers "$HANDOVERS" --warmup "$WARMUP" --rounds "$ROUNDS"
    stop_server "$leased_pid"
    stop_server "$redis_pid"
done
