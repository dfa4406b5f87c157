"""Every kernel of the manifest on its case table (matrix.py): each run passes the driver's
checks, names the requested kernel, and reports on its first line the problem asked for; its
Tflop/s and GB/s go to the session's perf table (--perf-csv)."""

import pytest

from .cases import Case
from .driver import describe, parse_output, run_fmha
from .manifest import dtype_label, kernels_or_skip, require_arch, warp_spec
from .matrix import build_cases

KERNELS = kernels_or_skip()
CASES = build_cases(KERNELS)


def param(case: Case):
    return pytest.param(case, id=case.id, marks=[pytest.mark.slow] if case.shape.large else [])


@pytest.mark.gpu
@pytest.mark.parametrize("case", [param(c) for c in CASES])
def test_kernel(case: Case, exe, gpu_sm, perf_record, request):
    require_arch(case.kernel, gpu_sm)
    proc = run_fmha(exe, [*case.args(), "-kernel", case.kernel["name"], "-v", "0", "-runs", "1", "-warm-up-runs", "0"])
    assert proc.returncode == 0, describe(proc)
    fields = parse_output(proc.stdout)
    assert fields["checks"] == "SUCCESS", describe(proc)
    assert fields["kernel"] == case.kernel["name"], describe(proc)
    # The first line reports the problem we asked for.
    k, shape = case.kernel, case.shape
    expected = {
        "s": shape.s, "s_q": shape.s_q or shape.s, "b": shape.b, "h": case.h, "h_kv": case.h_kv,
        "d": k["d"], "dv": k["dv"], "dtype": dtype_label(k), "mask": case.mask,
        "attn": case.attn, "qkv_layout": case.layout, "wm": k["warps_m"], "wn": k["warps_n"],
        "warp_spec": warp_spec(k),
        "output_dtype": {"e4m3": "E4M3" if case.e4m3_out else "BF16", "bf16": "BF16"}.get(k["dtype"], "FP16"),
    }
    got = {key: type(value)(fields[key]) for key, value in expected.items()}
    assert got == expected, describe(proc)
    perf_record(request.node, case, fields)
