"""The GPU tier's fixtures for `pytest tests/gpu` (fmha_test.py imports the same ones), and
the partial build's skips: a package or autograd test whose problem no kernel of a filtered
build serves is skipped with the library's reason (manifest.partial_build_skip), not failed."""

import pytest

from .fixtures import exe, perf_record  # noqa: F401
from .manifest import library_config, partial_build_skip


def _gpu_arch() -> str | None:
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{major}.{minor}"
    except ImportError:
        pass
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.failed or call.excinfo is None:
        return
    reason = partial_build_skip(call.excinfo.value, library_config(), _gpu_arch)
    if reason is not None:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")
