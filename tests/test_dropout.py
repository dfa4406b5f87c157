"""Dropout's mask on the CPU: tests/gpu/oracle.py's NumPy Philox4x32-10 against Random123's
known answers, its keep mask against src/fmha/dropout.h compiled for the host (bit for bit),
the mask's statistics, the oracle's dropped attention and its backward against torch's float64
autograd, and the package's dropout plumbing (python/fmha: argument checks, the RNG state, the
ops' signatures and autograd through their fake implementations)."""

import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.oracle import (attention_backward_fp64, attention_fp64, dropout_keep, dropout_rescale,
                              dropout_threshold, philox4x32_10, visible_fp64)
from tests.torch_attention import autograd_attention

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("counter, key, want", [
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
])
def test_philox_known_answers(counter, key, want):
    """Random123's kat_vectors for philox4x32_10, one at a time and broadcast together."""
    assert tuple(int(x) for x in philox4x32_10(counter, key)) == want
    batch = philox4x32_10(np.array([counter] * 3), np.array(key))
    assert batch.shape == (3, 4) and batch.dtype == np.uint32 and (batch == np.array(want)).all()


def test_threshold_and_rescale():
    """p as the library's float holds it, times 2^16, rounded; the rescale 2^16 / (2^16 - t)."""
    assert dropout_threshold(0.0) == 0 and dropout_rescale(0.0) == 1.0
    assert dropout_threshold(0.5) == 32768 and dropout_rescale(0.5) == 2.0
    assert dropout_threshold(0.25) == 16384 and dropout_rescale(0.25) == 65536 / 49152
    assert dropout_threshold(0.1) == 6554  # float(0.1) * 2^16 = 6553.6000977
    assert dropout_threshold(1.5 / 65536) == 2  # a tie rounds up
    assert dropout_threshold(0.9999999) == 65535 and dropout_rescale(0.9999999) == 65536.0  # clamped
    for p in (0.17, 0.5, 0.01, 0.9):
        t = math.floor(float(np.float32(p)) * 65536 + 0.5)
        assert dropout_threshold(p) == t and dropout_rescale(p) == 65536 / (65536 - t)


def test_keep_fraction_is_one_minus_p():
    """Over 2 M pairs the kept fraction is within 5 sigma of 1 - t / 2^16, and so is each of the
    8 places a pair takes in its Philox call (every 16-bit half is used alike), and each head."""
    b, h, s = 2, 4, 512
    for p, seed, offset in ((0.17, 42, 0), (0.5, 2**40 + 3, 2**35 + 11)):
        keep = dropout_keep(b, h, s, s, p, seed, offset)
        want = 1 - dropout_threshold(p) / 65536
        sigma = math.sqrt(want * (1 - want) / keep.size)
        assert abs(keep.mean() - want) < 5 * sigma, (p, keep.mean(), want)
        q, k = np.arange(s)[:, None], np.arange(s)[None, :]
        place = 4 * (q >> 3 & 1) + 2 * (k >> 3 & 1) + (k & 1)
        for i in range(8):
            part = keep[..., place == i]
            assert abs(part.mean() - want) < 5 * math.sqrt(want * (1 - want) / part.size), (p, i)
        per_head = keep.reshape(b * h, -1).mean(axis=1)
        assert np.all(np.abs(per_head - want) < 5 * math.sqrt(want * (1 - want) / (s * s)))


