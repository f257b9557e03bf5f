"""Prints leased's lease events as they happen (redis-py 5).

    python3 examples/watch.py --port 6479 [--pattern '__lease__:*']

Subscribes to PATTERN (PSUBSCRIBE) and prints one line per message, with
the time it arrived:

    12:00:01.234 run-42 acquired token=7 worker=worker-py
    12:00:04.240 run-42 expired token=7 worker=worker-py

The server publishes every lease event twice: on `__lease__:<run_id>` as
`<event>:<fencing_token>:<worker_id>` (the default pattern takes all of
these), and on `__leaseevent__:<event>` as `<fencing_token>:<run_id>`,
shown as

    12:00:04.240 run-42 expired token=7 (on __leaseevent__:expired)

Events: acquired, released, expired (when the server's clock passes the
lease's expiry), reclaimed. A pattern such as `__lease*` takes both kinds,
so every event shows twice. Ctrl-C exits 0; a lost connection exits 1.
"""

import argparse
import datetime
import signal
import sys

import redis

RUN_CHANNEL = "__lease__:"
EVENT_CHANNEL = "__leaseevent__:"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=6479, help="leased's port on 127.0.0.1")
    parser.add_argument(
        "--pattern", default=RUN_CHANNEL + "*",
        help="the channels to watch, a glob-style pattern (default: every run's)",
    )
    return parser.parse_args()


def describe(channel, data):
    """One event as a line, without the time. Run and worker ids may hold
    colons; the event and the token never do."""
    if channel.startswith(RUN_CHANNEL):
        run = channel[len(RUN_CHANNEL):]
        parts = data.split(":", 2)
        if len(parts) == 3:
            event, token, worker = parts
            return f"{run} {event} token={token} worker={worker}"
    elif channel.startswith(EVENT_CHANNEL):
        event = channel[len(EVENT_CHANNEL):]
        parts = data.split(":", 1)
        if len(parts) == 2:
            token, run = parts
            return f"{run} {event} token={token} (on {channel})"
    # Not a lease event's form: shown as it came.
    return f"{channel} {data}"


def text(data):
    """Bytes as text; ids need not be UTF-8, so what is not shows escaped."""
    return data.decode("utf-8", errors="backslashreplace")


def now():
    """The local time of day, to the millisecond."""
    return datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]


def watch(args):
    # No socket timeout: a quiet server is not a failure, events come when
    # leases change.
    r = redis.Redis(port=args.port, socket_timeout=None)
    p = r.pubsub()
    p.psubscribe(args.pattern)
    for message in p.listen():
        kind = message["type"]
        if kind == "psubscribe":
            print(f"watching {args.pattern} on port {args.port} (Ctrl-C to stop)", flush=True)
        elif kind == "pmessage":
            line = describe(text(message["channel"]), text(message["data"]))
            print(f"{now()} {line}", flush=True)


def main():
    args = parse_args()
    # Ctrl-C raises KeyboardInterrupt even if SIGINT was ignored when the
    # watcher started (as for a command put in the background by a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        watch(args)
    except KeyboardInterrupt:
        sys.exit(0)
    except redis.exceptions.ConnectionError as error:
        print(f"connection lost: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
