#!/usr/bin/env python3
"""Client for bench/cluster.sh (Python 3.11 standard library only).

    spread NODES OBJECTS REQUESTS PREFIX
        REQUESTS GETs of PREFIX<i> (i < OBJECTS, each object at least once,
        the rest random), each to a random node of NODES (host:port,...),
        with 16 threads and keep-alive; prints "SPREAD ok=.. bad=..".
    purge ADMIN COUNT
        COUNT admin URL purges one after another; prints the p50/p99/max
        time to the answer in ms and how many answers named every member
        acked: "PURGE p50_ms=.. p99_ms=.. max_ms=.. all_acked=.. n=..".
    load NODES SECONDS PREFIX
        unique URLs (every one a miss) on NODES for SECONDS with 8 threads;
        prints "LOAD ok=.. bad=.." (bad: any error or non-200).
    hits NODES SECONDS PREFIX OBJECTS
        GETs of PREFIX<i> (i < OBJECTS, random) on random NODES for SECONDS
        with 8 threads; prints "HITS ok=.. bad=.. hit=.." (hit: the node's
        own Cache-Status entry, the last one, says hit).
"""

import http.client
import json
import random
import sys
import threading
import time


def conn(node):
    host, port = node.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=10)


def get_hit(conns, node, path):
    """GET path on node; (200?, this node's Cache-Status entry says hit?)."""
    c = conns.get(node) or conn(node)
    conns[node] = c
    try:
        c.request("GET", path, headers={"Host": "localhost"})
        r = c.getresponse()
        r.read()
        status = r.getheader("cache-status") or ""
        own = status.split(",")[-1]
        return r.status == 200, "; hit" in own
    except Exception:
        conns.pop(node, None)
        return False, False


def get(conns, node, path):
    return get_hit(conns, node, path)[0]


def spread(nodes, objects, requests, prefix):
    paths = [f"{prefix}{i}" for i in range(objects)]
    work = paths + [random.choice(paths) for _ in range(requests - objects)]
    random.shuffle(work)
    lock = threading.Lock()
    res = {"ok": 0, "bad": 0}

    def run(chunk):
        conns = {}
        for p in chunk:
            ok = get(conns, random.choice(nodes), p)
            with lock:
                res["ok" if ok else "bad"] += 1

    threads = [threading.Thread(target=run, args=(work[i::16],)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"SPREAD ok={res['ok']} bad={res['bad']}", flush=True)


def purge(admin, count):
    c = conn(admin)
    times, all_acked = [], 0
    for i in range(count):
        body = json.dumps({"url": f"http://localhost/purge-bench/{i}"})
        t0 = time.perf_counter()
        c.request("POST", "/purge", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        answer = json.loads(r.read())
        times.append((time.perf_counter() - t0) * 1000)
        if all(v == "acked" for v in answer.get("nodes", {}).values()):
            all_acked += 1
    times.sort()
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]
    print(f"PURGE p50_ms={pick(0.5):.2f} p99_ms={pick(0.99):.2f} max_ms={times[-1]:.2f} all_acked={all_acked} n={count}", flush=True)


def load(nodes, seconds, prefix):
    end = time.monotonic() + seconds
    lock = threading.Lock()
    res = {"ok": 0, "bad": 0}

    def run(k):
        conns, i = {}, 0
        while time.monotonic() < end:
            ok = get(conns, random.choice(nodes), f"{prefix}{k}-{i}")
            i += 1
            with lock:
                res["ok" if ok else "bad"] += 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"LOAD ok={res['ok']} bad={res['bad']}", flush=True)


def hits(nodes, seconds, prefix, objects):
    end = time.monotonic() + seconds
    lock = threading.Lock()
    res = {"ok": 0, "bad": 0, "hit": 0}

    def run():
        conns = {}
        while time.monotonic() < end:
            ok, hit = get_hit(conns, random.choice(nodes), f"{prefix}{random.randrange(objects)}")
            with lock:
                res["ok" if ok else "bad"] += 1
                res["hit"] += int(hit)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"HITS ok={res['ok']} bad={res['bad']} hit={res['hit']}", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "spread":
        spread(sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    elif mode == "purge":
        purge(sys.argv[2], int(sys.argv[3]))
    elif mode == "hits":
        hits(sys.argv[2].split(","), float(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    elif mode == "load":
        load(sys.argv[2].split(","), float(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"unknown mode {mode}")
