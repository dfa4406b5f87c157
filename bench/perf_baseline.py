"""Performance baselines for the GPU tier's perf runs (`pytest fmha_test.py -m perf`).

A baseline is a CSV, one per GPU name in bench/baselines/<gpu-slug>.csv, with one row per
(kernel, config): the GPU's name, Tflop/s and GB/s. conftest.py reads and writes it,
fmha_test.py checks each perf run against it, and conftest.py prints the end-of-session table.
Speeds measured on different GPUs say nothing about each other, so a baseline recorded on
another GPU is refused, never compared.

Every function here is pure (or reads/writes one file), so tests/test_perf_baseline.py covers
the logic without a GPU.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
BASELINE_DIR = REPO / "bench" / "baselines"
DEFAULT_TOLERANCE = 0.05
# A baseline entry's key: (kernel name, config). Both spell what runs, so the key does not
# change when pytest's parametrisation order or node ids do.
KEY = ["kernel", "config"]
COLUMNS = [*KEY, "gpu", "tflops", "gbs"]
# Relative slack so that binary rounding never fails a run exactly at the tolerance
# (95.0 Tflop/s against 100.0 at 5% passes).
ROUNDING_SLACK = 1e-9
SLUG_RE = re.compile(r"[^a-z0-9]+")

Key = tuple[str, str]


class BaselineError(Exception):
    """A baseline that cannot be used: recorded on another GPU, or not a baseline file."""


class MissingBaselineWarning(UserWarning):
    """A perf run that the baseline has no entry for (reported, never a failure)."""


class Speed(NamedTuple):
    tflops: float
    gbs: float


@dataclass(frozen=True)
class Baseline:
    gpu: str                    # nvidia-smi's name of the GPU, e.g. "NVIDIA H200"
    entries: dict[Key, Speed]


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200': the one rule that names baselines and bench/run.py's results."""
    return SLUG_RE.sub("-", name.lower()).strip("-")


def default_path(gpu: str) -> Path:
    return BASELINE_DIR / f"{gpu_slug(gpu)}.csv"


# ---------------------------------------------------------------------------------------------
# The file.

def read_baseline(path: Path) -> Baseline:
    frame = pd.read_csv(path)
    missing = sorted(set(COLUMNS) - set(frame.columns))
    if missing:
        raise BaselineError(f"{path} is not a perf baseline (no column {', '.join(missing)}): "
                            "write one with `pytest fmha_test.py -m perf --update-baseline`")
    gpus = sorted(frame["gpu"].unique())
    if len(gpus) != 1:
        raise BaselineError(f"{path} records {len(gpus)} GPUs {gpus}: a baseline holds one GPU's numbers")
    entries = {(r.kernel, r.config): Speed(float(r.tflops), float(r.gbs)) for r in frame.itertuples()}
    return Baseline(gpus[0], entries)


def write_baseline(path: Path, baseline: Baseline):
    rows = [(*key, baseline.gpu, *speed) for key, speed in baseline.entries.items()]
    frame = pd.DataFrame(rows, columns=COLUMNS).sort_values(KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)


def check_gpu(baseline: Baseline, gpu: str, path: Path):
    """Refuses a baseline recorded on another GPU: comparing across GPUs means nothing."""
    if baseline.gpu != gpu:
        raise BaselineError(
            f"{path} was recorded on {baseline.gpu!r} but this GPU is {gpu!r}: speeds on different "
            f"GPUs are not comparable. Use this GPU's baseline, {default_path(gpu)} (write it with "
            "`pytest fmha_test.py -m perf --update-baseline`).")


def updated(baseline: Baseline | None, gpu: str, results: pd.DataFrame) -> Baseline:
    """`baseline` with this session's results written over it; entries not run are kept."""
    old = baseline.entries if baseline else {}
    new = {(r.kernel, r.config): Speed(float(r.tflops), float(r.gbs)) for r in results.itertuples()}
    return Baseline(gpu, {**old, **new})


@dataclass(frozen=True)
class Check:
    """What a session does with its baseline: compare each perf run with it, or (update)
    write the session's numbers into it."""

    path: Path
    gpu: str
    stored: Baseline | None  # None: the file does not exist yet (update creates it)
    tolerance: float = DEFAULT_TOLERANCE
    update: bool = False

    def expected(self, key: Key) -> float | None:
        """The Tflop/s a run must reach within the tolerance; None where nothing is asserted."""
        if self.update or self.stored is None or key not in self.stored.entries:
            return None
        return self.stored.entries[key].tflops


