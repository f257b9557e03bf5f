#!/usr/bin/env bash
# Checks that bench/lease.lua on Redis answers like leased: runs the same
# command sequence against a release leased (LEASE.<CMD> ...) and against
# redis-server (EVALSHA sha 0 <CMD> ...), and diffs the replies as redis-cli
# prints them. Shows every difference and exits non-zero if there was one.
#
#   bench/check_lua.sh [--leased-port P] [--redis-port P] [--no-build] [-v]
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LEASED_PORT=16481
REDIS_PORT=16381
BUILD=1
VERBOSE=0
while (($#)); do
    case $1 in
    --leased-port) LEASED_PORT=$2; shift 2 ;;
    --redis-port) REDIS_PORT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -v | --verbose) VERBOSE=1; shift ;;
    -h | --help) sed -n '2,8p' "$0"; exit 0 ;;
    *) die "unknown option $1" ;;
    esac
done

ensure_redis
((BUILD)) && build_leased
[[ -x $LEASED_BIN ]] || die "$LEASED_BIN missing (run without --no-build)"
bench_init
# The script keeps an expired lease until it is taken over or released;
# leased does the same only with retention off (0).
start_leased "$LEASED_PORT" no --lease-retention 0
start_redis "$REDIS_PORT" no
SHA=$(load_script "$REDIS_PORT")

CHECKED=0
DIFFERENT=0

# The replies of leased and of Redis + Lua to one command, as redis-cli
# prints them (types shown: (integer), (nil), (error)).
ask_leased() {
    local command=$1
    shift
    redis-cli --no-raw -p "$LEASED_PORT" "LEASE.$command" "$@"
}

ask_redis() {
    redis-cli --no-raw -p "$REDIS_PORT" EVALSHA "$SHA" 0 "$@"
}

report() {
    local label=$1 ours=$2 theirs=$3
    CHECKED=$((CHECKED + 1))
    if [[ $ours == "$theirs" ]]; then
        ((VERBOSE)) && printf 'same  %s\n%s\n' "$label" "$ours"
        return 0
    fi
    DIFFERENT=$((DIFFERENT + 1))
    printf 'DIFF  %s\n' "$label"
    diff <(printf '%s\n' "$ours") <(printf '%s\n' "$theirs") |
        sed 's/^</  leased/; s/^>/  redis /' || true
}

# both CMD args...: the replies must be identical.
both() {
    local ours theirs
    ours=$(ask_leased "$@" 2>&1)
    theirs=$(ask_redis "$@" 2>&1)
    report "$*" "$ours" "$theirs"
}