def test_keep_is_a_function_of_its_coordinates():
    """Lengths only clip the mask; a longer grid contains a shorter one; (seed, offset) and the
    head change it."""
    full = dropout_keep(2, 3, 70, 90, 0.3, 7, 9)
    assert np.array_equal(dropout_keep(2, 3, 33, 41, 0.3, 7, 9), full[:, :, :33, :41])
    clipped = dropout_keep(2, 3, 70, 90, 0.3, 7, 9, q_lens=[70, 20], k_lens=[5, 90])
    assert np.array_equal(clipped[0, :, :, :5], full[0, :, :, :5]) and not clipped[0, :, :, 5:].any()
    assert np.array_equal(clipped[1, :, :20], full[1, :, :20]) and not clipped[1, :, 20:].any()
    assert not np.array_equal(dropout_keep(2, 3, 70, 90, 0.3, 8, 9), full)
    assert not np.array_equal(dropout_keep(2, 3, 70, 90, 0.3, 7, 9 + 2**32), full)  # the offset's high word
    assert not np.array_equal(full[0, 0], full[0, 1]) and not np.array_equal(full[0, 0], full[1, 0])
    assert dropout_keep(1, 1, 16, 16, 0.0, 1, 2).all()


# --- src/fmha/dropout.h, compiled for the host ---------------------------------------------

_HOST = r"""
#include "fmha/dropout.h"
#include <cstdio>
#include <cstdlib>

// argv: p (a hex float), seed, offset, s_q, s_k, then batch * h + head values. Prints the
// threshold and rescale, then per bh value s_q lines of s_k keep bits.
int main(int argc, char** argv) {
    if (argc < 7) return 2;
    const float p = std::strtof(argv[1], nullptr);
    const uint64_t seed = std::strtoull(argv[2], nullptr, 0), offset = std::strtoull(argv[3], nullptr, 0);
    const int s_q = std::atoi(argv[4]), s_k = std::atoi(argv[5]);
    const fmha::dropout::Dropout d = fmha::dropout::make(p, seed, offset);
    std::printf("%u %a\n", d.threshold, static_cast<double>(d.rescale));
    for (int a = 6; a < argc; ++a) {
        const uint32_t bh = static_cast<uint32_t>(std::strtoul(argv[a], nullptr, 0));
        for (int q = 0; q < s_q; ++q) {
            for (int k = 0; k < s_k; ++k) std::putchar(fmha::dropout::keep(d, bh, q, k) ? '1' : '0');
            std::putchar('\n');
        }
    }
    return 0;
}
"""


def _compiler():
    return shutil.which("c++") or shutil.which("g++")


