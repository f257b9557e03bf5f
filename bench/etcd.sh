#!/usr/bin/env bash
# leased and etcd side by side: a three-node etcd (its defaults, fsync on)
# and a three-node leased cluster (its defaults), all on loopback, driven
# by one load generator (bench/etcd-load) with the same clients, loop and
# clock: acquire, heartbeat and validate throughput and latencies, then a
# failover test on each (kill -9 of the leader while clients acquire).
#
#   bench/etcd.sh [options]
#
#   --duration S         seconds per operation and run (10)
#   -c N                 clients (50)
#   --repeat R           runs per operation and system (2); each run of an
#                        operation goes to etcd then leased, so both see
#                        the same machine. Every run is printed; the
#                        ratios are of the medians (the lower run of two).
#                        0: failover runs only
#   --failovers F        failover runs per system and client timeout (1),
#                        alternating; 0: none
#   --failover-duration S  seconds of acquires per failover run (10), the
#                        leader killed after 3
#   --failover-timeouts LIST
#                        the clients' request timeouts in the failover
#                        runs, seconds (5,1): a request unanswered that
#                        long fails and is sent again (etcd holds a
#                        request its leader's death cut off until then)
#   --timeout S          the clients' request timeout in the other runs (5)
#   --ops LIST           operations (acquire,heartbeat,heartbeat-stream,
#                        validate): heartbeat sends etcd's LeaseKeepAlive
#                        on a stream of its own each time (as the Go
#                        client's KeepAliveOnce), heartbeat-stream on one
#                        stream per lease kept open (as its KeepAlive
#                        loop); leased's heartbeat is the same in both
#   --port P             first port (25000): etcd's clients on P+1..P+3 and
#                        its peers on P+11..P+13, leased's nodes on
#                        P+21..P+23 and their buses on P+31..P+33
#   --etcd-channels N    sets of gRPC channels etcd's clients share (1)
#   --etcd-balance rotate|channel
#                        etcd's clients each use one endpoint's channel
#                        and move to the next after a failure, as leased's
#                        clients do with their connections (rotate), or
#                        one channel over all endpoints, balanced by the
#                        etcd-client crate (channel)
#   --no-build           use the binaries as they are
#   --leased BIN         this leased binary (implies --no-build)
#   --load BIN           this etcd-load binary (implies --no-build)
#   --strict             fail if any request failed outside the failover
#                        runs, or a client had not recovered by the end of
#                        one (a smoke test: .ci/run)
#   --raw FILE           also write every run's line (etcd-load's CSV, plus
#                        the servers' CPU µs per request) to FILE
#
# Needs etcd 3.4 or later (Debian: etcd-server; etcdctl: etcd-client) and,
# to build bench/etcd-load, protoc (protobuf-compiler). The binaries are
# copied into the temporary directory before anything starts, so a build
# elsewhere during the run does not change them. Every server gets its own
# directory in it; all of them are stopped and it is removed at exit.
#
# Each row also gets the servers' CPU time per successful request (user +
# system, the three nodes together, from /proc, over the run), which
# depends far less on what else the machine runs than requests/s do.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=10
CLIENTS=50
REPEAT=2
FAILOVERS=1
FAILOVER_DURATION=10
FAILOVER_TIMEOUTS=5,1
TIMEOUT=5
OPS=acquire,heartbeat,heartbeat-stream,validate
PORT=25000
CHANNELS=1
BALANCE=rotate
BUILD=1
RAW=""
LOAD_BIN=""
STRICT=0

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

while (($#)); do
    case $1 in
    --duration) DURATION=$2; shift 2 ;;
    -c) CLIENTS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --failovers) FAILOVERS=$2; shift 2 ;;
    --failover-duration) FAILOVER_DURATION=$2; shift 2 ;;
    --failover-timeouts) FAILOVER_TIMEOUTS=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --ops) OPS=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --etcd-channels) CHANNELS=$2; shift 2 ;;
    --etcd-balance) BALANCE=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --leased) LEASED_BIN=$2; BUILD=0; shift 2 ;;
    --load) LOAD_BIN=$2; BUILD=0; shift 2 ;;
    --raw) RAW=$2; shift 2 ;;
    --strict) STRICT=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option $1" ;;
    esac
done

IFS=, read -ra OP_LIST <<<"$OPS"
for op in "${OP_LIST[@]}"; do
    [[ $op =~ ^(acquire|heartbeat|heartbeat-stream|validate)$ ]] || die "unknown operation $op"
done
IFS=, read -ra FAILOVER_TIMEOUT_LIST <<<"$FAILOVER_TIMEOUTS"
[[ $CLIENTS =~ ^[1-9][0-9]*$ && $REPEAT =~ ^[0-9]+$ && $FAILOVERS =~ ^[0-9]+$ &&
    $PORT =~ ^[1-9][0-9]*$ && $CHANNELS =~ ^[1-9][0-9]*$ ]] ||
    die "-c, --repeat, --failovers, --port and --etcd-channels take integers"
