"""The blocking client: :class:`Registry`, :class:`Lease` and
:class:`EventStream`, on redis-py's blocking connections and a heartbeat
thread per lease."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Type

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ._common import (
    HEARTBEATS_PER_TTL,
    REPLY_MARGIN,
    Backoff,
    Event,
    Id,
    LeaseInfo,
    LeaseLost,
    Node,
    NodeList,
    RunData,
    RunHeld,
    Tenure,
    Uncertain,
    Unavailable,
    acquire_args,
    acquired_is_ours,
    block_ms,
    check_ttl,
    check_wait,
    decode,
    encode,
    error_kind,
    node_urls,
    pairs,
    parse_event,
    parse_history,
)

_FAILURES = (redis.ConnectionError, redis.TimeoutError)


class Registry:
    """A leased server, or a list of nodes to try in order.

    ``Registry("redis://127.0.0.1:6479")`` or ``Registry(nodes=[("10.0.0.1",
    6479), "redis://10.0.0.2:6479"])``. Commands go to the node that last
    answered; one that cannot be reached moves them on to the next. A
    ``-TRYAGAIN`` reply is retried after 10 ms, doubling up to 500 ms, for
    at most ``retry_for`` seconds. ``socket_timeout`` bounds every reply
    but a waiting acquire's (whose connection waits ``wait`` seconds and
    ``REPLY_MARGIN`` more) and a heartbeat's (half the heartbeat
    period). Use it as a context manager, or :meth:`close` it.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        nodes: Optional[Sequence[Node]] = None,
        password: Optional[str] = None,
        socket_timeout: float = 5.0,
        connect_timeout: float = 2.0,
        retry_for: float = 2.0,
    ) -> None:
        self._nodes = NodeList(node_urls(url, nodes))
        self._password = password
        self._socket_timeout = socket_timeout
        self._connect_timeout = connect_timeout
        self._retry_for = retry_for
        self._clients: Dict[Tuple[int, float], redis.Redis] = {}
        self._clients_lock = threading.Lock()
        self._server_ttl: Optional[float] = None
        self._held: List[str] = []

    # Connections.

    def _new_client(self, index: int, timeout: Optional[float], protocol: int = 3) -> redis.Redis:
        connect = self._connect_timeout if timeout is None else min(self._connect_timeout, timeout)
        options: Dict[str, Any] = dict(
            protocol=protocol,
            socket_timeout=timeout,
            socket_connect_timeout=connect,
            retry=Retry(NoBackoff(), 0),  # retrying is ours to decide
        )
        if self._password is not None:
            options["password"] = self._password
        return redis.Redis(connection_pool=redis.ConnectionPool.from_url(self._nodes.urls[index], **options))

    def _client(self, index: int, timeout: float) -> redis.Redis:
        with self._clients_lock:
            client = self._clients.get((index, timeout))
            if client is None:
                client = self._new_client(index, timeout)
                self._clients[(index, timeout)] = client
            return client

    def close(self) -> None:
        """Closes every connection (leases still held are not released)."""
        with self._clients_lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
            client.connection_pool.disconnect()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def execute(self, *args: Any, write: bool = False, timeout: Optional[float] = None) -> Any:
        """Sends one command to the nodes, as described above, and returns
        its reply. A read goes on to the next node when one cannot be
        reached, and raises :class:`Unavailable` when none can. A write
        (``write=True``) may have taken effect when its connection failed:
        it raises :class:`Uncertain` then, as for an ``-UNCERTAIN`` reply,
        for the caller to read the state back."""
        timeout = self._socket_timeout if timeout is None else timeout
        backoff = Backoff(self._retry_for)
        unreachable = 0
        moves = 0
        dead: List[int] = []  # the nodes this command could not reach
        while True:
            index = self._nodes.current
            try:
                return self._client(index, timeout).execute_command(*args)
            except _FAILURES as error:
                self._nodes.failed(index)
                dead.append(index)
                if write:
                    raise Uncertain(str(error)) from error
                unreachable += 1
                if unreachable >= len(self._nodes.urls):
                    raise Unavailable(f"no node answered {args[0]}: {error}") from error
            except redis.ResponseError as error:
                kind = error_kind(error)
                if kind == "uncertain":
                    raise Uncertain(str(error)) from error
                # A follower's MOVED: straight to the leader it names (a few
                # times in a row; then as TRYAGAIN, while nodes disagree).
                if kind == "moved" and moves < 2 * len(self._nodes.urls):
                    moves += 1
                    if self._nodes.moved(index, error, dead):
                        continue
                elif kind != "tryagain" and kind != "moved":
                    raise
                unreachable = 0  # a node answered
                delay = backoff.next()
                if delay is None:
                    raise Unavailable(f"{args[0]} still answered {error} after retrying") from error
                time.sleep(delay)

    # Reads.

    def server_ttl(self) -> float:
        """The server's ``lease-ttl`` (read once, with ``CONFIG GET``)."""
        if self._server_ttl is None:
            reply = pairs(self.execute("CONFIG", "GET", "lease-ttl"))
            self._server_ttl = float(reply["lease-ttl"])
        return self._server_ttl

    def get(self, run: Id) -> Optional[LeaseInfo]:
        """The run's current lease (``LEASE.GET``), active or expired, or None."""
        return LeaseInfo.from_reply(self.execute("LEASE.GET", encode(run)))

    def get_data(self, run: Id) -> Optional[RunData]:
        """The run's data (``LEASE.GETDATA``), or None."""
        return RunData.from_reply(self.execute("LEASE.GETDATA", encode(run)))

    def history(self, run: Id, count: Optional[int] = None) -> List[Tenure]:
        """The run's tenures, newest first (``LEASE.HISTORY``)."""
        args: List[Any] = ["LEASE.HISTORY", encode(run)]
        if count is not None:
            args += ["COUNT", count]
        return parse_history(self.execute(*args))

    def events(self, pattern: str = "__lease__:*") -> "EventStream":
        """Subscribes to the lease events on the channels matching
        ``pattern`` (``__lease__:<run>`` and ``__leaseevent__:<event>``
        channels, Redis's glob syntax); iterate over the result. It is
        subscribed when this returns: no event after that is missed."""
        return EventStream(self, pattern)

    # Leases.

    def lease(
        self,
        run: Id,
        worker: Id,
        *,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        lock_delay: Optional[float] = None,
        with_data: bool = True,
    ) -> "Lease":
        """A lease on ``run`` for ``worker``, taken when the ``with`` block
        starts (or by :meth:`Lease.acquire`) and released when it ends.

        - ``ttl``: seconds; by default the server's ``lease-ttl``, read
          once and then sent with every acquire, so the server and the
          deadline use the same TTL.
        - ``wait``: None (or 0) raises :class:`RunHeld` at once when the run
          is held; seconds to wait for it (``LEASE.ACQUIRE ... BLOCK``, on a
          connection of its own that waits ``REPLY_MARGIN`` seconds longer),
          raising :class:`RunHeld` if it is still held then.
        - ``lock_delay``: seconds (``LOCKDELAY``); by default the server's.
        - ``with_data``: acquire ``WITHDATA``, for :attr:`Lease.data`.
        """
        return Lease(self, run, worker, ttl, check_wait(wait), lock_delay, with_data)

    def acquire(self, run: Id, worker: Id, **options: Any) -> "Lease":
        """``lease(run, worker, **options).acquire()``: a lease already
        taken and heartbeated; release it, or use it in a ``with`` block."""
        return self.lease(run, worker, **options).acquire()


