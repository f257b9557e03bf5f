#!/usr/bin/env bash
# The longest pause a Raft snapshot of a large registry causes in a
# three-node cluster: starts one (each node with a directory of its own
# under one temporary directory), and runs examples/snapshot_pause.rs
# against it: 1.4 million leases loaded through the leader, then probes on
# the leader until openraft's policy (a snapshot every 5,000 entries) has
# had the leader save a new snapshot.
#
#   bench/snapshot_pause.sh [--leases N] [--probes N] [--port P]
#                           [--no-build] [--leased BIN]
#
#   --port P      the nodes listen on P+1..P+3 (21000), their buses on
#                 P+11..P+13
#   --leased BIN  measure this leased binary (implies --no-build; the
#                 example is still built unless it exists)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LEASES=1400000
PROBES=2
PORT=21000
BUILD=1
while (($#)); do
    case $1 in
    --leases) LEASES=$2; shift 2 ;;
    --probes) PROBES=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --leased) LEASED_BIN=$2; BUILD=0; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1" ;;
    esac
done

ensure_redis
PAUSE_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/snapshot_pause"
if ((BUILD)); then
    build_leased
fi
if ((BUILD)) || [[ ! -x $PAUSE_BIN ]]; then
    log "building examples/snapshot_pause (release)"
    (cd "$ROOT" && cargo build --release --quiet --example snapshot_pause)
fi
[[ -x $PAUSE_BIN && -x $LEASED_BIN ]] || die "binaries missing (run without --no-build)"
bench_init

start_cluster "$PORT" 10
ports="" dirs=""
for i in 1 2 3; do
    ports+="${ports:+,}$((PORT + i))"
    dirs+="${dirs:+,}$WORK/node-$i/data"
done
printf '# %s, %s leases, %s probes\n' "$("$LEASED_BIN" --version 2>/dev/null | head -1)" \
    "$LEASES" "$PROBES"
"$PAUSE_BIN" --ports "$ports" --dirs "$dirs" --leases "$LEASES" --probes "$PROBES"
for i in 1 2 3; do
    printf 'node %s: used_memory_human %s\n' "$i" \
        "$(redis-cli -p $((PORT + i)) INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory_human" { print $2 }')"
done
# What each node's builds logged (the lock held per step, with a build
# that logs it).
for i in 1 2 3; do
    grep -h "walked in" "$WORK/node-$i/leased.log" | tail -n 2 | sed "s/^/node $i: /" || true
done
