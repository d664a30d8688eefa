#!/usr/bin/env python3
"""No module cycles in runner/src: between the crate's top-level modules
(`crate::X` used in module Y), and between the sibling files of one module
(`super::X` / `crate::M::X` used in `M/Y.rs`). A module's own `mod.rs` is its
parent, not a sibling. Prints each cycle; exits 1 if there is one."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runner", "src")


def code(path):
    """The file without comments (a doc link is not a dependency)."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def files():
    for folder, _, names in os.walk(ROOT):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, ROOT).split(os.sep), path


def cycles(edges):
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


top, inner = {}, {}
modules = {p[0].removesuffix(".rs") for p, _ in files()} - {"lib", "main"}
for parts, path in files():
    if parts[0] in ("lib.rs", "main.rs"):
        continue
    module = parts[0].removesuffix(".rs")
    text = code(path)
    for used in set(re.findall(r"\bcrate::(\w+)", text)) & modules:
        if used != module:
            top.setdefault(module, set()).add(used)
    if len(parts) == 2 and parts[1] != "mod.rs":
        me = parts[1].removesuffix(".rs")
        siblings = {n.removesuffix(".rs") for n in os.listdir(os.path.dirname(path))} - {"mod", me}
        used = set(re.findall(r"\bsuper::(\w+)", text))
        used |= set(re.findall(r"\bcrate::%s::(\w+)" % re.escape(module), text))
        for sibling in used & siblings:
            inner.setdefault(f"{module}/{me}", set()).add(f"{module}/{sibling}")

status = 0
for cycle in cycles(top) + cycles(inner):
    print("module cycle: " + " -> ".join(cycle), file=sys.stderr)
    status = 1
if status == 0:
    print(f"no module cycles among {len(modules)} modules of runner/src and their files")
sys.exit(status)
