"""FlashAttention-3's own Hopper kernels, from the `fa3_fwd` wheel (../shared/ANCHORS.md: its
interface imports `flash_attn_config`, which the wheel ships as `fa3_fwd_config`)."""

from __future__ import annotations

import sys


def load():
    """(fa3_fwd_interface, "") where the wheel is installed, else (None, why not)."""
    try:
        import fa3_fwd_config
        sys.modules.setdefault("flash_attn_config", fa3_fwd_config)
        import fa3_fwd_interface
    except ImportError as error:
        return None, f"FA3 not installed ({error})"
    return fa3_fwd_interface, ""
