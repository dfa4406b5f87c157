"""The build: generated code compiles, make is incremental, fmha.exe lists its kernels.

Runs in a temporary copy of the repository so the developer's generated/ and obj/ are left
alone. Two small builds: one flash kernel for sm80, and one ws kernel for sm_90a (nvcc
compiles sm_90a without a GPU), each with the driver (a few minutes on 2 cores at most).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD_INPUTS

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ("TORCH_CUDA_ARCH_LIST", "ENABLE_HMMA_FP32", "ENABLE_SM89_QMMA", "ENABLE_SM100",
         "ENABLE_SM120", "SCHEDULING_MODE", "USE_CCACHE", "FMHA_FILTER")
FAMILY_HEADER = "src/fmha/kernel/flash_sm80.h"
DRIVER = "src/fused_multihead_attention.cpp"
SMALL_FILTER = "*_fp16_d64_*"     # one kernel: d=64 compiles fastest of the 2-mask TUs
WS_HEADER = "src/fmha/kernel/ws.h"
WS_KERNEL = "fmha_v2_ws_bf16_d64_192x128_w12x1_sm90"   # bf16: no ENABLE_HMMA_FP32 needed
DECODE_KERNEL = "fmha_v2_decode_bf16_d64_1x8_w4x1_sm80"
SM90A = "-gencode arch=compute_90a,code=sm_90a"

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make not found")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")


def copy_tree(dest: Path, inputs=BUILD_INPUTS) -> Path:
    for name in inputs:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def run(cmd, cwd, timeout=900, **flags):
    env = {k: v for k, v in os.environ.items() if k not in FLAGS and not k.startswith("MAKE")}
    env.update(flags)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def setup(cwd, **flags):
    result = run([sys.executable, "setup.py"], cwd, **flags)
    assert result.returncode == 0, result.stderr
    return result


def objects(make_output: str) -> set:
    """The objects (and the exe) a `make -n` would build."""
    return set(re.findall(r" -o (\S+)", make_output))


# --- the Makefile without compiling ------------------------------------------------------

@needs_make
def test_make_without_generated_says_what_to_do(tmp_path):
    copy_tree(tmp_path, ("Makefile",))
    for goal in ([], ["list"]):
        result = run(["make", *goal], tmp_path)
        assert result.returncode != 0
        assert "generated/ is missing: run python3 setup.py first" in result.stderr
    assert run(["make", "clean"], tmp_path).returncode == 0
    assert run(["make", "distclean"], tmp_path).returncode == 0


@needs_make
def test_make_dry_run_picks_up_sources_and_gencode(tmp_path):
    copy_tree(tmp_path)
    (tmp_path / "src" / "reference" / "extra_check.cu").write_text("// a new reference file\n")
    setup(tmp_path, TORCH_CUDA_ARCH_LIST="8.0;9.0a", FMHA_FILTER=SMALL_FILTER)
    result = run(["make", "-n"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    kernel = next(l for l in lines if "-c generated/kernels/fmha_v2_flash_fp16_d64_" in l)
    extra = next(l for l in lines if "-c src/reference/extra_check.cu" in l)
    for line in (kernel, extra):
        assert "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a" in line
        assert "-MMD -MP" in line and "-std=c++17" in line
    assert "obj/src/reference/extra_check.o" in objects(result.stdout)
    assert "bin/fmha.exe" in objects(result.stdout)
    assert "fmha_v2_flash_fp16_d64_128x64_w4x1_sm80" in run(["make", "list"], tmp_path).stdout


@needs_make
def test_lineinfo_is_on_request(tmp_path):
    copy_tree(tmp_path)
    setup(tmp_path, TORCH_CUDA_ARCH_LIST="8.0", FMHA_FILTER=SMALL_FILTER)
    compiles = lambda out: [l for l in out.splitlines() if " -c generated/kernels/" in l]  # noqa: E731
    release = run(["make", "-n"], tmp_path)
    assert release.returncode == 0, release.stderr
    assert compiles(release.stdout) and not any("-lineinfo" in l for l in compiles(release.stdout))
    lines = run(["make", "-n", "LINEINFO=1"], tmp_path)
    assert lines.returncode == 0, lines.stderr
    assert compiles(lines.stdout) and all("-lineinfo" in l for l in compiles(lines.stdout))
    bad = run(["make", "-n", "LINEINFO=yes"], tmp_path)
    assert bad.returncode != 0 and "LINEINFO=yes: expected one of 0/1/true/false/on/off" in bad.stderr


@needs_make
def test_make_dry_run_gencode_per_family(tmp_path):
    """TORCH_CUDA_ARCH_LIST=8.0;9.0: flash and decode kernels and the reference for sm_80 and
    sm_90, the ws kernel for sm_90a alone (9.0 means Hopper; wgmma needs the arch-specific
    target)."""
    copy_tree(tmp_path)
    setup(tmp_path, TORCH_CUDA_ARCH_LIST="8.0;9.0",
          FMHA_FILTER=f"{WS_KERNEL},*_flash_bf16_d64_*,*_flash_fp16_d64_*,{DECODE_KERNEL}")
    result = run(["make", "-n"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    portable = "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 "
    ws = next(l for l in lines if f"-c generated/kernels/{WS_KERNEL}.cu" in l)
    assert SM90A + " " in ws and "code=sm_90 " not in ws and "sm_80" not in ws
    flash = [l for l in lines if "-c generated/kernels/fmha_v2_flash_" in l]
    assert len(flash) == 2 and all(portable in l and "90a" not in l for l in flash)
    assert portable in next(l for l in lines if "-c src/reference/reference.cu" in l)
    decode = next(l for l in lines if f"-c generated/kernels/{DECODE_KERNEL}.cu" in l)
    assert portable in decode and "90a" not in decode
    assert run(["make", "list"], tmp_path).stdout.split()[:2] == [DECODE_KERNEL, WS_KERNEL]  # dispatch order


FAKE_NVCC = """#!/usr/bin/env python3
# Stands in for nvcc: logs when each job starts and ends, holds it a second, writes its -o.
import os, sys, time
out = sys.argv[sys.argv.index("-o") + 1]
with open(os.environ["FAKE_NVCC_LOG"], "a") as log:
    log.write(f"{time.time()} 1\\n")
