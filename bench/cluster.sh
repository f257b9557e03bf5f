#!/usr/bin/env bash
# A three-node cluster against a single node: requests/s of the same
# redis-benchmark rows on a single leased (its log on, appendfsync always,
# and everysec), on the cluster's leader, and on a follower (which proxies
# every lease write to the leader over the bus, and serves reads itself at
# a read index it asks the leader for).
#
#   bench/cluster.sh [options]
#
#   --requests N, -n N  requests per run (100000)
#   -c N                parallel connections (50)
#   --pipelines LIST    -P values, pipeline depths (1,16)
#   --rows LIST         rows, comma-separated, from:
#                         acquire    LEASE.ACQUIRE run:__rand_int__ w
#                                    (random runs: nearly every one succeeds)
#                         heartbeat  LEASE.HEARTBEAT of one live lease
#                         validate   LEASE.VALIDATE of one live lease
#                         get        LEASE.GET of one live lease's run
#                       (default: acquire, heartbeat, validate)
#   --targets LIST      what to measure, comma-separated, from: always,
#                       everysec (single nodes with that appendfsync),
#                       leader, follower (default: all four)
#   --repeat R          runs per row and target (2); targets alternate
#                       within each repetition. Every run is printed; the
#                       ratios are of the medians (the lower run of two)
#   --quick             -n 20000, --repeat 1
#   --port P            first port (16600): single nodes on P (always) and
#                       P+4 (everysec), the cluster's nodes on P+1..P+3,
#                       their buses on those + the bus offset
#   --bus-offset B      how far above its client port a node's bus listens
#                       (10000, the default cluster-port's)
#   --no-build          use target/release/leased as it is
#   --leased BIN        measure this leased binary (implies --no-build)
#   --raw FILE          also write every run as CSV to FILE
#   --etcd [OPTIONS]    instead, the cluster against a three-node etcd:
#                       runs bench/etcd.sh with the options that follow
#                       (bench/etcd.sh --help lists them)
#
# The cluster runs with its defaults: the Raft log fsynced before a write
# is acknowledged (group commit), 100 ms heartbeats. Every server gets a
# directory of its own under one temporary directory, and all five run for
# the whole benchmark, so every row sees the same machine; an idle one
# costs next to nothing (the cluster's heartbeats and ticks).
#
# The heartbeat, validate and get rows take one lease (TTL 1e9) on the
# target before the row (through the follower for the follower's row: it
# is proxied) and check afterwards that it is still valid, so they time
# successful commands. Reads in a cluster do not go through the Raft log:
# they are served at a read index (see docs/cluster.md), on the node they
# are sent to.
#
# Each command also gets a table of the servers' CPU time per request
# (user + system, from /proc, over the run): the single node's, or the
# three cluster nodes' together, the leader's and followers' share of the
# work. It depends far less on what else the machine runs than
# requests/s do.
#
# The script stops if the leader changes during a run: the follower's and
# leader's figures would no longer be what they say.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REQUESTS=100000
CLIENTS=50
PIPELINES=1,16
ROWS=acquire,heartbeat,validate
TARGETS=always,everysec,leader,follower
REPEAT=2
PORT=16600
BUS_OFFSET=10000
KEYSPACE=100000000
BUILD=1
RAW=""

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

while (($#)); do
    case $1 in
    --requests | -n) REQUESTS=$2; shift 2 ;;
    -c) CLIENTS=$2; shift 2 ;;
    --pipelines) PIPELINES=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --targets) TARGETS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --quick) REQUESTS=20000; REPEAT=1; shift ;;
    --port) PORT=$2; shift 2 ;;
    --bus-offset) BUS_OFFSET=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --leased) LEASED_BIN=$2; BUILD=0; shift 2 ;;
    --raw) RAW=$2; shift 2 ;;
    --etcd) shift; exec "$BENCH_DIR/etcd.sh" "$@" ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option $1" ;;
    esac
done

IFS=, read -ra PIPELINE_LIST <<<"$PIPELINES"
IFS=, read -ra ROW_LIST <<<"$ROWS"
IFS=, read -ra TARGET_LIST <<<"$TARGETS"
for row in "${ROW_LIST[@]}"; do
    [[ $row =~ ^(acquire|heartbeat|validate|get)$ ]] || die "unknown row $row"
done
CLUSTER=0
for target in "${TARGET_LIST[@]}"; do
    [[ $target =~ ^(always|everysec|leader|follower)$ ]] || die "unknown target $target"
    [[ $target =~ ^(leader|follower)$ ]] && CLUSTER=1
done
[[ $REQUESTS =~ ^[1-9][0-9]*$ && $CLIENTS =~ ^[1-9][0-9]*$ && $REPEAT =~ ^[1-9][0-9]*$ &&
    $PORT =~ ^[1-9][0-9]*$ && $BUS_OFFSET =~ ^[1-9][0-9]*$ ]] ||
    die "-n, -c, --repeat, --port and --bus-offset take positive integers"
