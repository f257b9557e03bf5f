#!/usr/bin/env bash
# Runs examples/nemesis.rs: three release leased nodes on loopback, every
# bus link through a proxy, 50 clients acquiring, heartbeating,
# validating and releasing leases on a few dozen runs while a fault is
# injected every few seconds (kill -9 of the leader or a follower, SIGSTOP
# of the leader, the leader isolated, a node's links delayed). At the end
# it heals, checks the whole history and prints the verdict and each
# fault's unavailability window; exits non-zero on a violation.
#
#   bench/nemesis.sh [--minutes M] [--clients N] [--seed N] [--no-build]
#                    [-- other options of the example]
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MINUTES=10
CLIENTS=50
SEED=""
BUILD=1
EXTRA=()
while (($#)); do
    case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1" ;;
    esac
done
[[ -n $SEED ]] && EXTRA+=(--seed "$SEED")

build_driver nemesis
print_setup
# The example starts and kills its own nodes (and removes their
# directories); nothing here to clean up.
"$DRIVER" --binary "$LEASED_BIN" --minutes "$MINUTES" --clients "$CLIENTS" "${EXTRA[@]}"
