"""examples/capi_forward.c on a GPU, against the build's lib/libfmha.so: a C program plans and
runs a causal bf16 d = 128 problem whose V is all ones, and checks every output is 1.0."""

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_capi import build_c_example

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu


def test_c_client_runs_and_checks(tmp_path):
    lib = ROOT / "lib" / "libfmha.so"
    if not lib.is_file():
        pytest.skip("lib/libfmha.so is not built: run `make`")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    exe = build_c_example(lib.parent, tmp_path)
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    if result.returncode == 3:
        pytest.skip(f"no GPU to run on: {result.stderr.strip()}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ": 0 of " in result.stdout
