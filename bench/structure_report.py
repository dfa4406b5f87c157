#!/usr/bin/env python3
"""How big the code's pieces are, at any commit: files by lines, the longest function per area.

    python3 bench/structure_report.py [--rev REV] [--top N]

Reads the tree of REV (default: the working tree) through git, so two commits compare without a
checkout: `--rev e682839` against the default. Function lengths are measured from a definition's
opening brace to its closing one (C++: a line with a parameter list that opens a body at
namespace or class level; Python: a `def` to the next line at its indentation or less), which is
what a reader scrolls through; comments inside count.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = re.compile(r"\.(h|cuh|cu|cpp|py|j2|sh)$|^Makefile$")
# Areas of the tree and the files in each, by path prefix (first match wins).
AREAS = (
    ("kernel: decode", ("src/fmha/kernel/decode",)),
    ("kernel: ws", ("src/fmha/kernel/ws", "src/fmha/kernel/flash_sm90")),
    ("kernel: flash", ("src/fmha/kernel/flash_sm80",)),
    ("kernel: backward", ("src/fmha/kernel/flash_bwd", "src/fmha/kernel/wgmma_bwd")),
    ("kernel: shared layers", ("src/fmha/",)),
    ("driver", ("src/",)),
    ("generator", ("generator/", "setup.py", "templates/")),
    ("GPU tier", ("fmha_test.py", "tests/gpu/")),
    ("CPU tests", ("tests/",)),
    ("bench", ("bench/",)),
)
CONTAINER = re.compile(r"^(template\s*<.*>\s*)?(namespace|struct|class|union|enum)\b|^extern\s+\"C\"")
CONTROL = re.compile(r"^(if|for|while|switch|else|do|return|case|catch|try)\b")


def strip_cpp(text: str) -> list[str]:
    """Lines without comments, strings and preprocessor lines (braces inside them do not count)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out = []
    for line in text.splitlines():
        line = re.sub(r"//.*", "", line)
        line = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', '""', line)
        out.append("" if line.lstrip().startswith("#") else line)
    return out


def files(rev: str | None) -> dict[str, str]:
    if rev is None:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return {n: (ROOT / n).read_text(errors="replace") for n in names.split() if SOURCE.search(Path(n).name)
                and (ROOT / n).is_file()}
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    out = {}
    for n in names:
        if SOURCE.search(Path(n).name):
            out[n] = subprocess.run(["git", "show", f"{rev}:{n}"], cwd=ROOT, capture_output=True, text=True,
                                    errors="replace").stdout
    return out


def area(path: str) -> str | None:
    for name, prefixes in AREAS:
        if any(path.startswith(p) for p in prefixes):
            return name
    return None


def drop_template(header: str) -> str:
    """The header without its leading `template <...>` clauses (their defaults hold '=')."""
    while header.startswith("template"):
        start, depth = header.find("<"), 0
        for i in range(start, len(header)):
            depth += {"<": 1, ">": -1}.get(header[i], 0)
            if depth == 0:
                header = header[i + 1:].lstrip()
                break
        else:
            return header
    return header


def function_name(header: str) -> str:
    """The identifier before the header's last parameter list at parenthesis depth 0, or ''."""
    header = drop_template(header)
    depth, name = 0, ""
    for m in re.finditer(r"(~?\w+)?\s*([()])", header):
        if m.group(2) == "(":
            if depth == 0 and m.group(1) and "=" not in header[:m.start()].replace("operator=", ""):
                name = m.group(1)
            depth += 1
        else:
            depth -= 1
    return name


def cpp_functions(text: str):
    """(name, first line, lines) of each function body not nested in another function: a `{`
    whose header (the text since the last `;`, `{` or `}`) has a parameter list and is not a
    control statement, a lambda or an initializer."""
    header, header_line = "", 0
    stack = []  # per open brace: (kind, name, start line)
    for number, line in enumerate(strip_cpp(text), 1):
        for ch in line + "\n":
            if ch == "{":
                h = " ".join(header.split())
                in_function = any(kind == "function" for kind, _, _ in stack)
                kind, name = "other", ""
                if CONTAINER.match(h):
                    kind = "container"
                elif not in_function and not CONTROL.match(h) and "](" not in h.replace(" ", ""):
                    name = function_name(h)
                    kind = "function" if name else "other"
                stack.append((kind, name, header_line or number))
                header, header_line = "", 0
            elif ch == "}":
                if stack:
                    kind, name, start = stack.pop()
                    if kind == "function" and not any(k == "function" for k, _, _ in stack):
                        yield name, start, number - start + 1
                header, header_line = "", 0
            elif ch == ";":
                header, header_line = "", 0
            else:
                if not header.strip() and not ch.isspace():
                    header_line = number
                header += ch


def py_functions(text: str):
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)def (\w+)", line)
        if not m:
            continue
        indent, j = len(m.group(1)), i + 1
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
            j += 1
        while j > i + 1 and not lines[j - 1].strip():
            j -= 1
        yield m.group(2), i + 1, j - i


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default=None, help="a commit (default: the working tree)")
    parser.add_argument("--top", type=int, default=15, help="largest files to list")
    args = parser.parse_args(argv)
    tree = files(args.rev)
    print(f"tree: {args.rev or 'working tree'}, {len(tree)} source files, "
          f"{sum(t.count(chr(10)) for t in tree.values())} lines")
    print(f"\n| largest files | lines |\n|---|---|")
    for path, text in sorted(tree.items(), key=lambda kv: -kv[1].count("\n"))[:args.top]:
        print(f"| {path} | {text.count(chr(10))} |")
    print("\n| area | files | lines | longest function | its lines |\n|---|---|---|---|---|")
    for name, _ in AREAS:
        members = {p: t for p, t in tree.items() if area(p) == name}
        best = ("-", "", 0)
        for path, text in members.items():
            funcs = py_functions(text) if path.endswith(".py") else cpp_functions(text)
            for fn, line, length in funcs:
                if length > best[2]:
                    best = (fn, f"{path}:{line}", length)
        total = sum(t.count("\n") for t in members.values())
        print(f"| {name} | {len(members)} | {total} | `{best[0]}` ({best[1]}) | {best[2]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
