#!/usr/bin/env python3
"""Fail if the modules of a crate under crates/ depend on each other in a circle.

A module depends on another when its code (comments and `#[cfg(test)]` parts left out)
names it by a `crate::a::b` or `super::a` path. A module naming one of its ancestors or
descendants does not count: a parent declares and re-exports its children, and children
use what their parent holds. Every other circle is reported, one line per circle, and the
exit code is 1.

Usage:
    python3 scripts/check_module_cycles.py      # from anywhere in the repository

Python 3.11, standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r"\b(crate(?:::\w+)+|super(?:::\w+)+)")
COMMENT = re.compile(r"//[^\n]*")
TESTS = re.compile(r"#\[cfg\(test\)\]")

Module = tuple[str, ...]


def module_of(src: Path, file: Path) -> Module:
    parts = file.relative_to(src).with_suffix("").parts
    return parts[:-1] if parts[-1] in ("mod", "lib", "main") else parts


def related(a: Module, b: Module) -> bool:
    """One is an ancestor of the other (or they are the same)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def dependencies(src: Path) -> dict[Module, set[Module]]:
    files = {module_of(src, f): f for f in sorted(src.rglob("*.rs"))}
    graph: dict[Module, set[Module]] = {m: set() for m in files}
    for m, f in files.items():
        code = COMMENT.sub("", TESTS.split(f.read_text(encoding="utf-8"))[0])
        for path in PATH.findall(code):
            parts = path.split("::")
            if parts[0] == "crate":
                base, parts = (), parts[1:]
            else:
                base = m
                while parts and parts[0] == "super":
                    base, parts = base[:-1], parts[1:]
            for k in range(len(parts), -1, -1):
                target = base + tuple(parts[:k])
                if target in files:
                    if not related(m, target):
                        graph[m].add(target)
                    break
    return graph


def circles(graph: dict[Module, set[Module]]) -> list[list[Module]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[Module, int] = {}
    low: dict[Module, int] = {}
    stack: list[Module] = []
    on_stack: set[Module] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main() -> int:
    bad = 0
    for src in sorted((ROOT / "crates").glob("*/src")):
        for c in circles(dependencies(src)):
            bad += 1
            names = ", ".join("::".join(m) or "(root)" for m in c)
            print(f"{src.parent.name}: modules in a circle: {names}")
    if bad:
        return 1
    print("no module circles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
