"""bin/fmha.exe's command line without a GPU: -help, bad arguments, no-device exit, -list-kernels.

Runs the `fmha_exe` fixture's binary (conftest.py): $FMHA_EXE, bin/fmha.exe, or a small
kernel subset built for the session where neither exists (CI). SPEC.md's exit codes: 0 ok,
1 check failed, 2 bad arguments / no kernel fits, 3 no CUDA device / CUDA error.
"""

import os
import subprocess

import pytest

from generator import enumerate as enum
from tests.gpu.contract import DEFAULT_EPSILON, HELP_EPSILON_RE, parse_kernel_table


@pytest.fixture(scope="module")
def fmha(fmha_exe):
    """fmha(*args): run the binary without colour, capturing its output."""
    env = dict(os.environ, NO_COLOR="1")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(fmha_exe), *args], capture_output=True, text=True, timeout=120, env=env)

    return run


@pytest.fixture(scope="module")
def kernel_table(fmha) -> list[dict]:
    """-list-kernels of the binary, one dict a row (tests/gpu/contract.py)."""
    r = fmha("-list-kernels")
    assert r.returncode == 0, r.stderr
    return parse_kernel_table(r.stdout)


@pytest.mark.parametrize("flag", ["-help", "--help"])
def test_help_prints_usage_and_exits_0(flag, fmha):
    r = fmha(flag)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: fmha.exe")
    for documented in ("-causal-mask", "-gqa", "-separate-q-k-v", "-save-tensors", "-skip-checks", "(n/a)",
                       "-sliding-window-size", "-bidirectional-sliding-window-mask", "-chunked-attention-size",
                       "-softcapping-scale-bmm1", "-alibi", "-use-attention-sinks", "-save-softmax",
                       "-custom-mask", "-attention-bias", "-attention-bias-shape", "-paged-kv",
                       "-tokens-per-block", "-packed-qkv"):
        assert documented in r.stdout


def test_help_wins_over_bad_flags(fmha):
    assert fmha("-b", "0", "-help").returncode == 0


def test_help_states_the_default_epsilon(fmha):
    """The defaults -help states are contract.py's (test_contract.py: and src/cli.cpp's)."""
    stated = HELP_EPSILON_RE.search(fmha("-help").stdout)
    assert stated and {dtype: float(value) for dtype, value in stated.groupdict().items()} == DEFAULT_EPSILON