((BUS_OFFSET > 4)) || die "--bus-offset must be above 4: the buses would take client ports"
((PORT + BUS_OFFSET + 3 <= 65535)) || die "--port too high: the buses need port + $BUS_OFFSET + 3"

ensure_redis
((BUILD)) && build_leased
[[ -x $LEASED_BIN ]] || die "$LEASED_BIN missing (run without --no-build)"
bench_init
RUNS="$WORK/runs.csv"
: >"$RUNS"

# The port each target is measured on (the cluster's are set once it has
# a leader).
declare -A PORT_OF=([always]=$PORT [everysec]=$((PORT + 4)))
# The processes whose CPU time a target's runs are charged: the single
# node, or all three of the cluster's nodes.
declare -A PIDS_OF=()

# Prints the port of the node that says it is the master (the leader) and
# of one replica connected to it; fails if there are not both.
cluster_roles() {
    local i port leader="" follower=""
    for i in 1 2 3; do
        port=$((PORT + i))
        case $(redis-cli -p "$port" ROLE 2>/dev/null | head -n 1) in
        master) leader=$port ;;
        slave)
            if [[ -z $follower ]] &&
                redis-cli -p "$port" INFO replication | grep -q '^master_link_status:up'; then
                follower=$port
            fi
            ;;
        esac
    done
    [[ -n $leader && -n $follower ]] || return 1
    printf '%s %s\n' "$leader" "$follower"
}

# Waits (10 s at most) for a leader and a follower that knows it.
wait_leader() {
    local tries=0 roles
    until roles=$(cluster_roles); do
        tries=$((tries + 1))
        ((tries < 100)) || die "the cluster elected no leader in 10 s (logs in $WORK)"
        sleep 0.1
    done
    local leader follower
    read -r leader follower <<<"$roles"
    PORT_OF[leader]=$leader
    PORT_OF[follower]=$follower
    LEADER=$leader
}

# One redis-benchmark run against port $1 with pipeline $2 and the command
# in the remaining arguments; prints "ops/s p50 p99".
bench_once() {
    local port=$1 pipeline=$2 out
    shift 2
    out=$(redis-benchmark -p "$port" -n "$REQUESTS" -c "$CLIENTS" -P "$pipeline" \
        -r "$KEYSPACE" --csv "$@" 2>&1) || die "redis-benchmark failed: $out"
    csv_result redis-benchmark "$out"
}

# The command of row $1 on target $2 (pipeline $3), in CMD; takes the
# heartbeat and validate rows' lease, named in HOT.
command_for() {
    local row=$1 target=$2 pipeline=$3 port=${PORT_OF[$2]} reply id token
    HOT=""
    case $row in
    acquire) CMD=(LEASE.ACQUIRE 'run:__rand_int__' w) ;;
    heartbeat | validate | get)
        HOT="hot:$target-$row-$pipeline-$4"
        reply=$(redis-cli --raw -p "$port" LEASE.ACQUIRE "$HOT" w TTL 1e9)
        read -r id token <<<"$(lease_of "$reply")" ||
            die "could not take the lease $HOT on port $port: $reply"
        case $row in
        heartbeat) CMD=(LEASE.HEARTBEAT "$id" "$token") ;;
        validate) CMD=(LEASE.VALIDATE "$HOT" "$id" "$token") ;;
        get) CMD=(LEASE.GET "$HOT") ;;
        esac
        # What check_hot sends: whether the lease is still valid.
        CHECK=(LEASE.VALIDATE "$HOT" "$id" "$token")
        ;;
    esac
}

# Fails unless the lease the last command_for took is still valid.
check_hot() {
    local port=$1 reply
    [[ -z $HOT ]] && return
    reply=$(redis-cli -p "$port" "${CHECK[@]}")
    [[ $reply == 1 ]] || die "the lease $HOT is not live on port $port after its row ($reply)"
}

if ((CLUSTER)); then
    log "starting a three-node cluster on ports $((PORT + 1))-$((PORT + 3))"
    start_cluster "$PORT" "$BUS_OFFSET"
    PIDS_OF[leader]="${CLUSTER_PIDS[*]}"
    PIDS_OF[follower]="${CLUSTER_PIDS[*]}"
    wait_leader
    log "leader on port ${PORT_OF[leader]}, follower measured on port ${PORT_OF[follower]}"
fi
for target in "${TARGET_LIST[@]}"; do
    if [[ $target =~ ^(always|everysec)$ ]]; then
        log "starting a single node on port ${PORT_OF[$target]}, appendfsync $target"
        start_leased "${PORT_OF[$target]}" "$target"
        PIDS_OF[$target]=$STARTED_PID
    fi
done

# The median run's ops/s of the lines "ops p50 p99" on stdin.
median_ops() {
    median_run | awk '{ print $1 }'
}

