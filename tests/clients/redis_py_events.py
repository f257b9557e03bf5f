"""Lease events, blocking acquires and pub/sub, driven by redis-py 5.

Usage: python3 redis_py_events.py PORT PROTOCOL

PROTOCOL is 2 or 3. Expects a fresh server (it asserts fencing tokens from
1), exits non-zero (with a traceback) on the first reply that breaks the
contract. Run by tests/python_client.rs.

Every lease here is taken on the server's clock (no explicit `now`): the
events and the blocked acquires follow that clock, and a lease taken at a
small logical `now` would be long past on it.
"""

import socket
import sys
import threading
import time

import redis

# Seconds allowed for anything awaited here, generous for a loaded machine.
PATIENCE = 20.0


def connect(port, protocol, socket_timeout=PATIENCE, **options):
    return redis.Redis(
        host="127.0.0.1",
        port=port,
        protocol=protocol,
        socket_timeout=socket_timeout,
        **options,
    )


def lease_fields(reply):
    """A lease reply, RESP2 flat array or RESP3 map, as a dict with str keys,
    an int fencing_token and a float expires_at."""
    assert reply is not None, "expected a lease, got null"
    if isinstance(reply, dict):
        pairs = reply.items()
    else:
        assert isinstance(reply, list) and len(reply) == 10, reply
        pairs = zip(reply[0::2], reply[1::2])
    fields = {key.decode(): value for key, value in pairs}
    for key in ("run_id", "worker_id", "lease_id"):
        fields[key] = fields[key].decode()
    fields["fencing_token"] = int(fields["fencing_token"])
    fields["expires_at"] = float(fields["expires_at"])
    return fields


def wait_for(what, probe):
    """Polls `probe` every 10 ms until it returns true (nothing announces
    a change in another connection's state); fails after PATIENCE."""
    deadline = time.monotonic() + PATIENCE
    while True:
        seen = probe()
        if seen:
            return seen
        assert time.monotonic() < deadline, f"no {what} after {PATIENCE}s"
        time.sleep(0.01)


def wait_for_waiters(r, run, expected):
    wait_for(
        f"waiters {expected} on {run}",
        lambda: r.execute_command("LEASE.WAITERS", run) == expected,
    )


def published(p, count):
    """The next `count` published messages as (type, pattern, channel, data),
    decoded; subscription confirmations are skipped."""
    messages = []
    deadline = time.monotonic() + PATIENCE
    while len(messages) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"only {messages} after {PATIENCE}s"
        message = p.get_message(ignore_subscribe_messages=True, timeout=left)
        if message is None:
            continue
        pattern = message["pattern"]
        messages.append((
            message["type"],
            pattern.decode() if pattern is not None else None,
            message["channel"].decode(),
            message["data"].decode(),
        ))
    return messages


def confirmations(p, count):
    """The next `count` subscription confirmations as (type, channel, count)."""
    seen = []
    deadline = time.monotonic() + PATIENCE
    while len(seen) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"only {seen} after {PATIENCE}s"
        message = p.get_message(timeout=left)
        if message is not None:
            seen.append((message["type"], message["channel"].decode(), message["data"]))
    return seen


