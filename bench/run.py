#!/usr/bin/env python3
"""bin/fmha.exe against PyTorch SDPA (FlashAttention-2 and cuDNN backends), side by side on
one GPU in one run.

    python3 bench/run.py --suite fa3 [--dtype fp16|fp16-fp32|bf16] [--out bench/results]

Suites (ANCHORS.md): fa3 = FlashAttention-3's grid (16k tokens, hidden 2048, d 64/128/256,
s 512..16k, causal and not); readme = fmha_v2's README problem; decode = s_q = 1 against a
short or long KV cache (a bandwidth problem: compare GB/s).

Every implementation is timed the same way: CUDA events around back-to-back launches after
warm-up ones; FLOP = 2·(d+dv) per (query, key) pair the mask leaves (4·b·h·s²·d, halved
when causal); bytes = Q, K and V once per KV head, and O. Writes
<out>/<suite>_<gpu>_<dtype>.csv and a markdown table beside it, printed last.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # fmha_test.py holds the one parser of fmha.exe's output

NAN = float("nan")
# dtype argument -> (fmha.exe flag, torch dtype name, bytes per element)
DTYPES = {"fp16": ("-fp16", "float16", 2), "fp16-fp32": ("-fp16-fp32", "float16", 2), "bf16": ("-bf16", "bfloat16", 2)}


@dataclass(frozen=True)
class Problem:
    b: int
    h: int
    h_kv: int
    s_q: int
    s: int
    d: int
    causal: bool

    def pairs(self) -> float:
        """(query, key) pairs the mask leaves per (batch, head); causal is bottom-right aligned."""
        if not self.causal:
            return self.s_q * self.s
        return self.s_q * (self.s - self.s_q) + self.s_q * (self.s_q + 1) / 2

    def flop(self) -> float:
        return 4.0 * self.b * self.h * self.d * self.pairs()

    def bytes(self, elt: int) -> float:
        q_and_o = 2 * self.b * self.s_q * self.h * self.d
        k_and_v = 2 * self.b * self.s * self.h_kv * self.d
        return float(elt * (q_and_o + k_and_v))

    def fmha_args(self) -> list[str]:
        args = ["-b", self.b, "-h", self.h, "-d", self.d, "-s", self.s]
        if self.h_kv != self.h:
            args += ["-gqa", self.h_kv]
        if self.s_q != self.s:  # packed QKV needs s_q == s
            args += ["-s-q", self.s_q, "-separate-q-k-v"]
        if self.causal:
            args.append("-causal-mask")
        return [str(a) for a in args]


def suite(name: str) -> tuple[str, list[Problem]]:
    """(metric shown in the table, problems) of a suite."""
    if name == "fa3":
        tokens = 16384
        return "tflops", [Problem(tokens // s, h, h, s, s, d, causal)
                          for d, h in ((64, 32), (128, 16), (256, 8))
                          for causal in (False, True)
                          for s in (512, 1024, 2048, 4096, 8192, 16384)]
    if name == "readme":
        return "tflops", [Problem(4, 32, 32, 1024, 1024, 128, True)]
    if name == "decode":
        return "gbs", [Problem(30720, h, h, 1, 2, d, False) for d in (128, 256) for h in (16, 32)] + [
            Problem(64, 32, 8, 1, 16384, 128, False)]
    raise ValueError(name)


SUITES = ("fa3", "readme", "decode")


# ---------------------------------------------------------------------------------------------
# Timing.

def time_ours(exe: Path, p: Problem, dtype: str, extra: list[str], runs: int, warm_up: int) -> dict:
    from fmha_test import parse_output, run_fmha

    proc = run_fmha(exe, [*p.fmha_args(), DTYPES[dtype][0], *extra, "-skip-checks", "-v", "0",
                          "-runs", str(runs), "-warm-up-runs", str(warm_up)], timeout=600)
    if proc.returncode != 0:
        why = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        return {"ours_us": NAN, "kernel": "", "ours_tflops_reported": NAN,
                "ours_note": f"exit {proc.returncode}: {why[-1] if why else ''}"}
    fields = parse_output(proc.stdout)
    return {"ours_us": float(fields["us"]), "kernel": fields["kernel"],
            "ours_tflops_reported": float(fields["tflops"]), "ours_note": ""}


def time_sdpa(torch, backend, p: Problem, dtype: str, launches: int, repeats: int, warm_up: int) -> tuple:
    """(median microseconds per launch, note). NaN with the reason where the backend refuses."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    tdtype = getattr(torch, DTYPES[dtype][1])
    # Small problems would be served from L2 (50-60 MB on Hopper) on repeats: rotate inputs.
    n_sets = 1 if p.bytes(2) > 256 * 2**20 else 3
    sets = [(torch.randn(p.b, p.h, p.s_q, p.d, device="cuda", dtype=tdtype),
             torch.randn(p.b, p.h_kv, p.s, p.d, device="cuda", dtype=tdtype),
             torch.randn(p.b, p.h_kv, p.s, p.d, device="cuda", dtype=tdtype)) for _ in range(n_sets)]
    kw = {"is_causal": p.causal}
    if p.h_kv != p.h:
        kw["enable_gqa"] = True
    # SDPA's is_causal is top-left aligned; ours is bottom-right. They agree only when s_q == s.
    assert not p.causal or p.s_q == p.s, "causal SDPA comparison needs s_q == s"

    def launch(i):
        F.scaled_dot_product_attention(*sets[i % n_sets], **kw)

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        with sdpa_kernel([backend]):
            for i in range(warm_up):
                launch(i)
            torch.cuda.synchronize()
            times = []
            for _ in range(repeats):
                # Queue a ~1 ms spin first so the launches below are all enqueued before the
                # start event fires: the timed region then holds no host dispatch gaps.
                torch.cuda._sleep(2_000_000)
                start.record()
                for i in range(launches):
                    launch(i)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e3 / launches)
    except RuntimeError as error:  # backend does not support this shape/dtype/GPU
        first = str(error).strip().splitlines()
        return NAN, f"{backend.name}: {first[0] if first else type(error).__name__}"[:200]
    return statistics.median(times), ""


