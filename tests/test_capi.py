"""The C API (include/fmha.h) through lib/libfmha.so, loaded with ctypes on a machine with no
GPU: the version, the registry, and bad problems answered with the right status and a
one-line reason. Builds the library from one small kernel (nvcc)."""

import ctypes
import re
from pathlib import Path

import pytest

from tests.test_build import DRIVER, ROOT, SMALL_FILTER, copy_tree, run, setup

HEADER = ROOT / "include" / "fmha.h"
KERNEL = "fmha_v2_flash_fp16_d64_128x64_w4x1_sm80"


def _load_lib_module():
    """python/fmha/_lib.py without the package (whose __init__ needs torch): its structs are
    the ones under test, the package's one copy of include/fmha.h."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("fmha_lib", ROOT / "python" / "fmha" / "_lib.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


capi = _load_lib_module()
Tensor, Problem, Plan = capi.Tensor, capi.Problem, capi.Plan
SUCCESS, INVALID, NOT_SUPPORTED, WORKSPACE, CUDA = range(5)
FP16, BF16, FP32, E4M3 = range(4)
NONE, CAUSAL, SLIDING, BIDIRECTIONAL, CHUNKED, CUSTOM = range(6)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """lib/libfmha.so built from one fp16 d = 64 flash kernel for sm_80, loaded."""
    import shutil
    if shutil.which("nvcc") is None or shutil.which("make") is None:
        pytest.skip("nvcc or make not found")
    if not (ROOT / DRIVER).is_file():
        pytest.skip(f"{DRIVER} does not exist")
    tree = copy_tree(tmp_path_factory.mktemp("capi"))
    setup(tree, TORCH_CUDA_ARCH_LIST="8.0", FMHA_FILTER=SMALL_FILTER)
    result = run(["make", "-j2", "lib"], tree)
    if result.returncode != 0:
        pytest.fail(f"make lib failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}", pytrace=False)
    return capi.load(tree / "lib" / "libfmha.so")


def problem(lib, **fields) -> Problem:
    """A valid fixed-length fp16 d = 64 problem with fp16 accumulation (the one kernel's):
    [b=2, s=128, h=4, d=64] tensors (fake device addresses; nothing here dereferences them)."""
    p = Problem()
    lib.fmha_problem_init(ctypes.byref(p))
    p.acc = FP16
    p.dtype, p.b, p.h, p.h_kv, p.d, p.dv, p.max_s_q, p.max_s_kv = FP16, 2, 4, 4, 64, 64, 128, 128
    for i, name in enumerate("qkvo"):
        setattr(p, name, Tensor(0x10000000 * (i + 1), 128 * 4 * 64, 4 * 64, 64))
    for key, value in fields.items():
        setattr(p, key, value)
    return p


def plan(lib, p: Problem, sm=80, num_sms=108):
    out = Plan()
    status = lib.fmha_plan(ctypes.byref(p), sm, num_sms, ctypes.byref(out))
    return status, lib.fmha_last_error().decode(), out


@pytest.mark.build
def test_struct_matches_the_header(lib):
    # The size fmha_problem_init writes is the C compiler's sizeof(fmha_problem_t).
    p = Problem()
    lib.fmha_problem_init(ctypes.byref(p))
    assert p.struct_size == ctypes.sizeof(Problem)
    assert p.acc == FP32 and p.dtype == FP16 and p.mask == NONE
    assert plan(lib, problem(lib, acc=FP32))[1].endswith(f"closest {KERNEL}: acc fp16)")
    fields = re.findall(r"^\s+(?:const\s+)?[\w ]+?\**\s*(\w+(?:, \w+)*)(?:\[\d+\])?;", HEADER.read_text(), re.M)
    header_fields = [f for group in fields for f in group.split(", ")]
    start = header_fields.index("struct_size")
    ours = [name for name, _ in Problem._fields_]
    assert header_fields[start:start + len(ours)] == ours


@pytest.mark.build
def test_version_and_registry(lib):
    text = HEADER.read_text()
    assert lib.fmha_version() == int(re.search(r"#define FMHA_API_VERSION (\d+)", text).group(1))
    assert lib.fmha_num_kernels() == 1
    assert lib.fmha_kernel_name(0).decode() == KERNEL
    assert lib.fmha_kernel_name(1) is None and lib.fmha_kernel_name(-1) is None


@pytest.mark.build
def test_plan_picks_the_kernel_without_a_gpu(lib):
    status, error, out = plan(lib, problem(lib))
    assert (status, error) == (SUCCESS, "")
    assert out.kernel.decode() == KERNEL and out.sm == 80 and out.num_sms == 108
    # 256 bytes of tile counter; no lengths (the kernels read cu_seqlens), flash needs no more.
    assert out.workspace_bytes == 256


@pytest.mark.build
@pytest.mark.parametrize("fields, status, reason", [
    ({"struct_size": 8}, INVALID, "struct_size = 8"),
    ({"dtype": E4M3}, INVALID, "e4m3: acc must be FMHA_DTYPE_FP32"),
    ({"dtype": E4M3, "acc": FP32}, NOT_SUPPORTED, "no kernel of this build serves dtype e4m3"),
    ({"dtype": E4M3, "acc": FP32, "k": Tensor(0x20000000, 128 * 256, 264, 64)}, INVALID,
     "k: token_stride 264, head_stride 64: positive token stride, both multiples of 16 elements"),
    ({"q_descale": 0x60000000}, INVALID, "for FMHA_DTYPE_E4M3 inputs only"),
    ({"o_e4m3": 1}, INVALID, "o_e4m3: for FMHA_DTYPE_E4M3 inputs only"),
    # an e4m3 KV cache under 16-bit queries: k_descale and v_descale, K and V in 16-byte rows
    ({"kv_e4m3": 1, "dtype": E4M3, "acc": FP32}, INVALID, "kv_e4m3: for FMHA_DTYPE_FP16 or FMHA_DTYPE_BF16 queries"),
    ({"kv_e4m3": 1, "q_descale": 0x60000000}, INVALID, "(k_descale and v_descale also with kv_e4m3)"),
    ({"kv_e4m3": 1, "v": Tensor(0x30000000, 128 * 264, 264, 64)}, INVALID,
     "v: token_stride 264, head_stride 64: positive token stride, both multiples of 16 elements"),
    ({"kv_e4m3": 1, "k_descale": 0x60000000, "v_descale": 0x61000000}, NOT_SUPPORTED,
     "no kernel of this build serves dtype fp16 (K, V e4m3), d 64"),
    ({"dtype": E4M3, "acc": FP32, "o_e4m3": 1}, NOT_SUPPORTED, "no kernel of this build serves dtype e4m3"),
    ({"dtype": 7}, INVALID, "dtype must be"),
    ({"b": 0}, INVALID, "b = 0: must be in [1, 65535]"),
    ({"h_kv": 3}, INVALID, "h_kv = 3: must divide h = 4"),
    ({"d": 60}, INVALID, "multiples of 8"),
    ({"max_s_q": 0}, INVALID, "max_s_q = 0"),
    ({"q": Tensor(0, 128 * 256, 256, 64)}, INVALID, "q.data is NULL"),
    ({"k": Tensor(0x10000004, 128 * 256, 256, 64)}, INVALID, "k.data is not 16-byte aligned"),
    ({"v": Tensor(0x30000000, 128 * 256, 100, 64)}, INVALID, "v: token_stride 100"),
    ({"o": Tensor(0x40000000, 64 * 256, 256, 64)}, INVALID, "q and o: batch_stride"),
    ({"cu_seqlens_q": 0x50000000}, INVALID, "q_tokens: the token count"),
    ({"mask": SLIDING}, INVALID, "window = 0: a window mask needs window >= 1"),
    ({"mask": CHUNKED, "chunk": 48}, INVALID, "chunk = 48: a power of two"),
    ({"mask": CUSTOM}, INVALID, "custom mask"),
    ({"mask": 9}, INVALID, "mask = 9"),
    ({"scale": -1.0}, INVALID, "scale must be > 0"),
    ({"softcap": 30.0, "alibi_slopes": 0x60000000}, NOT_SUPPORTED, "one at a time"),
    ({"block_table": 0x70000000, "block_size": 24}, INVALID, "block_size = 24"),
    ({"d": 128, "dv": 128}, NOT_SUPPORTED, "no kernel of this build serves dtype fp16, d 128"),
    ({"dtype": BF16}, NOT_SUPPORTED, f"closest {KERNEL}: dtype fp16"),
])
def test_bad_problems_get_a_status_and_a_reason(lib, fields, status, reason):
    got, error, _ = plan(lib, problem(lib, **fields))
    assert got == status and reason in error, error
    assert "\n" not in error


@pytest.mark.build
def test_no_image_for_the_device_is_not_supported(lib):
    status, error, _ = plan(lib, problem(lib), sm=90)
    assert status == NOT_SUPPORTED and "built for sm_80" in error


@pytest.mark.build
def test_forward_checks_before_the_device(lib):
    p = problem(lib)
    status, _, out = plan(lib, p)
    assert status == SUCCESS
    # Workspace: NULL, short, misaligned.
    for ws, n in ((None, 4096), (0x80000000, out.workspace_bytes - 1), (0x80000010, 4096)):
        assert lib.fmha_forward(ctypes.byref(p), ctypes.byref(out), ws, n, None) == WORKSPACE
        assert "256-byte aligned" in lib.fmha_last_error().decode()
    # A plan for another problem.
    other = problem(lib, mask=CAUSAL)
    wrong = Plan(b"x", 512, 80, 108, 5)
    assert lib.fmha_forward(ctypes.byref(other), ctypes.byref(wrong), 0x80000000, 4096, None) == INVALID
    assert "plan does not belong" in lib.fmha_last_error().decode()
    # No plan and no device: the CUDA status, with the reason.
    assert lib.fmha_forward(ctypes.byref(p), None, 0x80000000, 4096, None) == CUDA
    assert "no current CUDA device" in lib.fmha_last_error().decode()


@pytest.mark.build
def test_errors_are_per_thread(lib):
    import threading
    assert plan(lib, problem(lib, b=0))[0] == INVALID
    seen = []
    worker = threading.Thread(target=lambda: seen.append(lib.fmha_last_error().decode()))
    worker.start()
    worker.join()
    assert seen == [""] and "b = 0" in lib.fmha_last_error().decode()
    assert plan(lib, problem(lib))[0] == SUCCESS and lib.fmha_last_error().decode() == ""


@pytest.mark.build
def test_package_finds_and_checks_the_library(lib, monkeypatch, tmp_path):
    path = lib._name
    monkeypatch.setenv("FMHA_LIBRARY", path)
    assert str(capi.library_path()) == path
    # The package's constants are the header's.
    text = HEADER.read_text()
    assert capi.API_VERSION == int(re.search(r"#define FMHA_API_VERSION (\d+)", text).group(1))
    for name, value in (("FMHA_ERROR_NOT_SUPPORTED", capi.NOT_SUPPORTED), ("FMHA_DTYPE_BF16", capi.BF16),
                        ("FMHA_MASK_CHUNKED", capi.MASK_CHUNKED)):
        assert int(re.search(rf"{name} = (\d+)", text).group(1)) == value
    # A status becomes the exception a torch user expects, with the library's reason.
    assert capi.raise_for(lib, SUCCESS, "x") is None
    plan(lib, problem(lib, b=0))
    with pytest.raises(ValueError, match="b = 0"):
        capi.raise_for(lib, INVALID, "fmha")
    plan(lib, problem(lib, d=128, dv=128))
    with pytest.raises(NotImplementedError, match="no kernel of this build"):
        capi.raise_for(lib, NOT_SUPPORTED, "fmha")
    monkeypatch.setenv("FMHA_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(OSError):
        capi.load()


# --- The backward pass: fmha_plan_backward, fmha_backward -----------------------------------

BackwardArgs = capi.BackwardArgs


def grads(lib, **fields) -> BackwardArgs:
    """Gradients laid out as problem()'s tensors (fake addresses)."""
    g = BackwardArgs()
    lib.fmha_backward_args_init(ctypes.byref(g))
    for i, name in enumerate(("d_o", "dq", "dk", "dv")):
        setattr(g, name, Tensor(0x90000000 + 0x1000000 * i, 128 * 4 * 64, 4 * 64, 64))
    for key, value in fields.items():
        setattr(g, key, value)
    return g


def plan_backward(lib, p: Problem, g: BackwardArgs, sm=80, num_sms=108):
    out = Plan()
    status = lib.fmha_plan_backward(ctypes.byref(p), ctypes.byref(g), sm, num_sms, ctypes.byref(out))
    return status, lib.fmha_last_error().decode(), out


@pytest.mark.build
def test_backward_args_match_the_header(lib):
    g = BackwardArgs()
    lib.fmha_backward_args_init(ctypes.byref(g))
    assert g.struct_size == ctypes.sizeof(BackwardArgs) and g.deterministic == 0 and g.d_lse is None
    body = re.search(r"typedef struct fmha_backward_args \{(.*?)\} fmha_backward_args_t;", HEADER.read_text(), re.S)
    names = re.findall(r"^\s+(?:const\s+)?[\w ]+?\**\s*(\w+(?:, \w+)*);", body.group(1), re.M)
    assert [n for group in names for n in group.split(", ")] == [name for name, _ in BackwardArgs._fields_]


@pytest.mark.build
def test_plan_backward_names_the_kernel_and_sizes_the_workspace(lib):
    status, error, out = plan_backward(lib, problem(lib, lse=0xa0000000), grads(lib))
    assert (status, error) == (SUCCESS, "")
    assert out.kernel.decode() == "flash_bwd_fp16_d64_sm80" and out.sm == 80 and out.index == -1
    # fp32 dQ [256 tokens, 4, 64], dK and dV per query head [256, 4, 64 + 64], D and the LSE in
    # log2 units [2, 4, 128 rows padded to whole 128-row blocks], the order counters [2, 4, 2 query
    # blocks]: 794,688 bytes, to 256.
    floats = 256 * 4 * 64 + 256 * 4 * 128 + 2 * 2 * 4 * 128
    assert out.workspace_bytes == (floats * 4 + 2 * 4 * 2 * 4 + 255) // 256 * 256 == 794880
    status, _, causal = plan_backward(lib, problem(lib, lse=0xa0000000, mask=CAUSAL, dtype=BF16), grads(lib))
    assert status == SUCCESS and causal.kernel.decode() == "flash_bwd_bf16_d64_sm80"
    # The wgmma kernels need this build's sm_90a image, which an sm_80 build lacks: sm_90 plans
    # flash-bwd here too.
    wide = problem(lib, lse=0xa0000000, d=128, dv=128, q=Tensor(0x10000000, 128 * 4 * 128, 4 * 128, 128))
    status, _, hopper = plan_backward(lib, wide, grads(lib), sm=90)
    assert status == SUCCESS and hopper.kernel.decode() == "flash_bwd_fp16_d128_sm80"
    # Windows, chunks, softcap, ALiBi and sinks are served (not bias or a custom mask).
    for fields in ({"mask": SLIDING, "window": 8, "softcap": 30.0}, {"mask": BIDIRECTIONAL, "window": 3},
                   {"mask": CHUNKED, "chunk": 64, "sinks": 0x60000000}, {"alibi_slopes": 0x60000000}):
        assert plan_backward(lib, problem(lib, lse=0xa0000000, **fields), grads(lib))[:2] == (SUCCESS, "")


@pytest.mark.build
@pytest.mark.parametrize("fields, args, status, reason", [
    ({}, {}, INVALID, "backward: lse (the forward's) is NULL"),
    ({"dtype": E4M3, "acc": FP32}, {}, NOT_SUPPORTED, "backward: fp16 or bf16 inputs only"),
    ({"kv_e4m3": 1}, {}, NOT_SUPPORTED, "backward: kv_e4m3 (an e4m3 KV cache) is forward only"),
    ({"d": 264, "dv": 264}, {}, NOT_SUPPORTED, "backward: d and dv multiples of 8 up to 256 only (got d 264, dv 264)"),
    ({"mask": CUSTOM, "custom_mask": 0x60000000, "custom_mask_row_words": 4}, {}, NOT_SUPPORTED,
     "backward: no custom mask yet"),
    ({"bias": 0x60000000, "bias_row_stride": 128}, {}, NOT_SUPPORTED, "backward: no bias yet"),
    ({"seqused_k": 0x60000000}, {}, NOT_SUPPORTED, "backward: not with seqused_k"),
    ({"block_table": 0x70000000, "block_size": 16, "num_blocks": 16, "block_table_stride": 8,
      "k_block_stride": 4096, "v_block_stride": 4096}, {}, NOT_SUPPORTED, "backward: not over a paged KV cache"),
    ({"b": 0}, {}, INVALID, "b = 0"),
    ({"lse": 0xa0000000}, {"struct_size": 4}, INVALID, "args.struct_size = 4"),
    ({"lse": 0xa0000000}, {"dq": Tensor(0, 128 * 256, 256, 64)}, INVALID, "dq.data is NULL"),
    ({"lse": 0xa0000000}, {"dk": Tensor(0x90000008, 128 * 256, 256, 64)}, INVALID, "dk.data is not 16-byte aligned"),
    ({"lse": 0xa0000000}, {"d_o": Tensor(0x90000000, 128 * 256, 100, 64)}, INVALID, "d_o: token_stride 100"),
    ({"lse": 0xa0000000}, {"dv": Tensor(0x90000000, 64 * 256, 256, 64)}, INVALID,
     "dv.batch_stride holds 64 tokens, v's 128"),
])
def test_bad_backward_problems_get_a_status_and_a_reason(lib, fields, args, status, reason):
    got, error, _ = plan_backward(lib, problem(lib, **fields), grads(lib, **args))
    assert got == status and reason in error, error
    assert "\n" not in error


@pytest.mark.build
def test_backward_plans_d256_where_its_shared_memory_fits(lib):
    # flash-bwd at d = 256 takes 209 KB a block: sm_90's 227 KB hold it, sm_80's 163 do not;
    # at d = 128 (113 KB) the 99 KB of sm_86/89 are too few. Each refusal names both.
    def wide(d, dv=None):
        dv = dv or d
        width = {"q": d, "k": d, "v": dv, "o": dv, "d_o": dv, "dq": d, "dk": d, "dv": dv}
        t = {name: Tensor(0x10000000 * (i + 1), 128 * 4 * width[name], 4 * width[name], width[name])
             for i, name in enumerate("qkvo")}
        g = {name: Tensor(0x90000000 + 0x1000000 * i, 128 * 4 * width[name], 4 * width[name], width[name])
             for i, name in enumerate(("d_o", "dq", "dk", "dv"))}
        return problem(lib, lse=0xa0000000, d=d, dv=dv, **t), grads(lib, **g)
    # Where the build has the wgmma kernels' sm_90a image (d = 128 plans one there), d = 256 takes
    # the wide wgmma kernel on sm_90.
    image = plan_backward(lib, *wide(128), sm=90)[2].kernel.decode().startswith("wgmma_bwd_")
    status, error, out = plan_backward(lib, *wide(256), sm=90)
    want = "wgmma_bwd_fp16_d256_sm90" if image else "flash_bwd_fp16_d256_sm80"
    assert (status, error, out.kernel.decode()) == (SUCCESS, "", want)
    # Other head sizes take the next tile of 64, 128, 256, zero-padded (MLA's 192 / 128 too), in
    # either family.
    family = "wgmma_bwd_fp16_{}_sm90" if image else "flash_bwd_fp16_{}_sm80"
    for d, dv, kernel in ((32, 32, "d64"), (96, 96, "d128"), (160, 160, "d256"), (192, 128, "d256")):
        status, error, out = plan_backward(lib, *wide(d, dv), sm=90)
        assert (status, error, out.kernel.decode()) == (SUCCESS, "", family.format(kernel))
    assert plan_backward(lib, *wide(256), sm=80)[:2] == (
        NOT_SUPPORTED, "backward: flash_bwd_fp16_d256_sm80 needs 209 KB of shared memory a block; sm_80 offers 163 KB")
    assert plan_backward(lib, *wide(128), sm=89)[:2] == (
        NOT_SUPPORTED, "backward: flash_bwd_fp16_d128_sm80 needs 113 KB of shared memory a block; sm_89 offers 99 KB")
    assert plan_backward(lib, *wide(64), sm=89)[:2] == (SUCCESS, "")


@pytest.mark.build
def test_backward_checks_before_the_device(lib):
    p, g = problem(lib, lse=0xa0000000), grads(lib)
    assert plan_backward(lib, p, g, sm=75)[:2] == (NOT_SUPPORTED, "backward: the backward kernels need sm_80 or "
                                                                  "later, not sm_75")
    status, _, out = plan_backward(lib, p, g)
    assert status == SUCCESS
    for ws, n in ((None, out.workspace_bytes), (0x80000000, out.workspace_bytes - 1), (0x80000010, 1 << 20)):
        assert lib.fmha_backward(ctypes.byref(p), ctypes.byref(g), ctypes.byref(out), ws, n, None) == WORKSPACE
        assert "256-byte aligned" in lib.fmha_last_error().decode()
    # A forward plan, or one for another problem.
    forward = plan(lib, p)[2]
    other = plan_backward(lib, problem(lib, lse=0xa0000000, dtype=BF16), g)[2]
    for wrong in (forward, other):
        assert lib.fmha_backward(ctypes.byref(p), ctypes.byref(g), ctypes.byref(wrong), 0x80000000, 1 << 22,
                                 None) == INVALID
        assert "plan does not belong" in lib.fmha_last_error().decode()
    # And a backward plan is no forward plan.
    assert lib.fmha_forward(ctypes.byref(p), ctypes.byref(out), 0x80000000, 4096, None) == INVALID


def build_c_example(lib_dir: Path, out_dir: Path) -> Path:
    """examples/capi_forward.c compiled as C (nvcc -x c) and linked to lib_dir's libfmha.so."""
    import subprocess
    exe = out_dir / "capi_forward"
    build = subprocess.run(["nvcc", "-x", "c", str(ROOT / "examples" / "capi_forward.c"), f"-I{ROOT / 'include'}",
                            f"-L{lib_dir}", "-lfmha", "-Xlinker", f"-rpath,{lib_dir}", "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return exe


@pytest.mark.build
def test_c_example_builds_as_c_and_says_why_it_cannot_run(lib, tmp_path):
    """examples/capi_forward.c compiles as C against include/fmha.h and links the library. Here
    (the test library has one fp16 d = 64 kernel) it cannot run its bf16 d = 128 problem: exit 3
    without a GPU, 2 with one, a reason either way. tests/gpu/test_capi_example.py runs it."""
    import subprocess
    exe = build_c_example(Path(lib._name).parent, tmp_path)
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert result.returncode in (2, 3), result
    assert result.stderr.strip() and "\n" not in result.stderr.strip()
    if result.returncode == 2:
        assert "no kernel of this build serves dtype bf16, d 128" in result.stderr
