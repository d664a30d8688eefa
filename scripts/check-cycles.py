#!/usr/bin/env python3
"""No import circle anywhere: in every crate of the workspace (and the
runner's integration tests), between its modules as a reader sees them.

Every file is a module of its own: `a.rs` and `a/mod.rs` are module `a`,
`a/b.rs` is `a::b`, and a folder's `mod.rs` is a module like any other (not
a stand-in for its children). A file depends on each module a path in it
names: `crate::a::b::Item`, `super::b`, `self::c`, or a module it declares
itself (`mod c;` then `c::Item`), resolved to the deepest module the path
reaches, and through re-exports (`pub use b::Item;` in `a` sends a path to
`a::Item` on to `a::b`). What is not a dependency: a `mod` declaration, a
re-export itself (a facade), comments, strings, and `#[cfg(test)]` code (a
test may read anything). A path into one's own module or its descendants
is not an edge either (a file's own children are its inside).

Prints each circle as a chain of modules with a file and line for every
step; exits 1 if there is one. `--self-test` shows it is red on a circle
made on purpose and green without it."""
import os
import re
import sys
import tempfile

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# (name, source root, crate root files)
CRATES = [
    ("runner", "runner/src", ("lib.rs", "main.rs")),
    ("client", "client/src", ("lib.rs",)),
    ("builder", "builder/src", ("lib.rs",)),
    ("sdk", "sdk/src", ("lib.rs",)),
    ("test-support", "tests/support/src", ("lib.rs",)),
    ("bench", "bench/src", ("main.rs",)),
    ("integration tests", "tests/integration", ("main.rs",)),
]

KEYWORDS = {"crate", "super", "self", "Self"}


def strip(text):
    """The code without comments, string and char literals, and
    `#[cfg(test)]` items: what may name a module."""
    out, i, n = [], 0, len(text)
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
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or text.startswith("'\\u{", i):
            j = text.find("'", i + 1)
            while text[j - 1] == "\\" and text[j - 2] != "\\":
                j = text.find("'", j + 1)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    code = "".join(out)
    # #[cfg(test)] items: an attribute, then an item up to its matching brace or `;`
    result, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        if m.start() < i:
            continue
        result.append(code[i:m.start()])
        j = m.end()
        depth = 0
        while j < len(code):
            ch = code[j]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            elif ch == ";" and depth == 0:
                j += 1
                break
            j += 1
        result.append("\n" * code.count("\n", m.start(), j))
        i = j
    result.append(code[i:])
    return "".join(result)


def expand(tree):
    """A use tree (`a::{b, c::{d, e}}`) as its paths."""
    tree = tree.strip()
    m = re.match(r"^(.*?)\{(.*)\}$", tree, re.S)
    if not m:
        return [re.sub(r"\s+as\s+\w+$", "", tree).strip()]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            for tail in expand(p):
                out.append(prefix + tail if tail != "self" else prefix.rstrip(":"))
    return out


