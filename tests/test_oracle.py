"""tests/gpu/oracle.py, the float64 attention the -save-tensors re-check trusts, against
definitions written out here: the ALiBi paper's slopes, a softmax by the book, small masks."""

import math

import numpy as np
import pytest

from tests.gpu.oracle import (E4M3_MAX, QGMMA_SUM_ERROR, alibi_slopes_fp64, attention_backward_fp64, attention_fp64,
                              block_running_max, rms_error, round_p, round_to, spec_error, visible_fp64)
from tests.torch_attention import autograd_attention


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


def test_round_to_e4m3_is_the_ocp_grid():
    """e4m3 (OCP FP8 "fn"): 3 mantissa bits, exponents down to -6, subnormals 2^-9 apart,
    448 the largest value; to nearest even, saturating."""
    assert round_to(1 + 2.0 ** -4, "e4m3") == 1.0                       # a tie: to the even 1.0
    assert round_to(1 + 3 * 2.0 ** -4, "e4m3") == 1 + 2.0 ** -2          # a tie: to the even 1.25
    assert round_to(1 + 2.0 ** -4 + 2.0 ** -20, "e4m3") == 1 + 2.0 ** -3  # just past it: up
    assert round_to(2.0 ** -6 * 1.0625, "e4m3") == 2.0 ** -6             # the smallest normal's tie
    assert round_to(3 * 2.0 ** -10, "e4m3") == 2 * 2.0 ** -9             # subnormal tie 1.5 -> 2 steps
    assert round_to(2.0 ** -10, "e4m3") == 0.0                           # half the smallest: to 0
    assert round_to(2.0 ** -10 + 2.0 ** -30, "e4m3") == 2.0 ** -9
    assert round_to(-300.0, "e4m3") == -288.0 and round_to(1e6, "e4m3") == E4M3_MAX
    assert round_to(464.0, "e4m3") == E4M3_MAX                           # past 448: saturates
    with pytest.raises(ValueError):
        round_to(1.0, "e5m2")


def test_round_to_e4m3_agrees_with_torch():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn")
    rng = np.random.default_rng(9)
    x = np.concatenate([rng.standard_normal(20000) * 10.0 ** rng.uniform(-4, 2, 20000), [0.0, 448.0, -448.0]])
    x = x[np.abs(x) <= E4M3_MAX]
    # float32 first is exact enough here: e4m3's ties are far from float32's rounding.
    want = torch.from_numpy(x.astype(np.float32)).to(torch.float8_e4m3fn).to(torch.float64).numpy()
    assert np.array_equal(round_to(x, "e4m3"), want)


def test_round_p_scales_e4m3_by_a_power_of_two():
    p = np.array([1.0, 0.5, 0.3, 2.0 ** -12, 2.0 ** -20])
    got = round_p(p, "e4m3")
    assert got[0] == 1.0 and got[1] == 0.5 and got[2] == 0.3125          # 76.8 -> 80 at the scale 256
    assert got[3] == 2.0 ** -12                                          # 2^-4 at the scale: normal
    assert got[4] == 0.0                                                 # 2^-12 at the scale: below 2^-10
    assert np.array_equal(round_p(p, "bf16"), round_to(p, "bf16"))