time.sleep(1.0)
with open(os.environ["FAKE_NVCC_LOG"], "a") as log:
    log.write(f"{time.time()} -1\\n")
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
open(out, "w").close()
"""


def most_at_once(log: Path) -> int:
    events = sorted((float(t), int(d)) for t, d in (line.split() for line in log.read_text().splitlines()))
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


@needs_make
@pytest.mark.parametrize("make_args, jobs_env, expected", [
    (["-j"], {"JOBS": "2"}, 2),       # a bare -j is bounded (JOBS: the bound)
    (["-j3"], {"JOBS": "2"}, 3),      # make -j N means N
    ([], {}, 1),                      # no -j: one job
], ids=["bare-j", "j3", "serial"])
def test_parallel_jobs(tmp_path, make_args, jobs_env, expected):
    copy_tree(tmp_path)
    setup(tmp_path, TORCH_CUDA_ARCH_LIST="8.0", FMHA_FILTER="*_flash_bf16_d1*")  # several kernels
    fake = tmp_path / "fake_nvcc"
    fake.write_text(FAKE_NVCC)
    fake.chmod(0o755)
    log = tmp_path / "jobs.log"
    result = run(["make", *make_args, f"NVCC={fake}"], tmp_path, FAKE_NVCC_LOG=str(log), **jobs_env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "bin" / "fmha.exe").exists()
    assert most_at_once(log) == expected


@needs_make
def test_make_checks_use_ccache(tmp_path):
    copy_tree(tmp_path)
    setup(tmp_path, FMHA_FILTER=SMALL_FILTER)
    result = run(["make", "-n", "USE_CCACHE=maybe"], tmp_path)
    assert result.returncode != 0 and "USE_CCACHE=maybe: expected one of 0/1/true/false/on/off" in result.stderr
    if shutil.which("ccache"):
        assert "ccache nvcc" in run(["make", "-n"], tmp_path, USE_CCACHE="1").stdout
    assert "ccache" not in run(["make", "-n"], tmp_path, USE_CCACHE="0").stdout


# --- compiling ---------------------------------------------------------------------------

@pytest.mark.build
@needs_nvcc
@pytest.mark.parametrize("globs", ["nothing*", "*_d64_*"], ids=["zero_kernels", "two_kernels"])
def test_registry_compiles(tmp_path, globs):
    copy_tree(tmp_path, ("setup.py", "generator", "templates"))
    setup(tmp_path, FMHA_FILTER=globs)
    result = run(["nvcc", "-std=c++17", f"-I{ROOT / 'src'}", "-c", "generated/registry.cpp",
                  "-o", "registry.o"], tmp_path)
    assert result.returncode == 0, result.stderr


def build_tree(tmp_path_factory, name: str, header: str, arch_list: str, kernel_filter: str,
               **make_env) -> tuple[Path, str]:
    """A copied tree with bin/fmha.exe built from the kernels `kernel_filter` selects (the
    family in `header`, for `arch_list`); returns it and make's output. Skips where nvcc or
    make or the sources are missing."""
    if shutil.which("nvcc") is None or shutil.which("make") is None:
        pytest.skip("nvcc or make not found")
    for path in (header, DRIVER):
        if not (ROOT / path).is_file():
            pytest.skip(f"{path} does not exist yet")
    tree = copy_tree(tmp_path_factory.mktemp(name))
    setup(tree, TORCH_CUDA_ARCH_LIST=arch_list, FMHA_FILTER=kernel_filter)
    result = run(["make", "-j2"], tree, **make_env)
    if result.returncode != 0:
        pytest.fail(f"make failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}", pytrace=False)
    return tree, result.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tree with bin/fmha.exe built from one small kernel. The tests below share it and
    run in file order: the ones that leave it out of date (touch, new arch list) come last."""
    tree, _ = build_tree(tmp_path_factory, "build", FAMILY_HEADER, "8.0", SMALL_FILTER, TORCH_CUDA_ARCH_LIST="8.0")
    return tree


