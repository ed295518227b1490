#!/usr/bin/env python3
"""Import circles between the top-level modules of a crate.

Usage: .ci/import_cycles.py crates/hoard-proxy/src

For each top-level module (a file or a directory beside lib.rs), the
modules its code (comments left out) names as `crate::<module>`, or as
`super::<module>` from a top-level module's file (paths and
`use crate::{...}` lists).
Prints each module's imports, then every circle (a strongly connected set
of more than one module, Tarjan); exits 1 when there is one.
"""
import collections
import os
import re
import sys


def modules(root):
    mods = {}
    for name in sorted(os.listdir(root)):
        if name in ("lib.rs", "main.rs"):
            continue
        path = os.path.join(root, name)
        if name.endswith(".rs"):
            mods.setdefault(name[:-3], []).append(path)
        elif os.path.isdir(path):
            mods.setdefault(name, []).extend(
                os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".rs")
            )
    return mods


def root_path(root, f):
    """How file `f` names the crate root: `crate`, and the `super` chain
    that climbs from the file's module to the root (`super` in a top-level
    module's file, `super::super` one level down, ...)."""
    rel = os.path.relpath(f, root).split(os.sep)
    depth = len(rel) - (1 if rel[-1] == "mod.rs" else 0)
    return ["crate", "::".join(["super"] * depth)] if depth else ["crate"]


def imports(root, mods):
    edges = collections.defaultdict(set)
    for m, files in mods.items():
        for f in files:
            # Code only: a doc comment's link is not an import.
            src = "\n".join(
                line
                for line in open(f, encoding="utf-8").read().split("\n")
                if not line.lstrip().startswith("//")
            )
            named = []
            for path in root_path(root, f):
                p = re.escape(path)
                # `super::super` must not also count as `super` from a
                # deeper file: only a path that does not continue upwards.
                named += re.findall(r"(?<![a-z_:])" + p + r"::(?!super\b)([a-z_0-9]+)", src)
                for group in re.findall(r"(?<![a-z_:])" + p + r"::\{([^}]*)\}", src, re.S):
                    named += re.findall(r"(?:^|,)\s*([a-z_0-9]+)", group)
            edges[m].update(t for t in named if t != m and t in mods)
    return edges


def circles(mods, edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in mods:
        if v not in index:
            visit(v)
    return out


def main():
    root = sys.argv[1]
    mods = modules(root)
    edges = imports(root, mods)
    for m in sorted(mods):
        print(f"{m} -> {' '.join(sorted(edges[m]))}")
    found = circles(mods, edges)
    for c in found:
        print(f"circle of {len(c)}: {' '.join(c)}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
