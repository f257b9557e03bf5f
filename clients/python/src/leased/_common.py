"""What the blocking and the asyncio clients share: errors, the shapes of
the server's replies, lease events, the node list and the rules for
retrying. Nothing here does I/O."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

#: A run or worker id: text (sent as UTF-8) or bytes (sent as they are).
Id = Union[str, bytes]
#: A node: a URL (``redis://host:port``, ``rediss://...``) or ``(host, port)``.
Node = Union[str, Tuple[str, int]]

#: Heartbeats per TTL: a lease is heartbeated every ``ttl / 3`` seconds.
HEARTBEATS_PER_TTL = 3
#: How much longer than its block a waiting acquire's connection waits for
#: the reply before it gives up on it.
REPLY_MARGIN = 5.0
#: The longest ``wait=`` (about 31 years).
MAX_WAIT = 1e9
#: The channel prefixes of lease events.
RUN_CHANNEL = "__lease__:"
EVENT_CHANNEL = "__leaseevent__:"


class LeaseError(Exception):
    """The base of this package's errors."""


class RunHeld(LeaseError):
    """The run is held by another worker (after ``wait`` seconds, if given)."""

    def __init__(self, run: str) -> None:
        super().__init__(f"{run} is held by another worker")
        self.run = run


class LeaseLost(LeaseError):
    """The lease is lost, or may be: a write is no longer safe."""

    def __init__(self, lease_id: str, reason: str) -> None:
        super().__init__(f"lease {lease_id} lost: {reason}")
        self.lease_id = lease_id
        self.reason = reason


class Unavailable(LeaseError):
    """No node answered: every one was unreachable, or kept answering
    ``-TRYAGAIN`` for longer than ``retry_for`` seconds."""


class Uncertain(Exception):
    """Internal: a write command whose outcome is unknown (``-UNCERTAIN``,
    or the connection failed after it may have been sent). The caller
    resolves it by reading the state back."""


def encode(value: Id) -> bytes:
    """An id as sent: bytes as they are, text as UTF-8 (surrogate escapes,
    as :func:`decode` makes them, back to their bytes)."""
    if isinstance(value, bytes):
        return value
    return value.encode("utf-8", "surrogateescape")


