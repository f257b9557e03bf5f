"""The blocking client against a real server: acquire, heartbeat, release,
waiting, data, events, history, and losing the lease."""

from __future__ import annotations

import threading
import time
import unittest

import leased

from support import Monitor, Relay, Server, raw, shared_url, unique


class LeaseTest(unittest.TestCase):
    def setUp(self) -> None:
        self.url = shared_url()
        self.registry = leased.Registry(self.url)
        self.addCleanup(self.registry.close)
        self.r = raw(self.url)
        self.addCleanup(self.r.close)

    def test_acquire_heartbeat_release(self) -> None:
        run, worker = unique("run"), unique("worker")
        before = time.monotonic()
        with self.registry.lease(run, worker, ttl=0.9) as lease:
            self.assertEqual(lease.lease_id, f"{run}:{worker}:{lease.token}")
            self.assertGreater(lease.token, 0)
            self.assertEqual(lease.ttl, 0.9)
            # Sent after `before`: the deadline is at most a TTL past it.
            self.assertLessEqual(lease.deadline, time.monotonic() + 0.9)
            self.assertGreaterEqual(lease.deadline, before + 0.9)
            # Held for more than two TTLs: only heartbeats keep it.
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                lease.check()
                time.sleep(0.05)
            self.assertFalse(lease.lost.is_set())
            self.assertGreater(lease.remaining(), 0)
            got = self.registry.get(run)
            assert got is not None
            self.assertEqual((got.lease_id, got.expired), (lease.lease_id, False))
            beats = self.registry.history(run)[0].heartbeats
            self.assertGreaterEqual(beats, 3, "heartbeats every ttl/3 (about 6 in 2 s)")
        self.assertTrue(lease.released)
        self.assertIsNone(self.registry.get(run))
        self.assertEqual(self.registry.history(run)[0].end, "released")
        with self.assertRaises(leased.LeaseLost):
            lease.check()

    def test_the_ttl_defaults_to_the_servers(self) -> None:
        ttl = float(self.r.config_get("lease-ttl")["lease-ttl"])
        with self.registry.lease(unique("run"), "w") as lease:
            self.assertEqual(lease.ttl, ttl)
            info = self.registry.get(lease.run)
            assert info is not None
            history = self.registry.history(lease.run)[0]
            self.assertAlmostEqual(info.expires_at - history.acquired_at, ttl, delta=ttl / 3 + 0.5)

    def test_a_held_run_raises_at_once(self) -> None:
        run = unique("run")
        with self.registry.lease(run, "holder", ttl=30):
            with self.assertRaises(leased.RunHeld) as raised:
                self.registry.lease(run, "other").acquire()
            self.assertEqual(raised.exception.run, run)

    def test_waiting_for_a_held_run(self) -> None:
        run = unique("run")
        holder = self.registry.acquire(run, "holder", ttl=30)
        threading.Timer(0.5, holder.release).start()
        started = time.monotonic()
        with self.registry.lease(run, "waiter", ttl=5, wait=20) as lease:
            waited = time.monotonic() - started
            self.assertGreater(lease.token, holder.token)
            self.assertGreaterEqual(waited, 0.4)
            self.assertLess(waited, 10)
            # Dated by the heartbeat sent at once after the grant.
            self.assertGreater(lease.remaining(), 4)
            lease.check()
        self.assertTrue(lease.released)

    def test_a_wait_that_runs_out_raises_and_leaves_no_waiter(self) -> None:
        run = unique("run")
        with self.registry.lease(run, "holder", ttl=30):
            started = time.monotonic()
            with self.assertRaises(leased.RunHeld):
                self.registry.lease(run, "waiter", wait=0.3).acquire()
            self.assertGreaterEqual(time.monotonic() - started, 0.3)
            self.assertEqual(self.r.execute_command("LEASE.WAITERS", run), [])

    def test_released_on_exception(self) -> None:
        run = unique("run")
        with self.assertRaises(ZeroDivisionError):
            with self.registry.lease(run, "w", ttl=30) as lease:
                1 / 0
        self.assertTrue(lease.released)
        self.assertIsNone(self.registry.get(run))
        # Free: the next worker takes it at once.
        with self.registry.lease(run, "next", ttl=30) as after:
            self.assertGreater(after.token, lease.token)

    def test_checkpoints_are_the_next_holders_data(self) -> None:
        run = unique("run")
        with self.registry.lease(run, "first", ttl=30) as first:
            self.assertIsNone(first.data)
            self.assertIsNone(first.data_token)
            first.checkpoint("step=1")
            first.checkpoint(b"step=2")
            self.assertEqual((first.data, first.data_token), (b"step=2", first.token))
        with self.registry.lease(run, "second", ttl=30) as second:
            self.assertEqual((second.data, second.data_token), (b"step=2", first.token))
        data = self.registry.get_data(run)
        assert data is not None
        self.assertEqual((data.value, data.fencing_token), (b"step=2", first.token))

    def test_a_refused_heartbeat_sets_lost_at_once(self) -> None:
        run = unique("run")
        with self.registry.lease(run, "w", ttl=1.5) as lease:
            # Taken away: released from outside and taken over.
            self.assertEqual(self.r.execute_command("LEASE.RELEASE", lease.lease_id, lease.token), 1)
            self.r.execute_command("LEASE.ACQUIRE", run, "taker", "TTL", 30)
            started = time.monotonic()
            self.assertTrue(lease.lost.wait(1.5 / 3 + 1.0), "lost within a heartbeat period")
            self.assertLess(time.monotonic() - started, 1.5 / 3 + 1.0)
            self.assertIn("refused", lease.lost_reason or "")
            monitor = Monitor(self.url)
            self.addCleanup(monitor.close)
            with self.assertRaises(leased.LeaseLost):
                lease.checkpoint("late")
            self.r.echo("marker-after-checkpoint")
            monitor.wait_for("marker-after-checkpoint")
            self.assertFalse(any("LEASE.SETDATA" in c for c in monitor.seen()), monitor.seen())

    def test_events_and_history(self) -> None:
        run = unique("run")
        with self.registry.events(f"__lease__:{run}") as events:
            with self.registry.lease(run, "w:1", ttl=30) as lease:
                lease.checkpoint("x")
            seen = [events.get(5) for _ in range(3)]
        token = lease.token
        channel = f"__lease__:{run}"
        self.assertEqual(
            seen,
            [
                leased.Event("acquired", run, token, "w:1", channel),
                leased.Event("data", run, token, "w:1", channel),
                leased.Event("released", run, token, "w:1", channel),
            ],
        )
        with self.registry.events("__leaseevent__:released") as events:
            self.registry.acquire(run, "w2", ttl=30).release()
            event = events.get(5)
        assert event is not None
        self.assertEqual((event.kind, event.run_id, event.worker_id), ("released", run, None))
        history = self.registry.history(run)
        self.assertEqual([t.worker_id for t in history], ["w2", "w:1"])
        self.assertEqual([t.end for t in history], ["released", "released"])
        self.assertEqual(len(self.registry.history(run, count=1)), 1)