def check_events(port, protocol):
    """A takeover by a blocked acquire, seen by a pattern and a channel
    subscriber: expired, then acquired, then released; nothing after."""
    r = connect(port, protocol)
    p = r.pubsub()
    p.psubscribe("__lease__:*")
    p.subscribe("__leaseevent__:expired")
    assert confirmations(p, 2) == [
        ("psubscribe", "__lease__:*", 1),
        ("subscribe", "__leaseevent__:expired", 2),
    ]
    assert r.pubsub_numpat() == 1
    assert r.pubsub_numsub("__leaseevent__:expired", "__leaseevent__:acquired") == [
        (b"__leaseevent__:expired", 1),
        (b"__leaseevent__:acquired", 0),
    ]
    assert r.pubsub_channels() == [b"__leaseevent__:expired"]

    run = f"py-events-{protocol}"
    first = lease_fields(r.execute_command("LEASE.ACQUIRE", run, "w1", "TTL", 0.3))
    assert (first["fencing_token"], first["worker_id"]) == (1, "w1"), first
    # Blocks until w1's lease expires on the server's clock, about 0.3 s.
    waiter = connect(port, protocol)
    second = lease_fields(
        waiter.execute_command("LEASE.ACQUIRE", run, "w2", "TTL", 1, "BLOCK", 5000)
    )
    assert (second["fencing_token"], second["worker_id"]) == (2, "w2"), second
    assert second["lease_id"] == f"{run}:w2:2", second
    # Granted at w1's expiry, not before (expires_at has 3 decimals), and
    # expiring a TTL after the grant.
    granted = second["expires_at"] - 1
    assert first["expires_at"] - 0.001 <= granted < first["expires_at"] + 5, (first, second)
    assert r.execute_command("LEASE.RELEASE", second["lease_id"], 2) == 1

    channel = f"__lease__:{run}"
    messages = published(p, 5)
    on_run = [m for m in messages if m[2] == channel]
    assert on_run == [
        ("pmessage", "__lease__:*", channel, "acquired:1:w1"),
        ("pmessage", "__lease__:*", channel, "expired:1:w1"),
        ("pmessage", "__lease__:*", channel, "acquired:2:w2"),
        ("pmessage", "__lease__:*", channel, "released:2:w2"),
    ], messages
    on_expired = [m for m in messages if m[2] == "__leaseevent__:expired"]
    assert on_expired == [("message", None, "__leaseevent__:expired", f"1:{run}")], messages
    # The released lease's TTL (1 s) passes: a released lease never expires.
    late = p.get_message(ignore_subscribe_messages=True, timeout=1.5)
    assert late is None, late

    p.punsubscribe()
    p.unsubscribe()
    assert confirmations(p, 2) == [
        ("punsubscribe", "__lease__:*", 1),
        ("unsubscribe", "__leaseevent__:expired", 0),
    ]
    assert r.pubsub_numpat() == 0
    assert r.pubsub_channels() == []
    p.close()
    waiter.close()
    r.close()


def check_blocking(port, protocol):
    """A blocked acquire granted by a release from another connection, one
    that times out, and the trap: a socket timeout shorter than the block."""
    r = connect(port, protocol)
    run = f"py-block-{protocol}"
    held = lease_fields(r.execute_command("LEASE.ACQUIRE", run, "holder", "TTL", 30))

    # The socket timeout (5 s) exceeds the block (2 s): redis-py waits for
    # the server's answer, whichever it is.
    waiter = connect(port, protocol, socket_timeout=5)
    seen = []

    def release_once_queued():
        wait_for_waiters(r, run, [b"w2"])
        seen.append(r.execute_command("LEASE.RELEASE", held["lease_id"], held["fencing_token"]))

    releaser = threading.Thread(target=release_once_queued)
    releaser.start()
    granted = lease_fields(
        waiter.execute_command("LEASE.ACQUIRE", run, "w2", "TTL", 30, "BLOCK", 2000)
    )
    releaser.join()
    assert seen == [1], seen
    assert granted["fencing_token"] == held["fencing_token"] + 1, (held, granted)
    assert granted["worker_id"] == "w2", granted

    # Nobody releases: the block ends after 300 ms with null.
    started = time.monotonic()
    timed_out = waiter.execute_command("LEASE.ACQUIRE", run, "w3", "BLOCK", 300)
    assert timed_out is None, timed_out
    assert time.monotonic() - started >= 0.29
    assert r.execute_command("LEASE.WAITERS", run) == []

    # The trap: the socket timeout (0.3 s) is shorter than the block (here
    # forever), so redis-py gives up first and raises TimeoutError...
    short = connect(port, protocol, socket_timeout=0.3)
    try:
        short.execute_command("LEASE.ACQUIRE", run, "w4", "BLOCK", 0)
        raise AssertionError("a socket timeout shorter than the block must raise")
    except redis.exceptions.TimeoutError:
        pass
    # ...and closes the connection; the server drops it from the queue
    # (the block was forever: only the close can end it).
    wait_for_waiters(r, run, [])

    # No token went to the timed-out or the closed waiter.
    assert r.execute_command("LEASE.RELEASE", granted["lease_id"], granted["fencing_token"]) == 1
    after = lease_fields(r.execute_command("LEASE.ACQUIRE", run, "w5", "TTL", 30))
    assert after["fencing_token"] == granted["fencing_token"] + 1, (granted, after)
    for client in (short, waiter, r):
        client.close()


