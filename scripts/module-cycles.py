#!/usr/bin/env python3
"""Import cycles between the modules of one Rust crate.

Usage: scripts/module-cycles.py CRATE_SRC_DIR [--facade MODULE[:ALLOWED,...]]... [--edges]

Reads every .rs file under the directory (src/a.rs and src/a/mod.rs are module `a`,
src/a/b.rs is `a::b`), drops comments, string literals and `#[cfg(test)]` items (a test may
borrow fixtures from anywhere), and takes an edge A -> B for every path that names B from A:
`crate::B...`, `super::...` (the parent, or the sibling it names) and a bare `B::` where A
declares `mod B`. Prints the strongly connected components with more than one module, each
with the names that tie it, and exits 1 if there is one. `--facade M`: also fails when a module
other than lib.rs uses M (the rule that helpers import leaf modules, never the facade);
`--facade M:A,B` lets modules A and B use it too.
`--edges` prints every module's imports, lowest layer first.
"""

import os
import re
import sys


def strip(text):
    """Drops comments and string/char literals, keeping line structure."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not re.match(r"\w", text[i - 1:i] or " "):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or (
            c == "'" and re.match(r"'\\[xu]", text[i:i + 3])
        ):
            j = text.find("'", i + 2)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_items(text):
    """Removes each `#[cfg(test)]` item (a braced block or a single `;`-ended item)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]", text)
        if not m:
            return text
        j = m.end()
        while j < len(text) and text[j] not in "{;":
            j += 1
        if j < len(text) and text[j] == "{":
            depth = 0
            k = j
            while k < len(text):
                if text[k] == "{":
                    depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            text = text[: m.start()] + text[k + 1 :]
        else:
            text = text[: m.start()] + text[j + 1 :]


def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                name = "lib"
            else:
                name = "::".join(rel)
            mods[name] = path
    return mods


def resolve(mods, parts):
    """The longest known module named by the path `parts`."""
    for k in range(len(parts), 0, -1):
        name = "::".join(parts[:k])
        if name in mods:
            return name
    return None


def reexports(text):
    """What the crate root hands on: `pub use m::{A, B}` and `pub use m::A`, by item name."""
    out = {}
    for m in re.finditer(r"\bpub\s+use\s+([\w:]+)::\{([^}]*)\}", text):
        for item in m.group(2).split(","):
            item = item.strip().split(" as ")[-1].strip()
            if item:
                out[item] = m.group(1)
    for m in re.finditer(r"\bpub\s+use\s+([\w:]+)::(\w+)\s*;", text):
        out[m.group(2)] = m.group(1)
    return out


def edges_of(name, text, mods, roots):
    found = {}
    here = [] if name == "lib" else name.split("::")
    declared = set(re.findall(r"\bmod\s+(\w+)\s*;", text))
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)*)(?:::\{([^}]*)\})?", text):
        parts = m.group(2).split("::")[1:]
        group = [g.strip().split("::")[0] for g in (m.group(3) or "").split(",") if g.strip()]
        if not parts and not group:
            continue  # `pub(crate)`, `self.x`, `&self`
        if m.group(1) == "crate":
            base = []
        elif m.group(1) == "super":
            base = here[:-1]
            while parts and parts[0] == "super":
                base, parts = base[:-1], parts[1:]
        else:
            base = here
        target = resolve(mods, base + parts) or ("lib" if not base else resolve(mods, base))
        used = parts[len(target.split("::")) - len(base):] if target != "lib" else parts
        if target == "lib" and used and used[0] in roots:
            target = resolve(mods, roots[used[0]].removeprefix("crate::").split("::")) or "lib"
        if group and not used:
            # `use crate::m::{A, B}`, or `use crate::{a, b}` naming modules or root items.
            for head in group:
                t = resolve(mods, base + parts + [head]) or target
                if t == "lib" and head in roots:
                    t = resolve(mods, roots[head].removeprefix("crate::").split("::")) or "lib"
                if t and t != name and head != "self":
                    found.setdefault(t, set()).add(head)
                elif t and t != name:
                    found.setdefault(t, set()).add(t)
            continue
        if target and target != name:
            found.setdefault(target, set()).add(used[0] if used else target)
    for sub in declared:
        child = "::".join(here + [sub])
        if child in mods and re.search(r"(?<![:\w])" + sub + r"::", text):
            found.setdefault(child, set()).add(sub)
    return found


def sccs(graph):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv):
    args = argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src, facades, show = args[0], [], False
    i = 1
    while i < len(args):
        if args[i] == "--facade":
            facades.append(args[i + 1])
            i += 2
        elif args[i] == "--edges":
            show, i = True, i + 1
        else:
            print(f"unknown argument {args[i]}", file=sys.stderr)
            return 2
    mods = modules(src)
    with open(mods["lib"], encoding="utf-8") as f:
        roots = reexports(strip(f.read()))
    graph, names = {}, {}
    for name, path in mods.items():
        with open(path, encoding="utf-8") as f:
            text = drop_test_items(strip(f.read()))
        found = edges_of(name, text, mods, roots)
        graph[name] = sorted(found)
        for t, used in found.items():
            names[(name, t)] = sorted(used)
    bad = 0
    comps = sccs(graph)
    if show:
        order = [c for comp in comps for c in comp]
        for v in order:
            print(f"{v} -> {', '.join(graph[v]) or '(nothing)'}")
    for comp in comps:
        if len(comp) > 1:
            bad += 1
            print(f"cycle: {' '.join(comp)}")
            for a in comp:
                for b in graph[a]:
                    if b in comp:
                        print(f"  {a} -> {b}: {', '.join(names[(a, b)])}")
    for fac in facades:
        fac, _, allowed = fac.partition(":")
        allowed = {"lib", *filter(None, allowed.split(","))}
        users = [a for a in graph if fac in graph[a] and a not in allowed]
        if users:
            bad += 1
            print(f"facade {fac} is imported by {', '.join(sorted(users))}")
    if not bad:
        print(f"{len(mods)} modules of {src}: no import cycle")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