class LosingTheServerTest(unittest.TestCase):
    """Heartbeats that fail: `lost` is set within one heartbeat period of
    the first heartbeat that failed (the next one due after the break, so
    at most two periods after it, and a timeout's half period), and
    check() and checkpoint() raise from then on."""

    TTL = 1.5

    def lose(self, url: str, cause: str, break_it) -> None:
        registry = leased.Registry(url, connect_timeout=0.5, socket_timeout=1.0)
        self.addCleanup(registry.close)
        lease = registry.acquire(unique("run"), "w", ttl=self.TTL)
        time.sleep(0.7)  # a heartbeat or two in
        lease.check()
        broken = time.monotonic()
        break_it()
        period = self.TTL / 3
        self.assertTrue(lease.lost.wait(self.TTL + 1.0), f"lost after {cause}")
        noticed = time.monotonic()
        print(
            f"\n{cause}: lost {noticed - broken:.3f}s after it, {noticed - lease.deadline:+.3f}s "
            f"from the deadline (TTL {self.TTL}s, period {period:.2f}s): {lease.lost_reason}"
        )
        # The first failure comes with the next heartbeat (within a period
        # of the break), `lost` a period of retries later; an attempt that
        # must connect again may take the connect timeout (0.5 s here) on
        # top, and a little slack for a loaded machine.
        self.assertLessEqual(noticed - broken, 2.5 * period + 0.5 + 0.3, "within one period of the failure")
        with self.assertRaises(leased.LeaseLost):
            lease.check()
        with self.assertRaises(leased.LeaseLost):
            lease.checkpoint("late")
        # Nothing answers the release (a with block's exit swallows that).
        with self.assertRaises(leased.Unavailable):
            lease.release()
        self.assertFalse(lease.released)

    def test_server_killed(self) -> None:
        server = Server()
        self.addCleanup(server.close)
        self.lose(server.url, "server killed", server.kill)

    def test_connection_cut(self) -> None:
        server = Server() if not _shared_ok() else None
        port = server.port if server else int(shared_url().rsplit(":", 1)[1])
        if server:
            self.addCleanup(server.close)
        relay = Relay(port)
        self.addCleanup(relay.close)
        self.lose(relay.url, "connection cut", relay.cut)


def _shared_ok() -> bool:
    try:
        shared_url()
        return True
    except unittest.SkipTest:
        return False


if __name__ == "__main__":
    unittest.main()
