"""The asyncio client: :class:`Registry`, :class:`Lease` and
:class:`EventStream`, as in :mod:`leased`, on ``redis.asyncio`` and a
heartbeat task per lease::

    async with leased.aio.Registry("redis://127.0.0.1:6479") as registry:
        async with registry.lease("run-42", "worker-a", ttl=10) as lease:
            lease.check()
            await store.write(step, token=lease.token)
            await lease.checkpoint(b"step=0")

Everything behaves as in the blocking client (see :class:`leased.Lease`
for the heartbeat rule). One difference matters: the heartbeat is a task
on the same event loop as the work, so a loop blocked by a long
synchronous call sends no heartbeat; :meth:`Lease.check` still compares
the local clock with the deadline, and raises once it has passed.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import Any, AsyncIterator, Dict, List, Optional, Sequence, Tuple, Type

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

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

_FAILURES = (redis.ConnectionError, redis.TimeoutError, asyncio.TimeoutError)


async def _close(client: aioredis.Redis) -> None:
    await client.aclose()
    await client.connection_pool.disconnect()


class Registry:
    """A leased server, or a list of nodes to try in order; see
    :class:`leased.Registry`, whose options it takes."""

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
        self._clients: Dict[Tuple[int, float], aioredis.Redis] = {}
        self._server_ttl: Optional[float] = None
        self._held: List[str] = []

    def _new_client(self, index: int, timeout: Optional[float], protocol: int = 3) -> aioredis.Redis:
        connect = self._connect_timeout if timeout is None else min(self._connect_timeout, timeout)
        options: Dict[str, Any] = dict(
            protocol=protocol,
            socket_timeout=timeout,
            socket_connect_timeout=connect,
            retry=Retry(NoBackoff(), 0),
        )
        if self._password is not None:
            options["password"] = self._password
        pool = aioredis.ConnectionPool.from_url(self._nodes.urls[index], **options)
        return aioredis.Redis(connection_pool=pool)

    def _client(self, index: int, timeout: float) -> aioredis.Redis:
        client = self._clients.get((index, timeout))
        if client is None:
            client = self._clients[(index, timeout)] = self._new_client(index, timeout)
        return client

    async def close(self) -> None:
        """Closes every connection (leases still held are not released)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await _close(client)

    async def __aenter__(self) -> "Registry":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def execute(self, *args: Any, write: bool = False, timeout: Optional[float] = None) -> Any:
        """As :meth:`leased.Registry.execute`."""
        timeout = self._socket_timeout if timeout is None else timeout
        backoff = Backoff(self._retry_for)
        unreachable = 0
        moves = 0
        dead: List[int] = []  # the nodes this command could not reach
        while True:
            index = self._nodes.current
            try:
                return await self._client(index, timeout).execute_command(*args)
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
                await asyncio.sleep(delay)

    async def server_ttl(self) -> float:
        """The server's ``lease-ttl`` (read once, with ``CONFIG GET``)."""
        if self._server_ttl is None:
            reply = pairs(await self.execute("CONFIG", "GET", "lease-ttl"))
            self._server_ttl = float(reply["lease-ttl"])
        return self._server_ttl

    async def get(self, run: Id) -> Optional[LeaseInfo]:
        """The run's current lease (``LEASE.GET``), active or expired, or None."""
        return LeaseInfo.from_reply(await self.execute("LEASE.GET", encode(run)))

    async def get_data(self, run: Id) -> Optional[RunData]:
        """The run's data (``LEASE.GETDATA``), or None."""
        return RunData.from_reply(await self.execute("LEASE.GETDATA", encode(run)))

    async def history(self, run: Id, count: Optional[int] = None) -> List[Tenure]:
        """The run's tenures, newest first (``LEASE.HISTORY``)."""
        args: List[Any] = ["LEASE.HISTORY", encode(run)]
        if count is not None:
            args += ["COUNT", count]
        return parse_history(await self.execute(*args))

    def events(self, pattern: str = "__lease__:*") -> "EventStream":
        """Lease events, as :meth:`leased.Registry.events`: ``async with
        registry.events(pattern) as events``, then ``async for`` over them.
        Subscribed once the ``async with`` has entered (or :meth:`EventStream.subscribe`
        has returned)."""
        return EventStream(self, pattern)

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
        """A lease, taken when the ``async with`` block starts (or by
        :meth:`Lease.acquire`); options as :meth:`leased.Registry.lease`."""
        return Lease(self, run, worker, ttl, check_wait(wait), lock_delay, with_data)

    async def acquire(self, run: Id, worker: Id, **options: Any) -> "Lease":
        """``await lease(run, worker, **options).acquire()``."""
        return await self.lease(run, worker, **options).acquire()


