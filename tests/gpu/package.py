"""What the package's GPU tests need before they import it: torch with a CUDA device, the built
lib/libfmha.so, python/ on the path. Called at a test module's top: skips it with the reason."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_package():
    """(torch, fmha), or a module-level skip saying what is missing."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch", allow_module_level=True)
    if not (ROOT / "lib" / "libfmha.so").is_file():
        pytest.skip("lib/libfmha.so is not built: run `make`", allow_module_level=True)
    if str(ROOT / "python") not in sys.path:
        sys.path.insert(0, str(ROOT / "python"))
    import fmha
    return torch, fmha
