#!/usr/bin/env python3
"""A client loop for bench/upgrade.sh: HTTP/1.1 GETs for SECONDS seconds
from NEW threads that open a new connection per request and KEEP threads
that reuse one keep-alive connection (a new one after `Connection: close`).
Strict: a request fails on any error (refused, reset, closed before or
in the middle of the response, a status other than 200, a body other than
EXPECTED's length); nothing is retried. Prints one JSON line:
{"requests": N, "errors": E, "new": ..., "keep": ..., "kinds": {...}}.

usage: upgrade_client.py HOST:PORT PATH BODY_LEN SECONDS [NEW] [KEEP]
"""
import json
import socket
import sys
import threading
import time


def read_response(sock, buf):
    """Reads one response; returns (status, body_len, close, rest)."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed before the response" if not buf else "closed in the head")
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    close = False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"connection" and b"close" in value.lower():
            close = True
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed in the body")
        rest += data
    return status, length, close, rest[length:]


def worker(addr, path, body_len, deadline, keep, out):
    ok = 0
    errors = {}
    sock = None
    buf = b""
    close_hdr = b"" if keep else b"Connection: close\r\n"
    req = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: bench\r\n" + close_hdr + b"\r\n"
    while time.monotonic() < deadline:
        try:
            if sock is None:
                sock = socket.create_connection(addr, timeout=10)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buf = b""
            sock.sendall(req)
            status, length, close, buf = read_response(sock, buf)
            if status != 200 or length != body_len:
                raise ValueError("status %d, %d bytes" % (status, length))
            ok += 1
            if close or not keep:
                sock.close()
                sock = None
        except Exception as e:  # every failure counts, by kind
            kind = type(e).__name__ + ": " + str(e).split(" (")[0][:60]
            errors[kind] = errors.get(kind, 0) + 1
            if sock is not None:
                sock.close()
            sock = None
    if sock is not None:
        sock.close()
    out.append((keep, ok, errors))


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    path, body_len, seconds = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    new = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    keep = int(sys.argv[6]) if len(sys.argv) > 6 else 4
    deadline = time.monotonic() + seconds
    out = []
    threads = [
        threading.Thread(target=worker, args=((host, int(port)), path, body_len, deadline, k, out))
        for k in [False] * new + [True] * keep
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kinds = {}
    for _, _, errs in out:
        for k, n in errs.items():
            kinds[k] = kinds.get(k, 0) + n
    errors = sum(kinds.values())
    result = {
        "requests": sum(ok for _, ok, _ in out) + errors,
        "errors": errors,
        "new": sum(ok for k, ok, _ in out if not k),
        "keep": sum(ok for k, ok, _ in out if k),
        "kinds": kinds,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
