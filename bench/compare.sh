#!/usr/bin/env bash
# Benchmarks leased against Redis running the same registry in Lua
# (bench/lease.lua), with redis-benchmark and examples/lease_load.rs, for
# each appendfsync mode.
#
#   bench/compare.sh [options]
#
#   --modes LIST        appendfsync modes, comma-separated (always,everysec,no)
#   --pipelines LIST    -P values, pipeline depths (1,16)
#   --rows LIST         rows to run, comma-separated, from:
#                         acquire        LEASE.ACQUIRE run:__rand_int__ w, on both
#                         set-nx         SET lease:__rand_int__ w NX PX 10000, Redis
#                                        only (the plain-Redis lock, for reference)
#                         ping           PING, on both
#                         heartbeat      LEASE.HEARTBEAT of one live lease, on both
#                         validate       LEASE.VALIDATE of one live lease, on both
#                         validate-miss  LEASE.VALIDATE of random runs (no such
#                                        lease), on both
#                         heartbeat-many LEASE.HEARTBEAT of many different live
#                                        leases, on both (lease_load)
#                         validate-many  LEASE.VALIDATE of many different live
#                                        leases, on both (lease_load)
#                         release        LEASE.RELEASE that succeeds, each of -n
#                                        leases once, on both (lease_load)
#                         setdata        LEASE.SETDATA of a --value-size value
#                                        to many different live leases; on
#                                        Redis the script's SETDATA, HEARTBEAT's
#                                        check then SET (lease_load)
#                         setdata-one    the same with one live lease that all
#                                        connections write (lease_load)
#                       (default: all of them, in this order)
#   --leases N          leases the heartbeat-many, validate-many and setdata
#                       rows spread their requests over (default -n: every
#                       request has a lease of its own)
#   --value-size N      bytes of run data per setdata request (1024)
#   -n N                requests per row and run (100000)
#   -c N                parallel connections (50)
#   --repeat R          run every row R times, alternating leased and Redis,
#                       and report the run with the median ops/s (1)
#   --quick             -n 20000 and rows acquire,set-nx,ping
#   --pin               servers on CPU 1, redis-benchmark and lease_load on
#                       CPU 0 (taskset)
#   --leased-port P     (16479)   --redis-port P   (16379)
#   --no-build          use target/release/leased and
#                       target/release/examples/lease_load as they are
#   --raw FILE          also write every single run as CSV to FILE
#
# Each mode gets a fresh leased and a fresh redis-server, both with their
# log (AOF) on and the same appendfsync; Redis has RDB snapshots off. Rows
# run leased first and Redis right after, so both see the same machine
# state. Prints a Markdown table: ops/s, p50 and p99 latency in ms as
# redis-benchmark reports them, and leased's ops/s over Redis's.
#
# redis-benchmark cannot send a lease id together with its own token, so
# the heartbeat-many, validate-many, release and setdata rows are run by
# examples/lease_load.rs (built by this script) with the same -n, -c and
# -P. For each run it first acquires its leases (untimed; runs with a
# prefix of their own, TTL 1e9), then sends request i for lease i mod N in
# pipelines of -P, checks that every reply is 1 and fails otherwise, and
# prints redis-benchmark's CSV. Its ops/s count the timed phase only; its
# latencies are of whole pipelines (write P commands, read P replies).
# heartbeat-many, validate-many and the setdata rows release their leases
# afterwards (untimed; setdata deletes the data first), so repeated runs do
# not pile leases or data up on the servers.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODES=always,everysec,no
PIPELINES=1,16
ROWS=acquire,set-nx,ping,heartbeat,validate,validate-miss,heartbeat-many,validate-many,release
ROWS+=,setdata,setdata-one
LEASES=""
VALUE_SIZE=1024
REQUESTS=100000
CLIENTS=50
REPEAT=1
KEYSPACE=100000000
LEASED_PORT=16479
REDIS_PORT=16379
BUILD=1
PIN=0
RAW=""

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

while (($#)); do
    case $1 in
    --modes) MODES=$2; shift 2 ;;
    --pipelines) PIPELINES=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    -n) REQUESTS=$2; shift 2 ;;
    -c) CLIENTS=$2; shift 2 ;;
    --leases) LEASES=$2; shift 2 ;;
    --value-size) VALUE_SIZE=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --quick) REQUESTS=20000; ROWS=acquire,set-nx,ping; shift ;;
    --pin) PIN=1; shift ;;
    --leased-port) LEASED_PORT=$2; shift 2 ;;
    --redis-port) REDIS_PORT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --raw) RAW=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option $1" ;;
    esac