for seconds in "$DURATION" "$FAILOVER_DURATION" "$TIMEOUT" "${FAILOVER_TIMEOUT_LIST[@]}"; do
    [[ $seconds =~ ^[0-9]*\.?[0-9]+$ ]] ||
        die "--duration, --timeout and the failover options take seconds"
done
awk -v d="$FAILOVER_DURATION" 'BEGIN { exit !(d > 3) }' || die "--failover-duration must exceed 3"
[[ $BALANCE =~ ^(rotate|channel)$ ]] || die "--etcd-balance takes rotate or channel"
((PORT + 33 <= 65535)) || die "--port too high"
need etcd || die "etcd missing (Debian: apt-get install etcd-server)"

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR="$ROOT/$TARGET_DIR"
if ((BUILD)); then
    build_leased
    LEASED_BIN="$TARGET_DIR/release/leased"
    log "building bench/etcd-load (release; needs protoc)"
    (cd "$ROOT" && cargo build --release --quiet --manifest-path bench/etcd-load/Cargo.toml \
        --target-dir "$TARGET_DIR")
fi
LOAD_BIN=${LOAD_BIN:-$TARGET_DIR/release/etcd-load}
[[ -x $LEASED_BIN ]] || die "$LEASED_BIN missing (run without --no-build)"
[[ -x $LOAD_BIN ]] || die "$LOAD_BIN missing (run without --no-build)"

bench_init
cp "$LEASED_BIN" "$WORK/leased"
cp "$LOAD_BIN" "$WORK/etcd-load"
LEASED_BIN="$WORK/leased"
LOAD_BIN="$WORK/etcd-load"
RUNS="$WORK/runs.csv"
: >"$RUNS"

# Each system's nodes: client ports and current pids, by node 1..3.
declare -A CLIENT_PORT=() NODE_PID=()
ENDPOINTS_etcd=""
ENDPOINTS_leased=""
for i in 1 2 3; do
    CLIENT_PORT[etcd-$i]=$((PORT + i))
    CLIENT_PORT[leased-$i]=$((PORT + 20 + i))
    ENDPOINTS_etcd+="${ENDPOINTS_etcd:+,}127.0.0.1:$((PORT + i))"
    ENDPOINTS_leased+="${ENDPOINTS_leased:+,}127.0.0.1:$((PORT + 20 + i))"
    for port in $((PORT + i)) $((PORT + 10 + i)) $((PORT + 20 + i)) $((PORT + 30 + i)); do
        port_in_use "$port" && die "port $port is in use"
    done
done
ETCD_CLUSTER="n1=http://127.0.0.1:$((PORT + 11)),n2=http://127.0.0.1:$((PORT + 12))"
ETCD_CLUSTER+=",n3=http://127.0.0.1:$((PORT + 13))"
LEASED_NODES=""
for i in 1 2 3; do
    LEASED_NODES+="${LEASED_NODES:+ }$i@127.0.0.1:$((PORT + 20 + i))@$((PORT + 30 + i))"
done

# start_node SYSTEM I: starts (or restarts, on the same directory) node I.
start_node() {
    local system=$1 i=$2 dir="$WORK/$1-$2"
    mkdir -p "$dir"
    if [[ $system == etcd ]]; then
        # Every setting not about addresses is etcd's default (fsync on,
        # 100 ms heartbeats, 1 s election timeout). On a restart the data
        # directory's membership wins over the --initial-* flags.
        etcd --name "n$i" --data-dir "$dir/data" \
            --listen-client-urls "http://127.0.0.1:$((PORT + i))" \
            --advertise-client-urls "http://127.0.0.1:$((PORT + i))" \
            --listen-peer-urls "http://127.0.0.1:$((PORT + 10 + i))" \
            --initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 10 + i))" \
            --initial-cluster "$ETCD_CLUSTER" --initial-cluster-token leased-bench \
            --initial-cluster-state new >>"$dir/etcd.log" 2>&1 &
    else
        "$LEASED_BIN" --port $((PORT + 20 + i)) --dir "$dir/data" --cluster-enabled yes \
            --cluster-node-id "$i" --cluster-nodes "$LEASED_NODES" >>"$dir/leased.log" 2>&1 &
    fi
    NODE_PID[$system-$i]=$!
    SERVER_PIDS+=("$!")
}

# The pids of SYSTEM's nodes, comma-separated, in the order of its
# endpoints.
pids_of() {
    printf '%s,%s,%s\n' "${NODE_PID[$1-1]}" "${NODE_PID[$1-2]}" "${NODE_PID[$1-3]}"
}

