#!/usr/bin/env python3
"""Origin for bench/esi.sh (Python 3.11 standard library only).

An HTTP/1.1 keep-alive server on 127.0.0.1:

    /page/<delay_ms>/<id>       an HTML template with three ESI includes,
                                /frag/<delay_ms>/<id>/1..3 (max-age=3600)
    /frag/<delay_ms>/<id>/<n>   a fragment of --frag-size bytes, answered
                                after delay_ms (max-age=3600)
    /plain/<size>               HTML without markup, <size> bytes (max-age=3600)
    /__count                    requests received so far (not counted)
"""

import argparse
import asyncio
import email.utils

COUNT = 0
FRAG_SIZE = 1024


def template(delay: str, ident: str) -> bytes:
    head = b"<html><head><title>page</title></head><body><h1>Top story</h1>\n"
    parts = [head]
    for n in (1, 2, 3):
        parts.append(f'<div id="p{n}"><esi:include src="/frag/{delay}/{ident}/{n}"/></div>\n'.encode())
    parts.append(b"<footer>end</footer></body></html>\n")
    return b"".join(parts)


def fragment(path: str) -> bytes:
    seed = (path + "\n").encode()
    return (seed * (FRAG_SIZE // len(seed) + 1))[:FRAG_SIZE]


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    global COUNT
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            parts = line.decode("latin-1").split()
            if len(parts) < 2:
                return
            path = parts[1]
            while True:
                h = await reader.readline()
                if h in (b"\r\n", b"\n", b""):
                    break
            seg = path.split("?")[0].strip("/").split("/")
            status, body, ctype = 200, b"", "text/html"
            if seg[0] == "__count":
                body, ctype = str(COUNT).encode(), "text/plain"
            else:
                COUNT += 1
                if seg[0] == "page" and len(seg) == 3:
                    body = template(seg[1], seg[2])
                elif seg[0] == "frag" and len(seg) == 4:
                    await asyncio.sleep(int(seg[1]) / 1000)
                    body = fragment(path)
                elif seg[0] == "plain" and len(seg) == 2:
                    body = (b"<p>plain page</p>\n" * (int(seg[1]) // 18 + 1))[: int(seg[1])]
                else:
                    status, body = 404, b"not found\n"
            head = (
                f"HTTP/1.1 {status} X\r\nDate: {email.utils.formatdate(usegmt=True)}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Cache-Control: max-age=3600\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main() -> None:
    global FRAG_SIZE
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--frag-size", type=int, default=1024)
    a = ap.parse_args()
    FRAG_SIZE = a.frag_size
    server = await asyncio.start_server(handle, "127.0.0.1", a.port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
