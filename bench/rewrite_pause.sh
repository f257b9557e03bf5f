#!/usr/bin/env bash
# Runs examples/rewrite_pause.rs against a fresh release leased for each
# appendfsync mode, once with only the probes and once with acquiring
# clients too.
#
#   bench/rewrite_pause.sh [--modes everysec,always] [--leases N]
#                          [--acquirers N] [--port P] [--no-build]
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODES=everysec,always
LEASES=1000000
ACQUIRERS=4
PORT=16480
BUILD=1
while (($#)); do
    case $1 in
    --modes) MODES=$2; shift 2 ;;
    --leases) LEASES=$2; shift 2 ;;
    --acquirers) ACQUIRERS=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1" ;;
    esac
done
IFS=, read -ra MODE_LIST <<<"$MODES"

ensure_redis
if ((BUILD)); then
    log "building leased and examples/rewrite_pause (release)"
    (cd "$ROOT" && cargo build --release --quiet --bin leased --example rewrite_pause)
fi
PAUSE_BIN="$ROOT/target/release/examples/rewrite_pause"
[[ -x $PAUSE_BIN && -x $LEASED_BIN ]] || die "binaries missing (run without --no-build)"
bench_init

for mode in "${MODE_LIST[@]}"; do
    for acquirers in 0 "$ACQUIRERS"; do
        printf '\n## appendfsync %s, %s acquiring clients\n\n' "$mode" "$acquirers"
        # Only the program starts rewrites.
        start_leased "$PORT" "$mode" --auto-aof-rewrite-percentage 0
        pid=$STARTED_PID
        "$PAUSE_BIN" --port "$PORT" --leases "$LEASES" --acquirers "$acquirers"
        stop_server "$pid"
        rm -rf "$WORK/leased-$PORT-$mode"
        if [[ $ACQUIRERS == 0 ]]; then
            break
        fi
    done
done
