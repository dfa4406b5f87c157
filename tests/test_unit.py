"""The device unit tests (tests/unit/, GoogleTest) as pytest items: one item per GTest case.

bin/unit_tests comes from `make test` in the repository (incremental; GTEST_ROOT and
TORCH_CUDA_ARCH_LIST reach make through the environment). At collection, an existing
bin/unit_tests lists its cases (--gtest_list_tests) and each becomes an item that runs
`bin/unit_tests --gtest_filter=Suite.Case` after the build; where the binary does not exist
yet, one item builds it and runs every case. Those items are marked `gpu`: without a GPU the
root conftest skips them, and the CPU tests below still check that `make test` builds and
that the binary skips its device tests instead of failing.
"""

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNIT_TESTS = ROOT / "bin" / "unit_tests"
MIN_CASES = 30
ALL = "all"  # the one item collected when bin/unit_tests does not exist yet
GTEST_MISSING = "GoogleTest not found"


def parse_gtest_list(text: str) -> list[str]:
    """`--gtest_list_tests` output -> ['Suite.Case', 'Prefix/Suite.Case/param', ...]."""
    cases, suite = [], None
    for line in text.splitlines():
        name = line.split("#", 1)[0].rstrip()  # drop "  # GetParam() = ..." comments
        if not name.strip():
            continue
        if line.startswith(" "):
            if suite:
                cases.append(suite + name.strip())
        else:  # a suite line ends with '.'; anything else (gtest_main's banner) resets
            suite = name if name.endswith(".") else None
    return cases


def list_cases(binary: Path) -> list[str]:
    run = subprocess.run([str(binary), "--gtest_list_tests"], capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        raise RuntimeError(f"{binary} --gtest_list_tests exited {run.returncode}: {run.stderr[-2000:]}")
    return parse_gtest_list(run.stdout)


def collected_cases() -> list[str]:
    if not os.access(UNIT_TESTS, os.X_OK):
        return [ALL]
    try:
        return list_cases(UNIT_TESTS) or [ALL]
    except (OSError, RuntimeError, subprocess.TimeoutExpired):
        return [ALL]  # an unusable binary: the build replaces it, then everything runs


CASES = collected_cases()


@contextmanager
def build_lock():
    """One `make test` at a time in this checkout (pytest-xdist workers share it)."""
    key = hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]  # str hash() differs per process
    path = Path(tempfile.gettempdir()) / f"fmha_unit_tests_{key}.lock"
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def unit_tests() -> Path:
    """bin/unit_tests, brought up to date by `make test`; skips where nvcc, make or
    GoogleTest is missing (the skip, like a failure, is cached for the session)."""
    for tool in ("make", os.environ.get("NVCC", "nvcc")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found: cannot build bin/unit_tests")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    with build_lock():
        run = subprocess.run(["make", f"-j{min(os.cpu_count() or 2, 8)}", "test"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=1800)
    output = run.stdout + run.stderr
    if run.returncode != 0:
        missing = next((line for line in output.splitlines() if GTEST_MISSING in line), None)
        if missing:
            pytest.skip(missing)
        pytest.fail(f"`make test` failed ({run.returncode}):\n{output[-4000:]}", pytrace=False)
    return UNIT_TESTS


def run_unit_tests(binary: Path, gtest_filter: str = "*") -> tuple[subprocess.CompletedProcess, str]:
    run = subprocess.run([str(binary), f"--gtest_filter={gtest_filter}", "--gtest_color=no"],
                         capture_output=True, text=True, timeout=600)
    return run, run.stdout + run.stderr


def count(output: str, label: str) -> int:
    """The number in gtest's summary line `[  PASSED  ] N tests.` (label PASSED, SKIPPED, FAILED)."""
    found = re.search(rf"^\[\s*{label}\s*\] (\d+) tests?", output, re.MULTILINE)
    return int(found.group(1)) if found else 0


# --- the cases (GPU) ---------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.build
@pytest.mark.parametrize("case", CASES)
def test_unit(unit_tests, case):
    run, output = run_unit_tests(unit_tests, "*" if case == ALL else case)
    if run.returncode != 0:
        pytest.fail(f"bin/unit_tests --gtest_filter={case} exited {run.returncode}:\n{output[-6000:]}", pytrace=False)
    ran = re.search(r"^\[==========\] (\d+) tests? from", output, re.MULTILINE)
    if ran is None or int(ran.group(1)) == 0:
        pytest.fail(f"{case} is not a case of the rebuilt bin/unit_tests: run pytest again to collect its cases",
                    pytrace=False)
    if case != ALL and count(output, "SKIPPED"):
        reason = re.search(r": Skipped\n(.*)", output)
        pytest.skip(reason.group(1) if reason else "skipped by bin/unit_tests")


# --- the build (CPU) ---------------------------------------------------------------------

@pytest.mark.build
def test_make_test_builds_and_lists_the_cases(unit_tests):
    cases = list_cases(unit_tests)
    assert len(cases) >= MIN_CASES, cases
    assert len(set(cases)) == len(cases), "duplicate case names"
    if CASES != [ALL] and set(CASES) != set(cases):
        warnings.warn("bin/unit_tests changed since collection: run pytest again to collect its new cases")


@pytest.mark.build
def test_without_a_gpu_device_tests_skip_and_host_tests_pass(unit_tests, has_gpu):
    if has_gpu:
        pytest.skip("there is a GPU: the gpu-marked items run every case")
    run, output = run_unit_tests(unit_tests)
    assert run.returncode == 0, output[-6000:]
    assert count(output, "FAILED") == 0, output[-6000:]
    assert count(output, "SKIPPED") > 0 and "no CUDA device" in output, output[-3000:]
    assert count(output, "PASSED") > 0, "the host-only cases (layouts, key_limit, block schedule) run anywhere"


def test_parse_gtest_list():
    text = ("Running main() from gtest_main.cc\n"
            "KeyLimit.\n  PaddingIsTheKeyLengthOnEveryRow\n"
            "Mask/MaskApply.\n  MatchesThePredicate/causal  # GetParam() = causal\n"
            "Typed/0.  # TypeParam = float\n  Works\n")
    assert parse_gtest_list(text) == ["KeyLimit.PaddingIsTheKeyLengthOnEveryRow",
                                      "Mask/MaskApply.MatchesThePredicate/causal", "Typed/0.Works"]