@pytest.mark.build
def test_exe_lists_its_kernels(built):
    result = run([str(built / "bin" / "fmha.exe"), "-list-kernels"], built)
    assert result.returncode == 0, result.stderr
    assert "fmha_v2_flash_fp16_d64_128x64_w4x1_sm80" in result.stdout
    assert "fmha_v2_flash_bf16" not in result.stdout


@pytest.mark.build
def test_setup_again_leaves_make_nothing_to_do(built):
    setup(built, TORCH_CUDA_ARCH_LIST="8.0", FMHA_FILTER=SMALL_FILTER)
    assert run(["make", "-q"], built).returncode == 0


@pytest.mark.build
def test_touching_a_header_rebuilds_exactly_its_users(built):
    users = {
        str(d.relative_to(built).with_suffix(".o"))
        for d in (built / "obj").rglob("*.d")
        if re.search(rf"(^|\s){re.escape(FAMILY_HEADER)}(\s|\\|:|$)", d.read_text(), re.MULTILINE)
    }
    assert any("/kernels/" in u for u in users)
    os.utime(built / FAMILY_HEADER)
    # The kernels live in the library; fmha.exe relinks against it.
    assert objects(run(["make", "-n"], built).stdout) == users | {"lib/libfmha.so", "bin/fmha.exe"}


@pytest.mark.build
def test_new_arch_list_rebuilds_device_objects_only(built):
    setup(built, TORCH_CUDA_ARCH_LIST="8.0;9.0", FMHA_FILTER=SMALL_FILTER)
    try:
        rebuilt = objects(run(["make", "-n"], built).stdout)
        device = {str(d.relative_to(built).with_suffix(".o")) for d in (built / "obj").rglob("*.d")
                  if (built / d.relative_to(built / "obj")).with_suffix(".cu").exists()}
        # The registry lists each kernel's archs, so it is rebuilt too (host code, quick).
        assert device and rebuilt == device | {"obj/generated/registry.o", "lib/libfmha.so", "bin/fmha.exe"}
    finally:
        setup(built, TORCH_CUDA_ARCH_LIST="8.0", FMHA_FILTER=SMALL_FILTER)


# --- the ws family: one kernel for sm_90a --------------------------------------------------

@pytest.fixture(scope="module")
def built_ws(tmp_path_factory):
    """A tree with bin/fmha.exe built from one ws kernel (sm_90a) and the driver (sm_90)."""
    return build_tree(tmp_path_factory, "build_ws", WS_HEADER, "9.0", WS_KERNEL)


@pytest.mark.build
@needs_nvcc
@pytest.mark.parametrize("kernel", ["fmha_v2_ws_e4m3_d128_128x192_w8x1_sm90", "fmha_v2_ws_e4m3_d256_128x128_w8x1_sm90",
                                    "fmha_v2_ws_fp16_fp32_d40_192x128_w12x1_sm90", "fmha_v2_ws_bf16_d160_128x64_w8x1_sm90"])