def test_rms_error():
    assert rms_error(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == pytest.approx(math.sqrt(2.0))
    assert rms_error(np.zeros(0), np.zeros(0)) == 0.0


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


def test_e4m3_lse_amb_is_the_lse_moved_by_the_qgmma_bound():
    """lse_amb: 0 for fp16; for e4m3, what moving every score by the QGMMA bound (all up or
    all down, the worst case) moves the LSE, to first order: within 1 % of either shift, and
    a bound for it but for second-order terms. A causal row of one key moves by its whole
    bound; the sink joins the normaliser."""
    rng = np.random.default_rng(11)
    b, s, h, d = 2, 33, 2, 128
    q, k, v = (round_to(rng.standard_normal((b, s, h, d)), "e4m3") for _ in range(3))
    lens, scale, sinks = np.array([s, 20]), d ** -0.5, np.array([0.5, -1.0])
    meta = {"mask": "causal"}
    visible = lambda i, lq, lk: visible_fp64(meta, lq, lk)  # noqa: E731
    args = (q, k, v, lens, lens, scale, 1.0, visible)
    lse_amb16 = np.full((b, h, s), -1.0)
    attention_fp64(*args, "fp16", sinks=sinks, lse_amb=lse_amb16)
    assert not lse_amb16[0].any() and not lse_amb16[1, :, :20].any()
    lse_amb = np.zeros((b, h, s))
    _, _, lse = attention_fp64(*args, "e4m3", sinks=sinks, lse_amb=lse_amb)
    for i in range(b):
        lq = lens[i]
        size = scale * np.einsum("qhd,khd->hqk", np.abs(q[i, :lq]), np.abs(k[i, :lq]))
        bound = np.zeros((b, h, s, s))
        bound[i, :, :lq, :lq] = QGMMA_SUM_ERROR * size
        for sign in (1.0, -1.0):
            _, _, moved = attention_fp64(*args, "e4m3", sinks=sinks, bias=sign * bound)
            shift = np.abs(moved[i, :, :lq] - lse[i, :, :lq])
            assert np.allclose(shift, lse_amb[i, :, :lq], rtol=1e-2, atol=0), (i, sign)
            assert (shift <= lse_amb[i, :, :lq] + 1e-4).all(), (i, sign)
        # Row 0 sees key 0 and the sink: its weight is exp(S_00 - LSE).
        s00 = scale * np.einsum("hd,hd->h", q[i, 0], k[i, 0])
        assert np.allclose(lse_amb[i, :, 0], QGMMA_SUM_ERROR * size[:, 0, 0] * np.exp(s00 - lse[i, :, 0]), rtol=1e-9)


def test_e4m3_ambiguity_covers_the_qgmma_sum_error(monkeypatch):
    """e4m3: each P may round either way within QGMMA_SUM_ERROR x sum |q_c k_c| x scale of an
    edge (the kernel's S is that far off at most): amb is at least the fp32-noise one, larger
    for some element, and bounds the output moved by perturbing the scores that much."""
    import tests.gpu.oracle as oracle
    rng = np.random.default_rng(7)
    b, s, h, d = 1, 40, 2, 64
    q, k, v = (oracle.round_to(rng.standard_normal((b, s, h, d)), "e4m3") for _ in range(3))
    lens, scale = np.array([s]), d ** -0.5
    args = (q, k, v, lens, lens, scale, 1.0, None, "e4m3")
    out, amb, _ = attention_fp64(*args)
    monkeypatch.setattr(oracle, "QGMMA_SUM_ERROR", 0.0)
    _, amb_fp32, _ = attention_fp64(*args)
    assert (amb >= amb_fp32).all() and (amb > amb_fp32).any()
    # The same problem with every score moved by +-(bound): its output within amb of out.
    monkeypatch.setattr(oracle, "QGMMA_SUM_ERROR", 2.0 ** -9)
    size = scale * np.einsum("qhd,khd->hqk", np.abs(q[0]), np.abs(k[0]))
    shift = 0.99 * 2.0 ** -9 * size * rng.choice([-1.0, 1.0], size.shape)
    scores = scale * np.einsum("qhd,khd->hqk", q[0], k[0]) + shift
    x = scores * math.log2(math.e)
    p = np.exp2(x - np.ceil(x.max(axis=-1, keepdims=True)))
    moved = np.einsum("hqk,khd->qhd", oracle.round_p(p, "e4m3") / p.sum(axis=-1, keepdims=True), v[0])
    # Beyond amb, only the unrounded weights' own first-order change (the normaliser and P
    # itself move by the same relative amount as the shift).
    slack = np.einsum("hqk,khd->qhd", np.abs(shift) * p / p.sum(axis=-1, keepdims=True), np.abs(v[0])) * 3
    assert (np.abs(moved - out[0]) <= amb[0] + slack + 1e-12).all()
    assert not (np.abs(moved - out[0]) <= amb_fp32[0] + slack + 1e-12).all()  # the fp32 one alone would not do


def streamed_e4m3(q, k, v, scale, block, visible):
    """One sequence and head as the e4m3 kernels stream it: key blocks of `block`, last first;
    M the exact running max (raised only past it), O and l rescaled when it rises, each
    block's P rounded to e4m3 at the scale 2^8 against that M, l summing P unrounded."""
    x = scale * (q @ k.T) * math.log2(math.e)
    x = np.where(visible, x, -np.inf)
    m, l, o = np.full(len(q), -np.inf), np.zeros(len(q)), np.zeros((len(q), v.shape[1]))
    for start in range(((k.shape[0] - 1) // block) * block, -1, -block):
        xb = x[:, start:start + block]
        m_new = np.maximum(m, xb.max(axis=-1))
        rise = m_new > m
        alpha = np.where(rise & np.isfinite(m), np.exp2(m - np.where(np.isfinite(m_new), m_new, 0)), 1.0)
        alpha = np.where(rise & ~np.isfinite(m), 0.0, alpha)
        o, l, m = o * alpha[:, None], l * alpha, m_new
        p = np.exp2(xb - np.where(np.isfinite(m), m, 0)[:, None])
        l = l + p.sum(axis=-1)
        o = o + round_p(p, "e4m3") @ v[start:start + block]
    return o / np.where(l > 0, l, 1)[:, None]


@pytest.mark.parametrize("mask", ["padding", "causal"])
def test_e4m3_block_rule_is_the_streamed_kernels(mask):
    """attention_fp64 with p_block_keys (the e4m3 kernels' rule, bench/NOTES.md §56) is what a
    kernel streaming blocks last first with the exact running max computes, to float64's
    noise; and it differs from the max-rounded-up rule's P (a different grid)."""
    rng = np.random.default_rng(11)
    b, s_q, s, h, d, block = 1, 50, 200, 2, 32, 64
    q, k, v = (round_to(rng.standard_normal(shape), "e4m3") for shape in ((b, s_q, h, d), (b, s, h, d), (b, s, h, d)))
    lens_q, lens_k, scale, meta = np.array([s_q]), np.array([s]), 0.5, {"mask": mask}
    visible = lambda i, lq, lk: visible_fp64(meta, lq, lk)
    out, amb, _ = attention_fp64(q, k, v, lens_q, lens_k, scale, 1.0, visible, "e4m3", p_block_keys=block)
    for head in range(h):
        want = streamed_e4m3(q[0, :, head], k[0, :, head], v[0, :, head], scale, block, visible(0, s_q, s))
        assert np.allclose(out[0, :, head], want, rtol=0, atol=1e-12), head
    rounded_up, _, _ = attention_fp64(q, k, v, lens_q, lens_k, scale, 1.0, visible, "e4m3")
    assert not np.allclose(out, rounded_up, rtol=0, atol=1e-6)
    assert (amb > 0).any()


def test_block_running_max_takes_the_blocks_last_first():
    x = np.array([[[1.0, 5.0, 2.0, 3.0, -np.inf, 0.5]]])  # blocks of 2: [1, 5] [2, 3] [-inf, 0.5]
    m, arg = block_running_max(x, 2)
    assert m.tolist() == [[[5.0, 5.0, 3.0, 3.0, 0.5, 0.5]]] and arg.tolist() == [[[1, 1, 3, 3, 5, 5]]]
    m, arg = block_running_max(np.full((1, 1, 3), -np.inf), 2)  # a row that sees nothing
    assert np.isneginf(m).all() and (arg == -1).all()


@pytest.mark.parametrize("mask, softcap, with_sinks, with_alibi", [
    ("padding", 0.0, False, False),
    ("causal", 0.0, True, False),
    ("sliding_window", 5.0, False, True),
])
def test_backward_matches_autograd(mask, softcap, with_sinks, with_alibi):
    """attention_backward_fp64 against torch's float64 autograd of the same attention: GQA (4
    query heads over 2 KV heads), var-len with s_q < s, a row that sees no key (lq > lk)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    b, s_q, s, h, h_kv, d, dv = 2, 4, 6, 4, 2, 8, 5
    q, k = rng.standard_normal((b, s_q, h, d)), rng.standard_normal((b, s, h_kv, d))
    v = rng.standard_normal((b, s, h_kv, dv))
    do = rng.standard_normal((b, s_q, h, dv))
    q_lens, kv_lens, scale = np.array([4, 3]), np.array([6, 2]), 0.4
    meta = {"mask": mask, "sliding_window_size": 2}
    sinks = np.array([0.5, -1.0, 0.0, 2.0]) if with_sinks else None
    alibi = alibi_slopes_fp64(h) if with_alibi else None
    visible = lambda i, lq, lk: visible_fp64(meta, lq, lk)
    got = attention_backward_fp64(q, k, v, do, q_lens, kv_lens, scale, visible, softcap, sinks, alibi)

    _, want = autograd_attention(torch, q, k, v, do, q_lens, kv_lens, scale, visible, softcap, sinks, alibi)
    for name, mine, theirs in zip(("dq", "dk", "dv"), got, want):
        assert np.allclose(mine, theirs, rtol=1e-10, atol=1e-12), name
