#!/usr/bin/env python3
"""Lists the dependency cycles between mysql-lb's modules (the rooms of ARCHITECTURE.md).

An edge A -> B is a path `crate::B...` (or `super::...` resolving to B) written in a file of
module A outside comments. Test code (`tests.rs`, `*_tests.rs`, items under `#[cfg(test)]`) is
left out unless `--tests` is given: a test may reach anywhere. `lib.rs` (the wiring, above every
room) and `main.rs` are no nodes. An inline `mod x { }` counts as its file's module, and a path
written relative to a child module (`latency::tick` in balancer/mod.rs) is not read: both stay
inside one node at depth 1.

`--depth 2` makes each submodule (`balancer::latency`) a node of its own instead of its
top-level module, and leaves out the edges between a module and its own ancestors (a room's root
declares and re-exports its parts and they use its types: that is one room), so what it adds is
the cycles between the parts of one room; cycles between rooms are depth 1's.

`--wings` checks the floors of ARCHITECTURE.md instead: each wing (a folder at the root of src/)
may use only the wings below it in `WINGS`, so a new edge that runs up fails even where it makes
no cycle yet.

Prints each strongly connected component with the edges inside it (the ones to cut), then
`no cycles` or the count; exits 1 when there is a cycle, so `scripts/test.sh` can run it.
"""

import argparse
import pathlib
import re
import sys

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{)?")


# The wings bottom up: each may use the ones before it, never one after it.
WINGS = ["wire", "config", "telemetry", "net", "backends", "proxy", "tools", "control"]


def wing_violations(edges: dict[str, set[str]]) -> list[str]:
    """The depth-1 edges that run up the floors of `WINGS` (or touch a wing it does not list)."""
    out = []
    for a in sorted(edges):
        for b in sorted(edges[a]):
            if a not in WINGS or b not in WINGS:
                out.append(f"  {a} -> {b}: not a wing of WINGS")
            elif WINGS.index(b) > WINGS.index(a):
                out.append(f"  {a} -> {b}: runs up ({b} is above {a})")
    return out


def module_of(src: pathlib.Path, file: pathlib.Path) -> list[str]:
    """The module path a source file defines: src/a/b.rs and src/a/b/mod.rs are ["a", "b"]."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return parts


def strip_test_items(lines: list[str]) -> list[str]:
    """Drops every item that follows a `#[cfg(test)]` attribute, and comment lines."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#[cfg(test)]"):
            i += 1
            depth, opened = 0, False
            while i < len(lines):
                text = lines[i]
                depth += text.count("{") - text.count("}")
                opened = opened or "{" in text
                i += 1
                if (opened and depth <= 0) or (not opened and text.rstrip().endswith(";")):
                    break
            continue
        out.append(lines[i])
        i += 1
    return out


def close_brace(text: str, start: int) -> int:
    depth = 0
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text)


def split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def expand(prefix: list[str], body: str) -> list[list[str]]:
    """`a::{b, c::{d, e}}` as paths: [a, b], [a, c, d], [a, c, e]."""
    paths = []
    for item in split_top(body):
        item = item.split(" as ")[0].strip()
        if "{" in item:
            head, rest = item.split("{", 1)
            head_parts = [p for p in head.split("::") if p]
            paths += expand(prefix + head_parts, rest[: rest.rfind("}")])
        else:
            paths.append(prefix + [p for p in item.split("::") if p and p != "self"])
    return paths


def paths_in(text: str) -> list[list[str]]:
    """Every crate-relative path written in `text`, `{}` groups expanded, first word kept."""
    found = []
    for m in PATH_RE.finditer(text):
        head = [m.group(1)] + [p for p in m.group(2).split("::") if p]
        if m.group(3):
            brace = m.end() - 1
            found += expand(head, text[brace + 1 : close_brace(text, brace)])
        else:
            found.append(head)
    return found


