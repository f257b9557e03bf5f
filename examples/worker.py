"""A worker that holds a lease on its run while it works (redis-py 5).

    python3 examples/worker.py [PORT] [RUN]

It acquires the run, heartbeats in the background at a third of the TTL,
stamps every write with its fencing token, stops writing the moment a
heartbeat fails, and releases the lease when done.
"""

import sys
import threading
import time

import redis

TTL = 3.0


class Storage:
    """Stands in for the database the worker writes to. It remembers the
    newest fencing token it has seen and refuses writes with an older one:
    that check, on the storage side, is what makes a stale worker harmless."""

    def __init__(self):
        self.newest_token = 0
        self.rows = {}

    def write(self, key, value, token):
        if token < self.newest_token:
            raise PermissionError(f"stale fencing token {token} < {self.newest_token}")
        self.newest_token = token
        self.rows[key] = value


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 6479
    run = sys.argv[2] if len(sys.argv) > 2 else "run-42"
    r = redis.Redis(host="127.0.0.1", port=port, protocol=3)

    lease = r.execute_command("LEASE.ACQUIRE", run, "worker-py", "TTL", TTL)
    if lease is None:
        sys.exit(f"{run} is held by another worker")
    lease_id, token = lease[b"lease_id"], lease[b"fencing_token"]
    print(f"acquired {lease_id.decode()} (token {token})")

    lost = threading.Event()

    def heartbeat():
        while not lost.wait(TTL / 3):
            if r.execute_command("LEASE.HEARTBEAT", lease_id, token) != 1:
                lost.set()

    threading.Thread(target=heartbeat, daemon=True).start()

    storage = Storage()
    for step in range(5):
        if lost.is_set():
            sys.exit("lease lost: stopped writing")
        storage.write(f"{run}/checkpoint", step, token)
        time.sleep(0.2)

    lost.set()  # stops the heartbeat thread
    released = r.execute_command("LEASE.RELEASE", lease_id, token)
    print(f"done: checkpoint {storage.rows[f'{run}/checkpoint']}, released={released}")


if __name__ == "__main__":
    main()
