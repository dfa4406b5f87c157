"""Attention in float64 with NumPy, independent of the driver's own reference: the
-save-tensors re-check (test_save_tensors.py) compares both the kernel's output and the
driver's fp32 reference with it. SPEC.md's error metric, the masks' formulas and the ALiBi
slopes are written here from their definitions, not from src/; dropout's keep mask from its
contract (include/fmha.h's dropout fields: Philox4x32-10 per group of 8 (query, key) pairs).
"""

import math
from pathlib import Path

import numpy as np

REF_REL_L2 = 1e-4  # the driver's fp32 reference against float64, relative L2
# Relative distance from a rounding edge where a kernel's fp32 P may round either way.
AMBIGUITY = 2.0 ** -16
# e4m3: how far a QGMMA's S = Q K^T may be off, relative to the sum of |q_c k_c| (Hopper's FP8
# tensor cores keep a limited part of the sum; measured: src/fmha/mma/fp8_sm90.h's
# kQgmmaSumError, which tests/test_contract.py holds equal). A P may round either way that far.
QGMMA_SUM_ERROR = 2.0 ** -9


def spec_error(found: np.ndarray, expected: np.ndarray, eps: float) -> np.ndarray:
    """SPEC.md's per-element error: relative |a-b|/(|a|+|b|), absolute where |a|+|b| <= eps;
    NaN anywhere counts as infinitely wrong."""
    a, b = found.astype(np.float64), expected.astype(np.float64)
    diff, size = np.abs(a - b), np.abs(a) + np.abs(b)
    err = np.where(size <= eps, diff, diff / np.where(size == 0, 1, size))
    return np.where(np.isnan(a) | np.isnan(b), np.inf, err)


E4M3_MAX = 448.0  # the largest finite e4m3 (OCP FP8, "fn": no infinities)
# P's power-of-two scale before it is rounded to e4m3 (FA3's and fmha_v2's convention): P in
# [0, 1] becomes [0, 256], below e4m3's 448, and small probabilities keep their mantissa
# instead of falling into its subnormals (2^-9 apart below 2^-6).
P_SCALE_E4M3 = 256.0


def round_to(x, dtype):
    """x (float64) rounded once, to nearest even, to fp16, bf16 or e4m3 (saturating at +-448,
    as cvt.rn.satfinite does), returned as float64. (Through float32 first would round twice:
    a value just off a bf16 midpoint can land on it and tie the other way; the driver's
    reference rounds float64 P once.)"""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float64)  # numpy rounds float64 -> half directly
    mant, exp = np.frexp(x)  # x = mant * 2^exp, 0.5 <= |mant| < 1
    if dtype == "bf16":  # 8 significant bits
        return np.ldexp(np.round(mant * 256.0) / 256.0, exp)  # np.round: ties to even
    if dtype == "e4m3":  # 4 significant bits down to 2^-6, then a fixed step of 2^-9
        step = np.ldexp(1.0, np.maximum(exp - 1, -6) - 3)
        return np.clip(np.round(x / step) * step, -E4M3_MAX, E4M3_MAX)
    raise ValueError(f"round_to: no dtype {dtype!r}")


def round_p(p, dtype):
    """P (float64, in [0, 1]) as a tensor-core kernel feeds it to P V: rounded to the input
    dtype, e4m3 at P_SCALE_E4M3 (and scaled back), 16-bit types at any power of two alike."""
    if dtype == "e4m3":
        return round_to(p * P_SCALE_E4M3, "e4m3") / P_SCALE_E4M3
    return round_to(p, dtype)


def rms_error(found: np.ndarray, expected: np.ndarray) -> float:
    """Root-mean-square of found - expected (float64), the FP8 checks' second measure beside
    the largest SPEC.md error."""
    diff = found.astype(np.float64) - expected.astype(np.float64)
    return float(np.sqrt(np.mean(diff * diff))) if diff.size else 0.0