done

IFS=, read -ra MODE_LIST <<<"$MODES"
IFS=, read -ra PIPELINE_LIST <<<"$PIPELINES"
IFS=, read -ra ROW_LIST <<<"$ROWS"
for mode in "${MODE_LIST[@]}"; do
    [[ $mode =~ ^(always|everysec|no)$ ]] || die "unknown appendfsync mode $mode"
done
LOAD_ROWS=0
for row in "${ROW_LIST[@]}"; do
    [[ $row =~ ^(acquire|set-nx|ping|heartbeat|validate|validate-miss|heartbeat-many|validate-many|release|setdata|setdata-one)$ ]] ||
        die "unknown row $row"
    if [[ $row =~ ^(heartbeat-many|validate-many|release|setdata|setdata-one)$ ]]; then
        LOAD_ROWS=1
    fi
done
[[ -n $LEASES ]] || LEASES=$REQUESTS
[[ $REQUESTS =~ ^[1-9][0-9]*$ && $CLIENTS =~ ^[1-9][0-9]*$ && $REPEAT =~ ^[1-9][0-9]*$ &&
    $LEASES =~ ^[1-9][0-9]*$ && $VALUE_SIZE =~ ^[0-9]+$ ]] ||
    die "-n, -c, --repeat and --leases take positive integers, --value-size a count"

SERVER_CPU=()
BENCH_CPU=()
if ((PIN)); then
    need taskset || die "--pin needs taskset (util-linux)"
    (($(nproc) >= 2)) || die "--pin needs two CPUs"
    SERVER_CPU=(taskset -c 1)
    BENCH_CPU=(taskset -c 0)
fi

LEASE_LOAD_BIN="$ROOT/target/release/examples/lease_load"

ensure_redis
if ((BUILD)); then
    build_leased
    if ((LOAD_ROWS)); then
        log "building examples/lease_load (release)"
        (cd "$ROOT" && cargo build --release --quiet --example lease_load)
    fi
fi
[[ -x $LEASED_BIN ]] || die "$LEASED_BIN missing (run without --no-build)"
((LOAD_ROWS == 0)) || [[ -x $LEASE_LOAD_BIN ]] ||
    die "$LEASE_LOAD_BIN missing (run without --no-build)"
bench_init
RESULTS="$WORK/results.csv"
RUNS="$WORK/runs.csv"
: >"$RESULTS"
: >"$RUNS"

# One redis-benchmark run against port $1 with pipeline $2 and the command
# in the remaining arguments; prints "ops/s p50 p99".
bench_once() {
    local port=$1 pipeline=$2 out
    shift 2
    out=$("${BENCH_CPU[@]}" redis-benchmark -p "$port" -n "$REQUESTS" -c "$CLIENTS" \
        -P "$pipeline" -r "$KEYSPACE" --csv "$@" 2>&1) || die "redis-benchmark failed: $out"
    csv_result redis-benchmark "$out"
}

# One lease_load run against port $1 with pipeline $2 and its --target,
# --op and --leases options in the remaining arguments; prints
# "ops/s p50 p99". Fails if any reply was not a success.
load_once() {
    local port=$1 pipeline=$2 out
    shift 2
    out=$("${BENCH_CPU[@]}" "$LEASE_LOAD_BIN" --port "$port" -n "$REQUESTS" -c "$CLIENTS" \
        -P "$pipeline" "$@" 2>"$WORK/lease_load.err") ||
        die "lease_load failed: $(cat "$WORK/lease_load.err") $out"
    csv_result lease_load "$out"
}

