"""Result rows, and the CSV and markdown files they are written to.

A row is one problem: its fields, the dtype, and per implementation the median microseconds
per call with the TFLOP/s and GB/s derived from Problem.flop() and Problem.bytes(). A
failed, refused or skipped measurement is NaN, and the row's note says why.

The CSV starts with `# key: value` lines (the run's metadata: GPU, driver, versions, clocks
at the start and the end), then one header line and the rows. `read_csv` also reads the
older files without that preamble and without some implementations' columns.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Iterable, Mapping

from bench.suites import DTYPES, PROBLEM_FIELDS, REQUIRED_FIELDS, Problem

NAN = float("nan")
IMPLS = ("ours", "fa3", "flash", "cudnn", "efficient")  # ours first: every ratio is ours / another
METRICS = ("us", "tflops", "gbs")
UNITS = {"tflops": "TFLOP/s", "gbs": "GB/s"}
# ncu's kernel time of the same calls (bench/run.py --ncu), µs per call, beside the events' us.
NCU = tuple(f"{who}_ncu_us" for who in IMPLS)
COLUMNS = (*PROBLEM_FIELDS, "dtype", "kernel",
           *(f"{who}_{metric}" for metric in METRICS for who in IMPLS), "note", *NCU)
META_PREFIX = "# "


def result_row(problem: Problem, dtype: str, us: Mapping[str, float], kernel: str = "",
               notes: Iterable[str] = ()) -> dict:
    """One table row from the microseconds per call of each implementation (missing: NaN)."""
    elt = DTYPES[dtype].bytes
    row = {**asdict(problem), "dtype": dtype, "kernel": kernel}
    for who in IMPLS:
        t = us.get(who, NAN)
        ok = t > 0  # False for NaN too
        row[f"{who}_us"] = t if ok else NAN
        row[f"{who}_tflops"] = problem.flop() / t / 1e6 if ok else NAN
        row[f"{who}_gbs"] = problem.bytes(elt) / t / 1e3 if ok else NAN
    row["note"] = "; ".join(n for n in notes if n)
    for column in NCU:
        row[column] = NAN
    return row


def ratio(row: Mapping, metric: str, other: str) -> float:
    """ours / other on `metric` (higher is better for both metrics); NaN where either is."""
    ours, theirs = row[f"ours_{metric}"], row[f"{other}_{metric}"]
    return ours / theirs if theirs > 0 else NAN  # NaN compares False


# ---------------------------------------------------------------------------------------------
# CSV

def write_csv(path: Path, meta: Mapping[str, str], rows: list[dict]) -> Path:
    with open(path, "w", newline="") as f:
        for key, value in meta.items():
            f.write(f"{META_PREFIX}{key}: {' '.join(str(value).split())}\n")
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_csv(path: Path) -> tuple[dict, list[dict]]:
    """(metadata, rows) of a CSV written by write_csv or by the older bench/run.py. Problem
    fields come back as int/bool, measurements as float (NaN where empty or absent)."""
    meta, lines = {}, Path(path).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith(META_PREFIX):
        key, _, value = lines.pop(0)[len(META_PREFIX):].partition(":")
        meta[key.strip()] = value.strip()
    reader = csv.DictReader(io.StringIO("".join(lines)))
    missing = {"ours_us", *REQUIRED_FIELDS} - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"{path}: not a bench/run.py CSV (no column {', '.join(sorted(missing))})")
    rows = []
    for raw in reader:
        row = {**raw, **asdict(Problem.from_row(raw))}
        for who in IMPLS:
            for metric in METRICS:
                row[f"{who}_{metric}"] = as_float(raw.get(f"{who}_{metric}"))
        for column in NCU:
            row[column] = as_float(raw.get(column))
        row.setdefault("note", "")
        rows.append(row)
    return meta, rows


def as_float(text: str | None) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return NAN


def present(rows: list[dict], metric: str) -> list[str]:
    """The implementations with at least one finite `metric` value in `rows`."""
    return [who for who in IMPLS if any(math.isfinite(r[f"{who}_{metric}"]) for r in rows)]


# ---------------------------------------------------------------------------------------------
# Markdown

def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def fmt(value: float, digits: int | None = None) -> str:
    """'—' for NaN; `digits` decimals, else whole numbers from 100 up and 3 significant digits below."""
    if not math.isfinite(value):
        return "—"
    if digits is None:
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{value:.{digits}f}"


def header_lines(meta: Mapping[str, str]) -> list[str]:
    """The run's context, one fact per line, for the markdown table and the plot."""
    unit = UNITS[meta["metric"]]
    return [
        f"{meta['gpu']}, driver {meta['driver']}, torch {meta['torch']} (CUDA {meta['cuda']}, "
        f"cuDNN {meta['cudnn']}), {meta['dtype']}, {unit} (higher is better)",
        f"clocks at start: {meta['clocks_start']}; at end: {meta['clocks_end']}",
    ]


