# shellcheck shell=bash
# Helpers shared by the bench scripts (compare.sh, check_lua.sh, cluster.sh
# and others): start a release leased and a redis-server in a temporary
# directory, wait until they answer, and stop them (and remove the
# directory) on exit; read redis-benchmark's CSV and leases out of replies.
#
# Source it from a script that runs with `set -euo pipefail`.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
LEASED_BIN="$ROOT/target/release/leased"
LUA_SCRIPT="$BENCH_DIR/lease.lua"

# Servers started by this script, by pid; stopped on exit.
SERVER_PIDS=()
WORK=""
# A command the servers are started under, e.g. (taskset -c 1).
SERVER_PREFIX=()
# Whether the servers keep their log (AOF); start_* read it.
APPENDONLY=yes

log() {
    printf '%s\n' "$*" >&2
}

die() {
    log "error: $*"
    exit 1
}

# stop_all PID...: asks each process to stop (SIGTERM), then waits for
# them all.
stop_all() {
    local pid
    for pid in "$@"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "$@"; do
        wait "$pid" 2>/dev/null || true
    done
}

# build_driver EXAMPLE: builds leased and examples/EXAMPLE.rs (release)
# unless --no-build was given (BUILD=0), and sets DRIVER to the example.
build_driver() {
    if ((BUILD)); then
        log "building leased and examples/$1 (release)"
        (cd "$ROOT" && cargo build --release --quiet --bin leased --example "$1")
    fi
    DRIVER="$ROOT/target/release/examples/$1"
    [[ -x $DRIVER ]] || (cd "$ROOT" && cargo build --release --quiet --example "$1")
    [[ -x $LEASED_BIN ]] || die "$LEASED_BIN missing (run without --no-build)"
}

# Prints, as Markdown comments, when and on what the figures were taken.
print_setup() {
    printf '# %s, %s CPUs (%s), load average %s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(nproc)" \
        "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
        "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf '# leased %s, %s\n' "$("$LEASED_BIN" --version 2>/dev/null | head -1)" \
        "$(redis-server --version | awk '{ print $1, $2, $3 }')"
}

cleanup() {
    stop_all "${SERVER_PIDS[@]}"
    SERVER_PIDS=()
    if [[ -n "$WORK" && -z "${KEEP_WORK:-}" ]]; then
        rm -rf "$WORK"
    elif [[ -n "$WORK" ]]; then
        log "kept $WORK"
    fi
}

# Creates the work directory and installs the exit trap.
bench_init() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/leased-bench.XXXXXX")
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

need() {
    command -v "$1" >/dev/null 2>&1
}

# Installs redis-server and redis-tools with apt if they are missing.
ensure_redis() {
    if need redis-server && need redis-benchmark && need redis-cli; then
        return
    fi
    need apt-get || die "redis-server/redis-benchmark missing and apt-get not available"
    log "installing redis-server and redis-tools with apt-get"
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-tools >/dev/null
}

