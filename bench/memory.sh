#!/usr/bin/env bash
# Bytes per lease: leased against Redis holding the same leases through
# bench/lease.lua (one hash per run plus a token index key) and as plain
# `SET run worker PX` keys, for both id styles, with the log on and off.
# Every measurement runs on a fresh server (examples/memory_load.rs).
#
#   bench/memory.sh [--leases N] [--appendonly yes,no] [--no-build]
#
# Prints a Markdown table of bytes per lease by used_memory and by RSS.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LEASES=1000000
MODES=yes,no
BUILD=1
LEASED_PORT=16481
REDIS_PORT=16381
while (($#)); do
    case $1 in
    --leases) LEASES=$2; shift 2 ;;
    --appendonly) MODES=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1" ;;
    esac
done
IFS=, read -ra MODE_LIST <<<"$MODES"

ensure_redis
if ((BUILD)); then
    log "building leased and examples/memory_load (release)"
    (cd "$ROOT" && cargo build --release --quiet --bin leased --example memory_load)
fi
LOAD_BIN="$ROOT/target/release/examples/memory_load"
[[ -x $LOAD_BIN && -x $LEASED_BIN ]] || die "binaries missing (run without --no-build)"
bench_init

# measure SERVER TARGET IDS: one fresh server, one load, one table row.
measure() {
    local server=$1 target=$2 ids=$3 line sha=()
    if [[ $server == leased ]]; then
        start_leased "$LEASED_PORT" everysec
        port=$LEASED_PORT
    else
        start_redis "$REDIS_PORT" everysec
        port=$REDIS_PORT
        [[ $target == lua ]] && sha=(--sha "$(load_script "$REDIS_PORT")")
    fi
    line=$("$LOAD_BIN" --port "$port" --target "$target" --ids "$ids" --leases "$LEASES" "${sha[@]}")
    stop_server "$STARTED_PID"
    rm -rf "$WORK"/leased-* "$WORK"/redis-*
    IFS=, read -r name idstyle count _ _ used _ _ rss <<<"$line"
    printf '| %s | %s | %s | %s | %s | %s |\n' "$APPENDONLY" "$idstyle" "$name" "$count" "$used" "$rss"
}

printf '| appendonly | ids | server | leases | bytes/lease (used_memory) | bytes/lease (RSS) |\n'
printf '|---|---|---|---:|---:|---:|\n'
for APPENDONLY in "${MODE_LIST[@]}"; do
    for ids in colon dash; do
        measure leased leased "$ids"
        measure redis lua "$ids"
        measure redis set "$ids"
    done
done