def markdown(meta: Mapping[str, str], rows: list[dict]) -> str:
    metric = meta["metric"]
    others = IMPLS[1:]
    lines = [f"### {meta['suite']}: {meta['about']}", "",
             *(f"{line}  " for line in header_lines(meta)),
             f"SDPA and FA3: {meta['sdpa']}  ",
             f"ours: {meta['ours']}", "",
             *([f"device-to-device copy measured in this run: {meta['copy_gbs']} GB/s (read + write); "
                "ours/copy is our GB/s against it", ""] if meta.get("copy_gbs") else []),
             "| b | h/h_kv | s_q/s | d | causal | " + " | ".join(IMPLS) + " | "
             + " | ".join(f"ours/{who}" for who in others)
             + (" | ours/copy" if meta.get("copy_gbs") else "") + " |",
             "|" + "---|" * (5 + len(IMPLS) + len(others) + (1 if meta.get("copy_gbs") else 0))]
    notes = []
    for i, r in enumerate(rows, 1):
        cells = [r["b"], f"{r['h']}/{r['h_kv']}", f"{r['s_q']}/{r['s']}", r["d"],
                 Problem.from_row(r).mask_label(),
                 *(fmt(r[f"{who}_{metric}"]) for who in IMPLS),
                 *(fmt(ratio(r, metric, who), 2) for who in others)]
        if meta.get("copy_gbs"):
            cells.append(fmt(float(r[f"ours_{metric}"]) / float(meta["copy_gbs"]), 2))
        mark = f" [{len(notes) + 1}]" if r["note"] else ""
        if r["note"]:
            notes.append(f"{len(notes) + 1}. row {i} ({Problem.from_row(r).label()}): {r['note']}")
        lines.append("| " + " | ".join(map(str, cells)) + f"{mark} |")
    if notes:
        lines += ["", "Notes (— in the table: no measurement):", "", *notes]
    lines += ncu_table(rows)
    return "\n".join(lines) + "\n"


def ncu_table(rows: list[dict]) -> list[str]:
    """Where --ncu ran: per problem and implementation, µs per call by the events (the table
    above) and by ncu's kernel durations, and their ratio (events / ncu)."""
    whos = [w for w in IMPLS if any(math.isfinite(r.get(f"{w}_ncu_us", NAN)) for r in rows)]
    if not whos:
        return []
    lines = ["", "Kernel time, µs per call: CUDA events / ncu gpu__time_duration (events ÷ ncu)", "",
             "| problem | " + " | ".join(whos) + " |", "|---|" + "---|" * len(whos)]
    for r in rows:
        cells = [f"{fmt(r[f'{w}_us'])} / {fmt(r[f'{w}_ncu_us'])} ({fmt(r[f'{w}_us'] / r[f'{w}_ncu_us'], 3)})"
                 if r[f"{w}_ncu_us"] > 0 and r[f"{w}_us"] > 0 else "—" for w in whos]
        lines.append(f"| {Problem.from_row(r).label()} | " + " | ".join(cells) + " |")
    return lines


def summary(meta: Mapping[str, str], rows: list[dict]) -> str:
    """One line: the geometric mean of ours / each SDPA backend over the rows both measured."""
    metric, parts = meta["metric"], []
    for who in IMPLS[1:]:
        ratios = [x for x in (ratio(r, metric, who) for r in rows) if x > 0]
        parts.append(f"ours/{who} {statistics.geometric_mean(ratios):.2f} ({count(len(ratios), 'row')})"
                     if ratios else f"ours/{who} —")
    return f"{meta['suite']} {meta['dtype']} ({UNITS[metric]}, geometric mean): " + ", ".join(parts)
