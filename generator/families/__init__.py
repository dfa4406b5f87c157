"""One module per kernel family: each owns its head sizes, dtypes, tile choice, limits and
validity, and `constants(spec)`, the facts its translation units render into a Config the
family's Traits read and static_assert (templates/kernel.cu.j2). Facts flow one way: decided
here, guarded in C++.
"""

from __future__ import annotations

from . import decode, flash, qmma, ws

MODULES = {"decode": decode, "ws": ws, "qmma": qmma, "flash": flash}


def constants(spec) -> dict:
    """The Config values of `spec`'s translation unit, in template parameter order (empty: the
    family takes no Config)."""
    return MODULES[spec.family].constants(spec)


def cpp_value(value) -> str:
    """A constant as C++ spells it."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def sibling_block_ns(spec) -> tuple:
    """The key blocks (block_n) of sibling_names(spec)'s tiles, in its order
    (KernelMeta::sibling_block_n: the e4m3 reference rounds P on the tile that runs)."""
    tiles = getattr(MODULES[spec.family], "siblings", None)
    return tuple(block_n for _, block_n, _, _ in tiles(spec).values()) if tiles else ()


def sibling_names(spec) -> tuple:
    """Kernel names of the tiles a launch of `spec` may run instead of its own (KernelMeta::
    siblings, -list-kernels, the manifest); empty for a family without siblings."""
    names = getattr(MODULES[spec.family], "sibling_names", None)
    return names(spec) if names else ()


def short_max_keys(spec) -> int:
    """ws: problems of at most this many keys run the tile's Short sibling (the manifest's
    short_max_keys, which the GPU tests read); 0 for a tile without one or another family."""
    bound = getattr(MODULES[spec.family], "short_max_keys", None)
    return bound(spec) if bound else 0
