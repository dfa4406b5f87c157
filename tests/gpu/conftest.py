"""The GPU tier's fixtures for `pytest tests/gpu` (fmha_test.py imports the same ones)."""

from .fixtures import exe, perf_record  # noqa: F401
