"""The import graph of the ``skype`` package, read from its source with ``ast`` (nothing is imported).

Every import counts: module level, inside a function, and under ``TYPE_CHECKING``, since each
one ties two modules together whether or not it runs at load.  Two views:

* **modules**: an edge ``a -> b`` when module ``a`` imports ``b`` (``from pkg import name`` counts
  as an import of ``pkg.name`` when that is a module, else of ``pkg``);
* **rooms**: each top-level module (``skype.api``) and each subpackage (``skype.service``) is one
  room; an edge joins two rooms when a module of one imports a module of the other.  The
  package's ``__init__`` re-exports are left out of this view.

A cycle is a strongly connected component of more than one node (Tarjan); :func:`cycles` lists
the room-level ones and, inside each subpackage, the module-level ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "skype"


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def edges(mods: dict[str, Path]) -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}`` over the package's own modules."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for mod, path in mods.items():
        out = graph.setdefault(mod, {})
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = mod.split(".") if is_package else mod.split(".")[:-1]
                    base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                found = resolve(target) if target.split(".")[0] == PACKAGE.name else None
                if found is not None and found != mod:
                    out.setdefault(found, node.lineno)
    return graph


def room(mod: str, package: Path = PACKAGE) -> str | None:
    """``api`` for ``skype.api``, ``service/`` for ``skype.service.wal``; None for the package root."""
    parts = mod.split(".")
    if len(parts) == 1:
        return None
    return parts[1] + "/" if (package / parts[1]).is_dir() else parts[1]


def strongly_connected(nodes, adj: dict[str, set[str]]) -> list[frozenset[str]]:
    """The components of more than one node (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(adj.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(adj.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(frozenset(comp))
    return found


def cycles(package: Path = PACKAGE) -> list[frozenset[str]]:
    """Room-level cycles (room names) and, inside each subpackage, module-level cycles."""
    mods = modules(package)
    graph = edges(mods)
    rooms: dict[str, set[str]] = {}
    for mod, out in graph.items():
        a = room(mod, package)
        for target in out:
            b = room(target, package)
            if a is not None and b is not None and a != b:
                rooms.setdefault(a, set()).add(b)
    names = sorted({r for m in mods if (r := room(m, package)) is not None})
    found = strongly_connected(names, rooms)
    for name in names:
        if name.endswith("/"):
            inside = {m for m in mods if room(m, package) == name}
            adj = {m: {t for t in graph[m] if t in inside} for m in inside}
            found.extend(strongly_connected(sorted(inside), adj))
    return found
