"""What the tests share: the server they run against, servers of their
own, a MONITOR recorder and a TCP relay that can be cut.

The server: ``LEASED_PORT``, the port of a leased on 127.0.0.1 that the
tests may share (tests/python_library.rs starts one), or else one started
here from ``LEASED_BIN``, the path of the leased binary. Tests that kill
their server always start their own from ``LEASED_BIN`` and are skipped
without it.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
from typing import List, Optional, Tuple

import redis

_names = itertools.count()


def unique(prefix: str) -> str:
    """A run or worker id no other test uses on a shared server."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


class Server:
    """A leased of our own, from LEASED_BIN, on a free port and a fresh
    data directory."""

    def __init__(self) -> None:
        binary = os.environ.get("LEASED_BIN")
        if not binary:
            raise unittest.SkipTest("set LEASED_BIN to the leased binary to run this test")
        self.dir = tempfile.mkdtemp(prefix="leased-py-")
        self.process = subprocess.Popen(
            [binary, "--port", "0", "--dir", os.path.join(self.dir, "data")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        self.port = 0
        for line in self.process.stdout:
            found = re.search(r"Ready to accept connections on 127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                break
        if not self.port:
            raise RuntimeError("leased did not become ready")
        # Keep reading its output, so a full pipe never stalls it.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)


_shared: Optional[Server] = None


def shared_url() -> str:
    """The URL of the server the tests share."""
    global _shared
    port = os.environ.get("LEASED_PORT")
    if port:
        return f"redis://127.0.0.1:{int(port)}"
    if _shared is None:
        _shared = Server()
        # Stopped when the test run ends, not left running.
        atexit.register(_shared.close)
    return _shared.url


def raw(url: str) -> redis.Redis:
    """A plain redis-py connection, for checking what the library did."""
    return redis.Redis.from_url(url, protocol=3, socket_timeout=10)


class Monitor:
    """Records every command the server runs (MONITOR), from now on."""

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=None)
        self._monitor = self._client.monitor().__enter__()  # sends MONITOR, reads +OK
        self.commands: List[Tuple[float, str]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                entry = self._monitor.next_command()
                with self._lock:
                    self.commands.append((float(entry["time"]), entry["command"]))
        except Exception:
            return

    def seen(self) -> List[str]:
        with self._lock:
            return [command for _, command in self.commands]

    def wait_for(self, text: str, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        while not any(text in command for command in self.seen()):
            if time.monotonic() > end:
                raise AssertionError(f"MONITOR never showed {text!r}")
            time.sleep(0.01)

    def close(self) -> None:
        try:
            self._monitor.connection.disconnect()
        except Exception:
            pass


class Relay:
    """A TCP relay on 127.0.0.1 to a server: cut() breaks every
    connection through it and refuses new ones, as a network cut would."""

    def __init__(self, port: int) -> None:
        self._target = port
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._sockets: List[socket.socket] = []
        self._cut = False
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    client.close()
                    continue
                server = socket.create_connection(("127.0.0.1", self._target))
                self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data or self._cut:
                    break
                sink.sendall(data)
        except OSError:
            pass

    def cut(self) -> None:
        """From now on nothing passes: open connections go silent (as a
        partition: no reset reaches the client) and new ones are refused."""
        with self._lock:
            self._cut = True
        self._listener.close()

    def close(self) -> None:
        self.cut()
        with self._lock:
            for s in self._sockets:
                try:
                    s.close()
                except OSError:
                    pass
