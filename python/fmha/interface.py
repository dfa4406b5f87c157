"""FlashAttention-3's functions over libfmha.so, on torch tensors, with autograd.

The names, signatures and return values are flash_attn_interface's (FA3), so that
`from fmha import flash_attn_func` replaces `from flash_attn_interface import ...`. Each
function checks its arguments, maps them onto the library's problem and calls the one custom
op (_op.py: torch.ops.fmha.fwd, with a fake implementation for torch.compile; it launches on
the current stream, takes its output and workspace from torch's allocator and never
synchronises the host). Where q, k or v require a gradient, the backward pass
(torch.ops.fmha.bwd) is fwd's autograd formula: flash_attn_func and flash_attn_varlen_func
train, `deterministic=True` makes dQ, dK, dV bitwise reproducible, and the keyword-only
`dropout_p` (FA2's name) drops probabilities in training: its seed comes from torch's CPU
generator (torch.manual_seed reproduces it) and the backward regenerates the same mask. A call
that repeats an earlier one's shapes, strides, dtypes, devices and options skips the checks
(dropout calls excepted): it is keyed here (_func_key, ...) and run by _op._Prepared.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch

from . import _lib
from ._masks import fa3_mask as _mask
from ._op import _DTYPES, _MAX_PREPARED, _call, _dropout_rng, _lookup, _out_dtype, _ready, _strides


def _unsupported(**args) -> None:
    for name, value in args.items():
        if value is not None and value is not False:
            raise NotImplementedError(f"fmha: {name} is not supported")


def _check_tensor(name: str, t: torch.Tensor, dims: int, dtype=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"fmha: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ValueError(f"fmha: {name} is on {t.device}, a CUDA tensor is needed")
    if t.dim() != dims:
        raise ValueError(f"fmha: {name} has {t.dim()} dimensions, expected {dims}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"fmha: {name} is {t.dtype}, expected {dtype}")
    if t.stride(-1) != 1:
        raise ValueError(f"fmha: {name}'s last dimension must be contiguous (stride 1)")


def _steps(t: torch.Tensor) -> Optional[int]:
    """Tokens from one sequence to the next of a [b, s, h, d] view, None when not whole."""
    batch, token, _ = _strides(t)
    return batch // token if token > 0 and batch % token == 0 else None


def _batch_views(q, k, v):
    """q as the library addresses it beside a contiguous output (sequences s_q tokens apart),
    k and v the same number of tokens apart: copies only where a view is not."""
    if q.shape[0] > 1 and _steps(q) != q.shape[1]:
        q = q.contiguous()
    if k.shape[0] > 1 and (_steps(k) is None or _steps(k) != _steps(v) or _steps(k) < k.shape[1]):
        k, v = k.contiguous(), v.contiguous()
    return q, k, v


def _kv_e4m3(q, k, v) -> bool:
    """An e4m3 KV cache under fp16/bf16 queries (flash_attn_with_kvcache only)."""
    return (_DTYPES.get(k.dtype) == _lib.E4M3 and v.dtype == k.dtype and q.dtype in _DTYPES
            and _DTYPES[q.dtype] != _lib.E4M3)


def _common(q, k, v, softmax_scale, softcap, alibi_slopes, sinks, kv_e4m3: bool = False):
    if q.dtype not in _DTYPES:
        raise TypeError(f"fmha: q is {q.dtype}; fp16, bf16 and float8_e4m3fn (out in bf16) are served")
    if (k.dtype != q.dtype or v.dtype != q.dtype) and not kv_e4m3:
        raise TypeError(f"fmha: q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
                        + ("" if _DTYPES.get(k.dtype) != _lib.E4M3 else
                           " (a float8_e4m3fn KV cache under fp16/bf16 q: flash_attn_with_kvcache)"))
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"fmha: q's head size {q.shape[-1]} differs from k's {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2] or q.shape[-2] % k.shape[-2] != 0:
        raise ValueError(f"fmha: {q.shape[-2]} query heads over {k.shape[-2]} key and {v.shape[-2]} value heads")
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"fmha: softmax_scale={softmax_scale} must be > 0 and finite")
    if softcap is None or softcap < 0:
        raise ValueError(f"fmha: softcap={softcap} must be >= 0")
    h = q.shape[-2]
    for name, t in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if t is not None:
            _check_tensor(name, t, 1, torch.float32)
            if t.shape[0] != h:
                raise ValueError(f"fmha: {name} has {t.shape[0]} entries, one per query head ({h}) is needed")
    return scale


def _dropout_p(dropout_p) -> float:
    """dropout_p checked (first, before the tensors': it needs no device)."""
    p = float(dropout_p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"fmha: dropout_p={dropout_p} must be in [0, 1)")
    return p


def _descales(q, b: int, h_kv: int, q_descale, k_descale, v_descale, kv_e4m3: bool = False) -> tuple:
    """FA3's descales, checked: for float8_e4m3fn inputs only (k_descale and v_descale also for
    a float8_e4m3fn KV cache), fp32 [b, h_kv] on q's device (contiguous copies where they are
    not). A call with them is not kept as a prepared call (the functions' fast paths take none)."""
    given = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
    if all(t is None for t in given.values()):
        return None, None, None
    if kv_e4m3 and q_descale is not None:
        raise ValueError(f"fmha: q_descale is for float8_e4m3fn queries, q is {q.dtype} (an e4m3 KV cache takes "
                         "k_descale and v_descale)")
    if _DTYPES.get(q.dtype) != _lib.E4M3 and not kv_e4m3:
        raise ValueError(f"fmha: q_descale, k_descale, v_descale are for float8_e4m3fn inputs, q is {q.dtype}")
    out = []
    for name, t in given.items():
        if t is not None:
            _check_tensor(name, t, 2, torch.float32)
            if tuple(t.shape) != (b, h_kv) or t.device != q.device:
                raise ValueError(f"fmha: {name} is {tuple(t.shape)} on {t.device}; [batch, kv heads] = "
                                 f"{(b, h_kv)} on {q.device} is needed")
            t = t.contiguous()
        out.append(t)
    return tuple(out)


def _o_e4m3(q, out_dtype) -> bool:
    """out_dtype checked: None (the default: q's dtype, bf16 for float8_e4m3fn q), or for
    float8_e4m3fn q torch.bfloat16 or torch.float8_e4m3fn (True: O in e4m3)."""
    if out_dtype is None or out_dtype == _out_dtype(q.dtype):
        return False
    if _DTYPES.get(q.dtype) == _lib.E4M3 and out_dtype == q.dtype:
        return True
    raise TypeError(f"fmha: out_dtype={out_dtype} for {q.dtype} inputs; float8_e4m3fn inputs write bfloat16 or "
                    f"float8_e4m3fn, 16-bit inputs their own dtype")


def _func_key(q, k, v, *options):
    """A prepared call's key: (kind, options, each tensor's shape, strides, dtype, device)."""
    return ("func", options, q.shape, q.stride(), q.dtype, q.get_device(), k.shape, k.stride(), k.dtype,
            k.get_device(), v.shape, v.stride(), v.dtype, v.get_device())


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                    pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False, *,
                    dropout_p=0.0, alibi_slopes=None, sinks=None, attn_bias=None, attn_mask=None, out_dtype=None):
    """Attention over [batch, seqlen, heads, headdim] tensors, as FA3's flash_attn_func: returns
    out [b, s_q, h, dv], and softmax_lse [b, h, s_q] (fp32, natural log) with
    return_attn_probs. Extras: alibi_slopes [h] and sinks [h] (fp32); attn_bias, added to the
    scaled logits, [b or 1, h or 1, s_q, s_k] in q's dtype; attn_mask, bool [b or 1, s_q, s_k]
    (True: attend), the same for every head, instead of causal or a window; out_dtype (float8_e4m3fn
    inputs only): torch.float8_e4m3fn writes O in e4m3 (v_descale scales it), bf16 the default;
    dropout_p in [0, 1): each probability is dropped with that probability, the kept ones scaled
    by 1 / (1 - p) (fp16 and bf16, without softcap, ALiBi, attn_bias or attn_mask)."""
    key = None
    if qv is None and q_descale is None and k_descale is None and v_descale is None and alibi_slopes is None and \
            sinks is None and attn_bias is None and attn_mask is None and out_dtype is None and dropout_p == 0:
        key, prepared = _lookup(_func_key, q, k, v, softmax_scale, causal, window_size, attention_chunk, softcap,
                                return_attn_probs)
        if _ready(prepared, q, k, v):
            out, lse = prepared.run((q, k, v) + (None,) * 8)
            return (out, lse) if return_attn_probs else out
    _unsupported(qv=qv)
    dropout_p = _dropout_p(dropout_p)
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, 4)
    descales = _descales(q, q.shape[0], k.shape[2], q_descale, k_descale, v_descale)
    if k.shape[0] != q.shape[0] or v.shape[:2] != k.shape[:2]:
        raise ValueError(f"fmha: batch and key lengths differ: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    scale = _common(q, k, v, softmax_scale, softcap, alibi_slopes, sinks)
    mask, window, chunk = _mask(causal, window_size, attention_chunk)
    if attn_bias is not None:
        _check_tensor("attn_bias", attn_bias, 4, q.dtype)
        want = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
        if any(n not in (1, w) for n, w in zip(attn_bias.shape[:2], want[:2])) or attn_bias.shape[2:] != want[2:]:
            raise ValueError(f"fmha: attn_bias is {tuple(attn_bias.shape)}, [b or 1, h or 1, s_q, s_k] = {want} needed")
    bits = None
    if attn_mask is not None:
        if mask != _lib.MASK_NONE:
            raise NotImplementedError("fmha: attn_mask with causal, a window or attention_chunk (fold them into the mask)")
        bits = _pack_mask(attn_mask, q.shape[0], q.shape[1], k.shape[1])
        mask = _lib.MASK_CUSTOM
    views = _batch_views(q, k, v)
    if any(a is not b for a, b in zip(views, (q, k, v))):
        key = None  # copies were made: the prepared call describes them, not the inputs
    q, k, v = views
    o_e4m3 = _o_e4m3(q, out_dtype)
    rng = _dropout_rng() if dropout_p > 0 else None  # drawn per call: never part of a prepared call
    out, lse = _call(key, q, k, v, None, None, None, None, q.shape[1], k.shape[1], scale, mask, window, chunk,
                     float(softcap), alibi_slopes, sinks, attn_bias, bits, bool(return_attn_probs), *descales,
                     o_e4m3, bool(deterministic), dropout_p, rng)
    return (out, lse) if return_attn_probs else out


def _pack_mask(attn_mask: torch.Tensor, b: int, s_q: int, s_k: int) -> torch.Tensor:
    """bool [b or 1, s_q, s_k] -> the library's bits, int32 [b, s_q, ceil(s_k / 32)], on the device."""
    if not isinstance(attn_mask, torch.Tensor) or attn_mask.device.type != "cuda":
        raise ValueError("fmha: attn_mask must be a CUDA tensor")
    if attn_mask.dtype != torch.bool or attn_mask.dim() != 3 or attn_mask.shape[0] not in (1, b) or \
            attn_mask.shape[1:] != (s_q, s_k):
        raise ValueError(f"fmha: attn_mask must be bool [b or 1, s_q, s_k] = [{b}, {s_q}, {s_k}], got "
                         f"{attn_mask.dtype} {tuple(attn_mask.shape)}")
    words = (s_k + 31) // 32
    m = torch.nn.functional.pad(attn_mask.expand(b, s_q, s_k).to(torch.int64), (0, words * 32 - s_k))
    weights = torch.bitwise_left_shift(torch.ones(32, dtype=torch.int64, device=m.device),
                                       torch.arange(32, device=m.device))
    packed = (m.view(b, s_q, words, 32) * weights).sum(-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32).contiguous()


def _varlen_lse(lse: torch.Tensor, cu_seqlens_q: torch.Tensor, total_q: int) -> torch.Tensor:
    """[b, h, max_s_q] -> FA3's varlen layout [h, total_q], on the device (no host sync)."""
    tokens = torch.arange(total_q, device=lse.device, dtype=torch.int32)
    batch = torch.searchsorted(cu_seqlens_q[1:].to(torch.int32), tokens, right=True)
    row = tokens - cu_seqlens_q[batch]
    return lse[batch.long(), :, row.long()].t().contiguous()


def _varlen_key(q, k, v, cu_q, cu_k, *options):
    return ("varlen", options, cu_q.shape, cu_q.stride(), cu_q.dtype, cu_q.get_device(), cu_k.shape, cu_k.stride(),
            cu_k.dtype, cu_k.get_device()) + _func_key(q, k, v)[2:]


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                           num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False,
                           *, dropout_p=0.0, alibi_slopes=None, sinks=None, out_dtype=None):
    """Attention over packed [total, heads, headdim] tensors with cu_seqlens, as FA3's:
    returns out [total_q, h, dv], and softmax_lse [h, total_q] with return_attn_probs; out_dtype
    and dropout_p as flash_attn_func's (the mask indexes rows and keys within each sequence)."""
    key = None
    if qv is None and q_descale is None and k_descale is None and v_descale is None and seqused_q is None and \
            seqused_k is None and alibi_slopes is None and sinks is None and out_dtype is None and dropout_p == 0:
        key, prepared = _lookup(_varlen_key, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                softmax_scale, causal, window_size, attention_chunk, softcap, return_attn_probs)
        if _ready(prepared, q, k, v):
            out, lse = prepared.run((q, k, v, cu_seqlens_q, cu_seqlens_k) + (None,) * 6)
            return (out, _varlen_lse(lse, cu_seqlens_q, q.shape[0])) if return_attn_probs else out
    _unsupported(qv=qv, seqused_q=seqused_q)
    dropout_p = _dropout_p(dropout_p)
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, 3)
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        _check_tensor(name, t, 1, torch.int32)
    if cu_seqlens_q.shape != cu_seqlens_k.shape or cu_seqlens_q.shape[0] < 2:
        raise ValueError("fmha: cu_seqlens_q and cu_seqlens_k need b + 1 entries each")
    if seqused_k is not None:
        _check_tensor("seqused_k", seqused_k, 1, torch.int32)
    if k.shape[0] != v.shape[0]:
        raise ValueError(f"fmha: k has {k.shape[0]} tokens, v {v.shape[0]}")
    scale = _common(q, k, v, softmax_scale, softcap, alibi_slopes, sinks)
    descales = _descales(q, cu_seqlens_q.shape[0] - 1, k.shape[1], q_descale, k_descale, v_descale)
    mask, window, chunk = _mask(causal, window_size, attention_chunk)
    o_e4m3 = _o_e4m3(q, out_dtype)
    rng = _dropout_rng() if dropout_p > 0 else None  # drawn per call: never part of a prepared call
    out, lse = _call(key, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, None, int(max_seqlen_q),
                     int(max_seqlen_k), scale, mask, window, chunk, float(softcap), alibi_slopes, sinks, None, None,
                     bool(return_attn_probs), *descales, o_e4m3, bool(deterministic), dropout_p, rng)
    if return_attn_probs:
        return out, _varlen_lse(lse, cu_seqlens_q, q.shape[0])
    return out