RESULTS="$WORK/results.csv"
: >"$RESULTS"
for row in "${ROW_LIST[@]}"; do
    for pipeline in "${PIPELINE_LIST[@]}"; do
        declare -A ALL=()
        for ((i = 0; i < REPEAT; i++)); do
            for target in "${TARGET_LIST[@]}"; do
                command_for "$row" "$target" "$pipeline" "$i"
                read -ra pids <<<"${PIDS_OF[$target]}"
                before=$(cpu_ticks "${pids[@]}")
                result=$(bench_once "${PORT_OF[$target]}" "$pipeline" "${CMD[@]}")
                # The servers' CPU time per request, in microseconds: what
                # a run costs whatever else the machine is doing.
                cpu=$(awk -v t=$(($(cpu_ticks "${pids[@]}") - before)) -v hz="$CLOCK_TICKS" \
                    -v n="$REQUESTS" 'BEGIN { printf "%.1f", t / hz / n * 1e6 }')
                result+=" $cpu"
                check_hot "${PORT_OF[$target]}"
                if ((CLUSTER)); then
                    [[ $(redis-cli -p "$LEADER" ROLE | head -n 1) == master ]] ||
                        die "the leader (port $LEADER) lost leadership during a run"
                fi
                log "  $row -P $pipeline $target: $result"
                ALL[$target]+="$result"$'\n'
                printf '%s,%s,%s,%s,%s\n' "$row" "$pipeline" "$target" "$i" "${result// /,}" >>"$RUNS"
            done
        done
        line="$row,$pipeline"
        for target in "${TARGET_LIST[@]}"; do
            runs=$(printf '%s' "${ALL[$target]}" | awk '{ printf "%s%.0f", (NR > 1 ? " / " : ""), $1 }')
            cpus=$(printf '%s' "${ALL[$target]}" | awk '{ printf "%s%s", (NR > 1 ? " / " : ""), $4 }')
            line+=",$runs,$(printf '%s' "${ALL[$target]}" | median_ops),$cpus"
        done
        printf '%s\n' "$line" >>"$RESULTS"
        unset ALL
    done
done

if [[ -n $RAW ]]; then
    {
        printf 'row,pipeline,target,run,ops,p50_ms,p99_ms,cpu_us\n'
        cat "$RUNS"
    } >"$RAW"
fi

name_of() {
    case $1 in
    always) printf 'single, always' ;;
    everysec) printf 'single, everysec' ;;
    leader) printf 'cluster leader' ;;
    follower) printf 'cluster follower' ;;
    esac
}

command_of() {
    case $1 in
    acquire) printf 'LEASE.ACQUIRE (random runs)' ;;
    heartbeat) printf 'LEASE.HEARTBEAT (one live lease)' ;;
    validate) printf 'LEASE.VALIDATE (one live lease)' ;;
    get) printf 'LEASE.GET (one live lease)' ;;
    esac
}

# The ratios shown: each cluster target over each single node measured.
RATIOS=()
for cluster in leader follower; do
    for single in always everysec; do
        if [[ " ${TARGET_LIST[*]} " == *" $cluster "* && " ${TARGET_LIST[*]} " == *" $single "* ]]; then
            RATIOS+=("$cluster/$single")
        fi
    done
done

printf '\n'
print_setup | sed '/^# leased/s/^# leased leased /# leased /; /^# leased/s/, Redis.*//'
printf '# %s requests per run, -c %s, %s run(s) per cell (requests/s, in the order run)\n' \
    "$REQUESTS" "$CLIENTS" "$REPEAT"
for row in "${ROW_LIST[@]}"; do
    printf '\n%s\n\n| -P |' "$(command_of "$row")"
    for target in "${TARGET_LIST[@]}"; do printf ' %s |' "$(name_of "$target")"; done
    for ratio in "${RATIOS[@]}"; do printf ' %s |' "$ratio"; done
    printf '\n|---:|'
    for _ in "${TARGET_LIST[@]}" "${RATIOS[@]}"; do printf -- '---:|'; done
    printf '\n'
    CPU_ROWS=""
    while IFS=, read -ra fields; do
        [[ ${fields[0]} == "$row" ]] || continue
        declare -A MEDIAN=()
        printf '| %s |' "${fields[1]}"
        CPU_ROWS+="| ${fields[1]} |"
        for ((t = 0; t < ${#TARGET_LIST[@]}; t++)); do
            printf ' %s |' "${fields[2 + 3 * t]}"
            MEDIAN[${TARGET_LIST[t]}]=${fields[3 + 3 * t]}
            CPU_ROWS+=" ${fields[4 + 3 * t]} |"
        done
        CPU_ROWS+=$'\n'
        for ratio in "${RATIOS[@]}"; do
            awk -v a="${MEDIAN[${ratio%/*}]}" -v b="${MEDIAN[${ratio#*/}]}" \
                'BEGIN { printf " %.2f |", a / b }'
        done
        printf '\n'
        unset MEDIAN
    done <"$RESULTS"
    printf '\nServer CPU time per request, µs (the single node; all three cluster nodes)\n\n| -P |'
    for target in "${TARGET_LIST[@]}"; do printf ' %s |' "$(name_of "$target")"; done
    printf '\n|---:|'
    for _ in "${TARGET_LIST[@]}"; do printf -- '---:|'; done
    printf '\n%s' "$CPU_ROWS"
done