@pytest.fixture(scope="module")
def host_dropout(tmp_path_factory):
    """The header's keep() as a host executable (skips where there is no C++ compiler)."""
    cxx = _compiler()
    if cxx is None:
        pytest.skip("no C++ compiler (c++ or g++) for src/fmha/dropout.h on the host")
    work = tmp_path_factory.mktemp("dropout")
    (work / "main.cpp").write_text(_HOST)
    exe = work / "dropout"
    subprocess.run([cxx, "-std=c++17", "-O2", "-I", str(ROOT / "src"), str(work / "main.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    return exe


@pytest.mark.parametrize("p, seed, offset", [
    (0.17, 1234, 0),
    (0.5, 2**40 + 12345, 2**33 + 99),           # a seed and an offset past 32 bits
    (0.9, 2**64 - 1, 2**64 - 1),
    (0.1, 0x0123456789abcdef, 0xfedcba9876543210),
    (3e-5, 5, 2**32),                           # a threshold of 2
])
def test_header_matches_the_oracle(host_dropout, p, seed, offset):
    s_q, s_k, bhs = 40, 40, (0, 5, 1001)
    p32 = float(np.float32(p))
    res = subprocess.run([str(host_dropout), p32.hex(), str(seed), str(offset), str(s_q), str(s_k)] +
                         [str(x) for x in bhs], check=True, capture_output=True, text=True)
    lines = res.stdout.split()
    threshold, rescale = int(lines[0]), float.fromhex(lines[1])
    assert threshold == dropout_threshold(p)
    assert rescale == float(np.float32(dropout_rescale(p)))
    got = np.array([[c == "1" for c in line] for line in lines[2:]]).reshape(len(bhs), s_q, s_k)
    keep = dropout_keep(1, max(bhs) + 1, s_q, s_k, p, seed, offset)[0]  # bh = head where b = 1
    for n, bh in enumerate(bhs):
        assert np.array_equal(got[n], keep[bh]), f"bh {bh}: {np.argwhere(got[n] != keep[bh])[:5]}"
    # bh = batch * h + head: the same bits as batch 1 of h = 5 heads, head 0
    assert np.array_equal(dropout_keep(2, 5, s_q, s_k, p, seed, offset)[1, 0], got[1])


def test_problem_struct_matches_the_header(tmp_path):
    """python/fmha/_lib.py's Problem against include/fmha.h's fmha_problem_t: size and every
    field's offset (the dropout fields at its end included). cuda_runtime.h's one type the
    header needs is stubbed where CUDA's is not on the include path."""
    cxx = _compiler()
    if cxx is None:
        pytest.skip("no C++ compiler (c++ or g++) for include/fmha.h on the host")
    import ctypes
    sys.path.insert(0, str(ROOT / "python"))
    try:
        from fmha import _lib
    except ImportError as e:  # the package's __init__ needs torch
        pytest.skip(f"python/fmha does not import here: {e}")
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "cuda_runtime.h").write_text("typedef struct CUstream_st* cudaStream_t;\n")
    names = [name for name, _ in _lib.Problem._fields_]
    body = "".join(f'    std::printf("%zu\\n", offsetof(fmha_problem_t, {n}));\n' for n in names)
    (tmp_path / "layout.cpp").write_text('#include "fmha.h"\n#include <cstddef>\n#include <cstdio>\nint main() {\n'
                                         '    std::printf("%zu\\n", sizeof(fmha_problem_t));\n' + body + "}\n")
    flags = ["-I", str(ROOT / "include")]
    for cuda in (Path("/usr/local/cuda/include"),):
        if cuda.is_dir():
            flags += ["-I", str(cuda)]
    subprocess.run([cxx, "-std=c++17", *flags, "-idirafter", str(stub), str(tmp_path / "layout.cpp"), "-o",
                    str(tmp_path / "layout")], check=True, capture_output=True, text=True)
    got = [int(x) for x in subprocess.run([str(tmp_path / "layout")], check=True, capture_output=True,
                                          text=True).stdout.split()]
    want = [ctypes.sizeof(_lib.Problem)] + [getattr(_lib.Problem, n).offset for n in names]
    assert got == want
    assert names[-4:] == ["dropout_p", "dropout_seed", "dropout_offset", "kv_e4m3"] and _lib.API_VERSION == 6


# --- The oracle's dropped attention --------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_oracle_with_dropout_matches_autograd(causal):
    """attention_fp64 and attention_backward_fp64 with a keep mask against torch's float64
    autograd of O = (softmax(S) Z rescale) V: GQA, var-len, s_q < s."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    b, s_q, s, h, h_kv, d, dv = 2, 20, 37, 4, 2, 8, 5
    q, k = rng.standard_normal((b, s_q, h, d)), rng.standard_normal((b, s, h_kv, d))
    v, do = rng.standard_normal((b, s, h_kv, dv)), rng.standard_normal((b, s_q, h, dv))
    q_lens, kv_lens, scale, p = np.array([20, 13]), np.array([37, 30]), 0.3, 0.3
    keep = dropout_keep(b, h, s_q, s, p, 99, 2**34 + 5, q_lens, kv_lens)
    rescale = dropout_rescale(p)
    visible = (lambda i, lq, lk: visible_fp64({"mask": "causal"}, lq, lk)) if causal else None
    # The forward rounds P V's P to the inputs' dtype (fp16 here: 2^-11 relative) as a kernel does.
    out, _, lse = attention_fp64(q, k, v, q_lens, kv_lens, scale, 1.0, visible, "fp16", keep=keep, rescale=rescale)
    grads = attention_backward_fp64(q, k, v, do, q_lens, kv_lens, scale, visible, keep=keep, rescale=rescale)
    _, _, lse_plain = attention_fp64(q, k, v, q_lens, kv_lens, scale, 1.0, visible, "fp16")
    assert np.array_equal(lse, lse_plain)  # the LSE sees every key

    outs, want = autograd_attention(torch, q, k, v, do, q_lens, kv_lens, scale, visible, keep=keep, rescale=rescale)
    for (i, head), o in outs.items():
        assert np.allclose(out[i, :int(q_lens[i]), head], o, rtol=0, atol=2e-3 * rescale)
    for name, mine, theirs in zip(("dq", "dk", "dv"), grads, want):
        assert np.allclose(mine, theirs, rtol=1e-10, atol=1e-12), name


def test_oracle_dropout_averages_to_no_dropout():
    """The rescale makes the dropped output unbiased: over many masks its mean is the plain one."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 8, 1, 4)) for _ in range(3))
    lens = np.array([8])
    plain, _, _ = attention_fp64(q, k, v, lens, lens, 0.5, 1.0, None, "fp16")
    runs = [attention_fp64(q, k, v, lens, lens, 0.5, 1.0, None, "fp16", keep=dropout_keep(1, 1, 8, 8, 0.4, n, 0),
                           rescale=dropout_rescale(0.4))[0] for n in range(4000)]
    assert np.abs(np.mean(runs, axis=0) - plain).max() < 0.1 * np.abs(plain).max()


# --- The package's plumbing (torch on the CPU, no library, no GPU) -------------------------

@pytest.fixture
def package():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if str(ROOT / "python") not in sys.path:
        sys.path.insert(0, str(ROOT / "python"))
    from fmha import _op, interface
    return torch, _op, interface


@pytest.mark.parametrize("bad", [1.0, -0.1, 1.5, float("nan")])
def test_dropout_p_outside_0_1_is_refused_first(package, bad):
    """A ValueError before the tensors are looked at (CPU tensors here would fail later)."""
    torch, _, interface = package
    q = torch.randn(1, 8, 2, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"dropout_p=.* must be in \[0, 1\)"):
        interface.flash_attn_func(q, q, q, dropout_p=bad)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"dropout_p=.* must be in \[0, 1\)"):
        interface.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 8, 8, dropout_p=bad)
    with pytest.raises(TypeError):  # FA3's positional arguments are unchanged: dropout_p is keyword-only
        interface.flash_attn_func(q, q, q, None, False, None, None, None, None, (-1, -1), 0, 0.0, 1, None, False, 0,
                                  False, 0.1)