class Crate:
    def __init__(self, name, src, roots):
        self.name, self.src = name, os.path.join(REPO, src)
        self.files = {}  # module path (tuple) -> file path
        for folder, dirs, names in os.walk(self.src):
            dirs[:] = [d for d in dirs if d not in ("target", "node_modules")]
            for f in names:
                if not f.endswith(".rs"):
                    continue
                rel = os.path.relpath(os.path.join(folder, f), self.src).split(os.sep)
                if len(rel) == 1 and f in roots:
                    module = ()
                elif f == "mod.rs":
                    module = tuple(rel[:-1])
                else:
                    module = tuple(rel[:-1]) + (f[:-3],)
                self.files.setdefault(module, os.path.join(folder, f))
        self.code = {m: strip(open(p, encoding="utf-8").read()) for m, p in self.files.items()}
        # re-exports: module -> {name: the path it stands for}
        self.reexports = {}
        for m, code in self.code.items():
            names = {}
            for tree in re.findall(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", code):
                for path in expand(tree):
                    segs = path.split("::")
                    names[segs[-1]] = segs
            self.reexports[m] = names

    def declared(self, module):
        """The child modules `module`'s file declares (`mod x;`)."""
        return set(re.findall(r"\bmod\s+(\w+)\s*;", self.code.get(module, "")))

    def resolve(self, module, segs, seen=0):
        """The module a path named in `module` reaches (None: outside the crate)."""
        if not segs:
            return None
        head, rest = segs[0], segs[1:]
        if head == "crate":
            base = ()
        elif head == "self":
            base = module
        elif head == "super":
            base = module[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        elif head in self.declared(module):
            base, rest = module + (head,), rest
        else:
            return None
        # walk down as far as modules go
        while rest and base + (rest[0],) in self.files:
            base, rest = base + (rest[0],), rest[1:]
        # then through a re-export of that module
        if rest and seen < 8:
            target = self.reexports.get(base, {}).get(rest[0])
            if target is not None:
                again = self.resolve(base, target, seen + 1)
                if again is not None:
                    return again
        return base

    def edges(self):
        """module -> {module it depends on: (file, line)}"""
        out = {}
        path_re = re.compile(r"(?<![\w:])((?:crate|super|self|[a-z_]\w*)(?:::\w+)+)")
        for m, code in self.code.items():
            declared = self.declared(m)
            deps = out.setdefault(m, {})
            # what a `use` brings in, its groups expanded (re-exports excluded)
            uses = []
            for um in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
                if um.group(1):
                    continue
                line = code.count("\n", 0, um.start()) + 1
                uses += [(p, line) for p in expand(um.group(2))]
            # paths written in code (outside use statements)
            body = re.sub(r"\b(pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", lambda x: "\n" * x.group(0).count("\n"), code)
            for pm in path_re.finditer(body):
                head = pm.group(1).split("::")[0]
                if head in ("crate", "super", "self") or head in declared:
                    uses.append((pm.group(1), body.count("\n", 0, pm.start()) + 1))
            for path, line in uses:
                target = self.resolve(m, [s for s in path.split("::") if s])
                if target is None or target[:len(m)] == m:
                    continue  # outside the crate, or its own inside
                deps.setdefault(target, (self.files[m], line))
        return out


def cycles(edges):
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def name(crate, module):
    return f"{crate.name}:" + ("::".join(module) or "(root)")


def check(crates):
    status, modules = 0, 0
    for crate in crates:
        modules += len(crate.files)
        edges = crate.edges()
        for cycle in cycles(edges):
            status = 1
            steps = []
            for a, b in zip(cycle, cycle[1:]):
                file, line = edges[a][b]
                steps.append(f"  {name(crate, a)} -> {name(crate, b)}  ({os.path.relpath(file, REPO)}:{line})")
            print(f"import circle in {crate.name}:\n" + "\n".join(steps), file=sys.stderr)
    if status == 0:
        print(f"no import circle among the {modules} modules of {len(crates)} crates")
    return status


def self_test():
    """A circle made on purpose (a sibling file each naming the other, and a
    child naming its folder's mod.rs that names it) is found; without it, none."""
    with tempfile.TemporaryDirectory() as root:
        src = os.path.join(root, "src")
        os.makedirs(os.path.join(src, "flow"))
        files = {
            "lib.rs": "mod flow;\npub use flow::Plan;\n",
            "flow/mod.rs": "mod spec;\nmod batch;\npub use spec::Plan;\npub const RESERVE: u64 = 1;\n",
            "flow/spec.rs": "use super::batch::BatchPlan; // circle\npub struct Plan;\n",
            "flow/batch.rs": "use super::spec::Plan;\nuse super::RESERVE;\npub struct BatchPlan;\n#[cfg(test)]\nmod tests { use crate::flow::spec::Plan; }\n",
        }
        for rel, text in files.items():
            with open(os.path.join(src, rel), "w") as f:
                f.write(text)
        crate = Crate("made on purpose", src, ("lib.rs",))
        red = cycles(crate.edges())
        with open(os.path.join(src, "flow/spec.rs"), "w") as f:
            f.write("pub struct Plan;\n")
        green = cycles(Crate("without it", src, ("lib.rs",)).edges())
    ok = red and not green
    print(f"self-test: the circle made on purpose {'found' if red else 'MISSED'}: {red}; without it: {green or 'none'}")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    crates = [Crate(n, s, r) for n, s, r in CRATES if os.path.isdir(os.path.join(REPO, s))]
    sys.exit(check(crates))
