#!/usr/bin/env bash
# Lease events and what their subscribers cost, with
# examples/handover_latency.rs:
#
# - events: how late `expired` reaches a pattern subscriber
#   (PSUBSCRIBE __lease__:*) after the lease's expires_at, for --leases
#   leases with staggered expiries and no other traffic, on a fresh
#   leased per spread; and `acquired` against the acquire's reply. For
#   scale, the same measurement on Redis: keys with PX expiring, reported
#   by keyspace notifications (notify-keyspace-events Ex, PSUBSCRIBE
#   __keyevent@*__:expired).
# - throughput: LEASE.ACQUIRE of random runs with redis-benchmark, the
#   invocation bench/compare.sh uses (-n 100000 -c 50 -P 16 -r 100000000
#   LEASE.ACQUIRE run:__rand_int__ w), on a fresh leased with the log on
#   (appendfsync everysec) for every run, with each count of pattern
#   subscribers connected (PSUBSCRIBE __lease__:*, each reading all it is
#   sent), and again with each subscribed to a pattern no event matches
#   (PSUBSCRIBE __lease__:elsewhere:*: every event is matched against
#   every pattern, nobody is sent anything). For reference, Redis with the
#   same fan-out: redis-benchmark
#   PUBLISH __lease__:run:__rand_int__ acquired:12345678:w (a message of
#   the size of a lease event) with the same subscribers. The counts and
#   servers alternate run after run, for --rounds rounds; the table shows,
#   per server and count, the run with the median ops/s.
#
#   bench/subscribers.sh [options]
#
#   --parts LIST        events,throughput (both)
#   --subscribers LIST  subscriber counts for throughput (0,1,10,100)
#   --patterns LIST     the subscribers' patterns, one set of runs each
#                       ('__lease__:*,__lease__:elsewhere:*')
#   --client driver|redis-cli
#                       subscribers as connections of one driver process
#                       (counts what each got) or as that many
#                       `redis-cli psubscribe` processes writing to
#                       /dev/null (driver)
#   --rounds R          (5)    -n N (100000)    -c N (50)    -P N (16)
#   --leases N          leases for events (1000)
#   --spreads LIST      seconds the events' expiries are spread over,
#                       one measurement each (5,20)
#   --first S           seconds to the first expiry (1)
#   --no-redis          leased only (no Redis reference rows)
#   --leased BIN        the leased binary to measure (target/release/leased)
#   --port P            leased (16484)   --redis-port P (16384)
#   --no-build          use the binaries in target/release as they are
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PARTS=events,throughput
SUBSCRIBERS=0,1,10,100
PATTERNS='__lease__:*,__lease__:elsewhere:*'
CLIENT=driver
ROUNDS=5
REQUESTS=100000
CLIENTS=50
PIPELINE=16
LEASES=1000
SPREADS=5,20
FIRST=1
WITH_REDIS=1
PORT=16484
REDIS_PORT=16384
BUILD=1
while (($#)); do
    case $1 in
    --parts) PARTS=$2; shift 2 ;;
    --subscribers) SUBSCRIBERS=$2; shift 2 ;;
    --patterns) PATTERNS=$2; shift 2 ;;
    --client) CLIENT=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    -n) REQUESTS=$2; shift 2 ;;
    -c) CLIENTS=$2; shift 2 ;;
    -P) PIPELINE=$2; shift 2 ;;
    --leases) LEASES=$2; shift 2 ;;
    --spreads) SPREADS=$2; shift 2 ;;
    --first) FIRST=$2; shift 2 ;;
    --no-redis) WITH_REDIS=0; shift ;;
    --leased) LEASED_BIN=$2; BUILD=0; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --redis-port) REDIS_PORT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
IFS=, read -ra PART_LIST <<<"$PARTS"
IFS=, read -ra COUNT_LIST <<<"$SUBSCRIBERS"
IFS=, read -ra PATTERN_LIST <<<"$PATTERNS"
IFS=, read -ra SPREAD_LIST <<<"$SPREADS"
THROUGHPUT_SERVERS=(leased)
if ((WITH_REDIS)); then
    THROUGHPUT_SERVERS+=(redis)