def test_rng_state_follows_torch_manual_seed(package):
    torch, _op, _ = package
    torch.manual_seed(123)
    a = _op._dropout_rng()
    torch.manual_seed(123)
    b = _op._dropout_rng()
    c = _op._dropout_rng()
    assert a.dtype == torch.int64 and a.shape == (2,) and a.device.type == "cpu"
    assert torch.equal(a, b) and not torch.equal(b, c)
    assert _op._rng_words(torch.tensor([-1, 5])) == (2**64 - 1, 5)  # written as unsigned 64-bit words


def test_ops_take_dropout_last(package):
    torch, _, _ = package
    for op in (torch.ops.fmha.fwd.default, torch.ops.fmha.bwd.default):
        args = op._schema.arguments
        assert [(a.name, str(a.type)) for a in args[-2:]] == [("dropout_p", "float"), ("rng", "Optional[Tensor]")]


def test_problem_gets_the_dropout_fields(package, monkeypatch):
    """_set_dropout writes p and the state as unsigned words; refused under a graph capture."""
    torch, _op, _ = package
    from fmha import _lib
    p = _lib.Problem()
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False)
    _op._set_dropout(p, 0.25, torch.tensor([-2, 2**40 + 1]))
    assert (p.dropout_p, p.dropout_seed, p.dropout_offset) == (0.25, 2**64 - 2, 2**40 + 1)
    with pytest.raises(ValueError, match="RNG state"):
        _op._set_dropout(_lib.Problem(), 0.25, None)
    untouched = _lib.Problem()
    _op._set_dropout(untouched, 0.0, None)
    assert (untouched.dropout_p, untouched.dropout_seed) == (0.0, 0)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA graph capture"):
        _op._set_dropout(_lib.Problem(), 0.25, torch.tensor([1, 2]))


