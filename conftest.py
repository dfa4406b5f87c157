"""Shared pytest plumbing: where bin/fmha.exe comes from, GPU detection, the perf CSV and the
perf baseline (the logic is in bench/perf_baseline.py).

GPU-marked tests skip with a reason on a machine without a CUDA GPU, so `pytest` on a CI
machine (nvcc, no GPU) still runs every CPU test; a test that asks for `fmha_exe` where
bin/fmha.exe is not built gets a small kernel subset compiled for it.
"""

import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pandas as pd
import pytest

from bench import perf_baseline as perf

REPO = Path(__file__).resolve().parent
NO_GPU_REASON = "no CUDA GPU on this machine"

# What a build reads (`python3 setup.py && make`): the fallback build and tests/test_build.py's
# trees copy it.
BUILD_INPUTS = ("setup.py", "generator", "templates", "src", "include", "Makefile", "requirements.txt")
# One small kernel keeps the fallback build to a few minutes on a 2-core CI machine.
FALLBACK_FILTER = "*_fp16_d64_*"
ENV_FLAGS = ("TORCH_CUDA_ARCH_LIST", "ENABLE_HMMA_FP32", "ENABLE_SM89_QMMA", "ENABLE_SM100",
             "ENABLE_SM120", "SCHEDULING_MODE", "USE_CCACHE", "FMHA_FILTER")

# The session's perf table: rows appended by the GPU tier (tests/gpu/, one per run of fmha.exe).
PERF_ROWS = pytest.StashKey[list]()
# What --perf-baseline / --update-baseline ask of the session (None: neither).
PERF_CHECK = pytest.StashKey[perf.Check | None]()


def pytest_addoption(parser):
    group = parser.getgroup("fmha")
    group.addoption("--perf-csv", metavar="PATH", help="write the Tflop/s and GB/s of every fmha.exe run as CSV")
    group.addoption("--perf-baseline", metavar="PATH",
                    help="a baseline of this GPU (bench/baselines/<gpu>.csv): fail a -m perf run slower than "
                         "its entry by more than --perf-tolerance (the better of two runs counts)")
    group.addoption("--perf-tolerance", metavar="FRAC", type=float, default=perf.DEFAULT_TOLERANCE,
                    help=f"allowed slowdown against the baseline, a fraction (default {perf.DEFAULT_TOLERANCE})")
    group.addoption("--update-baseline", action="store_true",
                    help="write this session's -m perf numbers to --perf-baseline PATH (default "
                         "bench/baselines/<gpu>.csv), keeping the entries that did not run; asserts nothing")


