#!/usr/bin/env bash
# Bytes per lease: leased against Redis holding the same leases through
# bench/lease.lua (one hash per run plus a token index key) and as plain
# `SET run worker PX` keys, for both id styles, with the log on and off.
# Every measurement runs on a fresh server (examples/memory_load.rs).
#
#   bench/memory.sh [--leases N] [--appendonly yes,no] [--tenures K]
#                   [--no-build]
#
# Prints a Markdown table of bytes per lease by used_memory and by RSS.
# Then, for tenure history (LEASE.HISTORY, on by default), one more fresh
# leased per id style: after the leases are loaded, K rounds (4 by
# default; 0 skips this) release every lease and acquire its run again,
# and a second table shows what each run's first past tenure cost (with
# the run's entry) and what each later one cost, by used_memory.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LEASES=1000000
MODES=yes,no
TENURES=4
BUILD=1
LEASED_PORT=16481
REDIS_PORT=16381
while (($#)); do
    case $1 in
    --leases) LEASES=$2; shift 2 ;;
    --appendonly) MODES=$2; shift 2 ;;
    --tenures) TENURES=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

((TENURES > 0)) || exit 0
printf '\n| ids | runs | past tenures per run | first (entry + tenure), bytes/run | each later tenure, bytes |\n'
printf '|---|---:|---:|---:|---:|\n'
APPENDONLY=yes
for ids in colon dash; do
    start_leased "$LEASED_PORT" everysec
    lines=$("$LOAD_BIN" --port "$LEASED_PORT" --target leased --ids "$ids" --leases "$LEASES" \
        --tenures "$TENURES")
    stop_server "$STARTED_PID"
    rm -rf "$WORK"/leased-*
    IFS=, read -r _ idstyle count tenures first later _ <<<"$(tail -n 1 <<<"$lines")"
    printf '| %s | %s | %s | %s | %s |\n' "$idstyle" "$count" "$tenures" "$first" "$later"
done
