"""-m perf: the timed problems of perf_cases.py. A run asserts a speed only against a stored
baseline of the same GPU (--perf-baseline, bench/perf_baseline.py), never against a number
written here; a kernel without a timed problem is one skipped item that says why."""

import warnings

import pytest

from bench import perf_baseline as perf

from .cases import Case
from .driver import describe, parse_output, run_fmha
from .manifest import kernels_or_skip, require_arch
from .perf_cases import PERF_FLAGS, perf_cases

KERNELS = kernels_or_skip()
PERF_CASES, UNTIMED = perf_cases(KERNELS)


def params():
    timed = [pytest.param(c, id=f"{c.kernel['name'].removeprefix('fmha_v2_')}-{c.config}") for c in PERF_CASES]
    untimed = [pytest.param(None, id=f"{name.removeprefix('fmha_v2_')}-untimed", marks=pytest.mark.skip(reason=why))
               for name, why in UNTIMED.items()]
    return timed + untimed


@pytest.mark.gpu
@pytest.mark.perf
@pytest.mark.parametrize("case", params())
def test_perf(case: Case, exe, gpu_sm, perf_record, perf_baseline, request):
    require_arch(case.kernel, gpu_sm)
    name = case.kernel["name"]

    def run() -> dict:
        proc = run_fmha(exe, [*case.args(), "-kernel", name, *PERF_FLAGS])
        assert proc.returncode == 0, describe(proc)
        fields = parse_output(proc.stdout)
        assert fields["kernel"] == name, describe(proc)
        return fields

    key = (name, case.config)
    expected = perf_baseline.expected(key) if perf_baseline else None
    tolerance = perf_baseline.tolerance if perf_baseline else perf.DEFAULT_TOLERANCE
    fields, runs = perf.measure(run, expected, tolerance)
    perf_record(request.node, case, fields, runs)
    if expected is None:
        if perf_baseline and not perf_baseline.update:
            warnings.warn(perf.MissingBaselineWarning(f"{perf_baseline.path} has no entry for {name} {case.config}"))
        return
    failure = perf.regression_message(float(fields["tflops"]), expected, tolerance)
    if failure:
        pytest.fail(f"{name} {case.config}: {failure}; best of {runs} runs", pytrace=False)
