#!/usr/bin/env python3
"""Regenerate the README's tables from the files behind them, or check that they match.

    python3 bench/readme_tables.py           # rewrite README.md's generated blocks
    python3 bench/readme_tables.py --check   # exit 1 if README.md differs (tests/test_readme.py)

Each block sits between `<!-- NAME:begin -->` and `<!-- NAME:end -->` and is rendered from
one source: `results` from a bench/run.py CSV, `build` from bench/results/build_*.json
(bench/build_report.sh). No number in README is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.report import read_csv  # noqa: E402

README = ROOT / "README.md"
RESULTS_CSV = ROOT / "bench" / "results" / "fa3_nvidia-h200_bf16.csv"
BUILD_GLOB = "build_*.json"
RESULT_SEQS = (1024, 4096, 16384)


def results_block(path: Path = RESULTS_CSV) -> str:
    header, rows = read_csv(path)
    cell = {(r["d"], r["causal"], r["s"]): r for r in rows}
    lines = [
        f"{header['gpu']}, {header['dtype']}, TFLOP/s of ours, and ours / FlashAttention-3 (its `fa3_fwd` "
        f"kernels) and ours / SDPA cuDNN, on FlashAttention-3's grid (16k tokens, hidden 2048; "
        f"`{path.relative_to(ROOT)}`)",
        "",
        "| d | causal | " + " | ".join(f"s = {s // 1024}k" for s in RESULT_SEQS) + " |",
        "|---|---|" + "---|" * len(RESULT_SEQS),
    ]
    for d in sorted({k[0] for k in cell}):
        for causal in (False, True):
            cells = []
            for s in RESULT_SEQS:
                r = cell[(d, causal, s)]
                ours, fa3, cudnn = (float(r[f"{who}_tflops"]) for who in ("ours", "fa3", "cudnn"))
                cells.append(f"{ours:.0f} ({ours / fa3:.2f}x FA3, {ours / cudnn:.2f}x cuDNN)")
            lines.append(f"| {d} | {'yes' if causal else 'no'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_block(results: Path = ROOT / "bench" / "results") -> str:
    reports = [json.loads(p.read_text()) for p in sorted(results.glob(BUILD_GLOB))]
    reports.sort(key=lambda r: r["cores"])
    lines = [
        "| machine | cores, memory | command | kernels | wall time | peak memory | bin/fmha.exe + lib/libfmha.so |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        lines.append(
            f"| {r['machine']} | {r['cores']}, {r['mem_gib']:.0f} GiB | `{r['command']}` | {r['kernels']} | "
            f"{r['wall_s'] / 60:.1f} min | {r['peak_mem_gib']:.1f} GiB | {r['exe_mib'] + r.get('lib_mib', 0.0):.0f} MiB |"
        )
    return "\n".join(lines)


BLOCKS = {"results": results_block, "build": build_block}


def render(text: str) -> str:
    for name, make in BLOCKS.items():
        pattern = re.compile(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)", re.DOTALL)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no <!-- {name}:begin --> ... <!-- {name}:end --> block")
        text = pattern.sub(lambda m: m.group(1) + make() + "\n" + m.group(2), text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is not up to date")
    args = parser.parse_args(argv)
    text = README.read_text()
    fresh = render(text)
    if args.check:
        if fresh != text:
            print("README.md's generated tables are stale: run python3 bench/readme_tables.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