# ---------------------------------------------------------------------------------------------
# Report.

def gpu_info(torch) -> dict:
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.split("\n")[0].strip()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"gpu": torch.cuda.get_device_name(), "driver": driver, "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": cudnn}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def markdown(rows: list[dict], metric: str, info: dict, dtype: str) -> str:
    unit = {"tflops": "TFLOP/s", "gbs": "GB/s"}[metric]
    lines = [f"{info['gpu']}, driver {info['driver']}, torch {info['torch']} (CUDA {info['cuda']}, "
             f"cuDNN {info['cudnn']}), {dtype}, {unit}",
             "",
             "| b | h/h_kv | s_q/s | d | causal | ours | flash | cudnn | ours/flash | ours/cudnn |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ours, flash, cudnn = (r[f"{who}_{metric}"] for who in ("ours", "flash", "cudnn"))
        lines.append(f"| {r['b']} | {r['h']}/{r['h_kv']} | {r['s_q']}/{r['s']} | {r['d']} | "
                     f"{'yes' if r['causal'] else 'no'} | {ours:.0f} | {flash:.0f} | {cudnn:.0f} | "
                     f"{ours / flash:.2f} | {ours / cudnn:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=SUITES, default="fa3")
    parser.add_argument("--dtype", choices=DTYPES, default="fp16")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--exe", type=Path, default=REPO / "bin" / "fmha.exe")
    parser.add_argument("--fmha-args", default="", help="extra fmha.exe flags, e.g. '-kernel NAME'")
    parser.add_argument("--runs", type=int, default=20, help="timed launches per measurement")
    parser.add_argument("--warm-up-runs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=10, help="SDPA: measurements, median taken")
    args = parser.parse_args(argv)

    if not args.exe.is_file():
        parser.error(f"{args.exe} not found: run `python3 setup.py && make -j` first")
    os.environ["FMHA_EXE"] = str(args.exe.resolve())  # fmha_test.py reads the manifest beside it
    import torch
    from torch.nn.attention import SDPBackend
    if not torch.cuda.is_available():
        print("no CUDA GPU visible to torch", file=sys.stderr)
        return 3

    info = gpu_info(torch)
    metric, problems = suite(args.suite)
    elt = DTYPES[args.dtype][2]
    extra = shlex.split(args.fmha_args)
    rows = []
    for p in problems:
        row = {**asdict(p), "dtype": args.dtype, **info}
        row.update(time_ours(args.exe, p, args.dtype, extra, args.runs, args.warm_up_runs))
        notes = [row.pop("ours_note")]
        for who, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            row[f"{who}_us"], note = time_sdpa(torch, backend, p, args.dtype, args.runs, args.repeats,
                                               args.warm_up_runs)
            notes.append(note)
        for who in ("ours", "flash", "cudnn"):
            us = row[f"{who}_us"]
            row[f"{who}_tflops"] = p.flop() / us / 1e6
            row[f"{who}_gbs"] = p.bytes(elt) / us / 1e3
        row["note"] = "; ".join(n for n in notes if n)
        rows.append(row)
        print(f"b={p.b} h={p.h}/{p.h_kv} s={p.s_q}/{p.s} d={p.d} causal={p.causal}: "
              + "  ".join(f"{who} {row[f'{who}_{metric}']:.1f}" for who in ("ours", "flash", "cudnn"))
              + (f"  [{row['note']}]" if row["note"] else ""), file=sys.stderr, flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{args.suite}_{slug(info['gpu'])}_{args.dtype}"
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    table = markdown(rows, metric, info, args.dtype)
    stem.with_suffix(".md").write_text(table)
    print(f"\nwrote {stem}.csv and .md\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
