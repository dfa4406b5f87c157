#!/usr/bin/env python3
"""Compare the SASS of two kernel objects function by function.

    bench/sass_compare.py A.o B.o [--rename]

Dumps both with `cuobjdump -sass`, strips addresses and encodings, and prints one line per
kernel: identical, or how many instructions differ (and the counts). --rename maps register
names to their order of first use first, so that a renumbering alone reads as identical.
Exit 0 when every kernel is identical (after --rename if given), 1 otherwise. The tool for
"the split moves no SASS" claims (bench/NOTES.md §39, §40).
"""
import argparse
import difflib
import re
import subprocess
import sys

_FUNC = re.compile(r"Function : (\S+)")
_INSN = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/")
_HI = re.compile(r"\s*/\* (0x[0-9a-f]+) \*/\s*$")
_REG = re.compile(r"\b(U?R\d+|U?P\d+)\b")


def dump(path):
    """`cuobjdump -sass` of an object or cubin; a .sass file is such a dump already."""
    if str(path).endswith(".sass"):
        with open(path) as f:
            return f.read()
    return subprocess.run(["cuobjdump", "-sass", path], check=True, capture_output=True, text=True).stdout


def parse(text):
    """Function -> [(address, instruction, upper encoding word)] of a `cuobjdump -sass` dump
    (each instruction's line, then the line of its encoding's upper word: the control bits)."""
    funcs, cur, pending = {}, None, None
    for line in text.splitlines():
        m = _FUNC.search(line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = _INSN.match(line)
        if m and cur is not None:
            pending = (int(m.group(1), 16), m.group(2))
            continue
        m = _HI.match(line)
        if m and pending is not None:
            cur.append((*pending, int(m.group(1), 16)))
            pending = None
    return funcs


def functions(obj):
    """Function -> its instructions' text, addresses and encodings left out."""
    return {name: [text for _, text, _ in ins] for name, ins in parse(dump(obj)).items()}


def renamed(insns):
    names = {}

    def sub(m):
        r = m.group(1)
        kind = re.match(r"U?[RP]", r).group(0)
        if r in ("RZ", "PT", "URZ", "UPT"):
            return r
        if r not in names:
            names[r] = f"{kind}#{sum(1 for v in names.values() if v.startswith(kind + '#'))}"
        return names[r]

    return [_REG.sub(sub, i) for i in insns]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rename", action="store_true", help="compare after renaming registers by first use")
    args = ap.parse_args()
    fa, fb = functions(args.a), functions(args.b)
    same = True
    for name in sorted(set(fa) | set(fb)):
        if name not in fa or name not in fb:
            print(f"only in {'A' if name in fa else 'B'}: {name}")
            same = False
            continue
        a, b = fa[name], fb[name]
        if args.rename:
            a, b = renamed(a), renamed(b)
        if a == b:
            print(f"identical ({len(a)} insns): {name}")
            continue
        same = False
        changed = sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in
                      difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op != "equal")
        print(f"differs ({len(a)} -> {len(b)} insns, {changed} changed): {name}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
