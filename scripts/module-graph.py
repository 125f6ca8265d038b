#!/usr/bin/env python3
"""Module-dependency summary of a crate: which top-level modules import which, and the
import cycles (strongly connected components) between them.

    python3 scripts/module-graph.py router/src [shard/src ...]
    python3 scripts/module-graph.py --depth 2 router/src   # modules two levels deep

A module is a file or directory under src/ (`commands/find.rs` is `commands::find` at
depth 2 and `commands` at depth 1). An edge A -> B means a file of A names `crate::B`
(in a `use`, or a path in code). `super::` paths are resolved against the file's own
module. Cycles are what a refactor has to break: a module in a cycle cannot be read or
tested without the others in it.
"""

import argparse
import os
import re
import sys

PATH = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\bcrate::\{([^}]*)\}")


def module_of(rel):
    """`commands/find.rs` -> ['commands', 'find']; `lib.rs`/`mod.rs` collapse."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def targets(text, own, modules):
    """The module paths `text` names, resolved to the longest existing module."""
    found = []
    for root, tail in PATH.findall(text):
        names = tail.split("::")[1:]
        if root == "super":
            base = own[:-1]
            while names and names[0] == "super":
                base, names = base[:-1], names[1:]
            names = base + names
        found.append(names)
    for group in GROUP.findall(text):
        for item in group.split(","):
            item = item.strip().split("::")
            if item and item[0]:
                found.append(item)
    for names in found:
        for n in range(len(names), 0, -1):
            if tuple(names[:n]) in modules:
                yield tuple(names[:n])
                break


def graph(src, depth):
    files = {}
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(dirpath, name), src)
                files[rel] = tuple(module_of(rel))
    modules = set(files.values())
    for m in list(modules):
        for n in range(1, len(m)):
            modules.add(m[:n])
    edges = {}
    for rel, own in files.items():
        if not own:
            continue
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            text = strip_comments(f.read())
        a = own[:depth]
        for t in targets(text, list(own), modules):
            b = t[:depth]
            if b and b != a and a[: len(b)] != b and b[: len(a)] != a:
                edges.setdefault(a, set()).add(b)
            elif b and b != a and b[: len(a)] == a:
                pass  # a parent naming its own children is not a dependency between peers
    nodes = {m[:depth] for m in files.values() if m}
    return nodes, edges


def components(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--depth", type=int, default=1)
    p.add_argument("--edges", action="store_true", help="print every edge too")
    p.add_argument("srcs", nargs="+")
    args = p.parse_args()
    for src in args.srcs:
        nodes, edges = graph(src, args.depth)
        name = lambda m: "::".join(m)
        cycles = [c for c in components(nodes, edges) if len(c) > 1]
        n_edges = sum(len(v) for v in edges.values())
        print(f"{src}: {len(nodes)} modules at depth {args.depth}, {n_edges} imports")
        largest = max((len(c) for c in cycles), default=1)
        print(f"  cycles: {len(cycles)}; largest: {largest} modules")
        for c in sorted(cycles, key=len, reverse=True):
            print(f"  - {len(c)}: {', '.join(name(m) for m in c)}")
        if args.edges:
            for a in sorted(edges):
                print(f"  {name(a)} -> {', '.join(sorted(name(b) for b in edges[a]))}")


if __name__ == "__main__":
    main()
