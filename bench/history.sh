#!/usr/bin/env bash
# What tenure history costs: leased with `lease-history-len 8` (the
# default) against leased with `lease-history-len 0` (none kept), side by
# side in one run, for each appendfsync mode.
#
#   bench/history.sh [--modes always,everysec,no] [--pipelines 1,16]
#                    [-n N] [-c N] [--repeat R] [--no-build]
#
# Rows:
#   acquire   LEASE.ACQUIRE run:__rand_int__ w (redis-benchmark, -r 1e8):
#             new runs, so no tenure ends; the lease slot is what differs
#   release   LEASE.RELEASE of -n leases, each once (examples/lease_load,
#             which acquires them first, untimed): every release ends a
#             tenure, which history keeps (a new entry per run)
#
# Every row runs on "on" then "off", R times (median), on fresh servers
# per mode. Prints a Markdown table with ops/s, p50, p99 and on/off.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODES=always,everysec,no
PIPELINES=1,16
REQUESTS=100000
CLIENTS=50
REPEAT=3
BUILD=1
ON_PORT=16483
OFF_PORT=16484
while (($#)); do
    case $1 in
    --modes) MODES=$2; shift 2 ;;
    --pipelines) PIPELINES=$2; shift 2 ;;
    -n) REQUESTS=$2; shift 2 ;;
    -c) CLIENTS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1" ;;
    esac
done
IFS=, read -ra MODE_LIST <<<"$MODES"
IFS=, read -ra PIPELINE_LIST <<<"$PIPELINES"

ensure_redis
build_driver lease_load
LOAD_BIN=$DRIVER
bench_init
RESULTS="$WORK/results.csv"
: >"$RESULTS"

# Prints "ops/s p50 p99" from the last line of --csv output in $1.
csv_result() {
    awk -F'","' 'NF == 8 && $2 + 0 > 0 { print $2, $5, $7; ok = 1 } END { exit !ok }' \
        <<<"$(printf '%s\n' "$1" | tail -n 1)" || die "cannot read: $1"
}

# run_once PORT PIPELINE ROW: one measurement; prints "ops/s p50 p99".
run_once() {
    local port=$1 pipeline=$2 row=$3 out
    case $row in
    acquire)
        out=$(redis-benchmark -p "$port" -n "$REQUESTS" -c "$CLIENTS" -P "$pipeline" \
            -r 100000000 --csv LEASE.ACQUIRE 'run:__rand_int__' w 2>&1) ||
            die "redis-benchmark failed: $out"
        ;;
    release)
        out=$("$LOAD_BIN" --port "$port" -n "$REQUESTS" -c "$CLIENTS" -P "$pipeline" \
            --target leased --op release --leases "$REQUESTS" 2>"$WORK/load.err") ||
            die "lease_load failed: $(cat "$WORK/load.err") $out"
        ;;
    esac
    csv_result "$out"
}

median_run() {
    sort -n -k1,1 | awk '{ line[NR] = $0 } END { print line[int((NR + 1) / 2)] }'
}

for mode in "${MODE_LIST[@]}"; do
    log "appendfsync $mode: leased with history on $ON_PORT, without on $OFF_PORT"
    start_leased "$ON_PORT" "$mode" --lease-history-len 8
    ON_PID=$STARTED_PID
    start_leased "$OFF_PORT" "$mode" --lease-history-len 0
    OFF_PID=$STARTED_PID
    for pipeline in "${PIPELINE_LIST[@]}"; do
        for row in acquire release; do
            on_runs="" off_runs=""
            for ((i = 0; i < REPEAT; i++)); do
                on_runs+="$(run_once "$ON_PORT" "$pipeline" "$row")"$'\n'
                off_runs+="$(run_once "$OFF_PORT" "$pipeline" "$row")"$'\n'
            done
            on=$(printf '%s' "$on_runs" | median_run)
            off=$(printf '%s' "$off_runs" | median_run)
            log "  $mode -P $pipeline $row: on $on | off $off"
            printf '%s,%s,%s,%s,%s\n' "$mode" "$pipeline" "$row" "${on// /,}" "${off// /,}" >>"$RESULTS"
        done
    done
    stop_server "$ON_PID"
    stop_server "$OFF_PID"
done

print_setup
printf '\n%s requests per row, %s connections, median of %s runs\n\n' "$REQUESTS" "$CLIENTS" "$REPEAT"
printf '| appendfsync | -P | row | history on ops/s | p50 ms | p99 ms | history off ops/s | p50 ms | p99 ms | on/off |\n'
printf '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n'
while IFS=, read -r mode pipeline row a ap50 ap99 b bp50 bp99; do
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')
    printf '| %s | %s | %s | %.0f | %s | %s | %.0f | %s | %s | %s |\n' \
        "$mode" "$pipeline" "$row" "$a" "$ap50" "$ap99" "$b" "$bp50" "$bp99" "$ratio"
done <"$RESULTS"