def test_other_ws_kernels_compile_without_spills(tmp_path, kernel):
    """Beside the d = 64 ws kernel the builds above link: the e4m3 path (QGMMA, the V^T
    transpose, the e4m3 O epilogue; a 192-key block, and d = 256's 24-register producer, with
    their siblings) and a head size with an odd count of n8 tiles (d = 40: the e4m3 O store,
    instantiated for it by mistake, once broke its build: bench/NOTES.md §58) compile for
    sm_90a, every entry with no stack and no spills; and a tile without a sibling (d = 160:
    naming its Short, which does not fit shared memory, once broke its build)."""
    tree = copy_tree(tmp_path)
    setup(tree, TORCH_CUDA_ARCH_LIST="9.0", ENABLE_HMMA_FP32="1", FMHA_FILTER=kernel)
    result = run(["nvcc", "-std=c++17", "-Isrc", "-Iinclude", "--expt-relaxed-constexpr", "-O3", *SM90A.split(),
                  "-Xptxas", "-v", "-c", f"generated/kernels/{kernel}.cu", "-o", "kernel.o"], tree)
    assert result.returncode == 0, result.stderr[-3000:]
    usage = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", result.stderr)
    assert usage and all(u == ("0", "0", "0") for u in usage), result.stderr[-3000:]


@pytest.mark.build
def test_ws_kernel_is_compiled_for_sm90a_only(built_ws):
    _, log = built_ws
    kernel = next(l for l in log.splitlines() if f"-c generated/kernels/{WS_KERNEL}.cu" in l)
    assert re.findall(r"-gencode \S+", kernel) == [SM90A]
    reference = next(l for l in log.splitlines() if "-c src/reference/reference.cu" in l)
    assert "-gencode arch=compute_90,code=sm_90" in reference and "90a" not in reference


@pytest.mark.build
def test_ws_exe_lists_its_kernel(built_ws):
    tree, _ = built_ws
    result = run([str(tree / "bin" / "fmha.exe"), "-list-kernels"], tree)
    assert result.returncode == 0, result.stderr
    row = next(l for l in result.stdout.splitlines() if l.startswith(WS_KERNEL))
    # family sm dtype acc d dv tile warps masks warp_spec tma sched max_s_q min_s_kv archs siblings
    assert row.split()[1:] == ["ws", "90", "bf16", "fp32", "64", "64", "192x128", "12x1",
                               "padding,causal,sliding_window,bidirectional_sliding_window,chunked,custom", "true",
                               "true", "persistent", "-", "-", "sm_90a", "fmha_v2_ws_bf16_d64_128x128_w8x1_sm90"]


@pytest.mark.build
def test_ws_force_non_warp_specialization_needs_no_gpu(built_ws):
    """-force-non-warp-specialization skips the ws row; decided before the GPU is touched."""
    tree, _ = built_ws
    exe = str(tree / "bin" / "fmha.exe")
    result = run([exe, "-bf16", "-d", "64", "-force-non-warp-specialization"], tree)
    assert result.returncode == 2, result.stderr
    assert "error: no kernel fits dtype=bf16 acc=fp32 d=64 dv=64 mask=padding non-warp-specialised" in result.stderr
    assert f"  {WS_KERNEL}: warp-specialised (-force-non-warp-specialization)" in result.stderr
    result = run([exe, "-bf16", "-d", "64", "-kernel", WS_KERNEL, "-force-non-warp-specialization"], tree)
    assert result.returncode == 2 and "warp-specialised (-force-non-warp-specialization)" in result.stderr


@pytest.mark.build
def test_ws_kernel_does_not_spill(built_ws):
    """ptxas -v on the generated TU: the three mask kinds (padding, causal, local) x the score modifiers
    the kernel has (none, ALiBi, bias; this 192-row tile has no softcapping: families/ws.py),
    and the custom mask (padding kind only), each twice on this tile (token storage, and a paged KV
    cache's producer: Traits::kSeparatePaged), and the causal ones of its 128-row sibling (Short),
    and the sibling's dropout ones of the three mask kinds (Traits::kHasDropout: the 128-row tile
    runs this row's dropout), sm_90a, no stack and no spills."""
    tree, _ = built_ws
    result = run(["nvcc", "-std=c++17", "-Isrc", "--expt-relaxed-constexpr", "-O3", SM90A.split()[0],
                  SM90A.split()[1], "-Xptxas", "-v", "-c", f"generated/kernels/{WS_KERNEL}.cu",
                  "-o", "ptxas_check.o"], tree)
    assert result.returncode == 0, result.stderr
    entries = re.findall(r"Compiling entry function '(_ZN4fmha2ws\S*)' for '(sm_\w+)'", result.stderr)
    assert len(entries) == 26 and {arch for _, arch in entries} == {"sm_90a"}, result.stderr
    usage = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", result.stderr)
    assert len(usage) == 26 and all(u == ("0", "0", "0") for u in usage), result.stderr
