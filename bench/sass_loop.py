#!/usr/bin/env python3
"""The key loop of wgmma kernels, read statically from their SASS control codes.

    bench/sass_loop.py X.cubin|X.o|X.sass [--name REGEX] [--skip START:END ...] [--top N]

For each kernel (optionally those whose mangled name matches REGEX): the back edges whose body
holds both an SS wgmma (Q K^T: both operands from shared memory) and an RS one (P V: A from
registers), and for the smallest of them the instruction count, the sum of the stall counts
ptxas wrote into the control bits (the fixed-latency waits ncu counts as "wait"), the
instructions that wait on a scoreboard, and the stall cycles by opcode. --skip drops address
ranges (hex, inclusive) from that body: the other side of a branch, to read one path. No GPU
needed; the tool behind bench/NOTES.md §100's comparison with FA3's SASS.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sass_compare import dump, parse  # noqa: E402  (the one SASS reader)

_BACK = re.compile(r"\bBRA (?:\S+, )?0x([0-9a-f]+)")
_SS = re.compile(r"GMMA\.\S+ R\d+, gdesc")
_RS = re.compile(r"GMMA\.\S+ R\d+, R\d+, gdesc")


def stall(hi: int) -> int:
    """Stall cycles of an instruction: bits 41-44 of its encoding's upper word."""
    return (hi >> 41) & 0xF


def waits(hi: int) -> bool:
    """Whether it waits on a scoreboard: the wait mask, bits 52-57 of the upper word."""
    return ((hi >> 52) & 0x3F) != 0


def key_loops(ins: list[tuple[int, str, int]]) -> list[tuple[int, int, list]]:
    """(start, end, body) of each back edge around both an SS and an RS wgmma, smallest first."""
    loops = []
    for addr, text, _ in ins:
        m = _BACK.search(text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        start = int(m.group(1), 16)
        body = [x for x in ins if start <= x[0] <= addr]
        if any(_SS.search(x[1]) for x in body) and any(_RS.search(x[1]) for x in body):
            loops.append((start, addr, body))
    return sorted(loops, key=lambda loop: len(loop[2]))


def opcode(text: str) -> str:
    """The opcode and its first modifier, without a predicate: `FADD.FTZ`, `MUFU.EX2`."""
    op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]
    return ".".join(op.split(".")[:2])


def summary(body: list) -> tuple[int, int, int, collections.Counter, collections.Counter]:
    """Instructions, stall cycles, scoreboard waits, and stall cycles and counts by opcode."""
    cycles, counts = collections.Counter(), collections.Counter()
    for _, text, hi in body:
        cycles[opcode(text)] += stall(hi)
        counts[opcode(text)] += 1
    return len(body), sum(cycles.values()), sum(waits(hi) for _, _, hi in body), cycles, counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--name", default="", help="only kernels whose mangled name matches this regex")
    ap.add_argument("--skip", nargs="*", default=[], help="hex address ranges START:END left out of the loop")
    ap.add_argument("--top", type=int, default=12, help="opcodes shown, by stall cycles")
    args = ap.parse_args(argv)
    skips = [tuple(int(v, 16) for v in s.split(":")) for s in args.skip]
    for name, ins in parse(dump(args.path)).items():
        if args.name and not re.search(args.name, name):
            continue
        loops = key_loops(ins)
        print(name)
        if not loops:
            print("  no key loop")
            continue
        print("  key loops (start, end, instructions):", ", ".join(f"{s:#x}-{e:#x} {len(b)}" for s, e, b in loops))
        body = [x for x in loops[0][2] if not any(a <= x[0] <= b for a, b in skips)]
        n, cycles, scoreboard, by_op, count = summary(body)
        print(f"  smallest: {n} instructions, {cycles} stall cycles, {scoreboard} scoreboard waits")
        print("  " + ", ".join(f"{op} {count[op]}/{c}" for op, c in by_op.most_common(args.top)) + "  (count/stall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
