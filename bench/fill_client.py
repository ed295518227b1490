#!/usr/bin/env python3
"""Latency client for bench/fill.sh (Python 3.11 standard library only).

Subcommands (each prints one "RESULT key=value ..." line per measurement,
plus "DETAIL ..." lines with every request, for the raw log):

  burst   open --clients keep-alive connections, then in each of --rounds
          rounds send one GET per connection at the same moment and time
          each response (time to first byte and to the end of the body).
          With --fresh every round uses its own URL (<path>-r<round>), so
          each round meets a cold key; without it all rounds use <path>.
          After each round the origin's request count for the URL is read.
  stale   warm <path> with one request, wait until it has been expired for
          --after seconds, then send --count requests back to back on one new
          keep-alive connection and time each; finally wait --settle seconds
          and read the origin's request count.

Times are taken with time.perf_counter(): a request's clock starts right
before its bytes are written to the socket, the first-byte time is the first
data_received() call for its connection (asyncio protocol callbacks, no
stream buffering), the end time when the whole body has arrived.  Bodies are
checked against the origin's deterministic body for the path.
"""

import argparse
import asyncio
import statistics
import time
import urllib.parse
import urllib.request

STATUS_HEADERS = ("cache-status", "x-cache")


def body_for(path: str, size: int) -> bytes:
    seed = (path + "\n").encode()
    return (seed * (size // len(seed) + 1))[:size]


class Response:
    def __init__(self):
        self.t_send = 0.0
        self.t_first = None
        self.t_done = None
        self.status = 0
        self.headers = {}
        self.body = b""
        self.error = None

    def cache_status(self):
        for h in STATUS_HEADERS:
            if h in self.headers:
                return self.headers[h]
        return "-"


class HttpConn(asyncio.Protocol):
    """One HTTP/1.1 keep-alive client connection, one request at a time."""

    def __init__(self):
        self.transport = None
        self.buf = bytearray()
        self.resp = None
        self.fut = None
        self.closed = False
        # parser state
        self.state = "head"
        self.remaining = 0
        self.chunked = False
        self.until_close = False

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self.fut and not self.fut.done():
            if self.resp and self.until_close and self.state == "body":
                self._finish()
            else:
                self.resp.error = f"connection closed ({exc or 'eof'})"
                self.fut.set_result(self.resp)

    def send(self, host: str, path: str) -> "asyncio.Future[Response]":
        loop = asyncio.get_running_loop()
        self.resp = Response()
        self.fut = loop.create_future()
        self.buf.clear()
        self.state = "head"
        self.chunked = False
        self.until_close = False
        req = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: fill-client\r\n\r\n".encode()
        self.resp.t_send = time.perf_counter()
        if self.closed:
            self.resp.error = "connection already closed"
            self.fut.set_result(self.resp)
        else:
            self.transport.write(req)
        return self.fut

    def data_received(self, data):
        now = time.perf_counter()
        r = self.resp
        if r is None or self.fut is None or self.fut.done():
            return  # unsolicited bytes; ignored
        if r.t_first is None:
            r.t_first = now
        self.buf += data
        self._parse()

    def _parse(self):
        r = self.resp
        while not self.fut.done():
            if self.state == "head":
                i = self.buf.find(b"\r\n\r\n")
                if i < 0:
                    return
                head = bytes(self.buf[:i]).decode("latin-1").split("\r\n")
                del self.buf[: i + 4]
                try:
                    r.status = int(head[0].split(" ", 2)[1])
                except (IndexError, ValueError):
                    r.error = f"bad status line {head[0]!r}"
                    self.fut.set_result(r)
                    return
                for line in head[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        r.headers[k.strip().lower()] = v.strip()
                if r.status in (100, 103):
                    r.headers = {}
                    continue
                te = r.headers.get("transfer-encoding", "").lower()
                if "chunked" in te:
                    self.chunked = True
                    self.state = "chunk-size"
                elif "content-length" in r.headers:
                    self.remaining = int(r.headers["content-length"])
                    self.state = "body"
                else:
                    self.until_close = True
                    self.remaining = -1
                    self.state = "body"
                if r.status in (204, 304):
                    self._finish()
                    return
            elif self.state == "body":
                if self.remaining < 0:  # read until close
                    r.body += bytes(self.buf)
                    self.buf.clear()
                    return
                take = min(self.remaining, len(self.buf))
                r.body += bytes(self.buf[:take])
                del self.buf[:take]
                self.remaining -= take
                if self.remaining == 0:
                    self._finish()
                return
            elif self.state == "chunk-size":
                i = self.buf.find(b"\r\n")
                if i < 0:
                    return
                size = int(bytes(self.buf[:i]).split(b";")[0], 16)
                del self.buf[: i + 2]
                if size == 0:
                    self.state = "trailer"
                else:
                    self.remaining = size
                    self.state = "chunk"
            elif self.state == "chunk":
                take = min(self.remaining, len(self.buf))
                r.body += bytes(self.buf[:take])
                del self.buf[:take]
                self.remaining -= take
                if self.remaining:
                    return
                self.state = "chunk-end"
            elif self.state == "chunk-end":
                if len(self.buf) < 2:
                    return
                del self.buf[:2]
                self.state = "chunk-size"
            elif self.state == "trailer":
                i = self.buf.find(b"\r\n")
                if i < 0:
                    return
                line = bytes(self.buf[:i])
                del self.buf[: i + 2]
                if not line:
                    self._finish()
                    return

    def _finish(self):
        self.resp.t_done = time.perf_counter()
        self.fut.set_result(self.resp)


async def connect(host, port):
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(HttpConn, host, port)
    return proto


def origin_count(origin: str, prefix: str) -> int:
    url = f"http://{origin}/__count?prefix={urllib.parse.quote(prefix, safe='')}"
    with urllib.request.urlopen(url, timeout=10) as f:
        return int(f.read().decode().strip())


def check(resp: Response, path: str, size: int):
    if resp.error:
        return resp.error
    if resp.status != 200:
        return f"status {resp.status}"
    if resp.body != body_for(path, size):
        return f"body mismatch ({len(resp.body)} bytes)"
    return None


def ms(x):
    return f"{x * 1000:.1f}"


def kv(**fields):
    return " ".join(f"{k}={v}" for k, v in fields.items())


def short_status(s: str) -> str:
    return s.replace(" ", "")


async def cmd_burst(a):
    conns = await asyncio.gather(*(connect(a.host, a.port) for _ in range(a.clients)))
    all_ttfb = []
    for rnd in range(1, a.rounds + 1):
        path = f"{a.path}-r{rnd}" if a.fresh else a.path
        # Reconnect anything the proxy closed since the last round.
        for i, c in enumerate(conns):
            if c.closed:
                conns[i] = await connect(a.host, a.port)
        futs = [c.send(a.host_header, path) for c in conns]
        spread = conns[-1].resp.t_send - conns[0].resp.t_send
        try:
            resps = await asyncio.wait_for(asyncio.gather(*futs), timeout=a.timeout)
        except asyncio.TimeoutError:
            resps = []
            for c in conns:
                if not c.fut.done():
                    c.resp.error = "timeout"
                resps.append(c.resp)
            for i in range(len(conns)):
                conns[i].transport.close()
                conns[i] = await connect(a.host, a.port)
        errors = []
        ttfb, total, statuses = [], [], {}
        for r in resps:
            e = check(r, path, a.body_size)
            if e:
                errors.append(e)
                continue
            ttfb.append(r.t_first - r.t_send)
            total.append(r.t_done - r.t_send)
            s = short_status(r.cache_status())
            statuses[s] = statuses.get(s, 0) + 1
        all_ttfb += ttfb
        # Let a detached refresh or late fill show up in the count.
        await asyncio.sleep(a.settle)
        count = origin_count(a.origin, path)
        after = "-"
        if a.check_hit:
            r = await conns[0].send(a.host_header, path)
            after = short_status(r.cache_status()) if not check(r, path, a.body_size) else "error"
        for r in resps:
            if not r.error and r.t_first is not None:
                print("DETAIL", kv(round=rnd, ttfb_ms=ms(r.t_first - r.t_send), total_ms=ms(r.t_done - r.t_send),
                                  status=short_status(r.cache_status())))
        print("ROUND", kv(
            round=rnd,
            path=path,
            ok=len(ttfb),
            errors=len(errors),
            p50_ttfb_ms=ms(statistics.median(ttfb)) if ttfb else "nan",
            max_ttfb_ms=ms(max(ttfb)) if ttfb else "nan",
            min_ttfb_ms=ms(min(ttfb)) if ttfb else "nan",
            max_total_ms=ms(max(total)) if total else "nan",
            send_spread_ms=ms(spread),
            origin=count,
            after=after,
            statuses="|".join(f"{k}*{v}" for k, v in sorted(statuses.items())) or "-",
            first_error=(errors[0].replace(" ", "_") if errors else "-"),
        ), flush=True)
        if a.pause:
            await asyncio.sleep(a.pause)
    for c in conns:
        c.transport.close()


async def cmd_stale(a):
    c = await connect(a.host, a.port)
    r = await c.send(a.host_header, a.path)
    e = check(r, a.path, a.body_size)
    if e:
        print("RESULT", kv(error=f"warm-up:{e}".replace(" ", "_")))
        return
    warmed = r.t_done
    warm_ms = ms(r.t_done - r.t_send)
    c.transport.close()
    # Wait until the object is --after seconds past its max-age.
    await asyncio.sleep(max(0.0, a.max_age + a.after - (time.perf_counter() - warmed)))
    c = await connect(a.host, a.port)
    lat, sts, errs = [], [], []
    for i in range(a.count):
        r = await asyncio.wait_for(c.send(a.host_header, a.path), timeout=a.timeout)
        e = check(r, a.path, a.body_size)
        if e:
            errs.append(e)
            lat.append(float("nan"))
        else:
            lat.append(r.t_done - r.t_send)
        sts.append(short_status(r.cache_status()))
        if c.closed and i + 1 < a.count:
            errs.append("proxy closed the keep-alive connection")
            c = await connect(a.host, a.port)
    c.transport.close()
    await asyncio.sleep(a.settle)
    count = origin_count(a.origin, a.path)
    fields = {"warm_ms": warm_ms}
    for i, (l, s) in enumerate(zip(lat, sts), 1):
        fields[f"req{i}_ms"] = ms(l)
        fields[f"req{i}_status"] = s
    fields["origin"] = count
    fields["errors"] = len(errs)
    fields["first_error"] = errs[0].replace(" ", "_") if errs else "-"
    print("RESULT", kv(**fields), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("burst", "stale"):
        p = sub.add_parser(name)
        p.add_argument("--proxy", required=True, help="host:port of the proxy")
        p.add_argument("--origin", required=True, help="host:port of fill_origin.py (for request counts)")
        p.add_argument("--path", required=True)
        p.add_argument("--body-size", type=int, default=4096)
        p.add_argument("--timeout", type=float, default=30.0)
    b = sub.choices["burst"]
    b.add_argument("--clients", type=int, default=10)
    b.add_argument("--rounds", type=int, default=1)
    b.add_argument("--fresh", action="store_true", help="a new URL for every round")
    b.add_argument("--settle", type=float, default=0.05, help="seconds to wait before reading the origin count")
    b.add_argument("--pause", type=float, default=0.2, help="seconds between rounds")
    b.add_argument("--check-hit", action="store_true", help="after each round, fetch the URL once more and report its cache status")
    s = sub.choices["stale"]
    s.add_argument("--max-age", type=float, required=True)
    s.add_argument("--after", type=float, default=0.5, help="seconds past expiry before the measured requests")
    s.add_argument("--count", type=int, default=3)
    s.add_argument("--settle", type=float, default=4.0)
    a = ap.parse_args()
    a.host, port = a.proxy.rsplit(":", 1)
    a.port = int(port)
    a.host_header = a.proxy
    asyncio.run(cmd_burst(a) if a.cmd == "burst" else cmd_stale(a))


if __name__ == "__main__":
    main()
