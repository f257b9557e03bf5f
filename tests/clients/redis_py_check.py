"""Drives a running leased with redis-py 5, over RESP2 and RESP3.

Usage: python3 redis_py_check.py PORT

Exits non-zero (with a traceback) on the first reply that breaks the
contract. Run by tests/python_client.rs against a freshly started server.
"""

import sys

import redis


def check(port: int, protocol: int, run: str, t: int) -> None:
    """Checks one protocol; `t` is a start time above any used before
    (registry time never goes back)."""
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol)
    assert r.ping() is True
    # redis-py sends CLIENT SETINFO on connect; the server must have kept it.
    client = r.client_info()
    assert client["lib-name"] == "redis-py", client
    assert client["resp"] == str(protocol), client

    lease = r.execute_command("LEASE.ACQUIRE", run, "worker-a", str(t))
    if protocol == 3:
        # A map, keys in the contract's order, typed values.
        assert isinstance(lease, dict), lease
        assert list(lease.keys()) == [
            b"run_id",
            b"worker_id",
            b"lease_id",
            b"fencing_token",
            b"expires_at",
        ], lease
        fields = lease
        assert isinstance(fields[b"fencing_token"], int)
        assert isinstance(fields[b"expires_at"], float)
        assert fields[b"expires_at"] == t + 10.0
    else:
        # A flat array of key/value pairs; expires_at as a bulk string.
        assert isinstance(lease, list) and len(lease) == 10, lease
        fields = dict(zip(lease[0::2], lease[1::2]))
        assert fields[b"expires_at"] == str(t + 10).encode(), fields
    token = fields[b"fencing_token"]
    lease_id = fields[b"lease_id"]
    assert fields[b"run_id"] == run.encode()
    assert lease_id == f"{run}:worker-a:{token}".encode()

    assert r.execute_command("LEASE.ACQUIRE", run, "worker-b", str(t + 5)) is None
    assert r.execute_command("LEASE.HEARTBEAT", lease_id, token, str(t + 5)) == 1
    assert r.execute_command("LEASE.VALIDATE", run, lease_id, token, str(t + 14)) == 1
    got = r.execute_command("LEASE.GET", run, str(t + 20))
    if protocol == 3:
        assert got[b"expired"] == 1 and got[b"expires_at"] == t + 15.0, got
    else:
        assert got[-2:] == [b"expired", 1], got
    assert r.execute_command("LEASE.HEARTBEAT", lease_id, token, str(t + 20)) == 0
    assert r.execute_command("LEASE.RELEASE", lease_id, token) == 1
    assert r.execute_command("LEASE.GET", run, str(t + 20)) is None

    try:
        r.execute_command("LEASE.HEARTBEAT", lease_id, "zero")
        raise AssertionError("a bad token must be an error")
    except redis.ResponseError as error:
        assert str(error) == "value is not an integer or out of range", error
    try:
        r.execute_command("LEASE.ACQUIRE", run)
        raise AssertionError("wrong arity must be an error")
    except redis.ResponseError as error:
        assert "wrong number of arguments for 'lease.acquire' command" in str(error)
    # Errors leave the connection usable.
    assert r.ping() is True

    pipe = r.pipeline(transaction=False)
    for i in range(100):
        pipe.execute_command("LEASE.ACQUIRE", f"{run}-p{i}", "w", str(t))
    replies = pipe.execute()
    tokens = [
        (reply[b"fencing_token"] if protocol == 3 else reply[7]) for reply in replies
    ]
    assert tokens == list(range(tokens[0], tokens[0] + 100)), tokens

    info = r.info()
    assert info["redis_mode"] == "standalone", info
    assert "leases" in r.info("leases")
    r.close()


