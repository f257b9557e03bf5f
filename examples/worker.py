"""A worker that holds a lease on its run while it works (the leased package).

    pip install ./clients/python      # the leased package, and redis-py 5
    python3 examples/worker.py --port 6479 --run run-42 --db checkpoints.db [--wait 30]
    python3 examples/worker.py --nodes 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 ...

With `--nodes` it talks to a cluster: commands go to the node that last
answered; a follower's `-MOVED` sends them to the leader it names, a node
that cannot be reached to the next one, and `-TRYAGAIN` or `-CLUSTERDOWN`
(an election) is retried (the leased package).

It takes a lease on the run with the leased package, which heartbeats it
in the background at a third of the TTL, and checkpoints its progress
into a SQLite table, each write stamped with its fencing token, and into
leased, as the run's data (`lease.checkpoint`, `LEASE.SETDATA`). The
lease is acquired with the run's data: a run that has a checkpoint (a
worker before it stopped, crashed or was stalled past its TTL) is resumed
at the step after it. Before each write it calls `lease.check()`, which
raises once a heartbeat failed or the lease's deadline passed, and it
stops writing then, or when `lease.checkpoint` is refused; the lease is
released when the work is done (or the worker stops). If the run is held
by another worker it exits, or with `--wait SECONDS` waits up to that long
for it (a blocking `LEASE.ACQUIRE ... BLOCK ms`): the server hands it the
run the moment the holder releases it or its lease expires, with the next
fencing token. docs/protocol.md shows the same worker on raw commands,
for other languages.

examples/worker.rs is the same worker in Rust, with the same options,
outputs, exit codes, table and checkpoint format: the two can share one
database file, and either resumes a run the other left.

Exit codes: 0 finished (or nothing left to do), 3 the run is held by
another worker (with `--wait`: still held when the wait ran out), 4 lease
lost (a heartbeat failed, the lease's deadline passed, or a
`LEASE.SETDATA` was refused; stopped writing), 5 a write
rejected by the storage (stale token), 1 any other error; 2 bad options.
"""

import argparse
import os
import signal
import sqlite3
import sys
import time

import leased

HELD, LOST, REJECTED = 3, 4, 5

# The longest --wait, about 31 years: its milliseconds and timeouts stay
# far within what the server and the clients can count.
MAX_WAIT = 1e9

SCHEMA = """CREATE TABLE IF NOT EXISTS checkpoints (
    run TEXT PRIMARY KEY, step INTEGER NOT NULL, token INTEGER NOT NULL, worker TEXT NOT NULL)"""

# The fencing check is made by the storage, in the same statement as the
# write. The worker cannot make it: it may be paused (GC, a suspended VM) or
# cut off between its last good heartbeat and the write, and does not know
# that its lease expired and the run has a new owner with a higher token.
# A write whose token is older than the row's changes no row.
CHECKPOINT = """INSERT INTO checkpoints (run, step, token, worker) VALUES (?, ?, ?, ?)
    ON CONFLICT (run) DO UPDATE
    SET step = excluded.step, token = excluded.token, worker = excluded.worker
    WHERE excluded.token >= checkpoints.token"""


# The run's data in leased is the last checkpoint written: `step=N`, in
# ASCII, N the step's number (a decimal integer, 0 or more). The next holder
# starts at step N + 1. examples/worker.rs writes and reads the same.
def encode_checkpoint(step):
    return f"step={step}".encode()


def decode_checkpoint(data):
    """The step of a `step=N` checkpoint."""
    name, _, step = data.partition(b"=")
    if name != b"step" or not step.isdigit():
        raise ValueError(f"the run's data is not a checkpoint: {data!r}")
    return int(step)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=6479, help="leased's port on 127.0.0.1")
    parser.add_argument(
        "--nodes", metavar="HOST:PORT,...", help="a cluster's nodes, separated by commas (instead of --port)"
    )
    parser.add_argument("--run", default="run-42", help="the run to work on")
    parser.add_argument("--db", default="checkpoints.db", help="the SQLite database file")
    parser.add_argument("--worker", default="worker-py", help="this worker's id")
    parser.add_argument("--ttl", type=float, default=3.0, help="lease TTL in seconds")
    parser.add_argument("--steps", type=int, default=5, help="checkpoints to write")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds of work per step")
    parser.add_argument(
        "--pause-before-write", type=int, metavar="K",
        help="demonstration: stop the whole process (SIGSTOP) just before checkpoint K",
    )
    parser.add_argument(
        "--wait", type=positive_seconds, metavar="SECONDS",
        help="when the run is held, wait up to SECONDS for it instead of exiting 3",
    )
    return parser.parse_args()


