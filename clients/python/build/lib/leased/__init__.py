"""A client for leased, the lease registry that speaks the Redis protocol.

A worker takes a lease on a run, heartbeats it in the background, checks
before each write that the lease still holds, and stamps each write with
the lease's fencing token::

    import leased

    with leased.Registry("redis://127.0.0.1:6479") as registry:
        with registry.lease("run-42", "worker-a", ttl=10, wait=30) as lease:
            for step in range(5):
                lease.check()                      # raises LeaseLost
                store.write(step, token=lease.token)
                lease.checkpoint(f"step={step}")   # the run's data

:mod:`leased.aio` is the same for asyncio.
"""

from ._common import (
    Event,
    Id,
    LeaseError,
    LeaseInfo,
    LeaseLost,
    Node,
    RunData,
    RunHeld,
    Tenure,
    Unavailable,
    Uncertain,
)
from ._sync import EventStream, Lease, Registry

__all__ = [
    "Event",
    "EventStream",
    "Id",
    "Lease",
    "LeaseError",
    "LeaseInfo",
    "LeaseLost",
    "Node",
    "Registry",
    "RunData",
    "RunHeld",
    "Tenure",
    "Unavailable",
    "Uncertain",
]

__version__ = "0.1.0"
