"""The node list, -TRYAGAIN and -UNCERTAIN. There is no cluster to test
against: the replies a cluster would give are injected in front of a real
server by wrapping redis-py's execute_command, and the decision rules are
tested on their own."""

from __future__ import annotations

import socket
import time
import unittest
from typing import Any, Callable, List, Tuple

import redis

import leased
from leased._common import Tenure, acquired_is_ours, node_urls, parse_event

from support import raw, shared_url, unique

Action = Callable[[Any, Tuple[Any, ...]], Any]


def tryagain(real: Any, args: Tuple[Any, ...]) -> Any:
    raise redis.ResponseError("TRYAGAIN the run is moving between nodes")


def uncertain_after_running(real: Any, args: Tuple[Any, ...]) -> Any:
    real.execute_command(*args)
    raise redis.ResponseError("UNCERTAIN the write may or may not have been applied")


def uncertain_without_running(real: Any, args: Tuple[Any, ...]) -> Any:
    raise redis.ResponseError("UNCERTAIN the write may or may not have been applied")


class Scripted:
    """A redis-py client whose next replies to some commands are scripted."""

    def __init__(self, real: Any, script: List[Tuple[str, Action]], calls: List[str]) -> None:
        self.real, self.script, self.calls = real, script, calls

    def execute_command(self, *args: Any) -> Any:
        name = args[0]
        self.calls.append(name)
        for i, (command, action) in enumerate(self.script):
            if command == name:
                del self.script[i]
                return action(self.real, args)
        return self.real.execute_command(*args)


def scripted(registry: leased.Registry, script: List[Tuple[str, Action]]) -> List[str]:
    """Makes every connection of `registry` follow `script`; the commands sent."""
    calls: List[str] = []
    real_client = registry._client
    registry._client = lambda index, timeout: Scripted(real_client(index, timeout), script, calls)  # type: ignore
    return calls


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NodesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.url = shared_url()
        self.r = raw(self.url)
        self.addCleanup(self.r.close)

    def registry(self, **options: Any) -> leased.Registry:
        registry = leased.Registry(self.url, **options)
        self.addCleanup(registry.close)
        return registry

    def test_an_unreachable_node_is_passed_over(self) -> None:
        dead = f"redis://127.0.0.1:{closed_port()}"
        registry = leased.Registry(nodes=[dead, self.url], connect_timeout=0.5)
        self.addCleanup(registry.close)
        self.assertEqual(registry.get(unique("run")), None)  # a read moves on
        self.assertEqual(registry._nodes.current, 1)
        with registry.lease(unique("run"), "w", ttl=30) as lease:
            self.assertGreater(lease.token, 0)
        self.assertTrue(lease.released)

    def test_an_uncertain_write_on_an_unreachable_node_is_resolved_on_the_next(self) -> None:
        dead = ("127.0.0.1", closed_port())
        registry = leased.Registry(nodes=[dead, self.url], connect_timeout=0.5)
        self.addCleanup(registry.close)
        run = unique("run")
        with registry.lease(run, "w", ttl=30) as lease:  # the first node fails the acquire
            self.assertEqual(registry.get(run).lease_id, lease.lease_id)  # type: ignore[union-attr]

    def test_no_node_reachable(self) -> None:
        registry = leased.Registry(nodes=[("127.0.0.1", closed_port())], connect_timeout=0.5)
        self.addCleanup(registry.close)
        with self.assertRaises(leased.Unavailable):
            registry.get("run")
        with self.assertRaises(leased.Unavailable):
            registry.lease("run", "w", ttl=5).acquire()

    def test_tryagain_is_retried_with_a_bounded_backoff(self) -> None:
        registry = self.registry()
        calls = scripted(registry, [("LEASE.ACQUIRE", tryagain), ("LEASE.ACQUIRE", tryagain)])
        with registry.lease(unique("run"), "w", ttl=30) as lease:
            self.assertEqual(calls[:3], ["LEASE.ACQUIRE"] * 3)
            self.assertGreater(lease.token, 0)

    def test_tryagain_gives_up_after_retry_for(self) -> None:
        registry = self.registry(retry_for=0.3)
        scripted(registry, [("LEASE.GET", tryagain)] * 1000)
        started = time.monotonic()
        with self.assertRaises(leased.Unavailable):
            registry.get("run")
        self.assertLess(time.monotonic() - started, 1.5)

    def test_an_uncertain_acquire_that_took_the_run_is_ours(self) -> None:
        registry = self.registry()
        run = unique("run")
        calls = scripted(registry, [("LEASE.ACQUIRE", uncertain_after_running)])
        with registry.lease(run, unique("worker"), ttl=30) as lease:
            current = registry.get(run)
            assert current is not None
            self.assertEqual((lease.lease_id, lease.token), (current.lease_id, current.fencing_token))
            self.assertEqual(calls[:3], ["LEASE.ACQUIRE", "LEASE.GET", "LEASE.HISTORY"])
            lease.checkpoint("x")  # the lease works
        self.assertTrue(lease.released)

    def test_an_uncertain_acquire_that_did_not_is_sent_again(self) -> None:
        registry = self.registry()
        run = unique("run")
        calls = scripted(registry, [("LEASE.ACQUIRE", uncertain_without_running)])
        with registry.lease(run, "w", ttl=30) as lease:
            self.assertEqual(calls[:4], ["LEASE.ACQUIRE", "LEASE.GET", "LEASE.HISTORY", "LEASE.ACQUIRE"])
            self.assertEqual(registry.get(run).lease_id, lease.lease_id)  # type: ignore[union-attr]

    def test_an_uncertain_acquire_does_not_adopt_another_process_lease(self) -> None:
        """Another process holds the run under the same worker id, and has
        heartbeated it: not ours, and the run is held."""
        registry = self.registry()
        run, worker = unique("run"), unique("worker")
        other = self.r.execute_command("LEASE.ACQUIRE", run, worker, "TTL", 30)
        self.r.execute_command("LEASE.HEARTBEAT", other[b"lease_id"], other[b"fencing_token"])
        scripted(registry, [("LEASE.ACQUIRE", uncertain_without_running)])
        with self.assertRaises(leased.RunHeld):
            registry.lease(run, worker, ttl=30).acquire()

    def test_an_uncertain_heartbeat_of_a_live_lease_keeps_it(self) -> None:
        registry = self.registry()
        script: List[Tuple[str, Action]] = [("LEASE.HEARTBEAT", uncertain_without_running)]
        calls = scripted(registry, script)
        with registry.lease(unique("run"), "w", ttl=0.9) as lease:
            time.sleep(1.5)
            lease.check()
            self.assertEqual(script, [])
            self.assertGreaterEqual(calls.count("LEASE.HEARTBEAT"), 3)

    def test_an_uncertain_heartbeat_of_a_lease_gone_loses_it(self) -> None:
        registry = self.registry()
        run = unique("run")

        def taken_over(real: Any, args: Tuple[Any, ...]) -> Any:
            self.r.execute_command("LEASE.RELEASE", args[1], args[2])
            raise redis.ResponseError("UNCERTAIN lost in the failover")

        scripted(registry, [("LEASE.HEARTBEAT", taken_over)])
        with registry.lease(run, "w", ttl=0.9) as lease:
            self.assertTrue(lease.lost.wait(2))
            self.assertIn("no longer has it", lease.lost_reason or "")


