"""Transactions through redis-py 5's default pipeline (MULTI ... EXEC),
over RESP2 and RESP3.

Usage: python3 redis_py_transactions.py PORT

Exits non-zero (with a traceback) on the first reply that breaks the
contract. Run by tests/python_client.rs against a freshly started server.
"""

import sys

import redis


def token(lease, protocol: int) -> int:
    if protocol == 3:
        return lease[b"fencing_token"]
    return dict(zip(lease[0::2], lease[1::2]))[b"fencing_token"]


def check(port: int, protocol: int) -> None:
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol)
    prefix = f"tx{protocol}"

    # The default pipeline is a transaction: every lease comes back, with
    # consecutive tokens (nothing ran between its commands).
    pipe = r.pipeline()
    for i in range(20):
        pipe.execute_command("LEASE.ACQUIRE", f"{prefix}-{i}", "w")
    leases = pipe.execute()
    assert len(leases) == 20 and all(lease is not None for lease in leases), leases
    tokens = [token(lease, protocol) for lease in leases]
    assert tokens == list(range(tokens[0], tokens[0] + 20)), tokens

    # An unknown command aborts it: redis-py raises that command's error,
    # and nothing was applied (no token spent).
    pipe = r.pipeline()
    pipe.execute_command("LEASE.ACQUIRE", f"{prefix}-aborted", "w")
    pipe.execute_command("NOSUCH")
    try:
        pipe.execute()
        raise AssertionError("EXEC after a queuing error must fail")
    except redis.ResponseError as error:
        assert "unknown command 'NOSUCH'" in str(error), error
    assert r.execute_command("LEASE.GET", f"{prefix}-aborted") is None
    next_lease = r.execute_command("LEASE.ACQUIRE", f"{prefix}-next", "w")
    assert token(next_lease, protocol) == tokens[-1] + 1, next_lease

    # An error in one command is that command's reply; the rest run.
    pipe = r.pipeline()
    pipe.execute_command("LEASE.ACQUIRE", f"{prefix}-0", "other")
    pipe.execute_command("LEASE.HEARTBEAT", f"{prefix}-0:w:{tokens[0]}", "zero")
    pipe.execute_command("LEASE.ACQUIRE", f"{prefix}-free", "w", "BLOCK", "0")
    replies = pipe.execute(raise_on_error=False)
    assert replies[0] is None, replies
    assert isinstance(replies[1], redis.ResponseError), replies
    assert token(replies[2], protocol) == tokens[-1] + 2, replies

    # WATCH is refused; UNWATCH is harmless.
    try:
        r.execute_command("WATCH", f"{prefix}-0")
        raise AssertionError("WATCH must be refused")
    except redis.ResponseError as error:
        assert str(error).startswith("WATCH is not supported"), error
    assert r.execute_command("UNWATCH") in (True, b"OK"), "UNWATCH"
    assert r.ping() is True
    r.close()


def main() -> None:
    port = int(sys.argv[1])
    for protocol in (2, 3):
        check(port, protocol)
        print(f"RESP{protocol} transactions ok")
    print("redis-py", redis.__version__, "ok")


if __name__ == "__main__":
    main()