fi
[[ $CLIENT =~ ^(driver|redis-cli)$ ]] || die "--client driver or redis-cli"

ensure_redis
build_driver handover_latency
bench_init

# Subscriber processes started by this script, by pid; stopped on exit.
SUB_PIDS=()
stop_subscribers() {
    stop_all "${SUB_PIDS[@]}"
    SUB_PIDS=()
}
trap 'stop_subscribers; cleanup' EXIT

print_setup

# info_field PORT SECTION KEY
info_field() {
    redis-cli -p "$1" INFO "$2" | tr -d '\r' | awk -F: -v key="$3" '$1 == key { print $2 }'
}

# subscribed SERVER PORT: clients subscribed to a pattern. leased has
# INFO's pubsub_clients; Redis 7.0 has not (7.2 added it), so its CLIENT
# LIST is counted.
subscribed() {
    if [[ $1 == leased ]]; then
        info_field "$2" clients pubsub_clients
    else
        redis-cli -p "$2" CLIENT LIST | grep -c ' psub=[1-9]' || true
    fi
}

run_events() {
    printf '\n## Event latency: %s leases, first expiry %s s after its acquire, no other traffic\n\n' \
        "$LEASES" "$FIRST"
    printf '| server | measured | leases | expiries spread over | received | min ms | p50 ms | p99 ms | max ms |\n'
    printf '|---|---|---:|---:|---:|---:|---:|---:|---:|\n'
    local spread pid
    for spread in "${SPREAD_LIST[@]}"; do
        start_leased "$PORT" everysec
        pid=$STARTED_PID
        "$DRIVER" events --port "$PORT" --target leased --leases "$LEASES" --first "$FIRST" \
            --spread "$spread"
        stop_server "$pid"
        rm -rf "$WORK/leased-$PORT-everysec"
        if ((WITH_REDIS)); then
            start_redis "$REDIS_PORT" everysec
            pid=$STARTED_PID
            "$DRIVER" events --port "$REDIS_PORT" --target redis --leases "$LEASES" \
                --first "$FIRST" --spread "$spread"
            stop_server "$pid"
            rm -rf "$WORK/redis-$REDIS_PORT-everysec"
        fi
    done
}

# One throughput run of SERVER ($1: leased, LEASE.ACQUIRE; redis,
# PUBLISH for reference) with $2 subscribers to pattern $3; appends
# "server pattern count ops p50 p99 messages min max closed drained_ms
# subscribed" to $WORK/throughput.
throughput_once() {
    local server=$1 count=$2 pattern=$3 port pid out line ops p50 p99 stats="- - - - -"
    local connected=0 i
    local bench=(LEASE.ACQUIRE 'run:__rand_int__' w)
    if [[ $server == leased ]]; then
        port=$PORT
        start_leased "$port" everysec
    else
        port=$REDIS_PORT
        start_redis "$port" everysec
        bench=(PUBLISH '__lease__:run:__rand_int__' 'acquired:12345678:w')
    fi
    pid=$STARTED_PID
    if ((count > 0)); then
        if [[ $CLIENT == driver ]]; then
            "$DRIVER" subscribe --port "$port" --subscribers "$count" --pattern "$pattern" \
                >"$WORK/subscribe.out" &
            SUB_PIDS+=("$!")
            for ((i = 0; i < 400; i++)); do
                grep -q '^ready' "$WORK/subscribe.out" && break
                sleep 0.05
            done
            grep -q '^ready' "$WORK/subscribe.out" || die "the subscribers did not get ready"
        else
            for ((i = 0; i < count; i++)); do
                redis-cli -p "$port" psubscribe "$pattern" >/dev/null 2>&1 &
                SUB_PIDS+=("$!")
            done
            for ((i = 0; i < 400; i++)); do
                [[ $(subscribed "$server" "$port") == "$count" ]] && break
                sleep 0.05
            done
        fi
        [[ $(subscribed "$server" "$port") == "$count" ]] ||
            die "$count subscribers did not all subscribe"
    fi
    out=$(redis-benchmark -p "$port" -n "$REQUESTS" -c "$CLIENTS" -P "$PIPELINE" -r 100000000 \
        --csv "${bench[@]}" 2>&1) || die "redis-benchmark failed: $out"
    line=$(printf '%s\n' "$out" | tail -n 1)
    read -r ops p50 p99 < <(awk -F'","' 'NF == 8 { print $2, $5, $7 }' <<<"$line") || true
    [[ -n ${ops:-} ]] || die "cannot read redis-benchmark's output: $out"
    if ((count > 0)); then
        connected=$(subscribed "$server" "$port")
        stop_subscribers
        if [[ $CLIENT == driver ]]; then
            stats=$(awk '/^subscribers=/ {
                for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                print v["messages"], v["min"], v["max"], v["closed"], v["drained_ms"] }' \
                "$WORK/subscribe.out")
            [[ -n $stats ]] || die "the subscriber driver printed no summary"
        fi
    fi
    stop_server "$pid"
    rm -rf "$WORK/leased-$port-everysec" "$WORK/redis-$port-everysec"
    echo "$server $pattern $count $ops $p50 $p99 $stats $connected" >>"$WORK/throughput"
    log "  $server, $count subscribers to $pattern: ${bench[0]} $ops/s, p50 $p50 p99 $p99 ms;" \
        "messages total/min/max, closed, drained ms: $stats; subscribed at the end: $connected"
}

