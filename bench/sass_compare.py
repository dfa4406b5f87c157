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

_FUNC = re.compile(r"^\s*Function : (\S+)")
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*/\*")
_REG = re.compile(r"\b(U?R\d+|U?P\d+)\b")


def functions(obj):
    text = subprocess.run(["cuobjdump", "-sass", obj], check=True, capture_output=True, text=True).stdout
    out, name = {}, None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = _INSN.search(line)
        if name and m:
            out[name].append(m.group(1).rstrip(" ;"))
    return out


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
