"""The package's prepared-call keys (python/fmha/interface.py, _op.py) on CPU tensors: which
calls may share a checked, planned problem. Needs torch (any build), no GPU and no library;
skips where torch is not installed."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from fmha import _op, interface  # noqa: E402

OPTIONS = (None, False, (-1, -1), 0, 0.0, False)  # softmax_scale, causal, window, chunk, softcap, lse


def key(q, k, v, options=OPTIONS):
    return _op._lookup(interface._func_key, q, k, v, *options)[0]


def test_same_shapes_strides_and_options_share_a_key():
    a = [torch.randn(2, 16, 4, 64, dtype=torch.bfloat16) for _ in range(3)]
    b = [torch.randn(2, 16, 4, 64, dtype=torch.bfloat16) for _ in range(3)]
    assert key(*a) == key(*b)


def test_what_changes_the_problem_changes_the_key():
    q = torch.randn(2, 16, 4, 64, dtype=torch.bfloat16)
    base = key(q, q, q)
    transposed = torch.randn(2, 4, 16, 64, dtype=torch.bfloat16).transpose(1, 2)  # same shape, other strides
    assert transposed.shape == q.shape and key(transposed, q, q) != base
    assert key(q.half(), q.half(), q.half()) != base
    assert key(q[:1], q[:1], q[:1]) != base
    assert key(q, q, q, (None, True, (-1, -1), 0, 0.0, False)) != base  # causal
    assert key(q, q, q, (0.1, False, (-1, -1), 0, 0.0, False)) != base  # softmax_scale
    assert key(q, q, q, (None, False, (-1, -1), 0, 0.0, True)) != base  # the LSE


def test_no_key_for_what_the_full_path_must_see():
    q = torch.randn(2, 16, 4, 64, dtype=torch.bfloat16)
    assert key("q", q, q) is None  # not a tensor: the full path raises with the reason
    assert key(q, q, q, (None, False, [-1, -1], 0, 0.0, False)) is None  # unhashable window
    assert _op._plain(OPTIONS)
    assert not _op._plain((torch.tensor(0.1), False))  # a tensor hashes by identity, not value
    assert not _op._plain(((torch.tensor(1), 0),))


def test_pointer_words_land_on_the_problem_fields():
    from fmha import _lib
    p = _lib.Problem()
    words = _op._Words.from_buffer(p)
    fields = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table", "alibi_slopes", "sinks",
              "bias", "custom_mask", "q_descale", "k_descale", "v_descale")
    for n, word in enumerate(_op._INPUT_WORDS):
        words[word] = 4096 * (n + 1)
    words[_op._O_WORD], words[_op._LSE_WORD] = 1 << 40, 1 << 41
    got = [getattr(p, f).data if f in ("q", "k", "v") else getattr(p, f) for f in fields]
    assert got == [4096 * (n + 1) for n in range(len(fields))]
    assert (p.o.data, p.lse) == (1 << 40, 1 << 41)


def test_kvcache_lengths_key_by_value_or_by_tensor():
    q = torch.randn(2, 1, 8, 64, dtype=torch.bfloat16)
    cache = torch.randn(2, 64, 2, 64, dtype=torch.bfloat16)

    def kv_key(lens):
        return _op._lookup(interface._kvcache_key, q, cache, cache, lens, None, *OPTIONS)[0]

    assert kv_key(5) != kv_key(6) and kv_key(5) == kv_key(5)  # an int is the value itself
    a, b = torch.tensor([5, 6], dtype=torch.int32), torch.tensor([7, 8], dtype=torch.int32)
    assert kv_key(a) == kv_key(b) != kv_key(5)  # a tensor by its shape, strides, dtype, device
    assert _op._plain(kv_key(5)[1]) and _op._plain(kv_key(a)[1])
