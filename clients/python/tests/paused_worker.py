"""The worker that test_paused.py stops: python3 paused_worker.py URL RUN TTL

It writes a checkpoint per step, calling check() before each, and prints
what it does. After checkpoint 1 it announces step 2's work and sleeps,
for the test to stop it (SIGSTOP) there. Exits 4 when check() raises."""

import sys
import time

import leased


def say(line: str) -> None:
    print(f"[worker {time.monotonic():.3f}] {line}", flush=True)


def main() -> None:
    url, run, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with leased.Registry(url) as registry:
        with registry.lease(run, "paused-worker", ttl=ttl) as lease:
            say(f"acquired {lease.lease_id} (token {lease.token}, TTL {lease.ttl}s)")
            step = 0
            try:
                while True:
                    lease.check()
                    say(f"check() passed, {lease.remaining():.3f}s before the deadline: writing checkpoint {step}")
                    lease.checkpoint(f"step={step}")
                    step += 1
                    say(f"working on step {step}")
                    time.sleep(0.5 if step == 2 else 0.4)
            except leased.LeaseLost as error:
                say(f"check() raised before checkpoint {step}, {-lease.remaining():.3f}s past the deadline: {error}")
                say(f"lost is set: {lease.lost.is_set()}")
                sys.exit(4)


if __name__ == "__main__":
    main()
