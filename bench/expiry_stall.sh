#!/usr/bin/env bash
# Runs examples/expiry_stall.rs against a fresh release leased for each
# appendfsync mode: 1,000,000 leases expire at the same instant, and two
# probe connections (LEASE.GET through the core, PING without it) record
# their latencies while the leases are reclaimed.
#
#   bench/expiry_stall.sh [--modes everysec,always] [--leases N]
#                         [--port P] [--no-build]
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODES=everysec,always
LEASES=1000000
PORT=16482
BUILD=1
while (($#)); do
    case $1 in
    --modes) MODES=$2; shift 2 ;;
    --leases) LEASES=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1" ;;
    esac
done
IFS=, read -ra MODE_LIST <<<"$MODES"

ensure_redis
if ((BUILD)); then
    log "building leased and examples/expiry_stall (release)"
    (cd "$ROOT" && cargo build --release --quiet --bin leased --example expiry_stall)
fi
STALL_BIN="$ROOT/target/release/examples/expiry_stall"
[[ -x $STALL_BIN && -x $LEASED_BIN ]] || die "binaries missing (run without --no-build)"
bench_init

for mode in "${MODE_LIST[@]}"; do
    printf '\n## appendfsync %s\n\n' "$mode"
    # Only the reclaiming runs: no rewrite starts meanwhile.
    start_leased "$PORT" "$mode" --lease-retention 1 --auto-aof-rewrite-percentage 0
    pid=$STARTED_PID
    "$STALL_BIN" --port "$PORT" --leases "$LEASES"
    stop_server "$pid"
    rm -rf "$WORK/leased-$PORT-$mode"
done
