"""The keyspace view driven by redis-py 5, over RESP2 and RESP3: runs that
hold a lease are read-only hash keys.

Usage: python3 redis_py_keyspace.py PORT

Expects a fresh server. Exits non-zero (with a traceback) on the first
reply that breaks the contract. Run by tests/python_client.rs.
"""

import sys

import redis

RUNS = 10_000

# (redis-py method, arguments, the command it sends): each must be refused.
WRITES = [
    ("set", ("run-1", "x"), "set"),
    ("setnx", ("run-1", "x"), "setnx"),
    ("setex", ("run-1", 10, "x"), "setex"),
    ("mset", ({"run-1": "x"},), "mset"),
    ("getdel", ("run-1",), "getdel"),
    ("append", ("run-1", "x"), "append"),
    ("incr", ("run-1",), "incrby"),
    ("decr", ("run-1",), "decrby"),
    ("delete", ("run-1",), "del"),
    ("unlink", ("run-1",), "unlink"),
    ("expire", ("run-1", 100), "expire"),
    ("pexpire", ("run-1", 100), "pexpire"),
    ("persist", ("run-1",), "persist"),
    ("rename", ("run-1", "run-x"), "rename"),
    ("copy", ("run-1", "run-x"), "copy"),
    ("hset", ("run-1", "worker_id", "me"), "hset"),
    ("hsetnx", ("run-1", "color", "red"), "hsetnx"),
    ("hdel", ("run-1", "worker_id"), "hdel"),
    ("hincrby", ("run-1", "fencing_token", 1), "hincrby"),
    ("hincrbyfloat", ("run-1", "expires_at", 1.5), "hincrbyfloat"),
    ("lpush", ("run-1", "x"), "lpush"),
    ("rpop", ("run-1",), "rpop"),
    ("sadd", ("run-1", "x"), "sadd"),
    ("zadd", ("run-1", {"x": 1}), "zadd"),
    ("flushdb", (), "flushdb"),
    ("flushall", (), "flushall"),
]


def fields_of_lease_get(r, run):
    """LEASE.GET's fields as the hash gives them: every value as bytes."""
    reply = r.execute_command("LEASE.GET", run)
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[0::2], reply[1::2])
    fields = {}
    for name, value in pairs:
        if isinstance(value, bytes):
            fields[name] = value
        elif isinstance(value, float):
            # RESP3 sends expires_at as a double; RESP2's bulk is the text.
            fields[name] = None
        else:
            fields[name] = str(value).encode()
    return fields


def check(port, protocol, runs):
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol)
    assert r.dbsize() == len(runs), r.dbsize()

    # scan_iter: each run exactly once, whatever the batch size.
    for count in (None, 7, 1000):
        seen = list(r.scan_iter(count=count))
        assert len(seen) == len(runs), (count, len(seen))
        assert set(seen) == runs, count
    ones = set(r.scan_iter(match="run-1*", count=500))
    assert ones == {run for run in runs if run.startswith(b"run-1")}, len(ones)
    assert set(r.scan_iter(_type="hash", count=500)) == runs
    assert list(r.scan_iter(_type="string", count=500)) == []
    assert len(r.keys("run-99*")) == 111

    # hgetall decodes to a dict of the lease's fields.
    lease = r.hgetall("run-42")
    assert isinstance(lease, dict), lease
    assert list(lease) == [
        b"run_id",
        b"worker_id",
        b"lease_id",
        b"fencing_token",
        b"expires_at",
        b"expired",
    ], lease
    expected = fields_of_lease_get(r, "run-42")
    for name, value in expected.items():
        if value is not None:
            assert lease[name] == value, (name, lease[name], value)
    assert float(lease[b"expires_at"]) > 0
    assert lease[b"expired"] == b"0"
    assert r.hget("run-42", "worker_id") == b"worker"
    assert r.hmget("run-42", ["run_id", "nope"]) == [b"run-42", None]
    assert r.hlen("run-42") == 6
    assert r.hexists("run-42", "lease_id") is True
    assert r.hkeys("run-42") == list(lease)
    assert r.hvals("run-42") == list(lease.values())
    assert dict(r.hscan_iter("run-42")) == lease
    assert r.hgetall("no-such-run") == {}
    assert r.type("run-42") == b"hash"
    assert r.type("no-such-run") == b"none"
    assert 590 <= r.ttl("run-42") <= 600, r.ttl("run-42")
    assert r.ttl("no-such-run") == -2
    assert 590_000 <= r.pttl("run-42") <= 600_000
    assert r.exists("run-1", "run-2", "no-such-run") == 2
    assert r.memory_usage("run-42") == 80
    assert r.memory_usage("no-such-run") is None
    assert r.object("encoding", "run-42") == b"listpack"
    assert r.randomkey() in runs

    # Every write refused, with one error, and the connection alive.
    for method, args, name in WRITES:
        try:
            getattr(r, method)(*args)
        except redis.exceptions.ResponseError as error:
            message = str(error)
            assert "leases change only through LEASE.* commands" in message, message
            assert f"'{name}' would bypass their fencing tokens" in message, message
        else:
            raise SystemExit(f"{method} was not refused")
        assert r.ping() is True
    assert r.dbsize() == len(runs)
    assert r.hgetall("run-42") == lease
    r.close()
    print(f"RESP{protocol} ok")


def main():
    port = int(sys.argv[1])
    r = redis.Redis(host="127.0.0.1", port=port)
    runs = {f"run-{i}".encode() for i in range(RUNS)}
    pipe = r.pipeline(transaction=False)
    for run in sorted(runs):
        pipe.execute_command("LEASE.ACQUIRE", run, "worker", "TTL", 600)
    assert all(lease is not None for lease in pipe.execute())
    r.close()
    for protocol in (2, 3):
        check(port, protocol, runs)
    print("ok")


main()