class Lease:
    """A lease on a run, kept alive by a heartbeat thread while it is held.

    Before each write, call :meth:`check`: it raises :class:`LeaseLost`
    once the lease is lost or :attr:`deadline` has passed. And stamp the
    write with :attr:`token`, for the storage to refuse a stale one: no
    check made by the worker closes the gap between the check and the
    write (a pause can strike there), only the storage's own can.

    The heartbeat rule: every ``ttl / 3`` seconds the thread sends
    ``LEASE.HEARTBEAT``. A reply of 1 moves the deadline to the moment the
    heartbeat was *sent* plus the TTL; 0 (the server says the lease is
    gone) sets :attr:`lost` at once. An error or a timeout is retried
    every twelfth of the TTL; when none has succeeded for a whole
    heartbeat period (or the deadline passes first), :attr:`lost` is set:
    a dead server or a cut connection loses the lease within one period of
    the heartbeat that found it, well before the deadline. A heartbeat's
    connection times out after half the period, so a dead server costs an
    attempt no more than that.
    """

    def __init__(
        self,
        registry: Registry,
        run: Id,
        worker: Id,
        ttl: Optional[float],
        wait: Optional[float],
        lock_delay: Optional[float],
        with_data: bool,
    ) -> None:
        self._registry = registry
        self._run = encode(run)
        self._worker = encode(worker)
        self.run: str = decode(self._run)
        self.worker: str = decode(self._worker)
        self._ttl = None if ttl is None else check_ttl(ttl)
        self._wait = wait
        self._lock_delay = lock_delay
        self._with_data = with_data
        #: Set once the lease is lost (or may be): stop writing.
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        #: The lease id, ``{run}:{worker}:{token}``, once acquired.
        self.lease_id: str = ""
        #: The fencing token, once acquired: stamp every write with it.
        self.token: int = 0
        #: The TTL in seconds, once acquired.
        self.ttl: float = 0.0
        #: The run's data when acquired (``WITHDATA``), then the last
        #: :meth:`checkpoint`; None when the run has none.
        self.data: Optional[bytes] = None
        #: The token of the lease that wrote :attr:`data`.
        self.data_token: Optional[int] = None
        #: Whether the release was confirmed (None until released).
        self.released: Optional[bool] = None
        self._lease_id = b""
        self._deadline = 0.0
        # Held across a write's check and its sending, and to set `lost`:
        # so no write is sent once `lost` is set.
        self._write_lock = threading.RLock()
        # Guards the deadline and `lost` against each other.
        self._state_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._acquired = False

    # The deadline.

    @property
    def deadline(self) -> float:
        """The latest moment a write is still safe, on ``time.monotonic()``:
        when the last successful acquire or heartbeat was sent, plus the
        TTL. The server started the TTL when the command arrived, later,
        so this is early by the trip there, whatever the round trip took."""
        return self._deadline

    def remaining(self) -> float:
        """Seconds until :attr:`deadline` (negative once past)."""
        return self._deadline - time.monotonic()

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lease is lost or its deadline
        has passed (and then sets :attr:`lost`). Call it before each write."""
        with self._write_lock:
            if not self.lost.is_set() and time.monotonic() >= self._deadline:
                self._lose("its deadline passed without a successful heartbeat")
            if self.lost.is_set():
                raise LeaseLost(self.lease_id or self.run, self.lost_reason or "lost")

    def _lose(self, reason: str) -> None:
        # Waits for a write being sent (checkpoint holds the write lock
        # from its check until the reply): none is sent after this.
        with self._write_lock, self._state_lock:
            if not self.lost.is_set():
                self.lost_reason = reason
                self.lost.set()

    def _extend(self, sent: float) -> bool:
        """A heartbeat sent at ``sent`` succeeded: the new deadline, unless
        the lease was already lost (a lost lease stays lost)."""
        with self._state_lock:
            if self.lost.is_set():
                return False
            self._deadline = max(self._deadline, sent + self.ttl)
            return True

    # Acquiring.

    def acquire(self) -> "Lease":
        """Takes the lease (waiting up to ``wait`` seconds if given) and
        starts heartbeating. Raises :class:`RunHeld` if the run is held."""
        if self._acquired:
            raise RuntimeError("this lease was already acquired; make a new one")
        self.ttl = self._ttl if self._ttl is not None else self._registry.server_ttl()
        if self._wait is None:
            sent = time.monotonic()
            reply = self._acquire_now()
        else:
            sent, reply = self._acquire_waiting(self._wait)
        if reply is None:
            raise RunHeld(self.run)
        fields = pairs(reply)
        self._lease_id = fields["lease_id"]
        self.lease_id = decode(self._lease_id)
        self.token = int(fields["fencing_token"])
        self.data = fields.get("data")
        self.data_token = None if fields.get("data_token") is None else int(fields["data_token"])
        self._deadline = sent + self.ttl
        self._acquired = True
        self._registry._held.append(self.lease_id)
        if self._wait is not None:
            # The grant may have come long after the acquire was sent, and
            # its moment is unknown here: a heartbeat sent now dates it.
            self._heartbeat_once()
        self._thread = threading.Thread(target=self._heartbeat_loop, name=f"lease {self.lease_id}", daemon=True)
        self._thread.start()
        return self

    def _acquire_now(self) -> Any:
        args = acquire_args(self._run, self._worker, self.ttl, self._lock_delay, None, self._with_data)
        for _ in range(3):
            try:
                return self._registry.execute(*args, write=True)
            except Uncertain:
                lease = self._adopt()
                if lease is not None:
                    return lease
        raise Unavailable(f"the acquire of {self.run} stayed uncertain")

    def _acquire_waiting(self, wait: float) -> Tuple[float, Any]:
        end = time.monotonic() + wait
        registry = self._registry
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return time.monotonic(), None
            args = acquire_args(self._run, self._worker, self.ttl, self._lock_delay, block_ms(left), self._with_data)
            index = registry._nodes.current
            # A connection of its own, whose timeout outlasts the block: one
            # that gave up sooner would leave its place in the queue, or
            # worse, keep the connection and never read the grant.
            client = registry._new_client(index, left + REPLY_MARGIN)
            sent = time.monotonic()
            try:
                return sent, client.execute_command(*args)
            except _FAILURES:
                registry._nodes.failed(index)
            except redis.ResponseError as error:
                kind = error_kind(error)
                if kind is None:
                    raise
                if kind == "moved" and registry._nodes.moved(index, error):
                    continue
                if kind in ("tryagain", "moved"):
                    time.sleep(0.05)
                    continue
            finally:
                client.close()
                client.connection_pool.disconnect()
            lease = self._adopt()
            if lease is not None:
                return sent, lease

    def _adopt(self) -> Any:
        """After an acquire whose outcome is unknown: the lease map if the
        run's current lease is the one it took (see
        :func:`leased._common.acquired_is_ours`), else None."""
        current = LeaseInfo.from_reply(self._registry.execute("LEASE.GET", self._run))
        newest = self._registry.history(self._run, 1)
        if not acquired_is_ours(current, newest[0] if newest else None, self.worker, self._registry._held):
            return None
        assert current is not None
        data: Optional[RunData] = self._registry.get_data(self._run) if self._with_data else None
        return {
            "lease_id": encode(current.lease_id),
            "fencing_token": current.fencing_token,
            "data": data.value if data else None,
            "data_token": data.fencing_token if data else None,
        }

    # Heartbeats.

    def _heartbeat_once(self) -> Optional[bool]:
        """Sends one heartbeat: True extended, False lost, None unknown."""
        registry = self._registry
        sent = time.monotonic()
        try:
            reply = registry.execute(
                "LEASE.HEARTBEAT", self._lease_id, self.token, write=True, timeout=self.ttl / HEARTBEATS_PER_TTL / 2
            )
        except Uncertain:
            # Did it arrive? It does not matter: the deadline moves only on
            # a reply. But a lease the server no longer has is lost now.
            try:
                current = registry.get(self._run)
            except (Unavailable, redis.RedisError):
                return None
            if current is None or current.lease_id != self.lease_id or current.expired:
                self._lose("the server no longer has it")
                return False
            return None
        except (Unavailable, redis.RedisError):
            return None
        if reply == 1:
            return self._extend(sent)
        self._lose("a heartbeat was refused (expired, released or taken over)")
        return False

    def _heartbeat_loop(self) -> None:
        period = self.ttl / HEARTBEATS_PER_TTL
        next_beat = self._deadline - self.ttl + period
        failing_since: Optional[float] = None
        while True:
            wake = min(next_beat, self._deadline)
            if self._stop.wait(max(0.0, wake - time.monotonic())):
                return
            if time.monotonic() >= self._deadline:
                self._lose("its deadline passed without a successful heartbeat")
                return
            sent = time.monotonic()
            outcome = self._heartbeat_once()
            if outcome is False:
                return
            if outcome:
                failing_since = None
                next_beat = sent + period
                continue
            # No answer: retry soon, but a server that stays out of reach
            # for a whole period loses the lease then, not at the deadline.
            failing_since = sent if failing_since is None else failing_since
            if time.monotonic() - failing_since >= period:
                self._lose("heartbeats failed for a whole heartbeat period")
                return
            next_beat = time.monotonic() + period / 4

    def _stop_heartbeats(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # Writes.

    def checkpoint(self, value: Id) -> None:
        """Stores ``value`` as the run's data (``LEASE.SETDATA``), for the
        worker that takes the run over after this one. Checks first, and
        raises :class:`LeaseLost` if the lease is lost or the server
        refuses it. No ``LEASE.SETDATA`` is sent once :attr:`lost` is set."""
        value = encode(value)
        registry = self._registry
        while True:
            with self._write_lock:
                self.check()
                try:
                    reply = registry.execute("LEASE.SETDATA", self._lease_id, self.token, value, write=True)
                except Uncertain:
                    reply = None
            if reply is None:
                # Unknown: read the data back, and send it again (after a
                # check) while it is not there.
                try:
                    data = registry.get_data(self._run)
                except Unavailable:
                    data = None
                if data is None or data.value != value or data.fencing_token != self.token:
                    time.sleep(0.05)
                    continue
                reply = 1
            if reply != 1:
                self._lose("the server refused its LEASE.SETDATA")
                self.check()
            self.data, self.data_token = value, self.token
            return

    def release(self) -> bool:
        """Stops the heartbeats and releases the lease (``LEASE.RELEASE``):
        True if the server released it. It is sent also when the lease is
        lost (it is refused unless the lease is still the run's current
        one, and then it frees the run at once, lock delay or not)."""
        self._stop_heartbeats()
        if not self._acquired or self.released is not None:
            return bool(self.released)
        self._lose("released")
        registry = self._registry
        released = False
        try:
            for _ in range(3):
                try:
                    released = registry.execute("LEASE.RELEASE", self._lease_id, self.token, write=True) == 1
                    break
                except Uncertain:
                    current = registry.get(self._run)
                    if current is None or current.lease_id != self.lease_id:
                        released = True  # it went, by this release or otherwise
                        break
        finally:
            self.released = released
            if self.lease_id in registry._held:
                registry._held.remove(self.lease_id)
        return released

    def __enter__(self) -> "Lease":
        if not self._acquired:
            self.acquire()
        return self

    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        error: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except (Unavailable, redis.RedisError):
            if kind is None:
                raise
            # The block's own exception matters more; the lease expires anyway.

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else f"{self.remaining():.3f}s left"
        return f"<Lease {self.lease_id or self.run} token={self.token} {state}>"


class EventStream:
    """Lease events from one subscription, on a connection of its own
    without a read timeout. Iterate over it, or :meth:`get` one at a time;
    close it (or use it in a ``with`` block) when done."""

    def __init__(self, registry: Registry, pattern: str) -> None:
        self._registry = registry
        last: Optional[BaseException] = None
        for index in registry._nodes.order():
            client = registry._new_client(index, None, protocol=2)
            pubsub = client.pubsub()
            try:
                pubsub.psubscribe(pattern)
                # The confirmation: subscribed from here on.
                while pubsub.get_message(timeout=registry._socket_timeout) is None:
                    pass
            except _FAILURES as error:
                last = error
                pubsub.close()
                client.connection_pool.disconnect()
                registry._nodes.failed(index)
                continue
            self._client, self._pubsub = client, pubsub
            return
        raise Unavailable(f"no node took the subscription: {last}")

    def get(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event, waiting at most ``timeout`` seconds (None: no
        limit); None if none came."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            message = self._pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
            if message is not None and message["type"] in ("message", "pmessage"):
                event = parse_event(message["channel"], message["data"])
                if event is not None:
                    return event
            if end is not None and time.monotonic() >= end:
                return None

    def __iter__(self) -> Iterator[Event]:
        while True:
            event = self.get()
            if event is not None:
                yield event

    def close(self) -> None:
        self._pubsub.close()
        self._client.connection_pool.disconnect()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
