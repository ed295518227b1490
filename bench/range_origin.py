#!/usr/bin/env python3
"""Paced origin for bench/range.sh (Python 3.11 standard library only).

An HTTP/1.1 keep-alive server on 127.0.0.1 that serves large objects at a
fixed rate per connection, honouring single byte ranges:

    /obj/<size>/<name>   <size> bytes (see data()), Cache-Control: max-age=3600,
                         a strong ETag, Last-Modified, Accept-Ranges: bytes;
                         `Range: bytes=A-B`, `A-` or `-N` gets a 206
    /__stats             "requests=<n> bytes=<body bytes written>" (not counted)
    /__reset             sets both to 0

Bodies are written in 16 KiB pieces, each connection at --rate bytes per
second; `bytes` counts what was written, so a proxy that hangs up early is
charged only for what it read.
"""

import argparse
import asyncio
import re
import sys

PERIOD = 65521  # a prime: no slice or block size lines up with the pattern
PATTERN = bytes((k * 7 + k // 251) % 251 for k in range(PERIOD)) * 2
STATS = {"requests": 0, "bytes": 0}
LAST_MODIFIED = "Mon, 01 Dec 2025 10:00:00 GMT"


def data(offset: int, n: int) -> bytes:
    """Bytes offset..offset+n of every object (bench/range_client.py has the same)."""
    out = bytearray()
    while n > 0:
        at = offset % PERIOD
        take = min(n, PERIOD - at)
        out += PATTERN[at : at + take]
        offset += take
        n -= take
    return bytes(out)


def parse_range(value: str, size: int):
    m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", value or "")
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    a, b = m.group(1), m.group(2)
    if a == "":
        n = min(int(b), size)
        return size - n, size - 1
    first = int(a)
    last = min(int(b), size - 1) if b else size - 1
    if first >= size or first > last:
        return "unsatisfiable"
    return first, last


async def send_paced(writer: asyncio.StreamWriter, offset: int, n: int, rate: int):
    loop = asyncio.get_running_loop()
    start = loop.time()
    sent = 0
    while sent < n:
        piece = min(16384, n - sent)
        writer.write(data(offset + sent, piece))
        await writer.drain()
        sent += piece
        STATS["bytes"] += piece
        due = start + sent / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)


async def handle(reader, writer, rate):
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            fields = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.strip()
            if target == "/__stats":
                body = f"requests={STATS['requests']} bytes={STATS['bytes']}\n".encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
                continue
            if target == "/__reset":
                STATS["requests"] = 0
                STATS["bytes"] = 0
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                await writer.drain()
                continue
            STATS["requests"] += 1
            m = re.fullmatch(r"/obj/(\d+)/[\w.-]+", target)
            if not m:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                continue
            size = int(m.group(1))
            common = (
                "Cache-Control: max-age=3600\r\n"
                f'ETag: "{target}-v1"\r\n'
                f"Last-Modified: {LAST_MODIFIED}\r\n"
                "Accept-Ranges: bytes\r\n"
                "Content-Type: application/octet-stream\r\n"
            )
            r = parse_range(fields.get("range"), size) if "range" in fields else None
            if r == "unsatisfiable":
                writer.write(
                    f"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{size}\r\n"
                    "Content-Length: 0\r\n\r\n".encode()
                )
                await writer.drain()
                continue
            if r is None:
                first, last, status = 0, size - 1, "200 OK"
                extra = ""
            else:
                first, last = r
                status = "206 Partial Content"
                extra = f"Content-Range: bytes {first}-{last}/{size}\r\n"
            n = last - first + 1
            writer.write(f"HTTP/1.1 {status}\r\n{common}{extra}Content-Length: {n}\r\n\r\n".encode())
            if method != "HEAD":
                await send_paced(writer, first, n, rate)
            else:
                await writer.drain()
    except ConnectionError:
        return
    finally:
        writer.close()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rate", type=int, default=1_000_000, help="bytes per second per connection")
    args = ap.parse_args()
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, args.rate), "127.0.0.1", args.port, limit=1 << 16
    )
    print(f"range origin on 127.0.0.1:{args.port}, {args.rate} B/s per connection", file=sys.stderr)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
