"""bench/perf_baseline.py without a GPU: the regression check, the retry, the end table's statuses,
the baseline file and the GPU-name refusal, on synthetic numbers. The last test runs the
whole -m perf flow of fmha_test.py with a fake fmha.exe and a fake nvidia-smi."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench import perf_baseline as perf
from bench.perf_baseline import Baseline, BaselineError, Speed

REPO = Path(__file__).resolve().parent.parent
GPU = "NVIDIA H200"
KERNEL = "fmha_v2_flash_fp16_d128_128x64_w4x1_sm80"
CONFIG = "causal-packed_qkv-mha-h16-b16_s1024"


def check(tflops: float, baseline: float = 100.0, tolerance: float = 0.05) -> str | None:
    return perf.regression_message(tflops, baseline, tolerance)


# ---------------------------------------------------------------------------------------------
# One run against its entry.

def test_ten_percent_slower_fails():
    message = check(90.0)
    assert message is not None
    assert "10.0% below" in message and "100.00" in message and "5%" in message


def test_two_percent_slower_passes():
    assert check(98.0) is None


@pytest.mark.parametrize("baseline, tolerance", [(100.0, 0.05), (331.27, 0.05), (287.93, 0.03), (17.5, 0.1)])
def test_exactly_at_the_tolerance_passes(baseline, tolerance):
    assert check(baseline * (1 - tolerance), baseline, tolerance) is None
    assert check(baseline * (1 - tolerance) * 0.999, baseline, tolerance) is not None


def test_faster_passes():
    assert check(150.0) is None


def test_zero_tolerance_fails_any_slowdown():
    assert check(99.99, tolerance=0.0) is not None
    assert check(100.0, tolerance=0.0) is None


class Runs:
    """A fake measurement: returns the given Tflop/s one after another, counting the calls."""

    def __init__(self, *tflops: float):
        self.tflops, self.calls = list(tflops), 0

    def __call__(self) -> dict:
        self.calls += 1
        return {"tflops": f"{self.tflops.pop(0):.2f}", "gbs": "1.00", "call": self.calls}


def test_slow_then_fine_passes_on_the_retry():
    runs = Runs(80.0, 99.0)
    fields, count = perf.measure(runs, 100.0, 0.05)
    assert (count, runs.calls, fields["call"]) == (2, 2, 2)
    assert check(float(fields["tflops"])) is None


def test_slow_twice_fails_with_the_better_run():
    runs = Runs(85.0, 80.0)
    fields, count = perf.measure(runs, 100.0, 0.05)
    assert (count, runs.calls, fields["tflops"]) == (2, 2, "85.00")
    assert "15.0% below" in check(float(fields["tflops"]))


@pytest.mark.parametrize("baseline", [100.0, None])
def test_no_retry_when_fine_or_nothing_to_compare(baseline):
    runs = Runs(70.0 if baseline is None else 97.0)
    assert perf.measure(runs, baseline, 0.05)[1] == 1 and runs.calls == 1


# ---------------------------------------------------------------------------------------------
# The session against the whole baseline (the end table).

def results(*rows: tuple) -> pd.DataFrame:
    return pd.DataFrame([dict(kernel=k, config=c, tflops=t, runs=r) for k, c, t, r in rows])


def test_compare_reports_every_status_and_both_missing_directions():
    entries = {("k_ok", CONFIG): Speed(100.0, 1.0), ("k_slow", CONFIG): Speed(100.0, 1.0),
               ("k_fast", CONFIG): Speed(100.0, 1.0), ("k_gone", CONFIG): Speed(100.0, 1.0)}
    now = results(("k_ok", CONFIG, 96.0, 1), ("k_slow", CONFIG, 90.0, 2), ("k_fast", CONFIG, 120.0, 1),
                  ("k_new", CONFIG, 50.0, 1))
    table = perf.compare(now, entries, 0.05)
    status = dict(zip(table["kernel"], table["status"]))
    assert status == {"k_ok": perf.OK, "k_slow": perf.SLOWER, "k_fast": perf.FASTER,
                      "k_new": perf.NO_ENTRY, "k_gone": perf.NOT_RUN}
    text = perf.format_table(table)
    assert "-10.0%" in text and "(best of 2)" in text and "+20.0%" in text
    assert perf.counts_line(table) == "4 runs: 1 ok, 1 SLOWER, 1 faster, 1 no baseline, 1 not run"


def test_compare_without_a_baseline_lists_the_runs():
    table = perf.compare(results((KERNEL, CONFIG, 300.0, 1)), {}, 0.05)
    assert list(table["status"]) == [perf.NO_ENTRY]
    assert "300.00" in perf.format_table(table)


# ---------------------------------------------------------------------------------------------
# The file, the GPU name.

def test_gpu_slug():
    assert perf.gpu_slug("NVIDIA H200") == "nvidia-h200"
    assert perf.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert perf.default_path("NVIDIA H200") == REPO / "bench" / "baselines" / "nvidia-h200.csv"


def test_write_then_read_round_trips(tmp_path):
    baseline = Baseline(GPU, {(KERNEL, CONFIG): Speed(331.27, 1234.5),
                              ("fmha_v2_flash_bf16_d64_128x64_w4x1_sm80", "padding-packed_qkv-mha-h32-b4_s4096"):
                                  Speed(287.93, 98.01)})
    path = tmp_path / "sub" / "nvidia-h200.csv"
    perf.write_baseline(path, baseline)
    assert perf.read_baseline(path) == baseline


def test_update_overwrites_runs_and_keeps_the_rest():
    old = Baseline(GPU, {("a", CONFIG): Speed(1.0, 1.0), ("b", CONFIG): Speed(2.0, 2.0)})
    now = pd.DataFrame([dict(kernel="b", config=CONFIG, tflops=3.0, gbs=3.0),
                        dict(kernel="c", config=CONFIG, tflops=4.0, gbs=4.0)])
    assert perf.updated(old, GPU, now).entries == {("a", CONFIG): Speed(1.0, 1.0), ("b", CONFIG): Speed(3.0, 3.0),
                                                   ("c", CONFIG): Speed(4.0, 4.0)}
    assert perf.updated(None, GPU, now).gpu == GPU


def test_another_gpus_baseline_is_refused(tmp_path):
    path = tmp_path / "nvidia-h200.csv"
    perf.write_baseline(path, Baseline(GPU, {(KERNEL, CONFIG): Speed(300.0, 1.0)}))
    for update in (False, True):  # neither compared with nor overwritten
        with pytest.raises(BaselineError, match="'NVIDIA H200' but this GPU is 'NVIDIA H100 80GB HBM3'.*"
                                                "not comparable.*nvidia-h100-80gb-hbm3.csv"):
            perf.open_check(path, "NVIDIA H100 80GB HBM3", 0.05, update)
    assert perf.open_check(path, GPU, 0.05, False).expected((KERNEL, CONFIG)) == 300.0


def test_open_check(tmp_path):
    missing = tmp_path / "none.csv"
    with pytest.raises(BaselineError, match="no such file.*--update-baseline"):
        perf.open_check(missing, GPU, 0.05, update=False)
    created = perf.open_check(missing, GPU, 0.05, update=True)
    assert created.stored is None and created.expected((KERNEL, CONFIG)) is None
    with pytest.raises(BaselineError, match="--perf-tolerance"):
        perf.open_check(missing, GPU, 1.5, update=True)
    not_a_baseline = tmp_path / "perf.csv"
    not_a_baseline.write_text("test,kernel,tflops\nx,y,1.0\n")
    with pytest.raises(BaselineError, match="not a perf baseline.*config"):
        perf.open_check(not_a_baseline, GPU, 0.05, update=False)


# ---------------------------------------------------------------------------------------------
# The flow end to end: fmha_test.py -m perf through conftest.py, with fakes for the GPU.

# Answers -list-kernels from the manifest beside it and a perf run with the four compact lines,
# at 300 Tflop/s times $FAKE_SPEED.
FAKE_FMHA = r"""
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
if "-list-kernels" in args:
    manifest = Path(__file__).resolve().parent.parent / "generated" / "manifest.json"
    print("\n".join(k["name"] + "  row" for k in json.loads(manifest.read_text())["kernels"]))
    sys.exit(0)