def check_unblock(port, protocol):
    """Two blocked clients: LEASE.WAITERS in queue order, CLIENT LIST and
    INFO show them, CLIENT UNBLOCK ends one with an error and one with null."""
    r = connect(port, protocol)
    run = f"py-unblock-{protocol}"
    held = lease_fields(r.execute_command("LEASE.ACQUIRE", run, "holder", "TTL", 30))
    results = {}
    clients = {}
    threads = []
    for worker in ("wa", "wb"):
        client = connect(port, protocol, single_connection_client=True)
        clients[worker] = (client, client.client_id())

        def block(worker=worker, client=client):
            try:
                results[worker] = client.execute_command(
                    "LEASE.ACQUIRE", run, worker, "BLOCK", 0
                )
            except redis.exceptions.RedisError as error:
                results[worker] = error

        threads.append(threading.Thread(target=block))
        threads[-1].start()
        # One at a time, so the queue order is known.
        wait_for_waiters(r, run, [w.encode() for w in clients])

    ids = {worker: client_id for worker, (_, client_id) in clients.items()}
    blocked = {int(c["id"]) for c in r.client_list() if "b" in c["flags"]}
    assert blocked == set(ids.values()), (blocked, ids)
    assert r.info("clients")["blocked_clients"] == 2

    assert r.client_unblock(ids["wa"], error=True)
    threads[0].join(PATIENCE)
    error = results["wa"]
    assert isinstance(error, redis.exceptions.ResponseError), repr(error)
    assert str(error).startswith("UNBLOCKED"), str(error)
    assert str(error) == "UNBLOCKED client unblocked via CLIENT UNBLOCK", str(error)
    assert r.execute_command("LEASE.WAITERS", run) == [b"wb"]

    assert r.client_unblock(ids["wb"])  # TIMEOUT: the acquire answers null
    threads[1].join(PATIENCE)
    assert "wb" in results and results["wb"] is None, results
    assert not r.client_unblock(ids["wb"])  # no longer blocked: 0
    assert r.execute_command("LEASE.WAITERS", run) == []
    assert r.info("clients")["blocked_clients"] == 0
    # Both connections go on serving commands.
    for client, _ in clients.values():
        assert client.ping() is True
        client.close()

    # An unblocked waiter spends no token.
    assert r.execute_command("LEASE.RELEASE", held["lease_id"], held["fencing_token"]) == 1
    after = lease_fields(r.execute_command("LEASE.ACQUIRE", run, "wc", "TTL", 30))
    assert after["fencing_token"] == held["fencing_token"] + 1, (held, after)
    r.close()


