#!/usr/bin/env python3
"""The built binary's size, and the kernel objects' share of it by family.

    python3 bench/build_size.py [--exe bin/fmha.exe] [--obj obj] [--max-mib N]

Reads the files make wrote (no GPU, no rebuild). --max-mib: exit 1 when bin/fmha.exe is
larger (the issue-29 target for the default build is 300).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def family_of(obj: Path) -> str:
    # fmha_v2_<family>_<dtype>...: the spec name's second token (generator/spec.py).
    return obj.stem.split("_")[2]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", type=Path, default=ROOT / "bin" / "fmha.exe")
    parser.add_argument("--lib", type=Path, default=ROOT / "lib" / "libfmha.so")
    parser.add_argument("--obj", type=Path, default=ROOT / "obj")
    parser.add_argument("--max-mib", type=float, default=None)
    args = parser.parse_args(argv)
    if not args.exe.is_file():
        print(f"{args.exe} not found: build it first (python3 setup.py && make -j)", file=sys.stderr)
        return 2
    by_family = defaultdict(lambda: [0, 0])
    for obj in sorted((args.obj / "generated" / "kernels").glob("fmha_v2_*.o")):
        entry = by_family[family_of(obj)]
        entry[0] += 1
        entry[1] += obj.stat().st_size
    exe = args.exe.stat().st_size
    print(f"{args.exe}: {exe / MIB:.1f} MiB")
    if args.lib.is_file():  # the kernels' home since issue #30
        lib = args.lib.stat().st_size
        print(f"{args.lib}: {lib / MIB:.1f} MiB")
        exe += lib
    for family, (count, size) in sorted(by_family.items()):
        print(f"  {family:<7} {count:4d} kernel objects  {size / MIB:8.1f} MiB")
    if args.max_mib is not None and exe > args.max_mib * MIB:
        print(f"{args.exe} and its library are {exe / MIB:.1f} MiB, over the {args.max_mib:g} MiB limit",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
