#!/usr/bin/env python3
"""Plot a bench/run.py CSV: TFLOP/s (GB/s for decode) against sequence length, one panel per
head size and mask, one line per implementation, log2 x axis. Needs no GPU:

    python3 bench/plot.py bench/results/fa3_nvidia-h200_fp16.csv [more.csv ...]

writes each CSV's plot beside it (same name, .png). Panels split further on any of b, h,
h_kv, s_q that varies independently of s (grid's b and h; decode's head counts), so a line
never joins different problems at one s.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import IMPLS, UNITS, fmt, header_lines, read_csv  # noqa: E402

STYLE = {  # implementation -> (label, colour, marker); ours drawn thicker and on top
    "ours": ("ours (fmha.exe)", "tab:red", "o"),
    "fa3": ("FlashAttention-3", "tab:purple", "D"),
    "flash": ("SDPA flash", "tab:blue", "s"),
    "cudnn": ("SDPA cuDNN", "tab:green", "^"),
    "efficient": ("SDPA efficient", "tab:orange", "v"),
}
SPLIT_FIELDS = ("b", "h", "h_kv", "s_q", "window", "softcap", "paged", "bias", "custom")  # panel keys when not determined by s
PANEL_INCHES = (4.4, 3.3)
MIN_WIDTH_INCHES = 9.0  # room for the title, legend and footer above and below one panel


def panel_key_fields(rows: list[dict]) -> tuple[str, ...]:
    """causal and d, plus each field that takes several values at one s within a (causal, d) group."""
    seen = defaultdict(set)  # (causal, d, s, field) -> values
    for r in rows:
        for name in SPLIT_FIELDS:
            seen[(r["causal"], r["d"], r["s"], name)].add(r[name])
    split = {name for (_, _, _, name), values in seen.items() if len(values) > 1}
    return ("causal", "d", *(name for name in SPLIT_FIELDS if name in split))


def panels(rows: list[dict]) -> list[tuple[dict, list[dict]]]:
    """[(the fields every row of the panel shares, rows sorted by s)], non-causal first, then by d."""
    keys = panel_key_fields(rows)
    groups = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in keys)].append(r)
    out = []
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda r: r["s"])
        shared = {name: members[0][name] for name in ("causal", "d", *SPLIT_FIELDS)
                  if len({r[name] for r in members}) == 1}
        out.append((shared, members))
    return out


def panel_title(shared: dict) -> str:
    parts = [f"d={shared['d']}"]
    if "h" in shared:
        h_kv = shared.get("h_kv", shared["h"])
        parts.append(f"h={shared['h']}" + (f"/{h_kv}" if h_kv != shared["h"] else ""))
    if "b" in shared:
        parts.append(f"b={shared['b']}")
    if "s_q" in shared and shared["s_q"] == 1:
        parts.append("s_q=1")
    parts.append("causal" if shared["causal"] else "no mask")
    if shared.get("window"):
        parts.append(f"window {shared['window']}")
    if shared.get("softcap"):
        parts.append(f"softcap {shared['softcap']:g}")
    if shared.get("paged"):
        parts.append(f"paged {shared['paged']}")
    if shared.get("bias"):
        parts.append("bias")
    if shared.get("custom"):
        parts.append("custom mask")
    return ", ".join(parts)


def length_label(s: int) -> str:
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


def plot(meta: dict, rows: list[dict], path: Path) -> Path:
    """Write the figure of one suite's rows to `path` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    metric, unit = meta["metric"], UNITS[meta["metric"]]
    groups = panels(rows)
    ncols = min(len(groups), math.ceil(math.sqrt(len(groups))))
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False,
                             figsize=(max(PANEL_INCHES[0] * ncols, MIN_WIDTH_INCHES),
                                      PANEL_INCHES[1] * nrows + 1.3))
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)

    drawn = set()
    for ax, (shared, members) in zip(axes.flat, groups):
        lengths = sorted({r["s"] for r in members})
        for who in IMPLS:
            points = [(r["s"], r[f"{who}_{metric}"]) for r in members if math.isfinite(r[f"{who}_{metric}"])]
            if not points:
                continue
            label, colour, marker = STYLE[who]
            ax.plot(*zip(*points), marker=marker, color=colour, label=label,
                    linewidth=2.4 if who == "ours" else 1.4, zorder=3 if who == "ours" else 2)
            drawn.add(who)
            if len(lengths) == 1:  # one point per line: print the values beside them, staggered
                ax.annotate(fmt(points[0][1]), points[0], xytext=(10 + 28 * IMPLS.index(who), 0),
                            textcoords="offset points",
                            va="center", fontsize=8, color=colour)
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [length_label(s) for s in lengths])
        ax.minorticks_off()
        margin = 1.6 if len(lengths) == 1 else 1.2  # a factor, on the log axis
        ax.set_xlim(lengths[0] / margin, lengths[-1] * margin)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.set_title(panel_title(shared), fontsize=10)
        ax.set_xlabel("KV length s" if shared.get("s_q", 0) == 1 else "sequence length s")
        ax.set_ylabel(unit)

    height = fig.get_figheight()
    fig.suptitle(f"{meta['suite']} on {meta['gpu']}: {unit} vs sequence length, {meta['dtype']} "
                 "(higher is better)", fontsize=13, y=1 - 0.08 / height, va="top")
    handles = [Line2D([], [], color=STYLE[w][1], marker=STYLE[w][2], linewidth=2.4 if w == "ours" else 1.4,
                      label=STYLE[w][0]) for w in IMPLS if w in drawn]
    if handles:
        fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False,
                   bbox_to_anchor=(0.5, 1 - 0.38 / height))
    footer = [header_lines(meta)[0] if "driver" in meta else meta["gpu"]]
    missing = [STYLE[w][0] for w in IMPLS if w not in drawn]
    if missing:
        footer.append(f"no data: {', '.join(missing)}")
    fig.text(0.5, 0.06 / height, "\n".join(footer), ha="center", va="bottom", fontsize=8, color="0.3")
    fig.tight_layout(rect=(0, (0.12 + 0.16 * len(footer)) / height, 1, 1 - 0.62 / height))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def infer_meta(meta: dict, rows: list[dict], path: Path) -> dict:
    """Fill what an older CSV (no `# key: value` preamble) lacks from its columns and name."""
    first = rows[0] if rows else {}
    full = dict(meta)
    full.setdefault("suite", path.stem.split("_")[0])
    full.setdefault("dtype", first.get("dtype", "?"))
    full.setdefault("gpu", first.get("gpu", "unknown GPU"))
    for key in ("driver", "torch", "cuda", "cudnn"):
        if key not in full and first.get(key):
            full[key] = first[key]
    full.setdefault("clocks_start", "not recorded")
    full.setdefault("clocks_end", "not recorded")
    full.setdefault("metric", "gbs" if rows and all(r["s_q"] == 1 for r in rows) else "tflops")
    return full


def plot_csv(csv_path: Path, png_path: Path | None = None) -> Path:
    meta, rows = read_csv(csv_path)
    if not rows:
        raise ValueError(f"{csv_path}: no rows")
    return plot(infer_meta(meta, rows, Path(csv_path)), rows, png_path or Path(csv_path).with_suffix(".png"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="+", type=Path, help="CSV files written by bench/run.py")
    args = parser.parse_args(argv)
    for path in args.csv:
        try:
            print(plot_csv(path))
        except (OSError, ValueError) as error:
            parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
