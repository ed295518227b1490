#!/usr/bin/env python3
"""Load and checks for bench/soak.sh (Python 3.11 standard library only).

    soak_client.py NODES ADMINS ORIGIN SECONDS OBJECTS THREADS DOWN_FILE

GETs of /o/<id> (Zipf popularity over OBJECTS ids) on random NODES
(host:port,...) for SECONDS with THREADS keep-alive threads, one in ten a
single byte range. Every answer is checked against the origin's functions
(bench/soak_origin.py): a 200 must be the whole body of the version its ETag
names, a 206 exactly those bytes of it. A purge thread bumps five popular
objects at ORIGIN every --purge-every seconds and purges them through a
random member's admin API (ADMINS, in NODES' order); once every member has
acknowledged, an answer for one of them that a request started later
receives from an older version is counted stale.

DOWN_FILE holds the nodes the driver has stopped, killed or frozen (one
host:port a line); a failure on a node listed there when the request started
or ended is counted apart (on_down), not as an error.

Prints one line: "SOAK requests=.. ok=.. errors=.. on_down=.. cut=..
corrupt=.. stale=.. purges=.. purges_acked=.. ranges=..", and the first
few failures on stderr.
"""

import http.client
import itertools
import json
import random
import sys
import threading
import time

PURGE_EVERY = 10.0


def size_of(oid: int) -> int:
    return 1024 + (oid * 2654435761 % (255 * 1024))


def body(oid: int, version: int) -> bytes:
    seed = f"<{oid}.{version}>".encode()
    n = size_of(oid)
    return (seed * (n // len(seed) + 1))[:n]


class Run:
    def __init__(self, nodes, admins, origin, objects, down_file):
        self.nodes, self.admins, self.origin = nodes, dict(zip(nodes, admins)), origin
        self.down_file = down_file
        self.down: set[str] = set()
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(
            "requests ok errors on_down cut corrupt stale purges purges_acked ranges".split(), 0
        )
        self.min_version: dict[int, tuple[int, float]] = {}
        self.reported = 0
        weights = [1.0 / (k + 1) for k in range(objects)]
        self.cum = list(itertools.accumulate(weights))
        self.ids = list(range(objects))

    def count(self, what, detail=None):
        with self.lock:
            self.counts[what] += 1
            if detail and what not in ("ok", "requests", "ranges", "on_down") and self.reported < 20:
                self.reported += 1
                print(f"soak: {time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d} {what}: {detail}", file=sys.stderr, flush=True)

    def watch_down(self, end):
        while time.monotonic() < end + 1:
            try:
                with open(self.down_file) as f:
                    self.down = {l.strip() for l in f if l.strip()}
            except FileNotFoundError:
                self.down = set()
            time.sleep(0.05)

    def one(self, conns, node):
        oid = random.choices(self.ids, cum_weights=self.cum)[0]
        headers = {"Host": "localhost"}
        ranged = random.random() < 0.1
        n = size_of(oid)
        if ranged:
            first = random.randrange(n)
            last = min(n - 1, first + random.randrange(1, 64 * 1024))
            headers["Range"] = f"bytes={first}-{last}"
        started = time.monotonic()
        down_at_start = node in self.down
        c = conns.get(node)
        if c is None:
            host, port = node.rsplit(":", 1)
            c = conns[node] = http.client.HTTPConnection(host, int(port), timeout=15)
        self.count("requests")
        if ranged:
            self.count("ranges")
        try:
            c.request("GET", f"/o/{oid}", headers=headers)
            r = c.getresponse()
            data = r.read()
        except http.client.IncompleteRead as e:
            conns.pop(node, None)
            c.close()
            self.fail("cut", node, down_at_start, f"{node} /o/{oid}: {len(e.partial)} bytes, then cut")
            return
        except Exception as e:  # refused, reset, timeout
            conns.pop(node, None)
            c.close()
            self.fail("errors", node, down_at_start, f"{node} /o/{oid}: {e!r}")
            return
        etag = (r.getheader("etag") or "").strip('"')
        try:
            tag_id, version = (int(x) for x in etag.split("."))
        except ValueError:
            tag_id, version = -1, -1
        if r.status not in (200, 206):
            self.fail("errors", node, down_at_start, f"{node} /o/{oid}: status {r.status}")
            return
        if tag_id != oid:
            self.count("corrupt", f"{node} /o/{oid}: ETag {etag!r}")
            return
        full = body(oid, version)
        if r.status == 200:
            good = data == full
        else:
            cr = r.getheader("content-range") or ""
            try:
                span, total = cr.removeprefix("bytes ").split("/")
                a, b = (int(x) for x in span.split("-"))
                good = int(total) == n and data == full[a : b + 1] and (not ranged or a == first)
            except ValueError:
                good = False
        if not good:
            self.count("corrupt", f"{node} /o/{oid}: {r.status}, {len(data)} bytes not version {version}")
            return
        floor = self.min_version.get(oid)
        if floor and started > floor[1] and version < floor[0]:
            self.count("stale", f"{node} /o/{oid}: version {version} after purge to {floor[0]} (Cache-Status: {r.getheader('cache-status')}; Age: {r.getheader('age')})")
            return
        self.count("ok")

    def fail(self, what, node, down_at_start, detail):
        if down_at_start or node in self.down:
            self.count("on_down")
        else:
            self.count(what, detail)

    def load(self, end):
        conns = {}
        while time.monotonic() < end:
            self.one(conns, random.choice(self.nodes))

    def purger(self, end):
        host, port = self.origin.rsplit(":", 1)
        while time.monotonic() + PURGE_EVERY < end:
            time.sleep(PURGE_EVERY)
            ids = random.sample(range(min(50, len(self.ids))), 5)
            try:
                o = http.client.HTTPConnection(host, int(port), timeout=5)
                o.request("GET", "/__bump?ids=" + ",".join(map(str, ids)))
                versions = dict(
                    (int(k), int(v)) for k, v in (l.split("=") for l in o.getresponse().read().decode().split())
                )
                o.close()
            except Exception as e:
                print(f"soak: origin bump failed: {e!r}", file=sys.stderr)
                continue
            live = [n for n in self.nodes if n not in self.down]
            admin = self.admins[random.choice(live)]
            ah, ap = admin.rsplit(":", 1)
            for oid in ids:
                self.count("purges")
                try:
                    a = http.client.HTTPConnection(ah, int(ap), timeout=15)
                    a.request(
                        "POST", "/purge", body=json.dumps({"url": f"http://localhost/o/{oid}"}),
                        headers={"Content-Type": "application/json"},
                    )
                    answer = json.loads(a.getresponse().read())
                    a.close()
                except Exception as e:
                    print(f"soak: purge through {admin} failed: {e!r}", file=sys.stderr)
                    continue
                nodes = answer.get("nodes", {})
                if nodes and all(v == "acked" for v in nodes.values()):
                    self.count("purges_acked")
                    self.min_version[oid] = (versions[oid], time.monotonic())


def main():
    nodes, admins, origin = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3]
    seconds, objects, threads = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    run = Run(nodes, admins, origin, objects, sys.argv[7])
    end = time.monotonic() + seconds
    workers = [threading.Thread(target=run.watch_down, args=(end,), daemon=True)]
    workers += [threading.Thread(target=run.load, args=(end,)) for _ in range(threads)]
    workers.append(threading.Thread(target=run.purger, args=(end,)))
    for t in workers:
        t.start()
    for t in workers[1:]:
        t.join()
    print("SOAK " + " ".join(f"{k}={v}" for k, v in run.counts.items()), flush=True)


if __name__ == "__main__":
    main()
