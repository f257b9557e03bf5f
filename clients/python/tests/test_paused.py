"""A worker stopped (SIGSTOP) past its TTL, as by a long GC pause or a
suspended VM, then resumed: check() raises before its next write, and the
server sees no write from it after its lease was lost (MONITOR)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from typing import List

import leased

from support import Monitor, raw, shared_url, unique

TTL = 1.0
HERE = os.path.dirname(os.path.abspath(__file__))


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


class PausedWorkerTest(unittest.TestCase):
    def test_a_paused_worker_checks_before_its_next_write(self) -> None:
        url = shared_url()
        r = raw(url)
        self.addCleanup(r.close)
        run = unique("paused")
        monitor = Monitor(url)
        self.addCleanup(monitor.close)
        transcript: List[str] = []

        def note(line: str) -> None:
            transcript.append(f"[test   {time.monotonic():.3f}] {line}")

        child = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "paused_worker.py"), url, run, str(TTL)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self.addCleanup(lambda: child.poll() is None and child.kill())
        lines: List[str] = []
        seen = threading.Condition()

        def read() -> None:
            assert child.stdout is not None
            for line in child.stdout:
                with seen:
                    lines.append(line.rstrip("\n"))
                    transcript.append(line.rstrip("\n"))
                    seen.notify_all()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        with seen:
            self.assertTrue(seen.wait_for(lambda: any("working on step 2" in l for l in lines), 30), lines)

        os.kill(child.pid, signal.SIGSTOP)
        while state(child.pid) != "T":
            time.sleep(0.005)
        note(f"worker stopped (SIGSTOP) during step 2's work")
        r.echo("marker: worker stopped")
        lease = leased.LeaseInfo.from_reply(r.execute_command("LEASE.GET", run))
        assert lease is not None
        time.sleep(2 * TTL)
        taken = r.execute_command("LEASE.ACQUIRE", run, "taker", "TTL", 30)
        self.assertIsNotNone(taken, "the paused worker's lease expired on the server")
        note(f"its lease expired on the server; taker acquired {run} with token {taken[b'fencing_token']}")
        r.echo("marker: worker resumed")
        note("worker resumed (SIGCONT)")
        os.kill(child.pid, signal.SIGCONT)
        self.assertEqual(child.wait(30), 4, "\n".join(transcript))
        reader.join(10)
        assert child.stdout is not None
        child.stdout.close()
        r.echo("marker: worker exited")
        monitor.wait_for("marker: worker exited")

        commands = monitor.seen()
        resumed = next(i for i, c in enumerate(commands) if "marker: worker resumed" in c)
        mine = [c for c in commands if lease.lease_id in c]
        after = [c for c in commands[resumed:] if lease.lease_id in c]
        transcript.append("[monitor] the worker's commands, in order:")
        transcript += [f"[monitor]   {c}" for c in mine]
        transcript.append(f"[monitor] after it was resumed: {after}")
        print("\n" + "\n".join(transcript))

        raised = [l for l in lines if "check() raised before checkpoint 2" in l]
        self.assertTrue(raised, lines)
        writes = [c for c in mine if c.startswith("LEASE.SETDATA")]
        self.assertEqual(len(writes), 2, mine)  # checkpoints 0 and 1, none after
        self.assertFalse([c for c in after if not c.startswith("LEASE.RELEASE")], after)
        self.assertEqual(r.execute_command("LEASE.GETDATA", run)[b"value"], b"step=1")


if __name__ == "__main__":
    unittest.main()
