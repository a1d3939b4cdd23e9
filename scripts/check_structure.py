#!/usr/bin/env python3
"""Keeps the structure targets that a structure issue set (scripts/test.sh runs this).

Over the non-test Rust code of every crate (src/, without `#[cfg(test)]` items):
  - at most MAX_STRING_ERRORS `Result<_, String>` in the tree (errors are typed);
  - no function longer than MAX_FN_LINES physical lines, from its `fn` line to its closing
    brace, comments and blank lines included;
  - no cycle among the modules of a crate (a module is a file of src/, or a directory with
    its submodules; `lib.rs`/`main.rs` is the crate root and may use any of them).

`--report` prints the longest functions and the module graph's edges instead of failing.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_STRING_ERRORS = 5
MAX_FN_LINES = 120

ROOT = Path(__file__).resolve().parent.parent


def strip_code(text: str) -> str:
    """The text with comments, string and char literals blanked (newlines kept), so that
    braces and words inside them are not taken for code."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # a char literal ('a', '\n', '\u{1F600}', b'x') or a lifetime ('a)
            m = re.compile(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'").match(text, i)
            if m:
                out.append(" " * (m.end() - i))
                i = m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(code: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


TEST_ITEM = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?(mod|fn|impl)\b[^{;]*\{")


def without_tests(code: str) -> str:
    """Blanks `#[cfg(test)]` modules, functions and impls (newlines kept)."""
    while m := TEST_ITEM.search(code):
        end = matching_brace(code, m.end() - 1)
        code = code[: m.start()] + re.sub(r"[^\n]", " ", code[m.start() : end + 1]) + code[end + 1 :]
    return code


@dataclass
class Function:
    path: Path
    line: int
    name: str
    lines: int


FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def functions(path: Path, code: str) -> list[Function]:
    found = []
    impl_of = impls(code)
    for m in FN.finditer(code):
        # the body opens at the first `{` after the signature, unless a `;` ends it first
        # (a trait method's declaration)
        j = m.end()
        depth = 0
        while j < len(code):
            ch = code[j]
            if ch in "(<[":
                depth += 1
            elif ch in ")>]":
                depth -= 1
            elif ch == ";" and depth <= 0:
                j = -1
                break
            elif ch == "{" and depth <= 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        end = matching_brace(code, j)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        owner = next((name for (s, e, name) in impl_of if s < m.start() < e), None)
        name = f"{owner}::{m.group(1)}" if owner else m.group(1)
        found.append(Function(path, first, name, last - first + 1))
    return found


IMPL = re.compile(r"\bimpl\b(\s*<[^{]*?>)?\s+(?:[^{;]*?\bfor\s+)?([A-Za-z_][A-Za-z0-9_]*)[^{;]*\{")


def impls(code: str) -> list[tuple[int, int, str]]:
    return [(m.start(), matching_brace(code, m.end() - 1), m.group(2)) for m in IMPL.finditer(code)]


STRING_ERROR = re.compile(r"Result<[^;{]*?,\s*String\s*>")


TEST_MOD_FILE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")


def crate_sources(crate: Path) -> list[Path]:
    """The crate's source files, without the files of `#[cfg(test)] mod x;` modules."""
    paths = sorted((crate / "src").rglob("*.rs"))
    test_files: set[Path] = set()
    for path in paths:
        here = path.parent if path.name in ("lib.rs", "main.rs", "mod.rs") else path.with_suffix("")
        for name in TEST_MOD_FILE.findall(strip_code(path.read_text())):
            test_files |= {here / f"{name}.rs", here / name / "mod.rs"}
            test_files |= set((here / name).rglob("*.rs"))
    return [p for p in paths if p not in test_files]


def top_module(src: Path, path: Path) -> str | None:
    rel = path.relative_to(src)
    if rel.parts[0] in ("lib.rs", "main.rs"):
        return None
    if len(rel.parts) == 1:
        return rel.stem
    return rel.parts[0]


USE_CRATE = re.compile(r"\bcrate::([A-Za-z_][A-Za-z0-9_]*)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\}", re.S)
USE_SUPER = re.compile(r"\bsuper::([A-Za-z_][A-Za-z0-9_]*)")


def module_edges(crate: Path, codes: dict[Path, str]) -> dict[str, set[str]]:
    src = crate / "src"
    modules = {top_module(src, p) for p in codes} - {None}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for path, code in codes.items():
        me = top_module(src, path)
        if me is None:
            continue
        targets = set(USE_CRATE.findall(code))
        for group in USE_GROUP.findall(code):
            targets |= {t.split("::")[0].strip() for t in group.split(",")}
        # `super::x` from a top-level file names the crate root's x
        if len(path.relative_to(src).parts) == 1:
            targets |= set(USE_SUPER.findall(code))
        elif len(path.relative_to(src).parts) == 2 and path.name != "mod.rs":
            pass  # super:: is the directory module itself
        for t in targets:
            if t in modules and t != me:
                edges[me].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", action="store_true", help="print the figures, fail on nothing")
    ap.add_argument("--root", type=Path, default=ROOT, help="the workspace (default: this one)")
    args = ap.parse_args()
    root = args.root.resolve()

    string_errors: list[str] = []
    long_fns: list[Function] = []
    all_fns: list[Function] = []
    crate_cycles: list[tuple[str, list[str]]] = []
    for crate in sorted((root / "crates").iterdir()):
        if not (crate / "src").is_dir():
            continue
        codes = {}
        for path in crate_sources(crate):
            code = without_tests(strip_code(path.read_text()))
            codes[path] = code
            for m in STRING_ERROR.finditer(code):
                line = code.count("\n", 0, m.start()) + 1
                string_errors.append(f"{path.relative_to(root)}:{line}")
            fns = functions(path.relative_to(root), code)
            all_fns += fns
            long_fns += [f for f in fns if f.lines > MAX_FN_LINES]
        edges = module_edges(crate, codes)
        for c in cycles(edges):
            crate_cycles.append((crate.name, c))
        if args.report:
            for m in sorted(edges):
                if edges[m]:
                    print(f"{crate.name}: {m} -> {', '.join(sorted(edges[m]))}")

    if args.report:
        print(f"\nResult<_, String>: {len(string_errors)}")
        for s in string_errors:
            print(f"  {s}")
        print("\nlongest functions:")
        for f in sorted(all_fns, key=lambda f: -f.lines)[:30]:
            print(f"  {f.lines:4d}  {f.name}  {f.path}:{f.line}")
        print("\nmodule cycles:")
        for crate, c in crate_cycles:
            print(f"  {crate}: {' <-> '.join(c)}")
        return 0

    failed = False
    if len(string_errors) > MAX_STRING_ERRORS:
        failed = True
        print(
            f"structure: {len(string_errors)} `Result<_, String>` in the crates' code, at most "
            f"{MAX_STRING_ERRORS}: give these a typed error:\n  " + "\n  ".join(string_errors),
            file=sys.stderr,
        )
    for f in long_fns:
        failed = True
        print(
            f"structure: {f.path}:{f.line}: `{f.name}` is {f.lines} lines, at most {MAX_FN_LINES}: "
            "split it into steps",
            file=sys.stderr,
        )
    for crate, c in crate_cycles:
        failed = True
        print(
            f"structure: crates/{crate}: modules {', '.join(c)} use each other in a cycle: "
            "move what they share into one module they both use",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