@pytest.mark.parametrize("varlen", [False, True])
def test_functions_pass_dropout_to_the_op(package, monkeypatch, varlen):
    """flash_attn_func and flash_attn_varlen_func (on fake CUDA tensors) hand the op dropout_p
    and a fresh RNG state, and no prepared-call key; without dropout, 0.0 and None."""
    torch, _, interface = package
    from torch._subclasses.fake_tensor import FakeTensorMode
    calls = []

    def call(key, *args):
        calls.append((key, args))
        return args[0].new_empty(args[0].shape), args[0].new_empty((0,), dtype=torch.float32)

    monkeypatch.setattr(interface, "_call", call)
    with FakeTensorMode():
        if varlen:
            q, k = torch.empty(30, 4, 64, device="cuda", dtype=torch.bfloat16), \
                torch.empty(30, 2, 64, device="cuda", dtype=torch.bfloat16)
            cu = torch.empty(3, dtype=torch.int32, device="cuda")
            run = lambda p: interface.flash_attn_varlen_func(q, k, k, cu, cu, 20, 20, causal=True, dropout_p=p)
        else:
            q, k = torch.empty(2, 16, 4, 64, device="cuda", dtype=torch.bfloat16), \
                torch.empty(2, 16, 2, 64, device="cuda", dtype=torch.bfloat16)
            run = lambda p: interface.flash_attn_func(q, k, k, causal=True, dropout_p=p)
        run(0.2)
        run(0.2)
        run(0.0)
    (key1, args1), (key2, args2), (_, args0) = calls
    assert key1 is None and key2 is None and len(args1) == 26  # the op's arguments
    assert args1[-2] == 0.2 and args1[-1].dtype == torch.int64 and tuple(args1[-1].shape) == (2,)
    assert args1[-1].device.type == "cpu"
    assert args0[-2:] == (0.0, None)


def test_autograd_carries_the_state_to_the_backward(package, monkeypatch):
    """fwd under autograd (fake CPU tensors: the ops' fake implementations, as torch.compile
    traces them): dropout_p and the forward's RNG state reach the backward op, and the backward
    returns one gradient slot per forward argument (autograd checks the count)."""
    torch, _op, _ = package
    from torch._subclasses.fake_tensor import FakeTensorMode
    seen = {}
    fwd_fake, bwd_fake = _op._fwd._abstract_fn, _op._bwd._abstract_fn

    def spy_fwd(*args):
        seen["fwd"] = args[-2:]
        return fwd_fake(*args)

    def spy_bwd(*args):
        seen["bwd"] = args[-2:]
        return bwd_fake(*args)

    monkeypatch.setattr(_op._fwd, "_abstract_fn", spy_fwd)
    monkeypatch.setattr(_op._bwd, "_abstract_fn", spy_bwd)
    with FakeTensorMode():
        q = torch.empty(2, 16, 4, 64, dtype=torch.bfloat16, requires_grad=True)
        k = torch.empty(2, 16, 2, 64, dtype=torch.bfloat16, requires_grad=True)
        rng = torch.tensor([3, 4])
        out, lse = torch.ops.fmha.fwd(q, k, k, None, None, None, None, 16, 16, 0.125, 1, 0, 0, 0.0, None, None, None,
                                      None, True, None, None, None, False, True, 0.2, rng)
        (out.float().sum() + lse.sum()).backward()
        assert q.grad.shape == q.shape and k.grad.shape == k.shape
    assert seen["fwd"][0] == seen["bwd"][0] == 0.2
    assert seen["bwd"][1] is not None and tuple(seen["bwd"][1].shape) == (2,)
