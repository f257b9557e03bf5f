#!/usr/bin/env bash
# What watching leased costs: redis-benchmark throughput of a release
# leased as it runs by default, with the slow log off, with a MONITOR
# client attached, and optionally another build of leased (to see what a
# change cost), alternating the setups round after round and printing the
# median ops/s of each.
#
#   bench/observe.sh [options]
#
#   --base BIN     also run this leased binary (e.g. a release build of an
#                  earlier commit, in a worktree) as the "base" setup
#   --rounds N     rounds of every setup (5)
#   -c N           parallel connections (50)
#   --port P       (16479)
#   --no-build     use target/release/leased as it is
#
# Rows: PING -P 1, LEASE.ACQUIRE of random runs -P 16 and -P 1, each
# with the log on (appendfsync everysec). Every setup gets a fresh server.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BASE_BIN=""
ROUNDS=5
CLIENTS=50
PORT=16479
BUILD=1
while (($#)); do
    case $1 in
    --base) BASE_BIN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    -c) CLIENTS=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    *) die "unknown option $1 (see the comment at the top)" ;;
    esac
done

ensure_redis
((BUILD)) && build_leased
bench_init

# ops/s of one redis-benchmark run against $PORT.
ops() {
    redis-benchmark -p "$PORT" -c "$CLIENTS" --csv "$@" 2>/dev/null |
        tail -1 | cut -d, -f2 | tr -d '"'
}

# run_setup NAME: starts the setup's server, runs the rows, appends
# "NAME ping acquire16 acquire1" to $WORK/results, stops it.
run_setup() {
    local name=$1 bin=$LEASED_BIN monitor_pid="" args=()
    case $name in
    base) bin=$BASE_BIN ;;
    slowlog-off) args=(--slowlog-log-slower-than -1) ;;
    monitor) ;;
    default) ;;
    esac
    LEASED_BIN=$bin start_leased "$PORT" everysec "${args[@]}"
    local pid=$STARTED_PID
    if [[ $name == monitor ]]; then
        redis-cli -p "$PORT" monitor >/dev/null &
        monitor_pid=$!
    fi
    local ping acq16 acq1
    ping=$(ops -n 200000 -P 1 PING)
    acq16=$(ops -n 500000 -P 16 -r 100000000 LEASE.ACQUIRE 'run:__rand_int__' w)
    acq1=$(ops -n 200000 -P 1 -r 100000000 LEASE.ACQUIRE 'run:__rand_int__' w)
    [[ -n $monitor_pid ]] && kill "$monitor_pid" 2>/dev/null
    stop_server "$pid"
    echo "$name $ping $acq16 $acq1" >>"$WORK/results"
    log "$name: PING -P1 $ping, acquire -P16 $acq16, acquire -P1 $acq1"
}

setups=(default slowlog-off monitor)
[[ -n $BASE_BIN ]] && setups=(base "${setups[@]}")
for ((round = 1; round <= ROUNDS; round++)); do
    log "round $round of $ROUNDS"
    for setup in "${setups[@]}"; do
        run_setup "$setup"
    done
done

python3 - "$WORK/results" "${setups[@]}" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *values = line.split()
    rows.setdefault(name, []).append([float(v) for v in values])
print("| setup | PING -P1 | acquire -P16 | acquire -P1 |")
print("|---|---:|---:|---:|")
for name in sys.argv[2:]:
    medians = [statistics.median(column) for column in zip(*rows[name])]
    print(f"| {name} | " + " | ".join(f"{m:,.0f}" for m in medians) + " |")
EOF