def resolve(path: list[str], here: list[str]) -> list[str] | None:
    """A written path as an absolute module path, or None when it leaves the crate."""
    if path[0] == "crate":
        return path[1:]
    base = list(here)
    # `super` in src/a/b.rs and in src/a/b/mod.rs alike is a: both define module a::b.
    rest = path
    if rest[0] == "self":
        rest = rest[1:]
    else:
        while rest and rest[0] == "super":
            if not base:
                return None
            base.pop()
            rest = rest[1:]
    return base + rest


def node_of(path: list[str], modules: set[tuple[str, ...]], depth: int) -> str | None:
    for n in range(min(depth, len(path)), 0, -1):
        if tuple(path[:n]) in modules:
            return "::".join(path[:n])
    return None


def related(a: str, b: str) -> bool:
    """Whether one of two nodes is the other or contains it."""
    return a == b or a.startswith(b + "::") or b.startswith(a + "::")


def graph(src: pathlib.Path, depth: int, tests: bool) -> dict[str, set[str]]:
    files = sorted(src.rglob("*.rs"))
    modules = {tuple(module_of(src, f)) for f in files}
    modules.discard(())
    edges: dict[str, set[str]] = {}
    for file in files:
        if file.name == "main.rs" and file.parent == src:
            continue
        here = module_of(src, file)
        if not here:
            continue  # lib.rs: the wiring, above every room
        if not tests and (file.name == "tests.rs" or file.name.endswith("_tests.rs")):
            continue
        lines = file.read_text().splitlines()
        if not tests:
            lines = strip_test_items(lines)
        code = "\n".join(l for l in lines if not l.lstrip().startswith("//"))
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', code)
        me = node_of(here, modules, depth)
        if me is None:
            continue
        edges.setdefault(me, set())
        for written in paths_in(code):
            target = resolve(written, here)
            if target is None:
                continue
            other = node_of(target, modules, depth)
            if other and not related(me, other):
                edges[me].add(other)
    return edges


def sccs(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(out)


def layers(edges: dict[str, set[str]]) -> list[list[str]]:
    """The nodes of an acyclic graph by height: each only depends on lower layers."""
    height: dict[str, int] = {}

    def of(v: str) -> int:
        if v not in height:
            height[v] = 1 + max((of(w) for w in edges.get(v, ())), default=-1)
        return height[v]

    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    out: list[list[str]] = []
    for v in nodes:
        h = of(v)
        out.extend([] for _ in range(h + 1 - len(out)))
        out[h].append(v)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", default=pathlib.Path(__file__).resolve().parent.parent / "src")
    parser.add_argument("--depth", type=int, default=1, help="module path length of a node")
    parser.add_argument("--tests", action="store_true", help="count test code's edges too")
    parser.add_argument("--edges", action="store_true", help="print every edge first")
    parser.add_argument(
        "--layers", action="store_true", help="without cycles, print the modules bottom up"
    )
    parser.add_argument(
        "--wings", action="store_true", help="check that each wing uses only those below it"
    )
    args = parser.parse_args()
    if args.wings:
        bad = wing_violations(graph(pathlib.Path(args.src), 1, args.tests))
        print("\n".join(["edges against the floors:"] + bad) if bad else "wings in order")
        return 1 if bad else 0
    edges = graph(pathlib.Path(args.src), args.depth, args.tests)
    if args.edges:
        for a in sorted(edges):
            print(f"{a} -> {', '.join(sorted(edges[a])) or '-'}")
    comps = sccs(edges)
    for comp in comps:
        members = set(comp)
        print(f"cycle among {{{', '.join(comp)}}}:")
        for a in comp:
            for b in sorted(edges.get(a, ()) & members):
                back = " (both ways)" if a in edges.get(b, ()) else ""
                print(f"  {a} -> {b}{back}")
    if args.layers and not comps:
        for i, layer in enumerate(layers(edges)):
            print(f"layer {i}: {', '.join(layer)}")
    print(f"{len(comps)} cycle(s)" if comps else "no cycles")
    return 1 if comps else 0


if __name__ == "__main__":
    sys.exit(main())