def check_data(port: int, protocol: int, run: str) -> None:
    """Run data, on the server's clock (no `now`, so it runs after the
    checks with explicit times): a checkpoint fenced by the lease, read
    back with the token that wrote it."""
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol)
    held = r.execute_command("LEASE.ACQUIRE", f"{run}-data", "w", "WITHDATA")
    held = held if protocol == 3 else dict(zip(held[0::2], held[1::2]))
    assert held[b"data"] is None and held[b"data_token"] is None, held
    data_id, data_token = held[b"lease_id"], held[b"fencing_token"]
    assert r.execute_command("LEASE.SETDATA", data_id, data_token, b"step\x00=1") == 1
    assert r.execute_command("LEASE.SETDATA", data_id, data_token + 1, b"x") == 0
    data = r.execute_command("LEASE.GETDATA", f"{run}-data")
    if protocol == 3:
        assert list(data.keys()) == [b"value", b"fencing_token", b"written_at"], data
        assert isinstance(data[b"written_at"], float), data
    else:
        data = dict(zip(data[0::2], data[1::2]))
        float(data[b"written_at"])
    assert data[b"value"] == b"step\x00=1" and data[b"fencing_token"] == data_token, data
    assert r.execute_command("LEASE.DELDATA", data_id, data_token) == 1
    assert r.execute_command("LEASE.GETDATA", f"{run}-data") is None
    r.close()


HISTORY_KEYS = [
    b"lease_id",
    b"worker_id",
    b"fencing_token",
    b"acquired_at",
    b"expires_at",
    b"ended_at",
    b"end",
    b"heartbeats",
]


def check_history(port: int, protocol: int, run: str) -> None:
    """LEASE.HISTORY on the server's clock: a released tenure with a
    heartbeat, then the active one, newest first; maps with float times in
    RESP3, flat arrays with times as bytes in RESP2; COUNT and its errors."""
    r = redis.Redis(host="127.0.0.1", port=port, protocol=protocol)
    hist = f"{run}-history"
    assert r.execute_command("LEASE.HISTORY", hist) == []
    first = r.execute_command("LEASE.ACQUIRE", hist, "w1", "TTL", "100")
    first = first if protocol == 3 else dict(zip(first[0::2], first[1::2]))
    first_id, first_token = first[b"lease_id"], first[b"fencing_token"]
    assert r.execute_command("LEASE.HEARTBEAT", first_id, first_token) == 1
    assert r.execute_command("LEASE.RELEASE", first_id, first_token) == 1
    r.execute_command("LEASE.ACQUIRE", hist, "w2", "TTL", "100")
    tenures = r.execute_command("LEASE.HISTORY", hist)
    assert len(tenures) == 2, tenures
    if protocol == 3:
        for tenure in tenures:
            assert list(tenure.keys()) == HISTORY_KEYS, tenure
            assert isinstance(tenure[b"acquired_at"], float), tenure
            assert isinstance(tenure[b"expires_at"], float), tenure
    else:
        for i, tenure in enumerate(tenures):
            assert len(tenure) == 16 and tenure[0::2] == HISTORY_KEYS, tenure
            tenure = dict(zip(tenure[0::2], tenure[1::2]))
            for time in (b"acquired_at", b"expires_at"):
                assert isinstance(tenure[time], bytes), tenure
                tenure[time] = float(tenure[time])
            if tenure[b"ended_at"] is not None:
                tenure[b"ended_at"] = float(tenure[b"ended_at"])
            tenures[i] = tenure
    active, released = tenures
    assert active[b"worker_id"] == b"w2" and active[b"end"] == b"active", active
    assert active[b"ended_at"] is None and active[b"heartbeats"] == 0, active
    assert active[b"fencing_token"] > first_token, active
    assert active[b"lease_id"] == f"{hist}:w2:{active[b'fencing_token']}".encode()
    assert released[b"lease_id"] == first_id and released[b"end"] == b"released", released
    assert released[b"fencing_token"] == first_token and released[b"heartbeats"] == 1
    assert released[b"acquired_at"] <= released[b"ended_at"] < released[b"expires_at"]
    newest = r.execute_command("LEASE.HISTORY", hist, "COUNT", 1)
    assert len(newest) == 1, newest
    for count, error in [("0", "must be positive"), ("x", "not an integer")]:
        try:
            r.execute_command("LEASE.HISTORY", hist, "COUNT", count)
        except redis.ResponseError as e:
            assert error in str(e), e
        else:
            raise AssertionError(f"COUNT {count} accepted")
    assert r.ping() is True
    r.close()


def main() -> None:
    port = int(sys.argv[1])
    check(port, 2, "py-run-resp2", 100)
    check(port, 3, "py-run-resp3", 1000)
    check_data(port, 2, "py-run-resp2")
    check_data(port, 3, "py-run-resp3")
    check_history(port, 2, "py-run-resp2")
    check_history(port, 3, "py-run-resp3")
    print("redis-py", redis.__version__, "ok")


if __name__ == "__main__":
    main()