class RulesTest(unittest.TestCase):
    def lease(self, worker: str = "w", token: int = 7, expired: bool = False) -> leased.LeaseInfo:
        return leased.LeaseInfo("run", worker, f"run:{worker}:{token}", token, 100.0, expired)

    def tenure(self, token: int = 7, heartbeats: int = 0, worker: str = "w") -> Tenure:
        return Tenure(f"run:{worker}:{token}", worker, token, 90.0, 100.0, None, "active", heartbeats)

    def test_whose_uncertain_acquire(self) -> None:
        self.assertTrue(acquired_is_ours(self.lease(), self.tenure(), "w", []))
        self.assertTrue(acquired_is_ours(self.lease(), None, "w", []), "history off: the worker id decides")
        self.assertFalse(acquired_is_ours(None, None, "w", []))
        self.assertFalse(acquired_is_ours(self.lease(worker="x"), self.tenure(worker="x"), "w", []))
        self.assertFalse(acquired_is_ours(self.lease(expired=True), self.tenure(), "w", []))
        self.assertFalse(acquired_is_ours(self.lease(), self.tenure(heartbeats=1), "w", []), "heartbeated")
        self.assertFalse(acquired_is_ours(self.lease(), self.tenure(), "w", ["run:w:7"]), "held here")
        self.assertFalse(acquired_is_ours(self.lease(), self.tenure(token=6), "w", []))

    def test_events_are_split_at_their_first_colons(self) -> None:
        self.assertEqual(
            parse_event(b"__lease__:a:b", b"expired:12:w:1"),
            leased.Event("expired", "a:b", 12, "w:1", "__lease__:a:b"),
        )
        self.assertEqual(
            parse_event(b"__leaseevent__:acquired", b"3:run:x"),
            leased.Event("acquired", "run:x", 3, None, "__leaseevent__:acquired"),
        )
        self.assertIsNone(parse_event(b"other", b"1:2"))
        self.assertIsNone(parse_event(b"__lease__:r", b"garbage"))

    def test_nodes(self) -> None:
        self.assertEqual(node_urls("redis://h:1", None), ["redis://h:1"])
        self.assertEqual(node_urls(None, [("h", 1), "h2:2", "rediss://h3:3"]), ["redis://h:1", "redis://h2:2", "rediss://h3:3"])
        with self.assertRaises(ValueError):
            node_urls(None, None)
        with self.assertRaises(ValueError):
            node_urls(None, [])


if __name__ == "__main__":
    unittest.main()


class MovedTest(unittest.TestCase):
    """A follower's -MOVED (cluster-redirect moved) and -CLUSTERDOWN."""

    def test_errors_are_classified(self) -> None:
        from leased._common import error_kind

        self.assertEqual(error_kind(redis.ResponseError("CLUSTERDOWN The cluster is down")), "tryagain")
        self.assertEqual(error_kind(redis.ResponseError("MOVED 4178 127.0.0.1:7003")), "moved")
        self.assertIsNone(error_kind(redis.ResponseError("ERR no")))

    def test_a_moved_makes_the_node_it_names_current(self) -> None:
        from leased._common import NodeList

        nodes = NodeList(["redis://127.0.0.1:7001", "redis://u:p@localhost:7002/0", "redis://127.0.0.1:7003"])
        self.assertTrue(nodes.moved(0, redis.ResponseError("MOVED 4178 127.0.0.1:7002")))
        self.assertEqual(nodes.current, 1)
        # A node not in the list (or the one that answered): on to the next.
        self.assertFalse(nodes.moved(1, redis.ResponseError("MOVED 4178 127.0.0.1:7009")))
        self.assertEqual(nodes.current, 2)
        self.assertFalse(nodes.moved(2, redis.ResponseError("MOVED 4178 127.0.0.1:7003")))
        self.assertEqual(nodes.current, 0)
        # Not to a node the command could not reach (a dead leader).
        self.assertFalse(nodes.moved(0, redis.ResponseError("MOVED 4178 127.0.0.1:7002"), dead=[1]))
        self.assertEqual(nodes.current, 1)
