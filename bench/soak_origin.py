#!/usr/bin/env python3
"""Origin for bench/soak.sh (Python 3.11 standard library only).

An HTTP/1.1 keep-alive server on 127.0.0.1 holding --objects objects whose
content changes when they are bumped:

    /o/<id>            the object's current version: a body of size_of(id)
                       bytes (1 KiB to 256 KiB) that is body(id, version)
                       (bench/soak_client.py has the same functions), a
                       strong ETag "<id>.<version>", Cache-Control:
                       max-age=--max-age, Accept-Ranges: bytes; a single
                       `Range: bytes=A-B`, `A-` or `-N` gets a 206, and
                       `If-None-Match` of the current ETag a 304
    /__bump?ids=1,2    each named object's version + 1; answers the new
                       versions as "id=version" lines (not counted)
    /__stats           "requests=<n> objects=<ids ever fetched> versions=<(id,
                       version) pairs ever fetched>" (not counted)
"""

import argparse
import asyncio
import re
import sys
import urllib.parse

VERSIONS: dict[int, int] = {}
STATS = {"requests": 0}
FETCHED: set[tuple[int, int]] = set()
RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def size_of(oid: int) -> int:
    """1 KiB to 256 KiB, a fixed function of the id."""
    return 1024 + (oid * 2654435761 % (255 * 1024))


def body(oid: int, version: int) -> bytes:
    seed = f"<{oid}.{version}>".encode()
    n = size_of(oid)
    return (seed * (n // len(seed) + 1))[:n]


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
            url = urllib.parse.urlsplit(target)
            extra = ""
            status = "200 OK"
            if url.path == "/__bump":
                ids = [int(x) for x in urllib.parse.parse_qs(url.query)["ids"][0].split(",")]
                for oid in ids:
                    VERSIONS[oid] = VERSIONS.get(oid, 0) + 1
                payload = "".join(f"{i}={VERSIONS[i]}\n" for i in ids).encode()
            elif url.path == "/__stats":
                objects = len({i for i, _ in FETCHED})
                payload = f"requests={STATS['requests']} objects={objects} versions={len(FETCHED)}\n".encode()
            elif url.path.startswith("/o/"):
                STATS["requests"] += 1
                oid = int(url.path[3:])
                version = VERSIONS.get(oid, 0)
                FETCHED.add((oid, version))
                etag = f'"{oid}.{version}"'
                full = body(oid, version)
                extra = (
                    f"ETag: {etag}\r\nCache-Control: max-age={ARGS.max_age}\r\n"
                    "Accept-Ranges: bytes\r\nLast-Modified: Mon, 01 Dec 2025 10:00:00 GMT\r\n"
                )
                payload = full
                if headers.get("if-none-match") == etag:
                    status, payload = "304 Not Modified", b""
                elif (m := RANGE.match(headers.get("range", ""))) and (
                    headers.get("if-range") in (None, etag)
                ):
                    a, b = m.group(1), m.group(2)
                    n = len(full)
                    if a == "":
                        first, last = max(0, n - int(b)), n - 1
                    else:
                        first, last = int(a), min(n - 1, int(b) if b else n - 1)
                    if first < n and first <= last:
                        status = "206 Partial Content"
                        extra += f"Content-Range: bytes {first}-{last}/{n}\r\n"
                        payload = full[first : last + 1]
                    else:
                        status, payload = "416 Range Not Satisfiable", b""
                        extra += f"Content-Range: bytes */{n}\r\n"
            else:
                status, payload = "404 Not Found", b""
            length = "" if status.startswith("304") else f"Content-Length: {len(payload)}\r\n"
            writer.write(f"HTTP/1.1 {status}\r\n{length}{extra}\r\n".encode())
            if method != "HEAD":
                writer.write(payload)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", ARGS.port, limit=1 << 20, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--max-age", type=int, default=60)
    ARGS = p.parse_args()
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
