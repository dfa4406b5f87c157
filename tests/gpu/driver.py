"""Running bin/fmha.exe: one subprocess without colour; its output is read by contract.py."""

import os
import subprocess
from pathlib import Path

from .contract import LIST_ROW_RE, parse_output  # noqa: F401  (parse_output: bench/run.py's import)

RUN_TIMEOUT_S = 120


def run_fmha(exe: Path, args: list[str], timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1")  # stdout is a pipe anyway; be explicit
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env)


def describe(proc: subprocess.CompletedProcess) -> str:
    return f"$ {' '.join(proc.args)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


def registry_names(exe: Path) -> set[str]:
    """The kernel names of the binary's registry (-list-kernels needs no GPU)."""
    proc = run_fmha(exe, ["-list-kernels"])
    assert proc.returncode == 0, describe(proc)
    return set(LIST_ROW_RE.findall(proc.stdout))