BAD_ARGS = {
    "unknown flag": (["-no-such-flag"], "unknown flag"),
    "missing value": (["-b"], "needs a value"),
    "non-numeric": (["-s", "abc"], "expects an integer"),
    "trailing junk": (["-d", "64x"], "expects an integer"),
    "zero batch": (["-b", "0"], "-b must be between"),
    "negative heads": (["-h", "-4"], "-h must be between"),
    "head size too big": (["-d", "513"], "-d must be between"),
    "min-s above s": (["-s", "128", "-min-s", "256"], "-min-s 256 is larger than -s 128"),
    "s-q above s": (["-s", "128", "-s-q", "256", "-separate-q-k-v"], "-s-q 256 is larger"),
    "h not a multiple of h_kv": (["-h", "16", "-gqa", "3"], "not a multiple"),
    "packed QKV with s_q < s": (["-s", "128", "-s-q", "64"], "packed QKV needs s_q == s and dv == d"),
    "packed QKV with dv != d": (["-d", "128", "-dv", "64"], "packed QKV needs"),
    "Q+KV with dv != d": (["-d", "128", "-dv", "64", "-contiguous-q-kv"], "contiguous Q + KV needs dv == d"),
    "verbosity": (["-v", "2"], "-v must be between 0 and 1"),
    "two dtypes": (["-fp16", "-bf16"], "cannot be combined"),
    "two layouts": (["-contiguous-q-kv", "-separate-q-k-v"], "cannot be combined"),
    "mqa and gqa": (["-mqa", "-gqa", "2"], "cannot be combined"),
    "epsilon not positive": (["-epsilon", "0"], "-epsilon must be > 0"),
    "scale not finite": (["-scale-bmm1", "inf"], "expects a finite number"),
    "negative seed": (["-seed", "-1"], "non-negative integer"),
    "zero runs": (["-runs", "0"], "-runs must be between"),
    "32-bit overflow": (["-b", "65535", "-s", "1048576"], "overflow 32-bit indexing"),
    "fix-s against min-s": (["-fix-s", "-min-s", "4"], "-fix-s"),
    "unknown kernel": (["-kernel", "no_such_kernel"], "no such kernel"),
    "alibi with softcapping": (["-alibi", "-softcapping-scale-bmm1", "30"],
                               "-alibi and -softcapping-scale-bmm1 cannot be combined"),
    "e4m3 fp16 out": (["-e4m3", "-fp16-output"], "no kernel writes O in fp16 yet"),
    "bwd head size": (["-bwd", "-d", "100"], "-bwd: d and dv multiples of 8 up to 256 only (got d 100, dv 100)"),
    "bwd e4m3": (["-bwd", "-e4m3"], "-bwd: fp16 or bf16 inputs only"),
    "bwd bias": (["-bwd", "-attention-bias"], "-bwd: no bias yet"),
    "bwd custom mask": (["-bwd", "-custom-mask"], "-bwd: no custom mask yet"),
    "bwd paged": (["-bwd", "-paged-kv"], "-bwd: not over a paged KV cache"),
    "deterministic alone": (["-deterministic"], "-deterministic applies to the backward pass: add -bwd"),
    "dropout one": (["-dropout", "1"], "-dropout must be in [0, 1), got 1"),
    "dropout negative": (["-dropout", "-0.1"], "-dropout must be in [0, 1), got -0.1"),
    "dropout word": (["-dropout", "half"], "-dropout expects a finite number, got 'half'"),
    "dropout e4m3": (["-dropout", "0.1", "-e4m3"], "-dropout: fp16 and bf16 inputs only"),
    "dropout alibi": (["-dropout", "0.1", "-alibi"], "-dropout: not with a score modifier"),
    "dropout custom mask": (["-dropout", "0.1", "-custom-mask"], "-dropout: not with a score modifier"),
    "bf16 output of fp16": (["-bf16-output"], "-bf16-output is for e4m3 inputs"),
    "bf16 output": (["-bf16", "-fp16-output"], "-fp16-output is for e4m3 inputs"),
    "two outputs": (["-e4m3", "-bf16-output", "-fp16-output"], "cannot be combined"),
    "e4m3 bias": (["-e4m3", "-bf16-output", "-attention-bias"], "no e4m3 kernel takes one"),
    "e4m3 bias shape": (["-e4m3", "-bf16-output", "-attention-bias-shape", "b1"], "no e4m3 kernel takes one"),
    "e4m3 and bf16": (["-e4m3", "-bf16"], "cannot be combined"),
    # an e4m3 KV cache under 16-bit queries: its own tensors, forward only
    "kv e4m3 with e4m3": (["-e4m3", "-kv-e4m3", "-separate-q-k-v"], "-kv-e4m3 is for fp16/bf16 queries"),
    "kv e4m3 packed": (["-kv-e4m3"], "-kv-e4m3 needs -separate-q-k-v or -paged-kv"),
    "kv e4m3 contiguous": (["-kv-e4m3", "-contiguous-q-kv"], "-kv-e4m3 needs -separate-q-k-v or -paged-kv"),
    "kv e4m3 bwd": (["-kv-e4m3", "-bwd", "-separate-q-k-v"], "-kv-e4m3: forward only"),
    "window zero": (["-sliding-window-size", "0"], "-sliding-window-size must be between 1"),
    "window larger than s": (["-s", "128", "-sliding-window-size", "129"], "-sliding-window-size 129 is larger than -s 128"),
    "bidirectional without a window": (["-bidirectional-sliding-window-mask"], "needs -sliding-window-size"),
    "bidirectional and causal": (["-sliding-window-size", "8", "-bidirectional-sliding-window-mask", "-causal-mask"],
                                 "cannot be combined"),
    "chunk not a power of two": (["-chunked-attention-size", "96"], "must be a power of two, got 96"),
    "chunk zero": (["-chunked-attention-size", "0"], "-chunked-attention-size must be between 1"),
    "window and chunk": (["-sliding-window-size", "8", "-chunked-attention-size", "64"], "cannot be combined"),
    "custom mask and causal": (["-custom-mask", "-causal-mask"], "-causal-mask and -custom-mask cannot be combined"),
    "custom mask and window": (["-custom-mask", "-sliding-window-size", "8"], "cannot be combined"),
    "custom mask and alibi": (["-custom-mask", "-alibi"], "-alibi and -custom-mask cannot be combined"),
    "bias and softcapping": (["-attention-bias", "-softcapping-scale-bmm1", "30"], "cannot be combined"),
    "bias shape and alibi": (["-alibi", "-attention-bias-shape", "1h"], "-alibi and -attention-bias-shape cannot be combined"),
    "bias shape and custom mask": (["-attention-bias-shape", "11", "-custom-mask"],
                                   "-attention-bias-shape and -custom-mask cannot be combined"),
    "bias shape unknown": (["-attention-bias-shape", "hb"], "-attention-bias-shape must be bh, b1, 1h or 11"),
    "bias shape missing": (["-attention-bias-shape"], "needs a value"),
    # a paged KV cache is a layout of its own: Q apart, K and V in the pool's blocks
    "paged kv with packed qkv": (["-paged-kv", "-packed-qkv"], "-packed-qkv and -paged-kv cannot be combined"),
    "paged kv with separate": (["-separate-q-k-v", "-paged-kv"], "cannot be combined"),
    "paged kv with contiguous": (["-paged-kv", "-contiguous-q-kv"], "cannot be combined"),
    "tokens per block without paged kv": (["-tokens-per-block", "64"], "-tokens-per-block needs -paged-kv"),
    "tokens per block not a size": (["-paged-kv", "-tokens-per-block", "24"], "must be 16, 32, 64 or 128"),
    "tokens per block 256": (["-paged-kv", "-tokens-per-block", "256"], "must be 16, 32, 64 or 128"),
    "tokens per block zero": (["-paged-kv", "-tokens-per-block", "0"], "between 1 and"),
    "softcapping zero": (["-softcapping-scale-bmm1", "0"], "-softcapping-scale-bmm1"),
    "softcapping negative": (["-softcapping-scale-bmm1", "-5"], "-softcapping-scale-bmm1"),
}