# Whether every node of SYSTEM is up and agrees on a leader: etcd's
# endpoint status (leader, and every member answering), leased's ROLE (a
# master and two replicas with their link up).
healthy() {
    local i masters=0 up=0 leaders
    if [[ $1 == etcd ]]; then
        leaders=$(ETCDCTL_API=3 etcdctl --endpoints "$ENDPOINTS_etcd" --dial-timeout 1s \
            --command-timeout 2s endpoint status -w json 2>/dev/null |
            grep -o '"leader":[0-9]*' | sort -u) || return 1
        [[ $(wc -l <<<"$leaders") == 1 && $leaders != '"leader":0' ]] &&
            ETCDCTL_API=3 etcdctl --endpoints "$ENDPOINTS_etcd" --dial-timeout 1s \
                --command-timeout 2s endpoint health >/dev/null 2>&1
        return
    fi
    for i in 1 2 3; do
        case $(redis-cli -p "${CLIENT_PORT[leased-$i]}" ROLE 2>/dev/null | head -n 1) in
        master) masters=$((masters + 1)) ;;
        slave)
            redis-cli -p "${CLIENT_PORT[leased-$i]}" INFO replication 2>/dev/null |
                grep -q '^master_link_status:up' && up=$((up + 1))
            ;;
        esac
    done
    ((masters == 1 && up == 2))
}

# Waits (20 s at most) until SYSTEM is healthy.
wait_healthy() {
    local tries=0 i
    until healthy "$1"; do
        for i in 1 2 3; do
            kill -0 "${NODE_PID[$1-$i]}" 2>/dev/null ||
                die "$1 node $i exited (log in $WORK/$1-$i)"
        done
        tries=$((tries + 1))
        ((tries < 100)) || die "$1 did not become healthy in 20 s (logs in $WORK)"
        sleep 0.2
    done
}

log "starting etcd on ports $((PORT + 1))-$((PORT + 3)) (peers $((PORT + 11))-$((PORT + 13)))"
log "starting leased on ports $((PORT + 21))-$((PORT + 23)) (buses $((PORT + 31))-$((PORT + 33)))"
for system in etcd leased; do
    for i in 1 2 3; do start_node "$system" "$i"; done
done
wait_healthy etcd
wait_healthy leased
SETUP=$(print_setup | sed '/^# leased/s/^# leased leased /# leased /; /^# leased/s/, Redis.*//')
SETUP+=$'\n'"# $(etcd --version | head -n 1); etcd-load -c $CLIENTS --etcd-channels $CHANNELS"
SETUP+=" --etcd-balance $BALANCE --timeout $TIMEOUT"

# load SYSTEM ARGS...: runs etcd-load against SYSTEM's cluster.
load() {
    local system=$1 endpoints
    shift
    endpoints="ENDPOINTS_$system"
    "$LOAD_BIN" --system "$system" --endpoints "${!endpoints}" -c "$CLIENTS" \
        --etcd-channels "$CHANNELS" --etcd-balance "$BALANCE" "$@"
}

# One run of operation $2 on system $1: etcd-load's line (the operation
# named as here) plus the servers' CPU µs per successful request, appended
# to RUNS.
bench_once() {
    local system=$1 op=$2 before line requests pids heartbeat=once rest
    [[ $op == heartbeat-stream ]] && heartbeat=stream
    IFS=, read -ra pids <<<"$(pids_of "$system")"
    before=$(cpu_ticks "${pids[@]}")
    line=$(load "$system" --ops "${op%-stream}" --etcd-heartbeat "$heartbeat" \
        --duration "$DURATION" --timeout "$TIMEOUT") || die "etcd-load failed on $system ($op)"
    IFS=, read -r _ _ rest <<<"$line"
    line="$system,$op,$rest"
    IFS=, read -r _ _ _ requests _ <<<"$line"
    line+=,$(awk -v t=$(($(cpu_ticks "${pids[@]}") - before)) -v hz="$CLOCK_TICKS" \
        -v n="$requests" 'BEGIN { printf "%.1f", n ? t / hz / n * 1e6 : 0 }')
    log "  $line"
    printf '%s\n' "$line" >>"$RUNS"
}

for ((r = 0; r < REPEAT; r++)); do
    for op in "${OP_LIST[@]}"; do
        for system in etcd leased; do
            bench_once "$system" "$op"
        done
    done
done

