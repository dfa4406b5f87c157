"""fmha: FMHA_v2's attention kernels on torch tensors, with FlashAttention-3's forward
functions (flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache,
flash_attn_combine). The library is lib/libfmha.so (`make lib`); FMHA_LIBRARY overrides
where it is found."""

from ._lib import FmhaError, library_path
from .interface import flash_attn_combine, flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "flash_attn_combine",
           "FmhaError", "library_path"]
__version__ = "0.1.0"
