"""A worker that holds a lease on its run while it works (redis-py 5).

    python3 examples/worker.py --port 6479 --run run-42 --db checkpoints.db [--wait 30]

It acquires the run, heartbeats in the background at a third of the TTL,
and checkpoints its progress into a SQLite table, each write stamped with
its fencing token, and into leased, as the run's data (`LEASE.SETDATA`).
It acquires `WITHDATA`: a run that has a checkpoint (a worker before it
stopped, crashed or was stalled past its TTL) is resumed at the step after
it. It stops writing the moment a heartbeat or a `LEASE.SETDATA` fails,
and releases the lease when done. If the run is held by another worker it
exits, or with `--wait SECONDS` waits up to that long for it (a blocking
`LEASE.ACQUIRE ... BLOCK ms`): the server hands it the run the moment the
holder releases it or its lease expires, with the next fencing token.
examples/worker.rs is the same worker in Rust, with the same options,
outputs, exit codes, table and checkpoint format: the two can share one
database file, and either resumes a run the other left.

Exit codes: 0 finished (or nothing left to do), 3 the run is held by
another worker (with `--wait`: still held when the wait ran out), 4 lease
lost (a heartbeat or a `LEASE.SETDATA` failed; stopped writing), 5 a write
rejected by the storage (stale token), 1 any other error; 2 bad options.
"""

import argparse
import math
import os
import signal
import sqlite3
import sys
import threading
import time

import redis

HELD, LOST, REJECTED = 3, 4, 5

# How much longer than the server's answer to a blocked acquire may take
# (the end of the block) the worker waits for it before it gives up.
REPLY_MARGIN = 5.0
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
    checkpoint in its data (the lease map of an acquire `WITHDATA`)."""
    if lease[b"data"] is None:
        say("no checkpoint: starting at step 0")
        return 0
    last = decode_checkpoint(lease[b"data"])
    say(f"resuming after checkpoint {last} (written with token {lease[b'data_token']})")
    return last + 1


def wait_for_run(args):
    """Blocks until the server hands the run to this worker (its holder
    released it, or its lease expired), or `args.wait` seconds pass: the
    lease, or None."""
    say(f"waiting up to {args.wait:.15g} s for {args.run}")
    # A connection of its own, whose socket timeout outlasts the wait. With
    # a shorter one, redis-py would give up on the reply while the server
    # still holds the worker's place in the queue: it raises TimeoutError
    # and drops the connection, losing the run the server may be about to
    # hand over. The heartbeat's connection keeps its short timeout: there
    # a slow reply must count as a failed heartbeat.
    waiting = redis.Redis(port=args.port, protocol=3, socket_timeout=args.wait + REPLY_MARGIN)
    block_ms = math.ceil(args.wait * 1000)
    try:
        return waiting.execute_command(
            "LEASE.ACQUIRE", args.run, args.worker, "TTL", args.ttl, "BLOCK", block_ms, "WITHDATA"
        )
    finally:
        waiting.close()


def pause(step):
    """Stops the whole process, heartbeat thread included, as a long GC
    pause would; `kill -CONT` resumes it, straight on to the write."""
    say(f"pausing before checkpoint {step} (SIGSTOP)")
    os.kill(os.getpid(), signal.SIGSTOP)


def main():
    args = parse_args()
    db = sqlite3.connect(args.db, isolation_level=None)  # each statement commits
    db.execute(SCHEMA)
    # A reply slower than the heartbeat period counts as a failed heartbeat.
    r = redis.Redis(port=args.port, protocol=3, socket_timeout=args.ttl / 3)

    lease = r.execute_command("LEASE.ACQUIRE", args.run, args.worker, "TTL", args.ttl, "WITHDATA")
    if lease is None and args.wait is not None:
        lease = wait_for_run(args)
    if lease is None:
        say(f"{args.run} is held by another worker")
        sys.exit(HELD)
    lease_id, token = lease[b"lease_id"], lease[b"fencing_token"]
    say(f"acquired {lease_id.decode()} (token {token})")
    first = first_step(lease)
    # A run whose checkpoint is its last step (its data stays after the
    # release that ends it) has nothing left to do: the worker releases it.
    if 0 < args.steps <= first:
        say(f"run already complete: nothing to do after checkpoint {first - 1}")

    lost = threading.Event()

    def heartbeat():
        while not lost.wait(args.ttl / 3):
            try:
                extended = r.execute_command("LEASE.HEARTBEAT", lease_id, token)
            except Exception:  # an error or a timeout: the lease may be gone
                extended = 0
            if extended != 1:
                lost.set()

    threading.Thread(target=heartbeat, daemon=True).start()

    for step in range(first, args.steps):
        if step > first:
            time.sleep(args.interval)  # the work
        if lost.is_set():
            say(f"lease lost: stopped writing before checkpoint {step}")
            sys.exit(LOST)
        if step == args.pause_before_write:
            pause(step)
        if not checkpoint(db, args.run, step, token, args.worker):
            say(f"write rejected: checkpoint {step}'s token {token} is older than the table's")
            sys.exit(REJECTED)
        # Then the run's data, the hint the next holder resumes from. The
        # SQLite row comes first: it is the durable truth, fenced by the
        # token in the write itself. A worker that stops between the two
        # (a crash, or its lease lost) leaves the data a step behind the
        # row, and the next holder redoes that one step with its higher
        # token. The other order could leave data ahead of the row: a step
        # resumed after but never written.
        try:
            stored = r.execute_command("LEASE.SETDATA", lease_id, token, encode_checkpoint(step))
        except Exception:  # an error or a timeout: the lease may be gone
            stored = 0
        if stored != 1:
            say(f"lease lost: checkpoint {step} is in the table, but leased refused it")
            sys.exit(LOST)
        say(f"wrote checkpoint {step} (token {token})")

    lost.set()  # stops the heartbeat thread
    released = r.execute_command("LEASE.RELEASE", lease_id, token)
    # The run's data stays (until lease-retention after this release, or a
    # LEASE.DELDATA): a worker that acquires the run again finds its last
    # step done, and does nothing.
    written = max(0, args.steps - first)
    say(f"done: wrote {written} checkpoints (token {token}), released={released}")


if __name__ == "__main__":
    main()
