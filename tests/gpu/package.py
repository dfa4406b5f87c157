"""What the package's GPU tests need before they import it: torch with a CUDA device, the built
lib/libfmha.so, python/ on the path (load_package, called at a test module's top: skips it with
the reason); and their float64 attention (reference), differentiable for the backward's tests."""

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_package():
    """(torch, fmha), or a module-level skip saying what is missing."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch", allow_module_level=True)
    if not (ROOT / "lib" / "libfmha.so").is_file():
        pytest.skip("lib/libfmha.so is not built: run `make`", allow_module_level=True)
    if str(ROOT / "python") not in sys.path:
        sys.path.insert(0, str(ROOT / "python"))
    import fmha
    return torch, fmha


def reference(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, alibi=None, sinks=None,
              kv_lens=None, chunk=0, keep=None):
    """float64 attention over [b, s, h, d] tensors, FA3's conventions (bottom-right aligned
    masks, a row that sees no key gives zeros); returns out [b, s_q, h, dv] and the LSE
    [b, h, s_q] (-inf for such rows). Differentiable: the autograd tests take its gradients,
    the sinks' included. keep [b, h, s_q, s_k]: a factor on each probability of P V (dropout:
    the keep mask times its rescale), not on the LSE; None: 1."""
    import torch
    q, k, v = (t.double() for t in (q, k, v))
    b, s_q, h, d = q.shape
    s_k, h_kv = k.shape[1], k.shape[2]
    scale = scale or 1.0 / math.sqrt(d)
    k = k.repeat_interleave(h // h_kv, dim=2)
    v = v.repeat_interleave(h // h_kv, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    lens = kv_lens.tolist() if kv_lens is not None else [s_k] * b
    out = torch.zeros(b, s_q, h, v.shape[-1], dtype=torch.float64, device=q.device)
    lse = torch.full((b, h, s_q), -math.inf, dtype=torch.float64, device=q.device)
    for i in range(b):
        n = lens[i]
        p = torch.arange(s_q, device=q.device)[:, None] + (n - s_q)
        j = torch.arange(n, device=q.device)[None, :]
        left, right = window
        if causal:
            right = 0
        ok = torch.ones(s_q, n, dtype=torch.bool, device=q.device)
        if right >= 0:
            ok &= j <= p + right
        if left >= 0:
            ok &= j >= p - left
        if chunk:
            ok &= (j <= p) & (j // chunk == p // chunk)
        si = s[i, :, :, :n].clone()
        if alibi is not None:
            si = si - alibi.double()[:, None, None] * (p - j).abs()[None]
        si = si.masked_fill(~ok[None], -math.inf)
        m = si.amax(-1, keepdim=True)
        if sinks is not None:
            m = torch.maximum(m, sinks.double()[:, None, None])
        m = torch.where(torch.isinf(m), 0.0, m)
        e = torch.exp(si - m)
        denom = e.sum(-1, keepdim=True)
        if sinks is not None:
            denom = denom + torch.exp(sinks.double()[:, None, None] - m)
        prob = torch.where(denom > 0, e / denom, 0.0)
        if keep is not None:
            prob = prob * keep[i, :, :, :n]
        out[i] = torch.einsum("hij,jhd->ihd", prob, v[i, :n])
        lse[i] = torch.where(denom[..., 0] > 0, torch.log(denom[..., 0]) + m[..., 0], -math.inf)
    return out, lse