build_leased() {
    log "building leased (release)"
    (cd "$ROOT" && cargo build --release --quiet --bin leased)
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Waits until the server on port $1 (process $2, log $3) answers PING.
wait_ready() {
    local port=$1 pid=$2 logfile=$3 tries=0
    until [[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            cat "$logfile" >&2 || true
            die "the server for port $port exited during start-up"
        fi
        tries=$((tries + 1))
        ((tries < 200)) || die "nothing answered on port $port after 10 s"
        sleep 0.05
    done
}

# start_leased PORT MODE [--directive value ...]: a release leased with its
# own data directory; sets STARTED_PID.
start_leased() {
    local port=$1 mode=$2
    shift 2
    port_in_use "$port" && die "port $port is in use"
    local dir="$WORK/leased-$port-$mode"
    mkdir -p "$dir"
    "${SERVER_PREFIX[@]}" "$LEASED_BIN" --port "$port" --dir "$dir/data" --appendonly "$APPENDONLY" \
        --appendfsync "$mode" "$@" >"$dir/leased.log" 2>&1 &
    STARTED_PID=$!
    SERVER_PIDS+=("$STARTED_PID")
    wait_ready "$port" "$STARTED_PID" "$dir/leased.log"
}

# start_cluster BASE BUS_OFFSET: a three-node cluster of the release leased
# on ports BASE+1..BASE+3, their buses BUS_OFFSET above, each node in
# $WORK/node-N with its log there, all stopped on exit; waits until each
# answers and sets CLUSTER_PIDS[1..3].
start_cluster() {
    local base=$1 offset=$2 i port nodes="" dir
    for i in 1 2 3; do
        port=$((base + i))
        port_in_use "$port" && die "port $port is in use"
        port_in_use $((port + offset)) && die "port $((port + offset)) (a bus) is in use"
        nodes+="${nodes:+ }$i@127.0.0.1:$port@$((port + offset))"
    done
    CLUSTER_PIDS=()
    for i in 1 2 3; do
        dir="$WORK/node-$i"
        mkdir -p "$dir"
        "$LEASED_BIN" --port $((base + i)) --dir "$dir/data" --cluster-enabled yes \
            --cluster-node-id "$i" --cluster-nodes "$nodes" >"$dir/leased.log" 2>&1 &
        SERVER_PIDS+=("$!")
        CLUSTER_PIDS[i]=$!
    done
    for i in 1 2 3; do
        wait_ready $((base + i)) "${CLUSTER_PIDS[i]}" "$WORK/node-$i/leased.log"
    done
}

# start_redis PORT MODE: redis-server with AOF in MODE and no RDB snapshots;
# sets STARTED_PID.
start_redis() {
    local port=$1 mode=$2
    port_in_use "$port" && die "port $port is in use"
    local dir="$WORK/redis-$port-$mode"
    mkdir -p "$dir"
    "${SERVER_PREFIX[@]}" redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" \
        --appendonly "$APPENDONLY" --appendfsync "$mode" --daemonize no \
        --logfile "$dir/redis.log" >/dev/null 2>&1 &
    STARTED_PID=$!
    SERVER_PIDS+=("$STARTED_PID")
    wait_ready "$port" "$STARTED_PID" "$dir/redis.log"
}

# Loads bench/lease.lua into the Redis on port $1 and prints its SHA1.
load_script() {
    local sha
    sha=$(redis-cli -p "$1" SCRIPT LOAD "$(cat "$LUA_SCRIPT")")
    [[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD failed: $sha"
    printf '%s\n' "$sha"
}

# stop_server PID: SIGTERM and wait (both servers flush and exit 0).
stop_server() {
    local pid=$1 kept=() p
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    for p in "${SERVER_PIDS[@]}"; do
        [[ $p == "$pid" ]] || kept+=("$p")
    done
    SERVER_PIDS=("${kept[@]}")
}

# Prints "ops/s p50 p99" from the last line of $2, the --csv output of
# redis-benchmark or lease_load ($1 names which, for errors).
csv_result() {
    local line
    line=$(printf '%s\n' "$2" | tail -n 1)
    # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
    # "p95_latency_ms","p99_latency_ms","max_latency_ms"
    awk -F'","' 'NF == 8 && $2 + 0 > 0 { print $2, $5, $7; ok = 1 } END { exit !ok }' \
        <<<"$line" || die "cannot read $1's output: $2"
}

# The run with the median ops/s among the "ops/s p50 p99" lines on stdin.
median_run() {
    sort -n -k1,1 | awk '{ line[NR] = $0 } END { print line[int((NR + 1) / 2)] }'
}

# Prints "lease_id token" from an acquire's reply as `redis-cli --raw`
# prints it (the lease as a flat array); fails if it holds no lease.
lease_of() {
    awk 'NR == 6 { id = $0 } NR == 8 { token = $0 } END { if (token == "") exit 1; print id, token }' \
        <<<"$1"
}

# The CPU time, user and system, in clock ticks (CLOCK_TICKS a second),
# the processes $@ have used so far.
# shellcheck disable=SC2034 # read by the scripts that source this file
CLOCK_TICKS=$(getconf CLK_TCK)
cpu_ticks() {
    local pid total=0 fields
    for pid in "$@"; do
        read -ra fields <"/proc/$pid/stat"
        # utime and stime are fields 14 and 15; the command name (field 2)
        # is the server's (leased, etcd), with no spaces.
        total=$((total + fields[13] + fields[14]))
    done
    printf '%s\n' "$total"
}