# measure MODE PIPELINE ROW: runs L_CMD on leased and R_CMD on Redis (either
# may be empty) with $RUNNER (bench_once or load_once), alternating, and
# appends the result to $RESULTS.
measure() {
    local mode=$1 pipeline=$2 row=$3 i ours theirs
    local ours_runs="" theirs_runs=""
    for ((i = 0; i < REPEAT; i++)); do
        if ((${#L_CMD[@]})); then
            ours=$("$RUNNER" "$LEASED_PORT" "$pipeline" "${L_CMD[@]}")
            ours_runs+="$ours"$'\n'
            printf '%s,%s,%s,%s,leased,%s\n' "$mode" "$pipeline" "$row" "$i" "${ours// /,}" >>"$RUNS"
        fi
        if ((${#R_CMD[@]})); then
            theirs=$("$RUNNER" "$REDIS_PORT" "$pipeline" "${R_CMD[@]}")
            theirs_runs+="$theirs"$'\n'
            printf '%s,%s,%s,%s,redis,%s\n' "$mode" "$pipeline" "$row" "$i" "${theirs// /,}" >>"$RUNS"
        fi
    done
    ours="- - -"
    theirs="- - -"
    [[ -n $ours_runs ]] && ours=$(printf '%s' "$ours_runs" | median_run)
    [[ -n $theirs_runs ]] && theirs=$(printf '%s' "$theirs_runs" | median_run)
    log "  $mode -P $pipeline $row: leased $ours | redis $theirs"
    printf '%s,%s,%s,%s,%s\n' "$mode" "$pipeline" "$row" "${ours// /,}" "${theirs// /,}" >>"$RESULTS"
}

# Takes a lease with a TTL far longer than any run on the server on port $1
# ("leased" or "redis" in $2) and prints "lease_id token".
hot_lease() {
    local port=$1 kind=$2 run=hot:$3 reply
    if [[ $kind == leased ]]; then
        reply=$(redis-cli --raw -p "$port" LEASE.ACQUIRE "$run" w TTL 1e9)
    else
        reply=$(redis-cli --raw -p "$port" EVALSHA "$SHA" 0 ACQUIRE "$run" w TTL 1e9)
    fi
    lease_of "$reply" || die "could not take the hot lease on port $port: $reply"
}

# Fails unless the hot lease is still live on both servers: the heartbeat
# and validate rows must have measured successes, not refusals.
check_hot() {
    local ours theirs
    ours=$(redis-cli -p "$LEASED_PORT" LEASE.VALIDATE "$1" "$L_ID" "$L_TOKEN")
    theirs=$(redis-cli -p "$REDIS_PORT" EVALSHA "$SHA" 0 VALIDATE "$1" "$R_ID" "$R_TOKEN")
    [[ $ours == 1 && $theirs == 1 ]] || die "the hot lease $1 is not live (leased $ours, redis $theirs)"
}

run_row() {
    local mode=$1 pipeline=$2 row=$3
    L_CMD=()
    R_CMD=()
    RUNNER=bench_once
    case $row in
    acquire)
        L_CMD=(LEASE.ACQUIRE 'run:__rand_int__' w)
        R_CMD=(EVALSHA "$SHA" 0 ACQUIRE 'run:__rand_int__' w)
        ;;
    set-nx)
        R_CMD=(SET 'lease:__rand_int__' w NX PX 10000)
        ;;
    ping)
        L_CMD=(PING)
        R_CMD=(PING)
        ;;
    heartbeat | validate)
        local run=$row-$pipeline
        read -r L_ID L_TOKEN <<<"$(hot_lease "$LEASED_PORT" leased "$run")"
        read -r R_ID R_TOKEN <<<"$(hot_lease "$REDIS_PORT" redis "$run")"
        if [[ $row == heartbeat ]]; then
            L_CMD=(LEASE.HEARTBEAT "$L_ID" "$L_TOKEN")
            R_CMD=(EVALSHA "$SHA" 0 HEARTBEAT "$R_ID" "$R_TOKEN")
        else
            L_CMD=(LEASE.VALIDATE "hot:$run" "$L_ID" "$L_TOKEN")
            R_CMD=(EVALSHA "$SHA" 0 VALIDATE "hot:$run" "$R_ID" "$R_TOKEN")
        fi
        check_hot "hot:$run"
        ;;
    validate-miss)
        L_CMD=(LEASE.VALIDATE 'run:__rand_int__' 'run:__rand_int__:w:1' 1)
        R_CMD=(EVALSHA "$SHA" 0 VALIDATE 'run:__rand_int__' 'run:__rand_int__:w:1' 1)
        ;;
    heartbeat-many | validate-many | release)
        RUNNER=load_once
        local op=${row%-many} leases=$LEASES
        [[ $row == release ]] && leases=$REQUESTS
        L_CMD=(--target leased --op "$op" --leases "$leases")
        R_CMD=(--target lua --sha "$SHA" --op "$op" --leases "$leases")
        ;;
    setdata | setdata-one)
        RUNNER=load_once
        local leases=$LEASES
        [[ $row == setdata-one ]] && leases=1
        L_CMD=(--target leased --op setdata --leases "$leases" --value-size "$VALUE_SIZE")
        R_CMD=(--target lua --sha "$SHA" --op setdata --leases "$leases" --value-size "$VALUE_SIZE")
        ;;
    esac
    measure "$mode" "$pipeline" "$row"
    if [[ $row == heartbeat || $row == validate ]]; then
        check_hot "hot:$row-$pipeline"
    fi
}

