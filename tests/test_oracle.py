"""tests/gpu/oracle.py, the float64 attention the -save-tensors re-check trusts, against
definitions written out here: the ALiBi paper's slopes, a softmax by the book, small masks."""

import math

import numpy as np
import pytest

from tests.gpu.oracle import alibi_slopes_fp64, attention_fp64, round_to, spec_error, visible_fp64


def test_alibi_slopes_are_the_papers():
    """The paper's examples: 8 heads 1/2 .. 1/256; 12 heads add the odd slopes of 16 heads."""
    assert np.allclose(alibi_slopes_fp64(8), 2.0 ** -np.arange(1, 9))
    assert np.allclose(alibi_slopes_fp64(12), np.r_[2.0 ** -np.arange(1, 9), 2.0 ** -np.array([0.5, 1.5, 2.5, 3.5])])
    assert np.allclose(alibi_slopes_fp64(1), [2.0 ** -8])


def test_round_to_rounds_once_to_nearest_even():
    assert round_to(1 + 2.0 ** -8, "bf16") == 1.0                          # a tie: to the even 1.0
    assert round_to(1 + 3 * 2.0 ** -8, "bf16") == 1 + 2.0 ** -6            # a tie: to the even 1 + 2^-6
    assert round_to(1 + 2.0 ** -8 + 2.0 ** -30, "bf16") == 1 + 2.0 ** -7   # just past it: up
    assert round_to(1 + 2.0 ** -11, "fp16") == 1.0 and round_to(1 + 3 * 2.0 ** -11, "fp16") == 1 + 2.0 ** -9


def test_spec_error():
    eps = 0.01
    got = spec_error(np.array([1.0, 0.002, np.nan, 0.0]), np.array([1.1, 0.001, 1.0, 0.0]), eps)
    assert got[0] == pytest.approx(0.1 / 2.1) and got[1] == pytest.approx(0.001)  # relative; absolute near 0
    assert got[2] == np.inf and got[3] == 0.0


@pytest.mark.parametrize("mask, extra, rows", [
    ("causal", {}, ["11100", "11110", "11111"]),                        # bottom-right aligned: row 0 at key 2
    ("sliding_window", {"sliding_window_size": 2}, ["01100", "00110", "00011"]),
    ("bidirectional_sliding_window", {"sliding_window_size": 2}, ["01110", "00111", "00011"]),
    ("chunked", {"chunked_attention_size": 2}, ["00100", "00110", "00001"]),   # chunks {0,1} {2,3} {4}
])
def test_visible_keys(mask, extra, rows):
    got = visible_fp64({"mask": mask, **extra}, 3, 5)
    assert ["".join("1" if x else "0" for x in row) for row in got] == rows


def by_the_book(q, k, v, scale, visible, sinks=None):
    """softmax(scale * q k^T) v row by row with math.exp, one query head over one KV head."""
    out, lse = np.zeros((q.shape[0], v.shape[1])), np.zeros(q.shape[0])
    for r in range(q.shape[0]):
        logits = [scale * float(q[r] @ k[j]) for j in range(k.shape[0]) if visible[r, j]]
        extra = [] if sinks is None else [sinks]
        if not logits:
            lse[r] = -math.inf
            continue
        top = max(logits + extra)
        norm = sum(math.exp(x - top) for x in logits + extra)
        weights = [math.exp(x - top) / norm for x in logits]
        keys = [j for j in range(k.shape[0]) if visible[r, j]]
        out[r] = sum(w * v[j] for w, j in zip(weights, keys))
        lse[r] = top + math.log(norm)
    return out, lse


def test_attention_matches_the_book():
    """GQA (4 query heads over 2 KV heads), var-len with s_q < s, causal, sinks; the oracle
    rounds P to fp16 as the kernels do, so it agrees with the book to fp16's P rounding."""
    rng = np.random.default_rng(5)
    b, s_q, s, h, h_kv, d = 2, 3, 6, 4, 2, 8
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for shape in
               ((b, s_q, h, d), (b, s, h_kv, d), (b, s, h_kv, d)))
    q_lens, kv_lens, scale, sinks = np.array([3, 2]), np.array([6, 4]), 0.3, np.array([0.5, -1.0, 0.0, 2.0])
    meta = {"mask": "causal"}
    out, amb, lse = attention_fp64(q, k, v, q_lens, kv_lens, scale, 1.0, lambda i, lq, lk: visible_fp64(meta, lq, lk),
                                   "fp16", sinks=sinks)
    for i in range(b):
        lq, lk = q_lens[i], kv_lens[i]
        for head in range(h):
            kv = head // (h // h_kv)
            want, want_lse = by_the_book(q[i, :lq, head].astype(float), k[i, :lk, kv].astype(float),
                                         v[i, :lk, kv].astype(float), scale, visible_fp64(meta, lq, lk), sinks[head])
            assert np.allclose(out[i, :lq, head], want, atol=2.0 ** -10 * np.abs(v).max()), (i, head)
            assert np.allclose(lse[i, head, :lq], want_lse, rtol=1e-12), (i, head)
        assert not out[i, lq:].any() and not lse[i, :, lq:].any()
    assert (amb >= 0).all()