@pytest.mark.parametrize("args,message", BAD_ARGS.values(), ids=BAD_ARGS.keys())
def test_bad_arguments_exit_2_with_one_line(args, message, fmha):
    r = fmha(*args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert message in lines[0]
    assert r.stdout == ""


def test_unwritable_save_dir_exits_2(tmp_path, fmha):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = fmha("-save-tensors", str(blocker / "sub"))
    assert r.returncode == 2, r.stderr
    assert "-save-tensors: cannot create directory" in r.stderr


def test_list_kernels_needs_no_gpu(fmha):
    r = fmha("-list-kernels")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["name", "family", "sm", "dtype"]
    assert lines[-1].endswith(" kernels")
    assert int(lines[-1].split()[0]) == len(lines) - 2


@pytest.mark.parametrize("args", [[], ["-causal-mask", "-b", "2", "-s", "256", "-v", "1"]])
def test_gpu_run_without_gpu_exits_3(args, fmha, kernel_table, has_gpu):
    """A problem that a row of the build fits (its smallest fp16 head size) reaches the device."""
    if has_gpu:
        pytest.skip("a GPU is present: this checks the no-device path")
    sizes = sorted(fp16_head_sizes(kernel_table, tma=False) | fp16_head_sizes(kernel_table, tma=True))
    if not sizes:
        pytest.skip("no fp16 kernel in this build")
    r = fmha("-d", str(sizes[0]), *args)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("CUDA error: no ")  # no driver / no device, not "upgrade your driver"
    assert "(cudaGetDeviceCount: " in r.stderr
    assert len(r.stderr.splitlines()) == 1


@pytest.mark.parametrize("args", [["-d", "100"], ["-d", "64", "-dv", "40", "-separate-q-k-v"]],
                         ids=["head size without a kernel", "dv without a kernel"])
def test_no_kernel_fits_exits_2(args, fmha):
    """Decided before the device is asked for: no sm_ in the reason."""
    r = fmha(*args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert lines[0].startswith("error: no kernel fits dtype=fp16"), r.stderr
    assert "sm_" not in lines[0]  # decided without a device
    assert lines[1] == "closest kernels:" and lines[2].startswith("  fmha_v2_flash_")


def test_kv_e4m3_beyond_decode_exits_2(fmha):
    """An e4m3 KV cache is the decode family's alone: 32 query rows find no row, and the
    reason names the KV dtype."""
    r = fmha("-kv-e4m3", "-separate-q-k-v", "-s", "64", "-s-q", "32")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert lines[0].startswith("error: no kernel fits dtype=fp16 kv=e4m3 acc=fp16 d=128 "), r.stderr
    assert "sm_" not in lines[0]


def fp16_head_sizes(table: list[dict], tma: bool) -> set[int]:
    """Head sizes (dv = d) of the rows that serve the default problem (fp16, padding mask) and
    do (not) load through TMA."""
    return {int(r["d"]) for r in table if r["dtype"] == "fp16" and r["d"] == r["dv"]
            and "padding" in r["masks"].split(",") and (r["tma"] == "true") == tma}


def test_use_tma_leaves_no_row_without_tma(fmha, kernel_table):
    """-use-tma on a head size whose rows all load without TMA: exit 2 before the device is
    asked, the closest rows of that size failing on TMA alone."""
    plain = sorted(fp16_head_sizes(kernel_table, tma=False) - fp16_head_sizes(kernel_table, tma=True))
    if not plain:
        pytest.skip("every fp16 head size of this build has a TMA row")
    d = plain[0]
    r = fmha("-use-tma", "-d", str(d))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"error: no kernel fits dtype=fp16 acc=fp16 d={d} ") and "sm_" not in lines[0]
    assert lines[0].split("(")[0].rstrip().endswith(" tma") and lines[1] == "closest kernels:", r.stderr
    tma_rows = {row["name"] for row in kernel_table if row["tma"] == "true"}
    closest = dict(line.strip().split(": ", 1) for line in lines[2:])
    assert closest and all("no TMA loads (-use-tma)" in why for name, why in closest.items() if name not in tma_rows)
    fits_but_tma = [row["name"] for row in kernel_table if row["family"] == "flash" and row["dtype"] == "fp16"
                    and row["acc"] == "fp16" and row["d"] == row["dv"] == str(d)]
    assert [closest.get(name) for name in fits_but_tma] == ["no TMA loads (-use-tma)"] * len(fits_but_tma), r.stderr


def test_use_tma_passes_dispatch_with_a_tma_row(fmha, kernel_table, has_gpu):
    """-use-tma on a head size with a TMA row gets past dispatch to the device: without a GPU,
    exit 3 (with one, the GPU tier's test_use_tma runs it)."""
    if has_gpu:
        pytest.skip("a GPU is present: this checks that dispatch lets the problem through to the device")
    tma = sorted(fp16_head_sizes(kernel_table, tma=True))
    if not tma:
        pytest.skip("no TMA row in this build (the ws family needs TORCH_CUDA_ARCH_LIST with 9.0)")
    r = fmha("-use-tma", "-d", str(tma[0]))
    assert r.returncode == 3 and r.stderr.startswith("CUDA error: "), (r.returncode, r.stdout, r.stderr)


def test_list_kernels_columns(kernel_table):
    """The tma, sched, max_s_q and min_s_kv columns follow the family."""
    rows = kernel_table
    assert all(r["tma"] == ("true" if r["family"] == "ws" else "false") for r in rows)
    # The archs a kernel was compiled for: ws for sm_90a alone, the others from sm_80 up.
    assert all(r["archs"] == "sm_90a" if r["family"] == "ws" else
               all(a.startswith("sm_") and int(a[3:]) >= 80 for a in r["archs"].split(",")) for r in rows)
    # SCHEDULING_MODE picks one scheduler for every ws kernel of a build; the others are grids.
    ws_sched = {r["sched"] for r in rows if r["family"] == "ws"}
    assert len(ws_sched) <= 1 and ws_sched <= {"persistent", "grid"}, ws_sched
    assert all(r["sched"] == "grid" for r in rows if r["family"] != "ws")
    # Only the decode family limits s_q; only its mma path (warps 1x4) asks for a long cache,
    # but over an e4m3 cache (dtype bf16_kve4m3: it has no warp path).
    assert all(r["max_s_q"] == ("16" if r["family"] == "decode" else "-") for r in rows)
    assert all(r["min_s_kv"] == (str(enum.DECODE_MMA_MIN_S_KV) if r["family"] == "decode" and r["warps"] == "1x4"
                                 and "_kv" not in r["dtype"] else "-") for r in rows)
