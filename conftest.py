"""Shared pytest plumbing: where bin/fmha.exe comes from, GPU detection, the perf CSV.

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

import pytest

REPO = Path(__file__).resolve().parent
NO_GPU_REASON = "no CUDA GPU on this machine"

# What the fallback build copies: everything `python3 setup.py && make` reads.
BUILD_INPUTS = ("setup.py", "generator", "templates", "src", "Makefile", "requirements.txt")
# One small kernel keeps the fallback build to a few minutes on a 2-core CI machine.
FALLBACK_FILTER = "*_fp16_d64_*"
ENV_FLAGS = ("TORCH_CUDA_ARCH_LIST", "ENABLE_HMMA_FP32", "ENABLE_SM89_QMMA", "ENABLE_SM100",
             "ENABLE_SM120", "SCHEDULING_MODE", "USE_CCACHE", "FMHA_FILTER")

# The session's perf table: rows appended by fmha_test.py (one per run of fmha.exe).
PERF_ROWS = pytest.StashKey[list]()


def pytest_addoption(parser):
    group = parser.getgroup("fmha")
    group.addoption("--perf-csv", metavar="PATH", help="write the Tflop/s and GB/s of every fmha.exe run as CSV")
    group.addoption("--perf-baseline", metavar="PATH",
                    help="a CSV written by --perf-csv on the same GPU; print each run's Tflop/s ratio to it (never fails)")


@lru_cache(maxsize=None)
def gpu_compute_cap() -> str | None:
    """'9.0' for the first GPU `nvidia-smi` lists, or None where there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    caps = out.stdout.split()
    return caps[0] if out.returncode == 0 and caps else None


def pytest_configure(config):
    config.stash[PERF_ROWS] = []


@pytest.fixture(scope="session")
def perf_rows(pytestconfig) -> list[dict]:
    """The session's perf table; --perf-csv writes it, --perf-baseline compares it."""
    return pytestconfig.stash[PERF_ROWS]


def pytest_collection_modifyitems(config, items):
    # Decided once per session, before any fixture (so no build happens for skipped tests).
    if gpu_compute_cap() is not None:
        return
    skip = pytest.mark.skip(reason=NO_GPU_REASON)
    for item in items:
        if "gpu" in item.keywords:
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


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    rows = config.stash[PERF_ROWS]
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: hand the rows to the controller
        config.workeroutput["perf_rows"] = rows
        return
    path = config.getoption("--perf-csv")
    if path and rows:
        import pandas as pd  # lazily: only perf users need pandas
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).sort_values("test").to_csv(path, index=False)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without the plugin
def pytest_testnodedown(node, error):
    node.config.stash[PERF_ROWS].extend(node.workeroutput.get("perf_rows", []))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    path, rows = config.getoption("--perf-baseline"), config.stash[PERF_ROWS]
    if not path or not rows:
        return
    import pandas as pd
    now = pd.DataFrame(rows)[["test", "tflops"]]
    base = pd.read_csv(path)[["test", "tflops"]]
    both = now.merge(base, on="test", suffixes=("", "_baseline"))
    both["ratio"] = both["tflops"] / both["tflops_baseline"]
    tr = terminalreporter
    tr.section("Tflop/s against the baseline")
    tr.write_line(f"{len(both)} runs in common; ratio now/baseline: median {both['ratio'].median():.3f}, "
                  f"min {both['ratio'].min():.3f}, max {both['ratio'].max():.3f}")
    for _, row in both.nsmallest(5, "ratio").iterrows():
        tr.write_line(f"  {row['ratio']:.3f}  {row['test']}")