run_throughput() {
    : >"$WORK/throughput"
    local round count server pattern
    for ((round = 1; round <= ROUNDS; round++)); do
        log "throughput round $round of $ROUNDS"
        for pattern in "${PATTERN_LIST[@]}"; do
            for count in "${COUNT_LIST[@]}"; do
                for server in "${THROUGHPUT_SERVERS[@]}"; do
                    throughput_once "$server" "$count" "$pattern"
                done
            done
        done
    done
    printf '\n## Throughput with pattern subscribers (%s)\n\n' "$CLIENT"
    printf 'redis-benchmark -n %s -c %s -P %s -r 100000000: leased LEASE.ACQUIRE run:__rand_int__ w' \
        "$REQUESTS" "$CLIENTS" "$PIPELINE"
    if ((WITH_REDIS)); then
        printf '; Redis, for reference, PUBLISH __lease__:run:__rand_int__ acquired:12345678:w'
    fi
    printf '. appendfsync everysec, a fresh server per run; per server and count the run with the median ops/s of %s\n\n' \
        "$ROUNDS"
    python3 - "$WORK/throughput" "$PATTERNS" "${COUNT_LIST[@]}" <<'PY'
import sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    # The pattern goes; the fields after it keep their places.
    runs.setdefault((f[0], f[1], f[2]), []).append([f[0]] + f[2:])
print("| server | command | pattern | subscribers | ops/s (runs) | median | p50 ms | p99 ms | vs 0 subscribers | messages per subscriber (min–max) | still subscribed | drained after, ms |")
print("|---|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|")
for server, command in (("leased", "LEASE.ACQUIRE"), ("redis", "PUBLISH")):
    for pattern in sys.argv[2].split(","):
        base = None
        for count in sys.argv[3:]:
            if (server, pattern, count) not in runs:
                continue
            every = runs[(server, pattern, count)]
            rows = sorted(every, key=lambda f: float(f[2]))
            med = rows[(len(rows) + 1) // 2 - 1]
            ops = float(med[2])
            if count == "0":
                base = ops
            listed = ", ".join(f"{float(f[2]):,.0f}" for f in every)
            ratio = f"{ops / base:.3f}" if base else "—"
            if count == "0":
                msgs, still, drained = "—", "—", "—"
            elif med[5] == "-":
                msgs, still, drained = "(not counted)", med[10], "—"
            else:
                msgs = f"{int(med[6]):,}–{int(med[7]):,}"
                still, drained = med[10], med[9]
            name = "leased" if server == "leased" else "Redis"
            shown = "—" if count == "0" else f"`{pattern}`"
            print(f"| {name} | {command} | {shown} | {count} | {listed} | {ops:,.0f} | {med[3]} | {med[4]} | {ratio} | {msgs} | {still} | {drained} |")
PY
}

for part in "${PART_LIST[@]}"; do
    case $part in
    events) run_events ;;
    throughput) run_throughput ;;
    *) die "unknown part $part" ;;
    esac
done