def open_check(path: Path | None, gpu: str, tolerance: float, update: bool) -> Check:
    """The Check of `--perf-baseline PATH` (None: this GPU's default path) on `gpu`. Raises
    BaselineError for a tolerance outside [0, 1), a missing file (unless updating it), a file
    that is not a baseline, and a baseline of another GPU (even to update it)."""
    if not 0 <= tolerance < 1:
        raise BaselineError(f"--perf-tolerance {tolerance}: a fraction in [0, 1), e.g. 0.05 for 5%")
    path = path or default_path(gpu)
    if not path.is_file():
        if update:
            return Check(path, gpu, None, tolerance, update)
        raise BaselineError(f"--perf-baseline {path}: no such file (write it on this GPU with "
                            f"`pytest fmha_test.py -m perf --perf-baseline {path} --update-baseline`)")
    stored = read_baseline(path)
    check_gpu(stored, gpu, path)
    return Check(path, gpu, stored, tolerance, update)


# ---------------------------------------------------------------------------------------------
# One run against its entry.

def is_regression(tflops: float, baseline: float, tolerance: float) -> bool:
    """Slower than `baseline` by more than `tolerance` (a fraction: 0.05 is 5%)."""
    return tflops < baseline * (1 - tolerance) * (1 - ROUNDING_SLACK)


def measure(run: Callable[[], dict], baseline: float | None, tolerance: float) -> tuple[dict, int]:
    """Calls `run` (-> fields with 'tflops'); where the result is a regression against
    `baseline`, calls it once more and keeps the faster of the two, since a single slow run is
    often noise (clocks, another process on the GPU). Returns (fields, number of runs)."""
    first = run()
    if baseline is None or not is_regression(float(first["tflops"]), baseline, tolerance):
        return first, 1
    return max(first, run(), key=lambda fields: float(fields["tflops"])), 2


def regression_message(tflops: float, baseline: float, tolerance: float) -> str | None:
    """Why a run fails against its baseline, or None when it passes."""
    if not is_regression(tflops, baseline, tolerance):
        return None
    return (f"{tflops:.2f} Tflop/s is {1 - tflops / baseline:.1%} below the baseline's {baseline:.2f} "
            f"(tolerance {tolerance * 100:g}%)")


# ---------------------------------------------------------------------------------------------
# The session against the whole baseline.

OK, SLOWER, FASTER, NO_ENTRY, NOT_RUN = "ok", "SLOWER", "faster", "no baseline", "not run"


def status(tflops: float, baseline: float, tolerance: float) -> str:
    if pd.isna(baseline):
        return NO_ENTRY
    if pd.isna(tflops):
        return NOT_RUN
    if is_regression(tflops, baseline, tolerance):
        return SLOWER
    return FASTER if tflops > baseline * (1 + tolerance) else OK


def compare(results: pd.DataFrame, entries: dict[Key, Speed], tolerance: float) -> pd.DataFrame:
    """One row per (kernel, config) that ran or has an entry: tflops (NaN: not run), runs,
    baseline (NaN: no entry), ratio and status. `results` has KEY, tflops and runs columns."""
    stored = pd.DataFrame([(*key, speed.tflops) for key, speed in entries.items()],
                          columns=[*KEY, "baseline"])
    table = results[[*KEY, "tflops", "runs"]].merge(stored, on=KEY, how="outer")
    table["ratio"] = table["tflops"] / table["baseline"]
    table["status"] = [status(t, b, tolerance) for t, b in zip(table["tflops"], table["baseline"])]
    return table.sort_values(KEY, ignore_index=True)


def format_table(table: pd.DataFrame) -> str:
    """The compact end-of-session table: kernel, config, Tflop/s, vs baseline, status."""
    def number(x: float, spec: str) -> str:
        return "-" if pd.isna(x) else format(x, spec)

    header = ("kernel", "config", "Tflop/s", "vs baseline", "status")
    align = "<<>><"
    rows = [header] + [
        (r.kernel, r.config, number(r.tflops, ".2f"), number(r.ratio - 1, "+.1%"),
         r.status + (" (best of 2)" if r.runs == 2 else ""))
        for r in table.itertuples()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(row, align, widths)).rstrip()
                     for row in rows)


def counts_line(table: pd.DataFrame) -> str:
    counts = table["status"].value_counts()
    parts = [f"{counts[s]} {s}" for s in (OK, SLOWER, FASTER, NO_ENTRY, NOT_RUN) if s in counts]
    return f"{table['tflops'].notna().sum()} runs: " + ", ".join(parts)