def decode(value: Any) -> str:
    """A reply's bytes as text; bytes that are not UTF-8 become surrogate
    escapes, which :func:`encode` turns back into the same bytes."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return str(value)


def pairs(reply: Any) -> Dict[str, Any]:
    """A map reply (RESP3) or its flat array of pairs (RESP2) as a dict."""
    if isinstance(reply, dict):
        return {decode(k): v for k, v in reply.items()}
    return {decode(k): v for k, v in zip(reply[0::2], reply[1::2])}


def _float(value: Any) -> Optional[float]:
    return None if value is None else float(value)


def _int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


@dataclass(frozen=True)
class LeaseInfo:
    """A lease as the server shows it (``LEASE.GET``, ``LEASE.ACQUIRE``).
    ``expires_at`` is in registry time (the server's clock), not this
    machine's."""

    run_id: str
    worker_id: str
    lease_id: str
    fencing_token: int
    expires_at: float
    #: ``LEASE.GET`` only: whether it had expired when read.
    expired: Optional[bool] = None

    @classmethod
    def from_reply(cls, reply: Any) -> Optional["LeaseInfo"]:
        if reply is None:
            return None
        fields = pairs(reply)
        expired = fields.get("expired")
        return cls(
            run_id=decode(fields["run_id"]),
            worker_id=decode(fields["worker_id"]),
            lease_id=decode(fields["lease_id"]),
            fencing_token=int(fields["fencing_token"]),
            expires_at=float(fields["expires_at"]),
            expired=None if expired is None else bool(int(expired)),
        )


@dataclass(frozen=True)
class RunData:
    """A run's data (``LEASE.GETDATA``): the value and the token that wrote it."""

    value: bytes
    fencing_token: int
    written_at: float

    @classmethod
    def from_reply(cls, reply: Any) -> Optional["RunData"]:
        if reply is None:
            return None
        fields = pairs(reply)
        return cls(
            value=fields["value"],
            fencing_token=int(fields["fencing_token"]),
            written_at=float(fields["written_at"]),
        )


@dataclass(frozen=True)
class Tenure:
    """One past or current tenure of a run (``LEASE.HISTORY``). Times are
    registry time; ``ended_at`` is None while the lease is active; ``end``
    is ``active``, ``released``, ``released-late`` or ``expired``."""

    lease_id: str
    worker_id: str
    fencing_token: int
    acquired_at: float
    expires_at: float
    ended_at: Optional[float]
    end: str
    heartbeats: int


def parse_history(reply: Any) -> List[Tenure]:
    tenures = []
    for item in reply or []:
        fields = pairs(item)
        tenures.append(
            Tenure(
                lease_id=decode(fields["lease_id"]),
                worker_id=decode(fields["worker_id"]),
                fencing_token=int(fields["fencing_token"]),
                acquired_at=float(fields["acquired_at"]),
                expires_at=float(fields["expires_at"]),
                ended_at=_float(fields.get("ended_at")),
                end=decode(fields["end"]),
                heartbeats=int(fields["heartbeats"]),
            )
        )
    return tenures


@dataclass(frozen=True)
class Event:
    """A lease event: ``kind`` is ``acquired``, ``released``, ``expired``,
    ``reclaimed`` or ``data``. ``worker_id`` is known for events on
    ``__lease__:<run>`` channels and None for those on
    ``__leaseevent__:<event>`` channels, whose messages do not carry it."""

    kind: str
    run_id: str
    fencing_token: int
    worker_id: Optional[str]
    channel: str


def parse_event(channel: Any, payload: Any) -> Optional[Event]:
    """The event of a pub/sub message, or None if it is not one. Ids may
    hold colons; the event name and the token never do, so the payload is
    split at its first colons only."""
    name = decode(channel)
    body = encode(payload) if isinstance(payload, (str, bytes)) else b""
    try:
        if name.startswith(RUN_CHANNEL):
            kind, token, worker = body.split(b":", 2)
            return Event(decode(kind), name[len(RUN_CHANNEL):], int(token), decode(worker), name)
        if name.startswith(EVENT_CHANNEL):
            token, run = body.split(b":", 1)
            return Event(name[len(EVENT_CHANNEL):], decode(run), int(token), None, name)
    except ValueError:
        pass
    return None


def acquire_args(
    run: bytes,
    worker: bytes,
    ttl: float,
    lock_delay: Optional[float],
    block_ms: Optional[int],
    with_data: bool,
) -> List[Any]:
    args: List[Any] = ["LEASE.ACQUIRE", run, worker, "TTL", repr(float(ttl))]
    if lock_delay is not None:
        args += ["LOCKDELAY", repr(float(lock_delay))]
    if block_ms is not None:
        args += ["BLOCK", block_ms]
    if with_data:
        args.append("WITHDATA")
    return args


def block_ms(seconds: float) -> int:
    """A wait as ``BLOCK`` milliseconds: rounded up, and never 0 (which
    the server takes as forever)."""
    return max(1, math.ceil(seconds * 1000))


def check_wait(wait: Optional[float]) -> Optional[float]:
    if wait is None:
        return None
    wait = float(wait)
    if not 0 <= wait <= MAX_WAIT:
        raise ValueError(f"wait must be None or seconds in [0, {MAX_WAIT:g}], not {wait}")
    return wait or None


def check_ttl(ttl: float) -> float:
    ttl = float(ttl)
    if not (ttl > 0 and math.isfinite(ttl)):
        raise ValueError(f"ttl must be a finite number of seconds above 0, not {ttl}")
    return ttl


def error_kind(error: BaseException) -> Optional[str]:
    """``tryagain``, ``uncertain`` or ``moved`` for those error replies, else
    None. A cluster's ``-CLUSTERDOWN`` (no leader now) is a ``tryagain``."""
    text = str(error)
    if text.startswith(("TRYAGAIN", "CLUSTERDOWN")):
        return "tryagain"
    if text.startswith("MOVED "):
        return "moved"
    if text.startswith("UNCERTAIN"):
        return "uncertain"
    return None


def node_urls(url: Optional[str], nodes: Optional[Sequence[Node]]) -> List[str]:
    """The nodes to try, in order, as URLs."""
    if (url is None) == (nodes is None):
        raise ValueError("give either url or nodes")
    given = [url] if url is not None else list(nodes or [])
    if not given:
        raise ValueError("nodes is empty")
    urls = []
    for node in given:
        if isinstance(node, str):
            urls.append(node if "://" in node else f"redis://{node}")
        else:
            host, port = node
            urls.append(f"redis://{host}:{int(port)}")
    return urls


def url_address(url: str) -> str:
    """The ``host:port`` of a node's URL (``redis://[user:pass@]host:port/...``)."""
    rest = url.split("://", 1)[-1]
    authority = rest.split("/", 1)[0].split("?", 1)[0]
    return authority.rsplit("@", 1)[-1]


class NodeList:
    """The nodes, and the one to try first: the last that answered. A node
    that fails moves the start on to the next, in order, round the list."""

    def __init__(self, urls: List[str]) -> None:
        self.urls = urls
        self.current = 0

    def order(self) -> List[int]:
        n = len(self.urls)
        return [(self.current + k) % n for k in range(n)]

    def failed(self, index: int) -> None:
        if index == self.current:
            self.current = (index + 1) % len(self.urls)

    def moved(self, index: int, error: BaseException, dead: Sequence[int] = ()) -> bool:
        """After ``-MOVED slot host:port`` from node ``index``: makes the node
        at that address the current one and says True, if it is in the list,
        not ``index`` and not among ``dead`` (nodes the command could not
        reach: a follower that has not yet seen its leader die names it);
        else moves on to the next node and says False (the caller then
        waits, as for ``-TRYAGAIN``)."""
        address = str(error).split()[-1]
        canonical = lambda text: text.replace("localhost:", "127.0.0.1:", 1)  # noqa: E731
        for to, url in enumerate(self.urls):
            if to != index and to not in dead and canonical(url_address(url)) == canonical(address):
                self.current = to
                return True
        self.failed(index)
        return False


class Backoff:
    """Delays between retries of a ``-TRYAGAIN``: 10 ms doubling to at most
    500 ms, for at most ``budget`` seconds in all (then :meth:`next` gives
    None)."""

    def __init__(self, budget: float) -> None:
        self.until = time.monotonic() + budget
        self.delay = 0.01

    def next(self) -> Optional[float]:
        left = self.until - time.monotonic()
        if left <= 0:
            return None
        delay = min(self.delay, left)
        self.delay = min(self.delay * 2, 0.5)
        return delay


def acquired_is_ours(
    current: Optional[LeaseInfo],
    newest: Optional[Tenure],
    worker: str,
    held: Sequence[str],
) -> bool:
    """Whether an acquire whose outcome is unknown took the run, judged
    from what was read after it: the run's current lease (``LEASE.GET``)
    and its newest tenure (``LEASE.HISTORY run COUNT 1``).

    The reply, and with it the token, was lost, so the lease can only be
    recognised by its worker id. It is ours when the run's current lease
    is unexpired and has our worker id, is not a lease this process
    already holds, and has not been heartbeated (a lease we have just been
    given has had no heartbeat; another process's would have had one
    within a third of its TTL). Worker ids must therefore be unique among
    live processes: two that share one could each take the other's lease
    for their own in that first third of a TTL. When history is off
    (``lease-history-len 0``) the heartbeat count is not known and the
    worker id alone decides.
    """
    if current is None or current.expired or current.worker_id != worker:
        return False
    if current.lease_id in held:
        return False
    if newest is not None and newest.lease_id == current.lease_id:
        return newest.heartbeats == 0
    return newest is None
