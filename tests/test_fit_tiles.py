"""bench/fit_tiles.py: a fixed cost and a cost a key from a grid's CSV (no GPU)."""

import math
from pathlib import Path

import pytest

from bench.fit_tiles import fits, line, main
from bench.report import read_csv

RESULTS = str(Path(__file__).resolve().parent.parent / "bench/results/fa3_nvidia-h200_e4m3.csv")


def test_line_recovers_an_exact_line_and_needs_two_lengths():
    a, b = line([(1024, 10 + 0.5 * 1024), (4096, 10 + 0.5 * 4096), (16384, 10 + 0.5 * 16384)])
    assert a == pytest.approx(10) and b == pytest.approx(0.5)
    with pytest.raises(ValueError):
        line([(1024, 1.0), (1024, 2.0)])


def test_fits_skip_short_rows_and_missing_sides():
    rows = [{"d": 64, "causal": False, "s": s, "ours_us": 3 + 2 * s, "fa3_us": math.nan} for s in (512, 1024, 2048)]
    rows[0]["ours_us"] = 1e9  # left out by min_s
    got = fits(rows, 1024)
    assert list(got) == [(64, False)] and list(got[(64, False)]) == ["ours"]
    assert got[(64, False)]["ours"] == pytest.approx((3, 2))


def test_cli_reads_a_committed_grid(capsys):
    assert main([RESULTS]) == 0
    out = capsys.readouterr().out.splitlines()
    _, rows = read_csv(RESULTS)
    d256 = [r for r in rows if r["d"] == 256 and not r["causal"] and r["s"] >= 1024]
    a, b = line([(r["s"], r["ours_us"]) for r in d256])
    assert f"| 256 | no | ours | {a:.1f} | {b:.4f} |" in out