for mode in "${MODE_LIST[@]}"; do
    log "appendfsync $mode: starting leased on $LEASED_PORT and redis-server on $REDIS_PORT"
    # shellcheck disable=SC2034 # read by start_leased and start_redis
    SERVER_PREFIX=("${SERVER_CPU[@]}")
    start_leased "$LEASED_PORT" "$mode"
    LEASED_PID=$STARTED_PID
    start_redis "$REDIS_PORT" "$mode"
    REDIS_PID=$STARTED_PID
    SHA=$(load_script "$REDIS_PORT")
    for pipeline in "${PIPELINE_LIST[@]}"; do
        for row in "${ROW_LIST[@]}"; do
            run_row "$mode" "$pipeline" "$row"
        done
    done
    stop_server "$LEASED_PID"
    stop_server "$REDIS_PID"
done

if [[ -n $RAW ]]; then
    {
        printf 'mode,pipeline,row,run,server,ops,p50_ms,p99_ms\n'
        cat "$RUNS"
    } >"$RAW"
fi

command_of() {
    case $1 in
    acquire) printf 'LEASE.ACQUIRE (random runs)' ;;
    set-nx) printf 'SET NX PX (Redis reference)' ;;
    ping) printf 'PING' ;;
    heartbeat) printf 'LEASE.HEARTBEAT (one live lease)' ;;
    validate) printf 'LEASE.VALIDATE (one live lease)' ;;
    validate-miss) printf 'LEASE.VALIDATE (random runs, miss)' ;;
    heartbeat-many) printf 'LEASE.HEARTBEAT (%s live leases)' "$LEASES" ;;
    validate-many) printf 'LEASE.VALIDATE (%s live leases)' "$LEASES" ;;
    release) printf 'LEASE.RELEASE (each lease once)' ;;
    setdata) printf 'LEASE.SETDATA %s B (%s live leases)' "$VALUE_SIZE" "$LEASES" ;;
    setdata-one) printf 'LEASE.SETDATA %s B (one live lease)' "$VALUE_SIZE" ;;
    esac
}

printf '\n%s requests per row, %s connections, -r %s, redis-benchmark %s%s%s\n\n' \
    "$REQUESTS" "$CLIENTS" "$KEYSPACE" "$(redis-benchmark --version | awk '{ print $2 }')" \
    "$( ((LOAD_ROWS)) && printf '; the -many, release and setdata rows by examples/lease_load')" \
    "$( ((REPEAT > 1)) && printf ', median of %s runs' "$REPEAT")"
printf '| appendfsync | -P | command | leased ops/s | p50 ms | p99 ms | Redis+Lua ops/s | p50 ms | p99 ms | leased/Redis |\n'
printf '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n'
ops() { if [[ $1 == - ]]; then printf '—'; else printf '%.0f' "$1"; fi; }
ms() { if [[ $1 == - ]]; then printf '—'; else printf '%s' "$1"; fi; }
while IFS=, read -r mode pipeline row lops lp50 lp99 rops rp50 rp99; do
    ratio="—"
    if [[ $lops != - && $rops != - ]]; then
        ratio=$(awk -v a="$lops" -v b="$rops" 'BEGIN { printf "%.2f", a / b }')
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$mode" "$pipeline" \
        "$(command_of "$row")" "$(ops "$lops")" "$(ms "$lp50")" "$(ms "$lp99")" \
        "$(ops "$rops")" "$(ms "$rp50")" "$(ms "$rp99")" "$ratio"
done <"$RESULTS"
