"""A filtered build's package tests skip where no kernel serves them (tests/gpu/conftest.py,
manifest.partial_build_skip); a whole build's fail. No GPU needed."""

import json
import textwrap
from pathlib import Path

import pytest

from tests.gpu.manifest import partial_build_skip

pytest_plugins = "pytester"
REPO = Path(__file__).resolve().parent.parent
NO_KERNEL = NotImplementedError("fmha_forward: no kernel of this build serves dtype bf16, d 64, dv 64, mask causal, softcap")
WHOLE = {"fmha_filter": [], "torch_cuda_arch_list": ["9.0"]}
FILTERED = {"fmha_filter": ["*ws_bf16_d128_*"], "torch_cuda_arch_list": ["9.0"]}


def test_filtered_build_skips_with_the_filter_and_the_reason():
    reason = partial_build_skip(NO_KERNEL, FILTERED, lambda: "9.0")
    assert reason.startswith("a partial build (FMHA_FILTER=*ws_bf16_d128_*): ")
    assert "d 64, dv 64, mask causal, softcap" in reason


def test_an_arch_list_without_the_gpu_skips():
    config = {"fmha_filter": [], "torch_cuda_arch_list": ["8.0", "8.6+PTX"]}
    assert "TORCH_CUDA_ARCH_LIST=8.0;8.6+PTX on a 9.0 GPU" in partial_build_skip(NO_KERNEL, config, lambda: "9.0")
    assert partial_build_skip(NO_KERNEL, {"torch_cuda_arch_list": ["9.0a"]}, lambda: "9.0") is None


@pytest.mark.parametrize("exc, config", [
    (NO_KERNEL, WHOLE),                                                        # whole build: a failure
    (NotImplementedError("fmha: window_size=(3, 4) (only (w, 0), (w, w), causal or none)"), FILTERED),
    (RuntimeError("no kernel of this build serves dtype bf16"), FILTERED),     # not the library's NOT_SUPPORTED
    (AssertionError("out: max error 0.5 > 0.02"), FILTERED),
])
def test_other_failures_stay_failures(exc, config):
    assert partial_build_skip(exc, config, lambda: "9.0") is None


@pytest.mark.parametrize("config, outcome", [(FILTERED, "skipped"), (WHOLE, "failed")])
def test_the_hook_turns_a_filtered_builds_no_kernel_into_a_skip(pytester, monkeypatch, config, outcome):
    tree = pytester.mkdir("build")
    (tree / "generated").mkdir()
    (tree / "generated" / "manifest.json").write_text(json.dumps({"config": config, "kernels": []}))
    monkeypatch.setenv("FMHA_LIBRARY", str(tree / "lib" / "libfmha.so"))
    pytester.syspathinsert(REPO)
    # (a 9.0 GPU, not torch's: pytester's in-process runs cannot import torch twice)
    pytester.makeconftest("import tests.gpu.conftest as gpu\n"
                          "gpu._gpu_arch = lambda: '9.0'\n"
                          "from tests.gpu.conftest import pytest_runtest_makereport  # noqa: F401\n")
    pytester.makepyfile(textwrap.dedent(f"""
        def test_no_kernel():
            raise NotImplementedError({str(NO_KERNEL)!r})

        def test_wrong_numbers():
            assert 1 == 2
    """))
    result = pytester.runpytest_inprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(**{outcome: 1, "failed": 1} if outcome == "skipped" else {"failed": 2})
    if outcome == "skipped":
        result.stdout.fnmatch_lines(["*a partial build (FMHA_FILTER=*ws_bf16_d128_*): fmha_forward: no kernel*"])
