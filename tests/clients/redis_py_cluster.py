"""redis-py's RedisCluster against a three-node leased cluster, across a
leader kill (run by tests/cluster_clients.rs).

    python3 redis_py_cluster.py PORT,PORT,PORT

It acquires, heartbeats and releases a lease, sends a command to a
follower on purpose (RedisCluster follows its -MOVED, or the follower
proxies), acquires a second lease, prints `killing` and waits for a line
on stdin (the test kills the leader meanwhile); then it heartbeats the
second lease and acquires a third run against the new leader, and prints
`ok`. RedisCluster retries lost connections and -MOVED itself; while the
election runs, it can give up (CLUSTER SLOTS is empty, so "All slots are
not covered"; -CLUSTERDOWN, -TRYAGAIN): this script then tries again for
at most 20 s.
"""

import sys
import time

from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    ClusterDownError,
    ConnectionError,
    RedisClusterException,
    TimeoutError,
    TryAgainError,
)

ELECTION = (
    ClusterDownError,
    ConnectionError,
    RedisClusterException,
    TimeoutError,
    TryAgainError,
)


def lease_map(reply):
    """A lease reply (a flat list in RESP2) as a dict."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def until_served(what, call, patience=20.0):
    deadline = time.monotonic() + patience
    while True:
        try:
            return call()
        except ELECTION as error:
            if time.monotonic() > deadline:
                raise
            print(f"{what}: {type(error).__name__}: {error}; again", flush=True)
            time.sleep(0.1)


def main():
    ports = [int(port) for port in sys.argv[1].split(",")]
    nodes = [ClusterNode("127.0.0.1", port) for port in ports]
    rc = RedisCluster(startup_nodes=nodes, decode_responses=True)

    def acquire(run, worker):
        reply = rc.execute_command("LEASE.ACQUIRE", run, worker, "TTL", 30)
        assert reply is not None, f"{run} is held"
        return lease_map(reply)

    def heartbeat(lease):
        return rc.execute_command(
            "LEASE.HEARTBEAT", lease["lease_id"], lease["fencing_token"]
        )

    a = acquire("run-a", "w-a")
    assert heartbeat(a) == 1, a
    assert rc.execute_command("LEASE.RELEASE", a["lease_id"], a["fencing_token"]) == 1
    # Sent to a follower: RedisCluster follows the MOVED (moved), or the
    # follower answers (proxy).
    follower = [node for node in rc.get_nodes() if node.server_type != "primary"][0]
    shown = rc.execute_command("LEASE.GET", "run-a", target_nodes=follower)
    assert shown is None, shown
    b = acquire("run-b", "w-b")
    print("acquired, heartbeated, released; holding", b["lease_id"], flush=True)

    print("killing", flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    assert until_served("heartbeat", lambda: heartbeat(b)) == 1
    c = until_served("acquire", lambda: acquire("run-c", "w-c"))
    assert c["fencing_token"] > b["fencing_token"], (b, c)
    shown = lease_map(rc.execute_command("LEASE.GET", "run-b"))
    assert shown["lease_id"] == b["lease_id"], shown
    print(f"served again {time.monotonic() - started:.2f} s after the kill", flush=True)
    print("ok", flush=True)


main()