def visible_fp64(meta: dict, lq: int, lk: int, custom=None) -> np.ndarray:
    """[lq, lk] booleans: which keys each query row sees under meta.json's mask. Query row r
    sits at key position p = r + lk - lq (Q holds the last lq tokens). custom: the sequence's
    [s_q, s] slice of custom_mask.npy (mask "custom")."""
    pos = np.arange(lq)[:, None] + (lk - lq)
    key = np.arange(lk)[None, :]
    mask = meta["mask"]
    if mask == "padding":
        return np.ones((lq, lk), dtype=bool)
    if mask == "custom":                # the saved bits, as they are
        return custom[:lq, :lk] != 0
    if mask == "causal":
        return key <= pos
    if mask == "sliding_window":        # the window's W keys end at the row's own position
        return (key <= pos) & (key > pos - meta["sliding_window_size"])
    if mask == "bidirectional_sliding_window":  # W - 1 keys on either side of it
        return np.abs(key - pos) < meta["sliding_window_size"]
    if mask == "chunked":               # causal inside the row's chunk of C keys
        c = meta["chunked_attention_size"]
        return (key <= pos) & (key // c == pos // c)
    raise ValueError(f"meta.json mask {mask!r} has no formula here")


def alibi_slopes_fp64(h: int) -> np.ndarray:
    """The ALiBi paper's slopes for h heads (Press et al., its reference code): a geometric
    sequence starting at 2^(-8/n) for n a power of two; otherwise those of the largest power
    of two below h, then every other slope of twice that many heads."""
    def power_of_2(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(h).is_integer():
        return np.array(power_of_2(h))
    closest = 2 ** math.floor(math.log2(h))
    return np.array(power_of_2(closest) + list(alibi_slopes_fp64(2 * closest)[0::2][:h - closest]))


def block_running_max(x: np.ndarray, block: int) -> tuple:
    """The e4m3 kernels' running max (bench/NOTES.md §56): keys in blocks of `block`, visited
    last block first, M after each visit the exact max of the blocks seen. For x [h, lq, lk]
    (log2 units, -inf where hidden) returns (M at each key's block's visit, [h, lq, lk]; the
    key that set it, as an index into lk, -1 where none has)."""
    h, lq, lk = x.shape
    blocks = -(-lk // block)
    padded = np.full((h, lq, blocks * block), -np.inf)
    padded[..., :lk] = x
    padded = padded.reshape(h, lq, blocks, block)
    top, where = padded.max(axis=-1), padded.argmax(axis=-1) + np.arange(blocks) * block
    m = np.full((h, lq, blocks), -np.inf)
    arg = np.full((h, lq, blocks), -1)
    run, run_arg = np.full((h, lq), -np.inf), np.full((h, lq), -1)
    for nb in range(blocks - 1, -1, -1):
        rise = top[..., nb] > run  # the kernel raises M only past it
        run, run_arg = np.where(rise, top[..., nb], run), np.where(rise, where[..., nb], run_arg)
        m[..., nb], arg[..., nb] = run, run_arg
    return np.repeat(m, block, axis=-1)[..., :lk], np.repeat(arg, block, axis=-1)[..., :lk]


_U32 = np.uint64(0xFFFFFFFF)
_U64 = (1 << 64) - 1
# Philox4x32's round multipliers and its key schedule's increments (Salmon et al., SC 2011).
_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_PHILOX_W = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))


def philox4x32_10(counter, key) -> np.ndarray:
    """Philox4x32 with 10 rounds: counter [..., 4] and key [..., 2] (32-bit words, broadcast
    against each other) -> [..., 4] uint32. Each round multiplies words 0 and 2 into 64-bit
    products (exact in uint64: both factors < 2^32) and mixes their halves with words 1 and 3
    and the key; the key steps by the Weyl increments between rounds."""
    c = np.asarray(counter, dtype=np.uint64)
    k = np.asarray(key, dtype=np.uint64)
    shape = np.broadcast_shapes(c.shape[:-1], k.shape[:-1])
    x0, x1, x2, x3 = (np.broadcast_to(c[..., j], shape) & _U32 for j in range(4))
    k0, k1 = (np.broadcast_to(k[..., j], shape) & _U32 for j in range(2))
    for _ in range(10):
        p0, p1 = _PHILOX_M[0] * x0, _PHILOX_M[1] * x2
        x0, x1, x2, x3 = (p1 >> np.uint64(32)) ^ x1 ^ k0, p1 & _U32, (p0 >> np.uint64(32)) ^ x3 ^ k1, p0 & _U32
        k0, k1 = (k0 + _PHILOX_W[0]) & _U32, (k1 + _PHILOX_W[1]) & _U32
    return np.stack([x0, x1, x2, x3], axis=-1).astype(np.uint32)


def dropout_threshold(p: float) -> int:
    """The 16-bit threshold of dropout probability p: round(p 2^16) of p as the library's
    float holds it, at most 2^16 - 1; 0 (off) for p <= 0."""
    p32 = float(np.float32(p))
    if not p32 > 0:
        return 0
    return min(65535, math.floor(p32 * 65536.0 + 0.5))


def dropout_rescale(p: float) -> float:
    """What a kept probability is multiplied by: 2^16 / (2^16 - threshold), so that the
    expectation of the dropped P is P itself (float64; the kernels hold it as a float)."""
    return 65536.0 / (65536.0 - dropout_threshold(p))


def dropout_keep(b: int, h: int, s_q: int, s_k: int, p: float, seed: int, offset: int, q_lens=None,
                 k_lens=None) -> np.ndarray:
    """Dropout's keep mask, bool [b, h, s_q, s_k]: whether query row q and key k (positions
    within their sequence) of sequence `batch`, query head `head` are kept. One Philox call per
    (batch * h + head, query group, key group), the groups being queries {q0, q0 + 8} and keys
    {k0, k0 + 1, k0 + 8, k0 + 9}: counter (key group, query group, batch * h + head, low word of
    offset), key (low word of seed, high word of seed ^ high word of offset); its 8 16-bit
    halves, word j's low half first, are the group's 8 pairs (query bit 3 picks the upper
    four, then key bit 3, then key bit 0); kept where >= dropout_threshold(p). q_lens, k_lens
    [b]: False past each sequence's lengths."""
    threshold = dropout_threshold(p)
    seed, offset = int(seed) & _U64, int(offset) & _U64
    key = np.array([seed & 0xFFFFFFFF, ((seed >> 32) ^ (offset >> 32)) & 0xFFFFFFFF], dtype=np.uint64)
    q, k = np.arange(s_q, dtype=np.int64), np.arange(s_k, dtype=np.int64)
    q_group = (q >> 4) << 3 | (q & 7)
    k_group = (k >> 4) << 2 | ((k >> 1) & 3)
    n_q = int(q_group.max()) + 1 if s_q else 0
    n_k = int(k_group.max()) + 1 if s_k else 0
    # Every group's call once: counters [b h, query groups, key groups, 4].
    bh, qg, kg = np.meshgrid(np.arange(b * h), np.arange(n_q), np.arange(n_k), indexing="ij")
    counter = np.stack([kg, qg, bh, np.full_like(bh, offset & 0xFFFFFFFF)], axis=-1)
    words = philox4x32_10(counter, key).astype(np.uint64)
    halves = np.stack([(words[..., j // 2] >> np.uint64(16 * (j % 2))) & np.uint64(0xFFFF) for j in range(8)],
                      axis=-1)
    which = 4 * ((q[:, None] >> 3) & 1) + 2 * ((k[None, :] >> 3) & 1) + (k[None, :] & 1)
    keep = halves[:, q_group[:, None], k_group[None, :], which] >= threshold  # [b h, s_q, s_k]
    keep = keep.reshape(b, h, s_q, s_k)
    if q_lens is not None:
        keep &= (q[None, :] < np.asarray(q_lens)[:, None])[:, None, :, None]
    if k_lens is not None:
        keep &= (k[None, :] < np.asarray(k_lens)[:, None])[:, None, None, :]
    return keep


def saved_dropout(t: dict, meta: dict) -> tuple:
    """(keep, rescale) of a -save-tensors run (t: its q, k, seqlens_q, seqlens_kv arrays; meta:
    meta.json), for attention_fp64 and attention_backward_fp64: fmha.exe keys the mask by -seed,
    offset 0; (None, 1.0) without -dropout."""
    if not meta["dropout_p"] > 0:
        return None, 1.0
    b, s_q, h = t["q"].shape[:3]
    keep = dropout_keep(b, h, s_q, t["k"].shape[1], meta["dropout_p"], meta["seed"], 0, t["seqlens_q"],
                        t["seqlens_kv"])
    return keep, dropout_rescale(meta["dropout_p"])


def _dropped(keep, rescale, i: int, lq: int, lk: int):
    """Sequence i's [h, lq, lk] factor on P from a keep mask (1 where there is none)."""
    return 1.0 if keep is None else keep[i, :, :lq, :lk] * rescale


def attention_fp64(q, k, v, q_lens, kv_lens, scale_bmm1, scale_out, visible, dtype, softcap=0.0, sinks=None,
                   alibi=None, bias=None, p_block_keys=0, keep=None, rescale=1.0, lse_amb=None):
    """Plain softmax attention per sequence in float64. q [b, s_q, h, d], k [b, s, h_kv, d],
    v [b, s, h_kv, dv]; visible(i, lq, lk) gives the [lq, lk] keys each query row of sequence
    i may see (None: all of them). A row that sees no key is 0. sinks [h] (gpt-oss attention
    sinks): a logit per query head that joins each row's denominator, exp(sink), and nothing
    else. alibi [h]: ALiBi slopes, the logit of query row r and key j less slope *
    |r + lk - lq - j|. bias [b or 1, h or 1, s_q, s]: added to the logits.
    The probabilities that multiply V are rounded to the input dtype (round_p), as a
    tensor-core kernel feeds them to P·V (the normaliser uses them unrounded): otherwise a row that
    averages a few nearly cancelling values fails bf16's relative check on that alone.
    Rounding at a power-of-two scale gives the same bits whatever the scale, so this is the
    same P as the kernel's and the driver's reference, computed independently.
    Returns (out, amb, lse): amb bounds how far the P within AMBIGUITY of a rounding edge, which
    a kernel computing P in fp32 may round the other way, move each output element (e4m3: within
    QGMMA_SUM_ERROR times the score's sum of |q_c k_c| times scale_bmm1, if more). e4m3 with
    p_block_keys (meta.json's, the kernel's key block): P is rounded against the exact running
    max of the blocks the kernel has visited (block_running_max), as the e4m3 kernels do, and the
    ambiguity adds the S error of the key that set that max; 0: the max rounded up. lse
    [b, h, s_q] is each row's natural-log log-sum-exp of its logits, the sink's exp(sink) in
    the sum (-inf for a row that sees nothing; 0 past a sequence's length, as lse.npy).
    keep [b, h, s_q, s] (dropout_keep) with rescale (dropout_rescale): O = (P Z rescale) V, the
    dropped probabilities 0 and the kept ones scaled; the normaliser and the LSE see them all.
    lse_amb [b, h, s_q], if given, is filled with how far a QGMMA's error in S may move each
    row's LSE: e4m3, QGMMA_SUM_ERROR x sum_j P_j |scale_bmm1| sum_c |q_c k_jc| over the
    normalised P (dLSE = sum_j P_j dS_j); 0 for the 16-bit types."""
    b, s_q, h, _ = q.shape
    group = h // k.shape[2]  # query head j reads kv head j // group
    out = np.zeros((b, s_q, h, v.shape[3]))
    amb = np.zeros_like(out)
    lse = np.zeros((b, h, s_q))
    if lse_amb is not None:
        lse_amb[...] = 0.0
    for i in range(b):
        lq, lk = int(q_lens[i]), int(kv_lens[i])
        qi = q[i, :lq].astype(np.float64)
        ki = np.repeat(k[i, :lk].astype(np.float64), group, axis=1)
        vi = np.repeat(v[i, :lk].astype(np.float64), group, axis=1)
        scores = scale_bmm1 * np.einsum("qhd,khd->hqk", qi, ki)
        if softcap:  # Gemma-2 logit softcapping: cap * tanh(logit / cap)
            scores = softcap * np.tanh(scores / softcap)
        if alibi is not None:  # distance between the row's key position and the key
            dist = np.abs(np.arange(lq)[:, None] + (lk - lq) - np.arange(lk)[None, :])
            scores = scores - alibi[:, None, None] * dist[None]
        if bias is not None:  # broadcast over a batch or the heads where the tensor has 1
            scores = scores + bias[i if bias.shape[0] > 1 else 0, :, :lq, :lk].astype(np.float64)
        if visible is not None:
            scores = np.where(visible(i, lq, lk)[None], scores, -np.inf)
        # P = 2^(log2(e)·S - M), M the row max rounded up to an integer: the power-of-two
        # scale makes P's rounding independent of where the kernel saw the max.
        x = scores * np.log2(np.e)
        m = x.max(axis=-1, keepdims=True)
        exact = dtype == "e4m3" and p_block_keys > 0
        if exact:  # each P against its block's running max, then brought to the row's max M
            m_key, m_arg = block_running_max(x, p_block_keys)
            m_top = m_key[..., :1] if lk else m
            p = np.exp2(x - np.where(np.isfinite(m_key), m_key, 0))
            to_top = np.exp2(np.where(np.isfinite(m_key), m_key - np.where(np.isfinite(m_top), m_top, 0), 0))
        else:
            m_top = np.ceil(np.where(np.isfinite(m), m, 0))
            p = np.exp2(x - m_top)
            to_top = 1.0
        norm = (p * to_top).sum(axis=-1, keepdims=True)
        if sinks is not None:  # exp(sink) on the same 2^(-M) scale as p, for rows that see a key
            top = np.where(np.isfinite(m_top), m_top, 0)
            norm = norm + np.where(np.isfinite(m), np.exp2(sinks[:, None, None] * np.log2(np.e) - top), 0)
        norm = np.where(norm > 0, norm, 1)
        z = _dropped(keep, rescale, i, lq, lk)
        out[i, :lq] = scale_out * np.einsum("hqk,khd->qhd", round_p(p, dtype) * to_top / norm * z, vi)
        near = AMBIGUITY
        if dtype == "e4m3":  # |dP| / P = |dS| scale_bmm1 to first order (softcap's tanh only shrinks it)
            size = abs(scale_bmm1) * np.einsum("qhd,khd->hqk", np.abs(qi), np.abs(ki))
            if lse_amb is not None:
                lse_amb[i, :, :lq] = QGMMA_SUM_ERROR * (p * to_top / norm * size).sum(axis=-1)
            if exact:  # and the S of the key that set the max is as inexact
                size = size + np.where(m_arg >= 0, np.take_along_axis(size, np.maximum(m_arg, 0), axis=-1), 0)
            near = np.maximum(AMBIGUITY, QGMMA_SUM_ERROR * size)
        edge = round_p(p * (1 + near), dtype) - round_p(p * (1 - near), dtype)
        amb[i, :lq] = abs(scale_out) * np.einsum("hqk,khd->qhd", edge * to_top / norm * z, np.abs(vi))
        # The LSE straight from the logits (no 2^-M scale): a log-sum-exp about the true max.
        terms = [scores] if sinks is None else [scores, np.broadcast_to(sinks[:, None, None], (h, lq, 1))]
        logits = np.concatenate(terms, axis=-1)
        top = logits.max(axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0)
        with np.errstate(divide="ignore"):  # a row that sees nothing: log(0) = -inf
            lse[i, :, :lq] = (top + np.log(np.exp(logits - top).sum(axis=-1, keepdims=True)))[..., 0]
    return out, amb, lse


def attention_backward_fp64(q, k, v, do, q_lens, kv_lens, scale_bmm1, visible, softcap=0.0, sinks=None,
                            alibi=None, keep=None, rescale=1.0):
    """Gradients of attention_fp64's output (unrounded P, scale_out 1) with respect to q, k and
    v, in float64, for the backward pass's checks: do [b, s_q, h, dv] is dL/dO; returns (dq, dk,
    dv) shaped as q, k, v (a KV head's gradient sums its query heads; zeros past the lengths).
    Per row, with T the (softcapped) logits over the visible keys and P = softmax(T):
    dV = P^T dO, dP = dO V^T, dT = P (dP - D) with D = rowsum(dO O) (a sink joins the
    denominator with no value, so D is unchanged), dS = dT (1 - tanh^2(S / cap)) with
    softcapping, dQ = scale dS K, dK = scale dS^T Q. A row that sees no key has no gradient.
    With dropout (keep, rescale as attention_fp64's; Z = keep rescale): O = (P Z) V, so
    dV = (P Z)^T dO and dP = (dO V^T) Z; D = rowsum(dO O) is still rowsum(P dP)."""
    b, s_q, h, _ = q.shape
    h_kv = k.shape[2]
    group = h // h_kv
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for i in range(b):
        lq, lk = int(q_lens[i]), int(kv_lens[i])
        qi = q[i, :lq].astype(np.float64)
        ki = np.repeat(k[i, :lk].astype(np.float64), group, axis=1)
        vi = np.repeat(v[i, :lk].astype(np.float64), group, axis=1)
        doi = do[i, :lq].astype(np.float64)
        raw = scale_bmm1 * np.einsum("qhd,khd->hqk", qi, ki)
        scores = softcap * np.tanh(raw / softcap) if softcap else raw
        if alibi is not None:
            dist = np.abs(np.arange(lq)[:, None] + (lk - lq) - np.arange(lk)[None, :])
            scores = scores - alibi[:, None, None] * dist[None]
        seen = np.ones((lq, lk), dtype=bool) if visible is None else visible(i, lq, lk)
        scores = np.where(seen[None], scores, -np.inf)
        top = scores.max(axis=-1, keepdims=True)
        if sinks is not None:
            top = np.maximum(top, sinks[:, None, None])
        top = np.where(np.isfinite(top), top, 0)
        e = np.exp(scores - top)
        norm = e.sum(axis=-1, keepdims=True)
        if sinks is not None:
            norm = norm + np.where(seen.any(axis=-1)[None, :, None], np.exp(sinks[:, None, None] - top), 0)
        p = e / np.where(norm > 0, norm, 1)  # [h, lq, lk]; 0 where masked or the row sees nothing
        z = _dropped(keep, rescale, i, lq, lk)
        o = np.einsum("hqk,khd->qhd", p * z, vi)
        dp = np.einsum("qhd,khd->hqk", doi, vi) * z
        big_d = np.einsum("qhd,qhd->hq", doi, o)[..., None]
        dt = p * (dp - big_d)
        ds = dt * (1.0 - np.tanh(raw / softcap) ** 2) if softcap else dt
        dq[i, :lq] = scale_bmm1 * np.einsum("hqk,khd->qhd", ds, ki)
        dk_h = scale_bmm1 * np.einsum("hqk,qhd->khd", ds, qi)
        dv_h = np.einsum("hqk,qhd->khd", p * z, doi)
        dk[i, :lk] = dk_h.reshape(lk, h_kv, group, -1).sum(axis=2)
        dv[i, :lk] = dv_h.reshape(lk, h_kv, group, -1).sum(axis=2)
    return dq, dk, dv


def gather_paged_fp64(path: Path, meta: dict, kv_lens, s: int) -> tuple:
    """K [b, s, h_kv, d] and V [b, s, h_kv, dv] of a -paged-kv run, read from the pool
    (k_pool.npy, v_pool.npy: [blocks, h_kv, tokens_per_block, d|dv]) through the block table
    (block_table.npy [b, blocks]): key j of sequence i is row j % T of block table[i, j // T].
    Checks the table: each sequence owns ceil(len / T) blocks, no block is owned twice, the
    entries after a sequence's blocks are -1; zeros past the lengths, as k.npy."""
    table = np.load(path / "block_table.npy")
    k_pool, v_pool = np.load(path / "k_pool.npy"), np.load(path / "v_pool.npy")
    tokens = meta["tokens_per_block"]
    assert table.dtype == np.int32 and table.shape[0] == len(kv_lens) and k_pool.shape[2] == tokens
    owned = []
    k = np.zeros((len(kv_lens), s, k_pool.shape[1], k_pool.shape[3]), dtype=k_pool.dtype)
    v = np.zeros((len(kv_lens), s, v_pool.shape[1], v_pool.shape[3]), dtype=v_pool.dtype)
    for i, lk in enumerate(int(x) for x in kv_lens):
        n = -(-lk // tokens)
        assert np.all(table[i, n:] == -1) and np.all(table[i, :n] >= 0), f"sequence {i}'s table row {table[i]}"
        owned += list(table[i, :n])
        keys = np.arange(lk)
        blocks = table[i, keys // tokens]
        k[i, :lk] = k_pool[blocks, :, keys % tokens]
        v[i, :lk] = v_pool[blocks, :, keys % tokens]
    assert len(set(owned)) == len(owned), "a pool block belongs to two places"
    return k, v