arg = dict(zip(args, args[1:]))
mask = "causal" if "-causal-mask" in args else "padding"
print(f"v1=0 il=0 s_q={arg['-s']}, s={arg['-s']} b={arg['-b']} h={arg['-h']}/{arg['-h']} d={arg['-d']}/{arg['-d']}"
      f" dtype=FP16, output_dtype=FP16, flash_attn=true, warp_spec=false, mask={mask}, alibi=false,"
      " attn=mha, qkv_layout=packed_qkv, wm=4 wn=1")
print(f"Kernel........: {arg['-kernel']}")
print("Checks........: DISABLED")
print(f"Elapsed ......: 100.000000 us (n/a), {300 * float(os.environ['FAKE_SPEED']):.2f} Tflop/s, 500.00 GB/s")
"""
FAKE_NVIDIA_SMI = r"""
import os, sys
print("9.0" if sys.argv[1] == "--query-gpu=compute_cap" else os.environ["FAKE_GPU"])
"""


def fake_tools(root: Path, kernels: list[dict]) -> dict:
    """bin/fmha.exe + generated/manifest.json (fmha_test.py reads the manifest beside the
    binary) and an nvidia-smi that answers the queries conftest.py makes; returns the env."""
    for sub in ("bin", "generated", "path"):
        (root / sub).mkdir()
    (root / "generated" / "manifest.json").write_text(json.dumps({"kernels": kernels}))
    scripts = {root / "bin" / "fmha.exe": FAKE_FMHA, root / "path" / "nvidia-smi": FAKE_NVIDIA_SMI}
    for path, body in scripts.items():
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return dict(os.environ, FMHA_EXE=str(root / "bin" / "fmha.exe"), FAKE_GPU=GPU, FAKE_SPEED="1",
                PATH=f"{root / 'path'}{os.pathsep}{os.environ['PATH']}")


def kernel(d: int) -> dict:
    return dict(name=f"fmha_v2_flash_fp16_d{d}_128x64_w4x1_sm80", family="flash", dtype="fp16", acc="fp16",
                d=d, dv=d, masks=["padding", "causal"], archs=["9.0"], sm=80, warps_m=4, warps_n=1,
                block_m=128, block_n=64, max_rows=0, min_s_kv=0, variants=["softcap", "alibi", "sinks", "softmax_stats"])


def test_perf_flow_end_to_end(tmp_path):
    env = fake_tools(tmp_path, [kernel(64), kernel(128), kernel(96)])  # d=96: not a core head size
    baseline = tmp_path / "baselines" / "nvidia-h200.csv"

    def run_perf(*args: str, **env_over) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pytest", "fmha_test.py", "-m", "perf", "-p", "no:cacheprovider", *args]
        return subprocess.run(command, cwd=REPO, env={**env, **env_over}, capture_output=True, text=True, timeout=300)

    wrote = run_perf("--perf-baseline", str(baseline), "--update-baseline")
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    stored = perf.read_baseline(baseline)
    assert stored.gpu == GPU and len(stored.entries) == 8  # 2 core kernels x 2 masks x 2 lengths
    assert stored.entries[(kernel(64)["name"], "causal-packed_qkv-mha-h32-b4_s4096")] == Speed(300.0, 500.0)

    slow = run_perf("--perf-baseline", str(baseline), "-k", "d64", FAKE_SPEED="0.9")
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "10.0% below the baseline's 300.00 (tolerance 5%); best of 2 runs" in slow.stdout
    assert "4 runs: 4 SLOWER, 4 not run" in slow.stdout

    perf.write_baseline(baseline, Baseline(GPU, dict(list(stored.entries.items())[1:])))
    partial = run_perf("--perf-baseline", str(baseline), FAKE_SPEED="0.98")
    assert partial.returncode == 0, partial.stdout + partial.stderr
    assert "8 runs: 7 ok, 1 no baseline" in partial.stdout and "MissingBaselineWarning" in partial.stdout

    other = run_perf("--perf-baseline", str(baseline), FAKE_GPU="NVIDIA H100 80GB HBM3")
    assert other.returncode == pytest.ExitCode.USAGE_ERROR
    assert "not comparable" in other.stderr