def positive_seconds(text):
    """A wait: more than 0 seconds, at most MAX_WAIT."""
    seconds = float(text)
    if not 0 < seconds <= MAX_WAIT:
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds in (0, 1e9]")
    return seconds


def say(line):
    print(line, flush=True)


def checkpoint(db, run, step, token, worker):
    """Writes the run's checkpoint; False if the storage rejected the token."""
    return db.execute(CHECKPOINT, (run, step, token, worker)).rowcount == 1


def first_step(lease):
    """The step to start at: 0 on a run without data, else the one after the
    checkpoint in its data (read with the acquire)."""
    if lease.data is None:
        say("no checkpoint: starting at step 0")
        return 0
    last = decode_checkpoint(lease.data)
    say(f"resuming after checkpoint {last} (written with token {lease.data_token})")
    return last + 1


def acquire(registry, args):
    """The lease on the run, heartbeated from here on. With --wait, a run
    held by another worker is waited for (on a connection of its own, whose
    timeout outlasts the wait); raises leased.RunHeld if it stays held."""
    try:
        return registry.acquire(args.run, args.worker, ttl=args.ttl)
    except leased.RunHeld:
        if args.wait is None:
            raise
    say(f"waiting up to {args.wait:.15g} s for {args.run}")
    return registry.acquire(args.run, args.worker, ttl=args.ttl, wait=args.wait)


def pause(step):
    """Stops the whole process, heartbeat thread included, as a long GC
    pause would; `kill -CONT` resumes it, straight on to the write: past
    the lease's check, which only the storage's fencing check can catch."""
    say(f"pausing before checkpoint {step} (SIGSTOP)")
    os.kill(os.getpid(), signal.SIGSTOP)


def main():
    args = parse_args()
    db = sqlite3.connect(args.db, isolation_level=None)  # each statement commits
    db.execute(SCHEMA)
    if args.nodes:
        # retry_for: long enough for an election (about 2 s) and then some.
        registry = leased.Registry(nodes=args.nodes.split(","), retry_for=10.0)
    else:
        registry = leased.Registry(f"redis://127.0.0.1:{args.port}")
    try:
        lease = acquire(registry, args)
    except leased.RunHeld:
        say(f"{args.run} is held by another worker")
        sys.exit(HELD)
    with lease:  # released at the end of the block, also when it exits early
        say(f"acquired {lease.lease_id} (token {lease.token})")
        first = first_step(lease)
        # A run whose checkpoint is its last step (its data stays after the
        # release that ends it) has nothing left to do: the worker releases it.
        if 0 < args.steps <= first:
            say(f"run already complete: nothing to do after checkpoint {first - 1}")
        for step in range(first, args.steps):
            if step > first:
                time.sleep(args.interval)  # the work
            try:
                lease.check()  # a heartbeat failed, or the deadline passed?
            except leased.LeaseLost:
                say(f"lease lost: stopped writing before checkpoint {step}")
                sys.exit(LOST)
            if step == args.pause_before_write:
                pause(step)
            if not checkpoint(db, args.run, step, lease.token, args.worker):
                say(f"write rejected: checkpoint {step}'s token {lease.token} is older than the table's")
                sys.exit(REJECTED)
            # Then the run's data, the hint the next holder resumes from
            # (checked first, then LEASE.SETDATA, which the server refuses
            # unless the lease is still the run's, unexpired).
            try:
                lease.checkpoint(encode_checkpoint(step))
            except (leased.LeaseLost, leased.Unavailable):
                say(f"lease lost: checkpoint {step} is in the table, but leased refused it")
                sys.exit(LOST)
            say(f"wrote checkpoint {step} (token {lease.token})")
    # The run's data stays (until lease-retention after this release, or a
    # LEASE.DELDATA): a worker that acquires the run again finds its last
    # step done, and does nothing.
    written = max(0, args.steps - first)
    say(f"done: wrote {written} checkpoints (token {lease.token}), released={int(bool(lease.released))}")


if __name__ == "__main__":
    main()
