"""leased.aio against a real server: acquire, heartbeat, release, waiting,
release on exception, events, and an event loop blocked past the TTL."""

from __future__ import annotations

import asyncio
import time
import unittest

import leased
import leased.aio

from support import Monitor, raw, shared_url, unique


class AsyncLeaseTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.url = shared_url()
        self.registry = leased.aio.Registry(self.url)
        self.r = raw(self.url)

    async def asyncTearDown(self) -> None:
        await self.registry.close()
        self.r.close()

    async def test_acquire_heartbeat_release(self) -> None:
        run = unique("run")
        async with self.registry.lease(run, "w", ttl=0.9) as lease:
            self.assertEqual(lease.lease_id, f"{run}:w:{lease.token}")
            self.assertLessEqual(lease.remaining(), 0.9)
            for _ in range(40):  # two seconds, more than two TTLs
                lease.check()
                await asyncio.sleep(0.05)
            await lease.checkpoint("step=0")
            self.assertFalse(lease.lost.is_set())
            self.assertGreaterEqual((await self.registry.history(run))[0].heartbeats, 3)
        self.assertTrue(lease.released)
        self.assertIsNone(await self.registry.get(run))
        data = await self.registry.get_data(run)
        assert data is not None
        self.assertEqual((data.value, data.fencing_token), (b"step=0", lease.token))

    async def test_waiting_for_a_held_run(self) -> None:
        run = unique("run")
        holder = await self.registry.acquire(run, "holder", ttl=30)
        with self.assertRaises(leased.RunHeld):
            await self.registry.lease(run, "impatient").acquire()

        async def release_soon() -> None:
            await asyncio.sleep(0.5)
            await holder.release()

        releasing = asyncio.ensure_future(release_soon())
        async with self.registry.lease(run, "waiter", ttl=5, wait=20) as lease:
            self.assertGreater(lease.token, holder.token)
            self.assertGreater(lease.remaining(), 4)
        await releasing
        async with self.registry.lease(run, "third", ttl=30):
            with self.assertRaises(leased.RunHeld):
                await self.registry.lease(run, "fourth", wait=0.3).acquire()
            self.assertEqual(self.r.execute_command("LEASE.WAITERS", run), [])

    async def test_released_on_exception(self) -> None:
        run = unique("run")
        with self.assertRaises(KeyError):
            async with self.registry.lease(run, "w", ttl=30) as lease:
                raise KeyError("boom")
        self.assertTrue(lease.released)
        self.assertIsNone(await self.registry.get(run))

    async def test_events(self) -> None:
        run = unique("run")
        async with self.registry.events(f"__lease__:{run}") as events:
            lease = await self.registry.acquire(run, "w", ttl=30)
            await lease.release()
            kinds = [(await events.get(5)) for _ in range(2)]
        self.assertEqual([e.kind if e else None for e in kinds], ["acquired", "released"])
        self.assertEqual({e.fencing_token for e in kinds if e}, {lease.token})

    async def test_a_blocked_event_loop_past_the_ttl(self) -> None:
        """The loop is blocked (a synchronous call) past the TTL: no
        heartbeat can run, and check() raises before the next write, which
        is never sent."""
        run = unique("run")
        monitor = Monitor(self.url)
        self.addCleanup(monitor.close)
        async with self.registry.lease(run, "w", ttl=1.0) as lease:
            await lease.checkpoint("step=0")
            time.sleep(1.5)  # blocks the loop: the heartbeat task cannot run
            with self.assertRaises(leased.LeaseLost):
                lease.check()
            self.assertTrue(lease.lost.is_set())
            with self.assertRaises(leased.LeaseLost):
                await lease.checkpoint("step=1")
        self.r.echo("marker: done")
        monitor.wait_for("marker: done")
        writes = [c for c in monitor.seen() if c.startswith("LEASE.SETDATA") and lease.lease_id in c]
        self.assertEqual(writes, [f"LEASE.SETDATA {lease.lease_id} {lease.token} step=0"])


if __name__ == "__main__":
    unittest.main()
