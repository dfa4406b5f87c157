"""FlashAttention-3's mask arguments in the library's terms. Needs no torch."""

from __future__ import annotations

from . import _lib


def fa3_mask(causal: bool, window_size, attention_chunk: int) -> tuple[int, int, int]:
    """FA3's causal / window_size / attention_chunk as (fmha_mask_t, window, chunk)."""
    left, right = (int(w) for w in window_size)
    if causal:
        right = 0
    if attention_chunk:
        if not (causal or right == 0) or left >= 0:
            raise NotImplementedError("fmha: attention_chunk is served with causal=True and no window")
        if attention_chunk & (attention_chunk - 1):
            raise NotImplementedError(f"fmha: attention_chunk={attention_chunk} is not a power of two")
        return _lib.MASK_CHUNKED, 0, attention_chunk
    if left < 0 and right < 0:
        return _lib.MASK_NONE, 0, 0
    if left < 0 and right == 0:
        return _lib.MASK_CAUSAL, 0, 0
    if left >= 0 and right == 0:
        return _lib.MASK_SLIDING, left + 1, 0
    if left >= 0 and left == right:
        return _lib.MASK_BIDIRECTIONAL, left + 1, 0
    raise NotImplementedError(f"fmha: window_size={tuple(window_size)} (only (w, 0), (w, w), causal or none)")
