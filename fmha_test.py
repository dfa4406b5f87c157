"""The GPU tier's entry (SPEC.md: `pytest fmha_test.py`): every generated kernel end to end
through bin/fmha.exe. The tests live in tests/gpu/ (its __init__.py maps the modules); this
file collects them all, so `pytest fmha_test.py -k d128` or `-m perf` work as before, and
`pytest tests/gpu` runs the same tests.

The kernels come from generated/manifest.json (written by `python3 setup.py`), never from a
list kept here. Every run parses the four `-v 0` lines (SPEC.md "Console output"), asserts the
checks passed and the Kernel line names the requested kernel, and records Tflop/s and GB/s
(written as CSV with `--perf-csv PATH`). `-save-tensors` runs are re-checked against a
float64 attention in NumPy, independent of the driver's own reference. The -m perf runs time a
few problems per kernel and assert a speed only against a stored baseline of the same GPU
(`--perf-baseline PATH`, bench/perf_baseline.py), never against a number written here.
"""

from tests.gpu.fixtures import exe, perf_record  # noqa: F401
from tests.gpu.test_dispatch import *  # noqa: F401,F403
from tests.gpu.test_matrix import *  # noqa: F401,F403
from tests.gpu.test_perf import *  # noqa: F401,F403
from tests.gpu.test_save_tensors import *  # noqa: F401,F403
