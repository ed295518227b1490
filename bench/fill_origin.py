#!/usr/bin/env python3
"""Slow origin for bench/fill.sh (Python 3.11 standard library only).

An HTTP/1.1 keep-alive server on 127.0.0.1 whose behaviour is chosen by the
request path:

    /cold/<delay_ms>/<id>     Cache-Control: max-age=3600, answered after delay_ms
    /private/<delay_ms>/<id>  Cache-Control: private, answered after delay_ms
    /stale/<delay_ms>/<id>    Cache-Control: max-age=<--stale-max-age>, after delay_ms
    /micro/<id>               no Cache-Control; an "application" with
                              --micro-workers concurrent workers that each take
                              --micro-ms per request (an asyncio semaphore)
    /__count?prefix=<p>       plain-text number of requests received so far whose
                              path starts with <p> (not counted itself)

Every response carries a Date header (taken when the response is sent), a
Content-Length and a body of --body-size bytes that is a function of the
path (see body_for), so clients can check what they received.

With --etag, cold and stale bodies carry a strong ETag (a function of the
body), and a GET with `Range: bytes=N-` whose If-Range names it (or has no
If-Range) is answered 206 with the rest, as a static file server does.
"""

import argparse
import asyncio
import collections
import email.utils
import sys
import urllib.parse
import zlib

COUNTS: collections.Counter = collections.Counter()


def body_for(path: str, size: int) -> bytes:
    """Deterministic body for a path; bench/fill_client.py has the same function."""
    seed = (path + "\n").encode()
    return (seed * (size // len(seed) + 1))[:size]


class Origin:
    def __init__(self, args):
        self.args = args
        self.micro = asyncio.Semaphore(args.micro_workers)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, version = lines[0].split(" ", 2)
                except ValueError:
                    return
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                clen = int(headers.get("content-length", "0") or 0)
                if clen:
                    await reader.readexactly(clen)
                close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
                status, extra, body = await self.respond(method, target)
                status, extra, body = self.ranged(headers, status, extra, body)
                if method == "HEAD":
                    payload = b""
                else:
                    payload = body
                out = [
                    f"HTTP/1.1 {status}",
                    f"Date: {email.utils.formatdate(usegmt=True)}",
                    "Content-Type: application/octet-stream",
                    f"Content-Length: {len(body)}",
                ]
                out += extra
                if close:
                    out.append("Connection: close")
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + payload)
                await writer.drain()
                if close:
                    return
        except ConnectionError:
            return
        finally:
            writer.close()

    def ranged(self, headers, status, extra, body):
        """A 206 of the rest for `Range: bytes=N-` under a matching If-Range (--etag)."""
        etag = next((h[len("ETag: "):] for h in extra if h.startswith("ETag: ")), None)
        rng = headers.get("range", "")
        if etag is None or status != "200 OK" or not rng.startswith("bytes=") or not rng.endswith("-"):
            return status, extra, body
        if headers.get("if-range", etag) != etag:
            return status, extra, body
        try:
            start = int(rng[len("bytes="):-1])
        except ValueError:
            return status, extra, body
        if start >= len(body):
            return status, extra, body
        extra = extra + [f"Content-Range: bytes {start}-{len(body) - 1}/{len(body)}"]
        return "206 Partial Content", extra, body[start:]

    async def respond(self, method: str, target: str):
        url = urllib.parse.urlsplit(target)
        path = url.path
        if path == "/__count":
            prefix = urllib.parse.parse_qs(url.query).get("prefix", [""])[0]
            n = sum(c for p, c in COUNTS.items() if p.startswith(prefix))
            return "200 OK", ["Cache-Control: no-store"], f"{n}\n".encode()
        COUNTS[path] += 1
        parts = path.split("/")
        kind = parts[1] if len(parts) > 1 else ""
        size = self.args.body_size
        if kind == "micro":
            async with self.micro:
                await asyncio.sleep(self.args.micro_ms / 1000)
            return "200 OK", [], body_for(path, size)
        if kind in ("cold", "private", "stale") and len(parts) >= 4:
            try:
                delay = int(parts[2]) / 1000
            except ValueError:
                return "404 Not Found", ["Cache-Control: no-store"], b"bad delay\n"
            if delay:
                await asyncio.sleep(delay)
            cc = {
                "cold": "max-age=3600",
                "private": "private",
                "stale": f"max-age={self.args.stale_max_age}",
            }[kind]
            body = body_for(path, size)
            extra = [f"Cache-Control: {cc}"]
            if self.args.etag:
                extra.append(f'ETag: "{zlib.crc32(body):08x}-{len(body)}"')
            return "200 OK", extra, body
        return "404 Not Found", ["Cache-Control: no-store"], b"not found\n"


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--body-size", type=int, default=4096)
    ap.add_argument("--stale-max-age", type=int, default=2)
    ap.add_argument("--micro-workers", type=int, default=10)
    ap.add_argument("--micro-ms", type=int, default=200)
    ap.add_argument("--etag", action="store_true", help="strong ETags and Range on cold and stale bodies")
    args = ap.parse_args()
    origin = Origin(args)
    server = await asyncio.start_server(origin.handle, "127.0.0.1", args.port, backlog=1024)
    print(f"origin listening on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