class Raw:
    """A plain socket speaking RESP, to see subscribed mode as the server
    sends it, without a client library's handling in between."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
        self.file = self.sock.makefile("rb")

    def send(self, *args):
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            arg = str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
        self.sock.sendall(b"".join(parts))

    def reply(self):
        """One reply: simple strings and errors as ('+'/'-', text), integers
        as int, bulk strings as bytes, arrays as lists, pushes as ('>', list)."""
        line = self.file.readline()
        assert line.endswith(b"\r\n"), line
        kind, body = line[:1], line[1:-2]
        if kind in (b"+", b"-"):
            return (kind.decode(), body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            data = self.file.read(int(body) + 2)
            return data[:-2]
        if kind == b"_":
            return None
        if kind == b",":
            return float(body)
        if kind in (b"*", b">", b"%"):
            count = int(body) * (2 if kind == b"%" else 1)
            items = [self.reply() for _ in range(count)]
            return (">", items) if kind == b">" else items
        raise AssertionError(f"unexpected reply {line!r}")

    def close(self):
        self.file.close()
        self.sock.close()


def check_resp2_subscribed_mode(port):
    """RESP2: in subscribed mode only the (un)subscribe commands, PING, QUIT
    and RESET run, and PING answers as a message; PUBSUB on another
    connection sees the subscriptions."""
    r = connect(port, 2)
    raw = Raw(port)
    raw.send("SUBSCRIBE", "__lease__:a", "__lease__:b")
    assert raw.reply() == [b"subscribe", b"__lease__:a", 1]
    assert raw.reply() == [b"subscribe", b"__lease__:b", 2]
    raw.send("PSUBSCRIBE", "__leaseevent__:*")
    assert raw.reply() == [b"psubscribe", b"__leaseevent__:*", 3]
    raw.send("PING")
    assert raw.reply() == [b"pong", b""]
    raw.send("PING", "hello")
    assert raw.reply() == [b"pong", b"hello"]
    raw.send("LEASE.GET", "x")
    assert raw.reply() == (
        "-",
        "ERR Can't execute 'lease.get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE"
        " / PING / QUIT / RESET are allowed in this context",
    )

    assert r.pubsub_numsub("__lease__:a", "__lease__:b", "__lease__:c") == [
        (b"__lease__:a", 1),
        (b"__lease__:b", 1),
        (b"__lease__:c", 0),
    ]
    assert r.pubsub_numpat() == 1
    assert sorted(r.pubsub_channels()) == [b"__lease__:a", b"__lease__:b"]
    assert r.pubsub_channels("*:a") == [b"__lease__:a"]
    clients = r.client_list()
    subscribers = [c for c in clients if "P" in c["flags"]]
    assert len(subscribers) == 1, clients
    assert (subscribers[0]["sub"], subscribers[0]["psub"]) == ("2", "1"), subscribers
    info = r.info("clients")
    assert info["pubsub_clients"] == 1, info

    # UNSUBSCRIBE with no channel leaves every channel, in some order; the
    # count still includes the pattern.
    raw.send("UNSUBSCRIBE")
    left = [raw.reply(), raw.reply()]
    assert sorted(reply[1] for reply in left) == [b"__lease__:a", b"__lease__:b"], left
    assert [reply[2] for reply in left] == [2, 1], left
    raw.send("PUNSUBSCRIBE")
    assert raw.reply() == [b"punsubscribe", b"__leaseevent__:*", 0]
    # Out of subscribed mode: ordinary replies again.
    raw.send("PING")
    assert raw.reply() == ("+", "PONG")
    raw.send("LEASE.WAITERS", "x")
    assert raw.reply() == []
    assert r.pubsub_numpat() == 0
    assert r.pubsub_channels() == []
    raw.close()
    r.close()


def check_resp3_subscribed_connection(port):
    """RESP3: confirmations and messages are pushes, and any command runs
    on a subscribed connection with its ordinary reply."""
    raw = Raw(port)
    raw.send("HELLO", 3)
    assert isinstance(raw.reply(), list)
    raw.send("SUBSCRIBE", "__lease__:r3")
    assert raw.reply() == (">", [b"subscribe", b"__lease__:r3", 1])
    raw.send("PING")
    assert raw.reply() == ("+", "PONG")
    raw.send("LEASE.ACQUIRE", "r3", "w", "TTL", 30)
    # The event may come before or after the reply: both arrive.
    replies = [raw.reply(), raw.reply()]
    pushes = [reply for reply in replies if isinstance(reply, tuple)]
    assert len(pushes) == 1, replies
    token = pushes[0][1][2].decode().split(":")[1]
    assert pushes[0] == (">", [b"message", b"__lease__:r3", f"acquired:{token}:w".encode()])
    raw.close()


def main():
    port, protocol = int(sys.argv[1]), int(sys.argv[2])
    check_events(port, protocol)
    print("events ok", flush=True)
    check_blocking(port, protocol)
    print("blocking ok", flush=True)
    check_unblock(port, protocol)
    print("unblock ok", flush=True)
    if protocol == 2:
        check_resp2_subscribed_mode(port)
    else:
        check_resp3_subscribed_connection(port)
    print("subscribed mode ok", flush=True)
    print(f"redis-py {redis.__version__} RESP{protocol} ok")


if __name__ == "__main__":
    main()