class Lease:
    """A lease kept alive by a heartbeat task; see :class:`leased.Lease`."""

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
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self.lease_id: str = ""
        self.token: int = 0
        self.ttl: float = 0.0
        self.data: Optional[bytes] = None
        self.data_token: Optional[int] = None
        self.released: Optional[bool] = None
        self._lease_id = b""
        self._deadline = 0.0
        # Held across a write's check and its sending, and by the heartbeat
        # task to set `lost`: no write is sent once `lost` is set.
        self._write_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: Optional["asyncio.Task[None]"] = None
        self._acquired = False

    @property
    def deadline(self) -> float:
        """As :attr:`leased.Lease.deadline`, on ``time.monotonic()``."""
        return self._deadline

    def remaining(self) -> float:
        """Seconds until :attr:`deadline` (negative once past)."""
        return self._deadline - time.monotonic()

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lease is lost or its deadline
        has passed (and then sets :attr:`lost`). Call it before each write."""
        if not self.lost.is_set() and time.monotonic() >= self._deadline:
            self._set_lost("its deadline passed without a successful heartbeat")
        if self.lost.is_set():
            raise LeaseLost(self.lease_id or self.run, self.lost_reason or "lost")

    def _set_lost(self, reason: str) -> None:
        if not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    async def _lose(self, reason: str) -> None:
        async with self._write_lock:
            self._set_lost(reason)

    def _extend(self, sent: float) -> bool:
        if self.lost.is_set():
            return False
        self._deadline = max(self._deadline, sent + self.ttl)
        return True

    async def acquire(self) -> "Lease":
        """Takes the lease (waiting up to ``wait`` seconds if given) and
        starts heartbeating. Raises :class:`RunHeld` if the run is held."""
        if self._acquired:
            raise RuntimeError("this lease was already acquired; make a new one")
        self.ttl = self._ttl if self._ttl is not None else await self._registry.server_ttl()
        if self._wait is None:
            sent = time.monotonic()
            reply = await self._acquire_now()
        else:
            sent, reply = await self._acquire_waiting(self._wait)
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
            await self._heartbeat_once()  # dates the grant, as in leased.Lease
        self._task = asyncio.ensure_future(self._heartbeat_loop())
        return self

    async def _acquire_now(self) -> Any:
        args = acquire_args(self._run, self._worker, self.ttl, self._lock_delay, None, self._with_data)
        for _ in range(3):
            try:
                return await self._registry.execute(*args, write=True)
            except Uncertain:
                lease = await self._adopt()
                if lease is not None:
                    return lease
        raise Unavailable(f"the acquire of {self.run} stayed uncertain")

    async def _acquire_waiting(self, wait: float) -> Tuple[float, Any]:
        end = time.monotonic() + wait
        registry = self._registry
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return time.monotonic(), None
            args = acquire_args(self._run, self._worker, self.ttl, self._lock_delay, block_ms(left), self._with_data)
            index = registry._nodes.current
            client = registry._new_client(index, left + REPLY_MARGIN)
            sent = time.monotonic()
            try:
                return sent, await client.execute_command(*args)
            except _FAILURES:
                registry._nodes.failed(index)
            except redis.ResponseError as error:
                kind = error_kind(error)
                if kind is None:
                    raise
                if kind == "moved" and registry._nodes.moved(index, error):
                    continue
                if kind in ("tryagain", "moved"):
                    await asyncio.sleep(0.05)
                    continue
            finally:
                await _close(client)
            lease = await self._adopt()
            if lease is not None:
                return sent, lease

    async def _adopt(self) -> Any:
        current = LeaseInfo.from_reply(await self._registry.execute("LEASE.GET", self._run))
        newest = await self._registry.history(self._run, 1)
        if not acquired_is_ours(current, newest[0] if newest else None, self.worker, self._registry._held):
            return None
        assert current is not None
        data = await self._registry.get_data(self._run) if self._with_data else None
        return {
            "lease_id": encode(current.lease_id),
            "fencing_token": current.fencing_token,
            "data": data.value if data else None,
            "data_token": data.fencing_token if data else None,
        }

    async def _heartbeat_once(self) -> Optional[bool]:
        registry = self._registry
        sent = time.monotonic()
        try:
            reply = await registry.execute(
                "LEASE.HEARTBEAT", self._lease_id, self.token, write=True, timeout=self.ttl / HEARTBEATS_PER_TTL / 2
            )
        except Uncertain:
            try:
                current = await registry.get(self._run)
            except (Unavailable, redis.RedisError):
                return None
            if current is None or current.lease_id != self.lease_id or current.expired:
                await self._lose("the server no longer has it")
                return False
            return None
        except (Unavailable, redis.RedisError):
            return None
        if reply == 1:
            return self._extend(sent)
        await self._lose("a heartbeat was refused (expired, released or taken over)")
        return False

    async def _heartbeat_loop(self) -> None:
        period = self.ttl / HEARTBEATS_PER_TTL
        next_beat = self._deadline - self.ttl + period
        failing_since: Optional[float] = None
        while True:
            wake = min(next_beat, self._deadline)
            try:
                await asyncio.wait_for(self._stop.wait(), max(0.0, wake - time.monotonic()))
                return
            except asyncio.TimeoutError:
                pass
            if time.monotonic() >= self._deadline:
                await self._lose("its deadline passed without a successful heartbeat")
                return
            sent = time.monotonic()
            outcome = await self._heartbeat_once()
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
                await self._lose("heartbeats failed for a whole heartbeat period")
                return
            next_beat = time.monotonic() + period / 4

    async def _stop_heartbeats(self) -> None:
        self._stop.set()
        if self._task is not None and self._task is not asyncio.current_task():
            await self._task

    async def checkpoint(self, value: Id) -> None:
        """As :meth:`leased.Lease.checkpoint`."""
        value = encode(value)
        registry = self._registry
        while True:
            async with self._write_lock:
                self.check()
                try:
                    reply = await registry.execute("LEASE.SETDATA", self._lease_id, self.token, value, write=True)
                except Uncertain:
                    reply = None
            if reply is None:
                try:
                    data = await registry.get_data(self._run)
                except Unavailable:
                    data = None
                if data is None or data.value != value or data.fencing_token != self.token:
                    await asyncio.sleep(0.05)
                    continue
                reply = 1
            if reply != 1:
                self._set_lost("the server refused its LEASE.SETDATA")
                self.check()
            self.data, self.data_token = value, self.token
            return

    async def release(self) -> bool:
        """As :meth:`leased.Lease.release`."""
        await self._stop_heartbeats()
        if not self._acquired or self.released is not None:
            return bool(self.released)
        self._set_lost("released")
        registry = self._registry
        released = False
        try:
            for _ in range(3):
                try:
                    reply = await registry.execute("LEASE.RELEASE", self._lease_id, self.token, write=True)
                    released = reply == 1
                    break
                except Uncertain:
                    current = await registry.get(self._run)
                    if current is None or current.lease_id != self.lease_id:
                        released = True
                        break
        finally:
            self.released = released
            if self.lease_id in registry._held:
                registry._held.remove(self.lease_id)
        return released

    async def __aenter__(self) -> "Lease":
        if not self._acquired:
            await self.acquire()
        return self

    async def __aexit__(
        self,
        kind: Optional[Type[BaseException]],
        error: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except (Unavailable, redis.RedisError):
            if kind is None:
                raise

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else f"{self.remaining():.3f}s left"
        return f"<Lease {self.lease_id or self.run} token={self.token} {state}>"


class EventStream:
    """Lease events from one subscription; ``async for`` over it, or
    :meth:`get` one at a time; close it when done (or ``async with``)."""

    def __init__(self, registry: Registry, pattern: str) -> None:
        self._registry = registry
        self._pattern = pattern
        self._pubsub: Optional[Any] = None

    async def subscribe(self) -> "EventStream":
        """Subscribes, unless it is already: no event after this is missed."""
        if self._pubsub is not None:
            return self
        registry = self._registry
        pattern = self._pattern
        last: Optional[BaseException] = None
        for index in registry._nodes.order():
            client = registry._new_client(index, None, protocol=2)
            pubsub = client.pubsub()
            try:
                await pubsub.psubscribe(pattern)
                while await pubsub.get_message(timeout=registry._socket_timeout) is None:
                    pass
            except _FAILURES as error:
                last = error
                await pubsub.aclose()
                await _close(client)
                registry._nodes.failed(index)
                continue
            self._client, self._pubsub = client, pubsub
            return self
        raise Unavailable(f"no node took the subscription: {last}")

    async def get(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event, waiting at most ``timeout`` seconds (None: no
        limit); None if none came."""
        pubsub = (await self.subscribe())._pubsub
        assert pubsub is not None
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=left)
            if message is not None and message["type"] in ("message", "pmessage"):
                event = parse_event(message["channel"], message["data"])
                if event is not None:
                    return event
            if end is not None and time.monotonic() >= end:
                return None

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            event = await self.get()
            if event is not None:
                yield event

    async def close(self) -> None:
        if self._pubsub is not None:
            await self._pubsub.aclose()
            await _close(self._client)
            self._pubsub = None

    async def __aenter__(self) -> "EventStream":
        return await self.subscribe()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