# One failover run on SYSTEM with request timeout $2: etcd-load kills the
# leader while acquiring; then the killed node is started again and the
# cluster waited for.
FAILOVERS_CSV="$WORK/failovers.csv"
: >"$FAILOVERS_CSV"
failover_once() {
    local system=$1 timeout=$2 line killed
    line=$(load "$system" --failover --duration "$FAILOVER_DURATION" --kill-after 3 \
        --timeout "$timeout" --pids "$(pids_of "$system")") ||
        die "etcd-load --failover failed on $system"
    log "  $line"
    printf '%s,%s\n' "$line" "$timeout" >>"$FAILOVERS_CSV"
    IFS=, read -r _ _ _ _ _ killed _ <<<"$line"
    wait "${NODE_PID[$system-$((killed + 1))]}" 2>/dev/null || true
    start_node "$system" $((killed + 1))
    wait_healthy "$system"
}
for ((f = 0; f < FAILOVERS; f++)); do
    for timeout in "${FAILOVER_TIMEOUT_LIST[@]}"; do
        for system in etcd leased; do
            log "failover $((f + 1)) on $system, request timeout $timeout s"
            failover_once "$system" "$timeout"
        done
    done
done
SETUP+=$'\n'"# done $(date -u '+%H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ -n $RAW ]]; then
    {
        printf 'system,op,clients,requests,errors,seconds,per_second,p50_ms,p99_ms,max_ms,cpu_us\n'
        cat "$RUNS"
        printf 'system,failover,clients,requests,errors,killed,first_ms,median_ms,max_ms,unrecovered,timeout_s\n'
        cat "$FAILOVERS_CSV"
    } >"$RAW"
fi

# field SYSTEM OP N: column N (1-based) of every run of OP on SYSTEM,
# one a line, in the order run.
field() {
    awk -F, -v s="$1" -v o="$2" -v n="$3" '$1 == s && $2 == o { print $n }' "$RUNS"
}

# The median of the numbers on stdin (the lower of two).
median() {
    sort -g | awk '{ v[NR] = $0 } END { print v[int((NR + 1) / 2)] }'
}

# The lines on stdin joined with " / ".
joined() {
    paste -sd/ - | sed 's|/| / |g'
}

printf '\n%s\n' "$SETUP"
errors=0
if ((REPEAT)); then
    printf '# %s s per run, %s run(s) per cell, in the order run; ratio of the medians\n\n' \
        "$DURATION" "$REPEAT"
    printf '| operation | etcd req/s | leased req/s | leased/etcd | etcd p50 ms | leased p50 ms |'
    printf ' etcd p99 ms | leased p99 ms | etcd max ms | leased max ms | etcd CPU µs/req | leased CPU µs/req |\n'
    printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
    for op in "${OP_LIST[@]}"; do
        ratio=$(awk -v a="$(field leased "$op" 7 | median)" -v b="$(field etcd "$op" 7 | median)" \
            'BEGIN { printf "%.1f", b ? a / b : 0 }')
        printf '| %s | %s | %s | %s |' "$op" "$(field etcd "$op" 7 | joined)" \
            "$(field leased "$op" 7 | joined)" "$ratio"
        for n in 8 9 10 11; do
            printf ' %s | %s |' "$(field etcd "$op" "$n" | joined)" "$(field leased "$op" "$n" | joined)"
        done
        printf '\n'
    done
    errors=$(awk -F, '{ e += $5 } END { print e + 0 }' "$RUNS")
    printf '\nFailed requests in these runs: %s\n' "$errors"
fi

if ((FAILOVERS)); then
    printf '\nFailover: kill -9 of the leader %s s into %s s of acquires, window per client from the kill\n' \
        3 "$FAILOVER_DURATION"
    printf 'to its first success after its last failure (ms)\n\n'
    printf '| system | request timeout | killed node | acquires | failed | first | median | max | unrecovered |\n'
    printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
    awk -F, '{ printf "| %s | %s s | %d | %s | %s | %s | %s | %s | %s |\n",
        $1, $11, $6 + 1, $4, $5, $7, $8, $9, $10 }' "$FAILOVERS_CSV"
    printf '\nPer system and timeout: the median window of each run, sorted, and the longest window (ms)\n\n'
    printf '| system | request timeout | runs | medians | longest |\n|---|---:|---:|---|---:|\n'
    for timeout in "${FAILOVER_TIMEOUT_LIST[@]}"; do
        for system in etcd leased; do
            awk -F, -v s="$system" -v t="$timeout" '$1 == s && $11 == t {
                    n++; m[n] = $8; if ($9 + 0 > longest) longest = $9 + 0 }
                function key(v) { return v == "-" ? 1e18 : v + 0 }
                END {
                    # "-" (no client recovered in that run) sorts last.
                    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                        if (key(m[j]) < key(m[i])) { x = m[i]; m[i] = m[j]; m[j] = x }
                    printf "| %s | %s s | %d | ", s, t, n
                    for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? ", " : ""), m[i]
                    printf " | %d |\n", longest
                }' "$FAILOVERS_CSV"
        done
    done
fi

if ((STRICT)); then
    ((errors == 0)) || die "$errors requests failed outside the failover runs"
    awk -F, '$10 != 0 { bad = 1 } END { exit bad }' "$FAILOVERS_CSV" ||
        die "a client had not recovered by the end of a failover run"
fi