@lru_cache(maxsize=None)
def query_gpu(field: str) -> str | None:
    """`nvidia-smi --query-gpu=FIELD` of the first GPU it lists, or None where there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def gpu_compute_cap() -> str | None:
    """'9.0' for the first GPU `nvidia-smi` lists, or None where there is none."""
    return query_gpu("compute_cap")


def gpu_name() -> str | None:
    """'NVIDIA H200' for the first GPU `nvidia-smi` lists, or None where there is none."""
    return query_gpu("name")


def perf_check(config) -> perf.Check | None:
    """What --perf-baseline / --update-baseline ask of this session; a baseline that cannot be
    used (another GPU's, a missing file) stops the session before any test runs."""
    path, update = config.getoption("--perf-baseline"), config.getoption("--update-baseline")
    if not (path or update):
        return None
    gpu = gpu_name()
    if gpu is None:  # the perf runs skip without a GPU: nothing to compare or write
        return None
    try:
        return perf.open_check(Path(path) if path else None, gpu, config.getoption("--perf-tolerance"), update)
    except perf.BaselineError as error:
        raise pytest.UsageError(str(error)) from None


def pytest_configure(config):
    config.stash[PERF_ROWS] = []
    config.stash[PERF_CHECK] = perf_check(config)


@pytest.fixture(scope="session")
def perf_rows(pytestconfig) -> list[dict]:
    """The session's perf table; --perf-csv writes it, --update-baseline stores its perf rows."""
    return pytestconfig.stash[PERF_ROWS]


@pytest.fixture(scope="session")
def perf_baseline(pytestconfig) -> perf.Check | None:
    return pytestconfig.stash[PERF_CHECK]


def pytest_collection_modifyitems(config, items):
    # Decided once per session, before any fixture (so no build happens for skipped tests).
    if gpu_compute_cap() is not None:
        return
    skip = pytest.mark.skip(reason=NO_GPU_REASON)
    for item in items:
        if item.get_closest_marker("gpu"):  # a marker, not a keyword: tests/gpu/ names a keyword "gpu"
            item.add_marker(skip)


@pytest.fixture(scope="session")
def has_gpu() -> bool:
    return gpu_compute_cap() is not None


@pytest.fixture(scope="session")
def gpu_sm() -> int:
    """Compute capability of the GPU as an int (90 for 9.0); skips where there is no GPU."""
    cap = gpu_compute_cap()
    if cap is None:
        pytest.skip(NO_GPU_REASON)
    major, minor = cap.split(".")
    return int(major) * 10 + int(minor)


def _build_subset(workdir: Path) -> Path:
    for name in BUILD_INPUTS:
        src = REPO / name
        if not src.exists():
            pytest.skip(f"cannot build fmha.exe: {name} is missing from the repository")
        if src.is_dir():
            shutil.copytree(src, workdir / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, workdir / name)
    # The caller's flags would change what gets built: drop them all, then ask for the subset,
    # for this GPU's arch where there is one.
    env = {k: v for k, v in os.environ.items() if k not in ENV_FLAGS and not k.startswith("MAKE")}
    env.update(FMHA_FILTER=FALLBACK_FILTER, TORCH_CUDA_ARCH_LIST=gpu_compute_cap() or "8.0")
    for cmd in ([sys.executable, "setup.py"], ["make", f"-j{min(os.cpu_count() or 2, 8)}"]):
        run = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            pytest.fail(f"`{' '.join(cmd)}` failed ({run.returncode}) building the test subset:\n"
                        f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}", pytrace=False)
    exe = workdir / "bin" / "fmha.exe"
    if not exe.is_file():
        pytest.fail(f"the build succeeded but {exe} does not exist", pytrace=False)
    return exe


@pytest.fixture(scope="session")
def fmha_exe(tmp_path_factory) -> Path:
    """Path of a built bin/fmha.exe: $FMHA_EXE, else the repo's bin/fmha.exe, else a small
    subset (FALLBACK_FILTER) built in a temporary copy of the repository."""
    if os.environ.get("FMHA_EXE"):
        exe = Path(os.environ["FMHA_EXE"])
        if not exe.is_file():
            pytest.fail(f"FMHA_EXE={exe} does not exist", pytrace=False)
        return exe
    exe = REPO / "bin" / "fmha.exe"
    if exe.is_file():
        return exe
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found: cannot build bin/fmha.exe (run `python3 setup.py && make -j` or set FMHA_EXE)")
    return _build_subset(tmp_path_factory.mktemp("fmha_build"))


def perf_results(config) -> pd.DataFrame | None:
    """The rows of the -m perf runs (the baseline's business), or None where none ran."""
    rows = [row for row in config.stash[PERF_ROWS] if row["perf"]]
    return pd.DataFrame(rows) if rows else None


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    rows = config.stash[PERF_ROWS]
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: hand the rows to the controller
        config.workeroutput["perf_rows"] = rows
        return
    path = config.getoption("--perf-csv")
    if path and rows:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).sort_values("test").to_csv(path, index=False)
    check, results = config.stash[PERF_CHECK], perf_results(config)
    if check and check.update and results is not None:
        perf.write_baseline(check.path, perf.updated(check.stored, check.gpu, results))


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without the plugin
def pytest_testnodedown(node, error):
    node.config.stash[PERF_ROWS].extend(node.workeroutput.get("perf_rows", []))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The -m perf runs against the baseline: one line per (kernel, config) that ran or has an
    entry, so a run without an entry and an entry without a run both show."""
    check, results = config.stash[PERF_CHECK], perf_results(config)
    tr = terminalreporter
    if results is None:
        if check:
            tr.write_line(f"no -m perf run: nothing compared with or written to {check.path}")
        return
    entries = check.stored.entries if check and check.stored else {}
    tolerance = check.tolerance if check else perf.DEFAULT_TOLERANCE
    table = perf.compare(results, entries, tolerance)
    if entries:
        before = " before this update" if check.update else ""  # an update asserts nothing
        tr.section(f"perf: Tflop/s against {check.path}{before} ({check.gpu}, tolerance {tolerance * 100:g}%)")
    else:
        tr.section("perf: Tflop/s (no baseline)")
    tr.write_line(perf.format_table(table))
    tr.write_line(perf.counts_line(table))
    if check and check.update:
        total = len(perf.read_baseline(check.path).entries)
        tr.write_line(f"wrote {check.path}: {total} entries, {len(results)} of them from this session")