_fixed: dict[tuple[int, int, int], torch.Tensor] = {}


def _fixed_lens(b: int, n: int, device: torch.device) -> torch.Tensor:
    """cache_seqlens given as an int: [b] int32 of n, kept for the next call (except one made
    in a graph capture, whose memory only the replays fill)."""
    key = (b, n, device.index)
    lens = _fixed.get(key)
    if lens is None:
        lens = torch.full((b,), n, dtype=torch.int32, device=device)
        if not torch.cuda.is_current_stream_capturing():
            if len(_fixed) >= _MAX_PREPARED:
                _fixed.clear()
            _fixed[key] = lens
    return lens


def _kvcache_key(q, k_cache, v_cache, lens, table, *options):
    """cache_seqlens as an int is an option (its value); as a tensor, keyed as the others."""
    if isinstance(lens, torch.Tensor):
        lens, lens_sig = None, (lens.shape, lens.stride(), lens.dtype, lens.get_device())
    else:
        lens_sig = None
    table = (table.shape, table.stride(), table.dtype, table.get_device()) if table is not None else None
    return ("kvcache", options + (lens,), lens_sig, table) + _func_key(q, k_cache, v_cache)[2:]


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens: Optional[Union[int, torch.Tensor]] = None, cache_batch_idx=None,
                            cache_leftpad=None, page_table=None, cu_seqlens_q=None, cu_seqlens_k_new=None,
                            max_seqlen_q=None, rotary_seqlens=None, q_descale=None, k_descale=None, v_descale=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                            rotary_interleaved=True, scheduler_metadata=None, num_splits=0, pack_gqa=None,
                            sm_margin=0, return_softmax_lse=False, *, alibi_slopes=None, sinks=None, out_dtype=None):
    """Decode and chunked prefill over a KV cache, as FA3's: q [b, s_q, h, d] against
    k_cache/v_cache [b, s_cache, h_kv, d] or, with page_table [b, max_blocks] (int32), a paged
    pool [num_blocks, block_size, h_kv, d]; cache_seqlens (int or [b] int32) keys each. Returns
    out, and softmax_lse [b, h, s_q] with return_softmax_lse. A float8_e4m3fn cache under fp16
    or bf16 q (s_q <= 16: the decode kernels) takes k_descale and v_descale [b, h_kv]; out is
    q's dtype."""
    key = None
    if k is None and v is None and qv is None and rotary_cos is None and rotary_sin is None and \
            cache_batch_idx is None and cache_leftpad is None and cu_seqlens_q is None and \
            cu_seqlens_k_new is None and rotary_seqlens is None and q_descale is None and k_descale is None and \
            v_descale is None and alibi_slopes is None and sinks is None and out_dtype is None:
        key, prepared = _lookup(_kvcache_key, q, k_cache, v_cache, cache_seqlens, page_table, softmax_scale, causal,
                                window_size, attention_chunk, softcap, return_softmax_lse)
        if _ready(prepared, q, k_cache, v_cache):
            lens = cache_seqlens
            if lens is not None and not isinstance(lens, torch.Tensor):
                lens = _fixed_lens(q.shape[0], lens, q.device)
            out, lse = prepared.run((q, k_cache, v_cache, None, None, lens, page_table) + (None,) * 4)
            return (out, lse) if return_softmax_lse else out
    _unsupported(k=k, v=v, qv=qv, rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_batch_idx=cache_batch_idx,
                 cache_leftpad=cache_leftpad, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new,
                 rotary_seqlens=rotary_seqlens)
    _check_tensor("q", q, 4)
    _check_tensor("k_cache", k_cache, 4)
    _check_tensor("v_cache", v_cache, 4)
    b = q.shape[0]
    if page_table is not None:
        _check_tensor("page_table", page_table, 2, torch.int32)
        if page_table.shape[0] != b:
            raise ValueError(f"fmha: page_table has {page_table.shape[0]} rows for a batch of {b}")
        block = k_cache.shape[1]
        if block < 16 or block & (block - 1):
            raise NotImplementedError(f"fmha: page block size {block} (a power of two >= 16 is served)")
        max_seqlen_k = page_table.shape[1] * block
    else:
        if k_cache.shape[0] != b:
            raise ValueError(f"fmha: k_cache holds {k_cache.shape[0]} sequences for a batch of {b}")
        max_seqlen_k = k_cache.shape[1]
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise ValueError(f"fmha: k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ")
    if isinstance(cache_seqlens, int):
        if not 0 <= cache_seqlens <= max_seqlen_k:
            raise ValueError(f"fmha: cache_seqlens={cache_seqlens} outside [0, {max_seqlen_k}]")
        cache_seqlens = _fixed_lens(b, cache_seqlens, q.device)
    elif cache_seqlens is not None:
        _check_tensor("cache_seqlens", cache_seqlens, 1, torch.int32)
        if cache_seqlens.shape[0] != b:
            raise ValueError(f"fmha: cache_seqlens has {cache_seqlens.shape[0]} entries for a batch of {b}")
    kv_e4m3 = _kv_e4m3(q, k_cache, v_cache)
    scale = _common(q, k_cache, v_cache, softmax_scale, softcap, alibi_slopes, sinks, kv_e4m3)
    mask, window, chunk = _mask(causal, window_size, attention_chunk)
    if page_table is None:
        views = _batch_views(q, k_cache, v_cache)
    else:
        views = (q.contiguous() if q.shape[0] > 1 and _steps(q) != q.shape[1] else q, k_cache, v_cache)
    if any(a is not b for a, b in zip(views, (q, k_cache, v_cache))):
        key = None  # copies were made: the prepared call describes them, not the inputs
    q, k_cache, v_cache = views
    descales = _descales(q, q.shape[0], k_cache.shape[2], q_descale, k_descale, v_descale, kv_e4m3)
    out, lse = _call(key, q, k_cache, v_cache, None, None, cache_seqlens, page_table, q.shape[1], max_seqlen_k,
                     scale, mask, window, chunk, float(softcap), alibi_slopes, sinks, None, None,
                     bool(return_softmax_lse), *descales, _o_e4m3(q, out_dtype), False, 0.0, None)
    return (out, lse) if return_softmax_lse else out


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """Merges split partial results by their LSE, as FA3's: out_partial [splits, b, s, h, d]
    (fp32), lse_partial [splits, b, s, h]; returns (out [b, s, h, d], lse [b, s, h])."""
    _check_tensor("out_partial", out_partial, 5, torch.float32)
    if lse_partial.dim() != 4 or lse_partial.shape != out_partial.shape[:4] or lse_partial.dtype != torch.float32:
        raise ValueError(f"fmha: lse_partial must be fp32 {tuple(out_partial.shape[:4])}, got "
                         f"{lse_partial.dtype} {tuple(lse_partial.shape)}")
    lse = torch.logsumexp(lse_partial, dim=0)
    # A row no split saw (every lse -inf) merges to zeros, not NaN.
    weights = torch.exp(lse_partial - torch.where(torch.isinf(lse), 0.0, lse).unsqueeze(0))
    merged = (weights.unsqueeze(-1) * out_partial).sum(dim=0)
    dtype = out_dtype or (out.dtype if out is not None else out_partial.dtype)
    if out is not None:
        out.copy_(merged)
        return out, lse
    return merged.to(dtype), lse