# both_clock CMD args...: a command that reads the server clock. The
# replies must be identical except for expires_at, which must agree to
# within 2 seconds (the two servers are asked a moment apart).
both_clock() {
    local ours theirs ours_at theirs_at
    ours=$(ask_leased "$@" 2>&1)
    theirs=$(ask_redis "$@" 2>&1)
    ours_at=$(printf '%s\n' "$ours" | awk '/"expires_at"/ { getline; gsub(/[ "]|^ *[0-9]+\)/, ""); print }')
    theirs_at=$(printf '%s\n' "$theirs" | awk '/"expires_at"/ { getline; gsub(/[ "]|^ *[0-9]+\)/, ""); print }')
    if [[ -n $ours_at && -n $theirs_at ]] &&
        awk -v a="$ours_at" -v b="$theirs_at" 'BEGIN { d = a - b; exit !(d < 2 && d > -2) }'; then
        ours=${ours//$ours_at/<clock>}
        theirs=${theirs//$theirs_at/<clock>}
    fi
    report "$* (clock)" "$ours" "$theirs"
}

# The README's redis-cli session.
both ACQUIRE run-1 worker-a 0
both ACQUIRE run-1 worker-b 5
both HEARTBEAT run-1:worker-a:1 1 8
both VALIDATE run-1 run-1:worker-a:1 1 17.9
both VALIDATE run-1 run-1:worker-a:1 1 18
both ACQUIRE run-1 worker-b 18
both RELEASE run-1:worker-a:1 1
both HEARTBEAT run-1:worker-b:2 two

# Takeover, and a failed acquire issues no token.
both ACQUIRE t worker-a 20 TTL 5
both ACQUIRE t worker-a 21           # held, even for its own worker
both ACQUIRE t worker-b 24.999
both ACQUIRE t worker-b 25           # expired at 25: taken over, token 4
both HEARTBEAT t:worker-a:3 3 25
both VALIDATE t t:worker-a:3 3 25
both RELEASE t:worker-a:3 3
both GET t 25
both VALIDATE t t:worker-b:4 4 25
both ACQUIRE t2 w 25                 # token 5: the failed acquires used none

# A lagging now is evaluated at registry time.
both ACQUIRE lag w 100
both VALIDATE lag lag:w:6 6 50       # evaluated at 100
both HEARTBEAT lag:w:6 6 60          # extends to 100 + 10
both GET lag 0
both ACQUIRE lag-2 w 1               # expires_at = 100 + 10
both VALIDATE lag lag:w:6 6 109.999
both VALIDATE lag lag:w:6 6 110
both VALIDATE lag lag:w:6 6 50       # still 110: expired
both HEARTBEAT lag:w:6 6 105         # lagging now cannot revive it
both GET lag 105

# Heartbeat never revives; expiry is inclusive.
both ACQUIRE hb w 200 TTL 1
both HEARTBEAT hb:w:8 8 200.5
both HEARTBEAT hb:w:8 8 201.5        # expired at 201.5 exactly
both GET hb 201.5
both HEARTBEAT hb:w:8 8 201.6
both VALIDATE hb hb:w:8 8 201.6

# Release works past expiry while the lease is still current.
both ACQUIRE rel w 300 TTL 1
both GET rel 400
both VALIDATE rel rel:w:9 9 400
both RELEASE rel:w:9 9
both RELEASE rel:w:9 9
both GET rel 400
both ACQUIRE rel w2 400

# Ids with ':' are never split: the same lease id from two runs.
both ACQUIRE a:b c 500
both ACQUIRE a b:c 500
both VALIDATE a:b a:b:c:11 11 500
both VALIDATE a a:b:c:11 11 500      # right text, wrong run
both VALIDATE a a:b:c:12 12 500
both VALIDATE a:b a:b:c:12 12 500
both HEARTBEAT a:b:c:12 12 501
both HEARTBEAT a:b:c:11 12 501       # id of one lease, token of the other
both RELEASE a:b:c:11 12
both RELEASE a:b:c:12 11
both RELEASE a:b:c:11 11
both GET a:b 501
both GET a 501
both ACQUIRE ':' ':' 501
both VALIDATE ':' ':::13' 13 501
both VALIDATE ':' '::13' 13 501
both VALIDATE ':' '::::13' 13 501
both ACQUIRE '' '' 501
both GET '' 501
both RELEASE '::14' 14
both ACQUIRE 'x:' ':y' 501
both VALIDATE 'x:' 'x:::y:15' 15 501
both RELEASE 'x:::y:15' 15

# Numbers: fractional times, exponents, signs, formatting.
both ACQUIRE f w 1000.1 TTL 0.2
both GET f 1000.2
both ACQUIRE f2 w 1e4 ttl 1.5
both ACQUIRE f3 w +10000.25 TTL 2.5e-1
both ACQUIRE f4 w 10000.3
both HEARTBEAT f4:w:19 19 10000.7
both GET f4 10000.70000000001
both ACQUIRE f5 w 10001 TTL 0.001
both ACQUIRE f6 w 10001.5 TTL 1e-7
both ACQUIRE f7 w 10002 TTL 123456789.123
both ACQUIRE f8 w .5e5 TTL 3.
both GET missing 0
both VALIDATE missing missing:w:1 1 0
both HEARTBEAT nobody:w:99 99 50000
both RELEASE nobody:w:99 99
both RELEASE r:w:9223372036854775807 9223372036854775807

# Errors, in leased's wording; none of them moves registry time.
both ACQUIRE
both ACQUIRE r
both ACQUIRE r w soon
both ACQUIRE r w inf
both ACQUIRE r w -inf
both ACQUIRE r w nan
both ACQUIRE r w ' 1'
both ACQUIRE r w '1 '
both ACQUIRE r w 0x10
both ACQUIRE r w 1e400
both ACQUIRE r w ''
both ACQUIRE r w .
both ACQUIRE r w 1e
both ACQUIRE r w 1 TTL
both ACQUIRE r w TTL
both ACQUIRE r w 1 EX 5
both ACQUIRE r w 1 TTL 5 x
both ACQUIRE r w TTL abc
both ACQUIRE r w TTL 0
both ACQUIRE r w TTL -1
both ACQUIRE r w 1 2
both HEARTBEAT
both HEARTBEAT id
both HEARTBEAT id abc
both HEARTBEAT id 0
both HEARTBEAT id -5
both HEARTBEAT id -9223372036854775808
both HEARTBEAT id -9223372036854775809
both HEARTBEAT id 01
both HEARTBEAT id +1
both HEARTBEAT id -0
both HEARTBEAT id 1.5
both HEARTBEAT id 9223372036854775808
both HEARTBEAT id 1 soon
both HEARTBEAT id 1 2 3
both HEARTBEAT id bad 2 3
both VALIDATE r id
both VALIDATE r id x
both VALIDATE r id 1 soon
both VALIDATE r id 1 2 3
both RELEASE id
both RELEASE id 1 2
both RELEASE id x
both GET
both GET r soon
both GET r 1 2
both ACQUIRE r w 60000 TTL 0
both ACQUIRE r w 60000 TTL 5 x
both HEARTBEAT f8:w:23 23 60000 3
both VALIDATE f8 f8:w:23 23 60000 3
both GET f8 60000 2
both GET f8 0                        # still 50000: not expired

# The server clock (no now): registry time is still 50000 here, far behind
# the clock, so these are evaluated at the clock.
both_clock ACQUIRE clock w
both_clock ACQUIRE clock w
both_clock GET clock
both_clock ACQUIRE clock-ttl w TTL 30
both HEARTBEAT clock:w:24 24
both VALIDATE clock clock:w:24 24
both VALIDATE clock clock:w:24 24 0  # lagging: evaluated at the clock
both_clock GET clock 0

# A now too far ahead of the clock is refused (lease-max-skew 60), and
# changes nothing.
both ACQUIRE far w 1e20
both GET nosuch 1e18
both HEARTBEAT clock:w:24 24 1e12
both VALIDATE clock clock:w:24 24 1e12

# Far in the future through the TTL (done last: expiry stays there).
both ACQUIRE far2 w 0 TTL 1e300
both VALIDATE clock clock:w:24 24
both ACQUIRE clock w
both GET far

# Run data, at the server clock: SETDATA passes HEARTBEAT's test and does
# not extend the lease; DELDATA says whether there was data to delete.
both_clock ACQUIRE data w TTL 30     # token 27
both SETDATA data:w:27 27 v1
both SETDATA data:w:27 27 v2
both SETDATA data:w:27 26 v3         # token of another lease
both SETDATA data:w:26 27 v3         # id of another lease
both SETDATA far2:w:26 26 ''         # empty value
both DELDATA data:w:27 27
both DELDATA data:w:27 27            # nothing left
both DELDATA data:w:27 28
both SETDATA data:w:27 27 v4 0       # lagging: evaluated at registry time
both SETDATA data:w:27 27 v5 1e12    # too far ahead
both_clock GET data
both RELEASE data:w:27 27
both SETDATA data:w:27 27 v6         # released
both DELDATA data:w:27 27
both_clock ACQUIRE data-x w TTL 0.05 # token 28
sleep 0.2
both SETDATA data-x:w:28 28 v7       # expired
both DELDATA data-x:w:28 28
both SETDATA
both SETDATA id 1
both SETDATA id x v
both SETDATA id 0 v
both SETDATA id 1 v soon
both SETDATA id 1 v 1 2
both SETDATA id 1 "$(printf '%065537d' 0)" # longer than lease-max-data-len
both DELDATA id
both DELDATA id x
both DELDATA id 1 2

printf '%d commands checked, %d different\n' "$CHECKED" "$DIFFERENT"
((DIFFERENT == 0))
