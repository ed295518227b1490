#!/usr/bin/env python3
"""Client for bench/range.sh: timed range requests, every byte checked.

    range_client.py repeat URL FIRST LAST [--every 0.5] [--for 10]
        one request for bytes FIRST-LAST, then the same range every --every
        seconds for --for seconds (each on its own connection, started on
        schedule whether or not earlier ones finished)
    range_client.py seeks URL SIZE [--seeks 20] [--read 524288]
        a player-like sequence: --seeks seeks to offsets spread over SIZE
        bytes (a fixed pseudo-random order), each reading --read bytes

Prints one JSON line: per request the time to the whole answer in ms.
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

from range_origin import data


def fetch(url: str, first: int, last: int) -> dict:
    u = urllib.parse.urlsplit(url)
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.request("GET", u.path, headers={"Range": f"bytes={first}-{last}"})
    resp = conn.getresponse()
    body = resp.read()
    ms = (time.monotonic() - t0) * 1000
    conn.close()
    ok = resp.status == 206 and body == data(first, last - first + 1)
    return {"ms": round(ms, 1), "status": resp.status, "ok": ok, "cache": resp.getheader("X-Cache") or resp.getheader("Cache-Status")}


def repeat(args):
    results = [None] * (1 + int(args.for_ / args.every))
    start = time.monotonic()

    def one(i):
        delay = start + i * args.every - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        results[i] = fetch(args.url, args.first, args.last)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    later = [r["ms"] for r in results[1:]]
    print(json.dumps({
        "first_ms": results[0]["ms"],
        "later_max_ms": max(later),
        "later_median_ms": sorted(later)[len(later) // 2],
        "all_ok": all(r["ok"] for r in results),
        "results": results,
    }))


def seeks(args):
    x = 12345
    out = []
    for _ in range(args.seeks):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        first = (x >> 20) % (args.size - args.read)
        out.append(fetch(args.url, first, first + args.read - 1))
    ms = [r["ms"] for r in out]
    print(json.dumps({
        "slowest_ms": max(ms),
        "median_ms": sorted(ms)[len(ms) // 2],
        "total_ms": round(sum(ms), 1),
        "all_ok": all(r["ok"] for r in out),
        "results": out,
    }))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("repeat")
    r.add_argument("url")
    r.add_argument("first", type=int)
    r.add_argument("last", type=int)
    r.add_argument("--every", type=float, default=0.5)
    r.add_argument("--for", dest="for_", type=float, default=10.0)
    s = sub.add_parser("seeks")
    s.add_argument("url")
    s.add_argument("size", type=int)
    s.add_argument("--seeks", type=int, default=20)
    s.add_argument("--read", type=int, default=524288)
    args = ap.parse_args()
    {"repeat": repeat, "seeks": seeks}[args.mode](args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
