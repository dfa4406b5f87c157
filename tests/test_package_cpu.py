"""The fmha package's parts that need no torch and no GPU: FA3's mask arguments in the
library's terms (python/fmha/_masks.py), checked against masks written out by hand."""

import sys
import types
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "fmha"


@pytest.fixture
def masks(monkeypatch):
    # A bare package object: the real __init__ imports torch, its submodules do not.
    stub = types.ModuleType("fmha")
    stub.__path__ = [str(PACKAGE)]
    monkeypatch.setitem(sys.modules, "fmha", stub)
    for name in ("fmha._lib", "fmha._masks"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import fmha._masks
    yield fmha._masks
    for name in ("fmha._lib", "fmha._masks"):  # bound to the stub: not for later imports
        sys.modules.pop(name, None)


NONE, CAUSAL, SLIDING, BIDIRECTIONAL, CHUNKED = range(5)


@pytest.mark.parametrize("causal, window, chunk, want", [
    (False, (-1, -1), 0, (NONE, 0, 0)),
    (True, (-1, -1), 0, (CAUSAL, 0, 0)),
    (False, (-1, 0), 0, (CAUSAL, 0, 0)),          # right = 0 is causal whatever `causal` says
    (True, (-1, 7), 0, (CAUSAL, 0, 0)),           # causal clears the right window, as FA3 does
    (True, (15, -1), 0, (SLIDING, 16, 0)),        # keys p - 15 .. p: 16 of them
    (False, (15, 0), 0, (SLIDING, 16, 0)),
    (False, (4, 4), 0, (BIDIRECTIONAL, 5, 0)),    # keys p - 4 .. p + 4
    (True, (-1, -1), 64, (CHUNKED, 0, 64)),
])
def test_fa3_arguments_map_to_the_library_masks(masks, causal, window, chunk, want):
    assert masks.fa3_mask(causal, window, chunk) == want


@pytest.mark.parametrize("causal, window, chunk, reason", [
    (False, (4, 2), 0, r"window_size=\(4, 2\)"),
    (False, (-1, 3), 0, r"window_size=\(-1, 3\)"),
    (True, (-1, -1), 48, "not a power of two"),
    (False, (-1, -1), 64, "causal=True and no window"),
    (True, (8, 0), 64, "causal=True and no window"),
])
def test_what_the_library_lacks_is_refused_by_name(masks, causal, window, chunk, reason):
    with pytest.raises(NotImplementedError, match=reason):
        masks.fa3_mask(causal, window, chunk)
