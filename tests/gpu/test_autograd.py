"""The package's backward pass (issue #33) on a GPU: flash_attn_func and flash_attn_varlen_func
under autograd against float64 autograd of plain attention (fixed and var-len lengths, GQA/MQA,
s_q != s_k, causal, windows, chunks, softcap, ALiBi, sinks, the LSE's own gradient),
deterministic=True bit for bit over 20 runs, torch.compile(fullgraph=True) and a CUDA graph
through the backward, problems no backward kernel serves refused before the forward runs, a
tiny transformer trained 50 steps with ours and with SDPA from one initialisation, and dropout
(dropout_p: the forward against oracle.py's float64 attention and the gradients against float64
autograd, both with oracle.py's NumPy keep mask of the call's RNG state; reproducibility under
torch.manual_seed; deterministic=True). Needs torch with CUDA and lib/libfmha.so; skips with
the reason otherwise."""

import copy
import math

import pytest

from .oracle import attention_fp64, dropout_keep, dropout_rescale, visible_fp64
from .package import load_package, reference

torch, fmha = load_package()
from fmha import _op  # noqa: E402

pytestmark = pytest.mark.gpu
DEV = "cuda"
# Relative L2 from float64: P and dS are rounded to the inputs' dtype before their products,
# the outputs once more (bf16 keeps 8 bits, fp16 11); as tests/gpu/test_backward.py.
REL_L2 = {torch.bfloat16: 2e-2, torch.float16: 4e-3}


def leaves(*shapes, dtype):
    return [torch.randn(*s, device=DEV, dtype=dtype).requires_grad_() for s in shapes]


def as64(ts):
    return [t.detach().double().requires_grad_() for t in ts]


def rel(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def check(got, want, dtype, what):
    err = rel(got, want)
    assert err <= REL_L2[dtype], f"{what}: relative L2 {err:.3g} from float64 > {REL_L2[dtype]}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b, s_q, s_k, h, h_kv", [(2, 77, 77, 4, 4), (2, 128, 300, 8, 2), (3, 1, 7, 4, 1),
                                                   (1, 1000, 1000, 2, 2)])
def test_gradients_match_float64_autograd(dtype, d, causal, b, s_q, s_k, h, h_kv):
    torch.manual_seed(s_q * 7 + d + causal)
    q, k, v = leaves((b, s_q, h, d), (b, s_k, h_kv, d), (b, s_k, h_kv, d), dtype=dtype)
    dout = torch.randn(b, s_q, h, d, device=DEV, dtype=dtype)
    out = fmha.flash_attn_func(q, k, v, causal=causal)
    out.backward(dout)
    q64, k64, v64 = as64((q, k, v))
    out64, _ = reference(q64, k64, v64, causal=causal)
    out64.backward(dout.double())
    check(out, out64, dtype, "out")
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        assert got.shape == want.shape and got.dtype == dtype
        check(got, want, dtype, name)


# Head sizes off the wgmma kernel's (d = dv = 64, 128 on sm_90): flash-bwd's tile of the next
# of 64, 128, 256, zero-padded, MLA's d 192 / dv 128 included.
@pytest.mark.parametrize("d, dv", [(32, 32), (96, 96), (160, 160), (256, 256), (192, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_other_head_sizes_match_float64_autograd(d, dv, causal):
    torch.manual_seed(d + dv + causal)
    b, s_q, s_k, h, h_kv = 2, 150, 230, 4, 2
    q, k, v = leaves((b, s_q, h, d), (b, s_k, h_kv, d), (b, s_k, h_kv, dv), dtype=torch.bfloat16)
    dout = torch.randn(b, s_q, h, dv, device=DEV, dtype=torch.bfloat16)
    fmha.flash_attn_func(q, k, v, causal=causal).backward(dout)
    q64, k64, v64 = as64((q, k, v))
    out64, _ = reference(q64, k64, v64, causal=causal)
    out64.backward(dout.double())
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        assert got.shape == want.shape
        check(got, want, torch.bfloat16, f"d {d} dv {dv}: {name}")


def test_lse_gradient_and_strided_inputs():
    """A loss over out and the returned LSE; q, k, v slices of one packed [b, s, 3, h, d]
    tensor (strided views, not copies), and a scale of the caller's."""
    torch.manual_seed(5)
    qkv = torch.randn(2, 200, 3, 4, 64, device=DEV, dtype=torch.bfloat16).requires_grad_()
    q, k, v = qkv.unbind(2)
    w_out, w_lse = torch.randn(2, 200, 4, 64, device=DEV), torch.randn(2, 4, 200, device=DEV)
    out, lse = fmha.flash_attn_func(q, k, v, softmax_scale=0.1, causal=True, return_attn_probs=True)
    ((out.float() * w_out).sum() + (lse * w_lse).sum()).backward()
    (qkv64,) = as64((qkv,))
    out64, lse64 = reference(*qkv64.unbind(2), causal=True, scale=0.1)
    ((out64 * w_out.double()).sum() + (lse64 * w_lse.double()).sum()).backward()
    check(qkv.grad, qkv64.grad, torch.bfloat16, "d qkv")
    assert rel(lse, lse64) < 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_gradients(causal):
    torch.manual_seed(11)
    lens = [1, 77, 300, 64, 129]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device=DEV, dtype=torch.int32)
    total, h, h_kv, d = sum(lens), 8, 2, 128
    q, k, v = leaves((total, h, d), (total, h_kv, d), (total, h_kv, d), dtype=torch.bfloat16)
    dout = torch.randn(total, h, d, device=DEV, dtype=torch.bfloat16)
    out, lse = fmha.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=causal,
                                           return_attn_probs=True)
    w = torch.randn_like(lse)
    ((out.float() * dout).sum() + (lse * w).sum()).backward()
    q64, k64, v64 = as64((q, k, v))
    loss = 0
    for i, n in enumerate(lens):
        a, z = int(cu[i]), int(cu[i + 1])
        o, l = reference(q64[None, a:z], k64[None, a:z], v64[None, a:z], causal=causal)
        loss = loss + (o[0] * dout[a:z].double()).sum() + (l[0] * w[:, a:z].double()).sum()
    loss.backward()
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        check(got, want, torch.bfloat16, name)


@pytest.mark.parametrize("dropout_p", [0.0, 0.17])
def test_deterministic_gives_the_same_bits_20_times(dropout_p):
    """deterministic=True: 20 runs, identical dQ, dK, dV (with dropout, each run's mask from the
    same seed), and those gradients match float64's."""
    torch.manual_seed(3)
    q, k, v = leaves((2, 1024, 8, 128), (2, 1024, 2, 128), (2, 1024, 2, 128), dtype=torch.bfloat16)
    dout = torch.randn(2, 1024, 8, 128, device=DEV, dtype=torch.bfloat16)
    first = None
    for _ in range(20):
        for t in (q, k, v):
            t.grad = None
        out, state = dropout_call(17, fmha.flash_attn_func, q, k, v, causal=True, deterministic=True,
                                  dropout_p=dropout_p)
        out.backward(dout)
        grads = [t.grad.clone() for t in (q, k, v)]
        if first is None:
            first = grads
        assert all(torch.equal(a, b) for a, b in zip(grads, first))
    q64, k64, v64 = as64((q, k, v))
    if dropout_p:
        dropped(q64, k64, v64, keep_mask(2, 8, 1024, 1024, dropout_p, state), dropout_p, True).backward(dout.double())
    else:
        reference(q64, k64, v64, causal=True)[0].backward(dout.double())
    for name, got, want in zip(("dq", "dk", "dv"), first, (q64.grad, k64.grad, v64.grad)):
        check(got, want, torch.bfloat16, name)


def test_torch_compile_fullgraph_backward():
    torch.manual_seed(4)
    q, k, v = leaves((2, 256, 8, 64), (2, 256, 8, 64), (2, 256, 8, 64), dtype=torch.bfloat16)
    f = torch.compile(lambda q, k, v: (fmha.flash_attn_func(q, k, v, causal=True).float() ** 2).sum(), fullgraph=True)
    f(q, k, v).backward()
    q64, k64, v64 = as64((q, k, v))
    (reference(q64, k64, v64, causal=True)[0] ** 2).sum().backward()
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        check(got, want, torch.bfloat16, name)


MODS = {  # ours, the reference's keywords
    "sliding": ({"window_size": (50, 0)}, {"window": (50, 0)}),
    "bidirectional": ({"window_size": (30, 30)}, {"window": (30, 30)}),
    "chunked": ({"causal": True, "attention_chunk": 64}, {"causal": True, "chunk": 64}),
    "softcap": ({"causal": True, "softcap": 5.0}, {"causal": True, "softcap": 5.0}),
    "alibi": ({"causal": True, "alibi_slopes": "slopes"}, {"causal": True, "alibi": "slopes"}),
    "sinks": ({"causal": True, "sinks": "sinks"}, {"causal": True, "sinks": "sinks"}),
}


@pytest.mark.parametrize("kind", MODS)
@pytest.mark.parametrize("d, deterministic", [(64, False), (128, True)])
def test_masks_and_score_modifiers(kind, d, deterministic):
    """Gradients through windows, chunks, softcap's tanh, ALiBi, and sinks (whose own
    gradient, a learnable logit per head as gpt-oss has, is checked too)."""
    torch.manual_seed(sum(map(ord, kind)) + d)
    b, s_q, s_k, h, h_kv = 2, 200, 333, 4, 2
    q, k, v = leaves((b, s_q, h, d), (b, s_k, h_kv, d), (b, s_k, h_kv, d), dtype=torch.bfloat16)
    extra = {"slopes": torch.tensor([0.5, 0.25, 0.125, 0.0625], device=DEV),
             "sinks": torch.randn(h, device=DEV).requires_grad_()}
    ours, ref = ({key: extra.get(val, val) if isinstance(val, str) else val for key, val in kw.items()}
                 for kw in MODS[kind])
    dout = torch.randn(b, s_q, h, d, device=DEV, dtype=torch.bfloat16)
    out = fmha.flash_attn_func(q, k, v, deterministic=deterministic, **ours)
    out.backward(dout)
    q64, k64, v64 = as64((q, k, v))
    if "sinks" in ref:
        ref["sinks"] = extra["sinks"].detach().double().requires_grad_()
    out64, _ = reference(q64, k64, v64, **ref)
    out64.backward(dout.double())
    check(out, out64, torch.bfloat16, "out")
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        check(got, want, torch.bfloat16, name)
    if "sinks" in ref:
        check(extra["sinks"].grad, ref["sinks"].grad, torch.bfloat16, "d sinks")


def test_cuda_graph_captures_forward_and_backward():
    """A training step's attention, forward and backward, captured once and replayed on fresh
    inputs: the workspace, the memset and the launches are all stream-ordered."""
    torch.manual_seed(6)
    q, k, v = leaves((2, 256, 8, 64), (2, 256, 2, 64), (2, 256, 2, 64), dtype=torch.bfloat16)
    dout = torch.randn(2, 256, 8, 64, device=DEV, dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as torch's docs do
        for _ in range(2):
            for t in (q, k, v):
                t.grad = None
            fmha.flash_attn_func(q, k, v, causal=True).backward(dout)
    torch.cuda.current_stream().wait_stream(side)
    for t in (q, k, v):
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fmha.flash_attn_func(q, k, v, causal=True).backward(dout)
    for seed in range(3):
        torch.manual_seed(200 + seed)
        with torch.no_grad():
            for t in (q, k, v, dout):
                t.copy_(torch.randn_like(t))
        graph.replay()
        torch.cuda.synchronize()
        q64, k64, v64 = as64((q, k, v))
        reference(q64, k64, v64, causal=True)[0].backward(dout.double())
        for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
            check(got, want, torch.bfloat16, f"replay {seed}: {name}")


def test_what_the_backward_lacks_is_refused_before_the_forward():
    q = torch.randn(1, 64, 4, 64, device=DEV, dtype=torch.bfloat16)
    g = q.clone().requires_grad_()
    with pytest.raises(NotImplementedError, match="backward: no bias yet"):
        fmha.flash_attn_func(g, q, q, attn_bias=torch.randn(1, 4, 64, 64, device=DEV, dtype=torch.bfloat16))
    with pytest.raises(NotImplementedError, match="backward: no custom mask yet"):
        fmha.flash_attn_func(g, q, q, attn_mask=torch.ones(1, 64, 64, device=DEV, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="no gradient for alibi_slopes"):
        fmha.flash_attn_func(g, q, q, alibi_slopes=torch.ones(4, device=DEV).requires_grad_())
    pool = torch.randn(4, 16, 4, 64, device=DEV, dtype=torch.bfloat16)
    table = torch.arange(4, device=DEV, dtype=torch.int32)[None]
    with pytest.raises(NotImplementedError, match="backward: not over a paged KV cache"):
        fmha.flash_attn_with_kvcache(q[:, :1].clone().requires_grad_(), pool, pool, cache_seqlens=40,
                                     page_table=table)
    # No gradient wanted: the forward runs as before.
    with torch.no_grad():
        assert fmha.flash_attn_func(g, q, q, attn_mask=torch.ones(1, 64, 64, device=DEV, dtype=torch.bool)).shape == \
            q.shape


class _Block(torch.nn.Module):
    def __init__(self, dim, heads, attend):
        super().__init__()
        self.heads, self.attend = heads, attend
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, s, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, dim // self.heads).unbind(2)
        x = x + self.proj(self.attend(q, k, v).reshape(b, s, dim))
        return x + self.mlp(self.norm2(x))


def _ours(q, k, v):
    return fmha.flash_attn_func(q, k, v, causal=True)


def _sdpa(q, k, v):
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=True)
    return out.transpose(1, 2)


def test_a_tiny_transformer_trains_as_with_sdpa():
    """50 AdamW steps on one batch of random tokens (bf16 autocast, fp32 weights), the same
    initialisation and data for both: the loss curves agree within bf16 noise, and fall."""
    torch.manual_seed(0)
    vocab, dim, heads, layers, b, s = 512, 256, 4, 2, 8, 256
    tokens = torch.randint(0, vocab, (b, s + 1), device=DEV)
    base = torch.nn.ModuleDict({"embed": torch.nn.Embedding(vocab, dim), "head": torch.nn.Linear(dim, vocab),
                                "blocks": torch.nn.ModuleList(_Block(dim, heads, None) for _ in range(layers))}).to(DEV)
    curves = {}
    for name, attend in (("ours", _ours), ("sdpa", _sdpa)):
        model = copy.deepcopy(base)
        for block in model["blocks"]:
            block.attend = attend
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for _ in range(50):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                x = model["embed"](tokens[:, :-1])
                for block in model["blocks"]:
                    x = block(x)
                loss = torch.nn.functional.cross_entropy(model["head"](x).float().view(-1, vocab),
                                                         tokens[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves[name] = losses
    ours, sdpa = curves["ours"], curves["sdpa"]
    assert ours[-1] < 0.5 * ours[0], f"no training: {ours[0]:.3f} -> {ours[-1]:.3f}"
    # bf16 noise: a few parts in a thousand of the loss early on; once the batch is nearly
    # memorised (loss ~0.05) the curves' small differences are larger parts of it (measured
    # on an H200: 5 % at step 40, 2e-3 absolute), so the bound is 2 % plus 0.1 % of the start.
    worst = max(abs(a - b) - 0.02 * b for a, b in zip(ours, sdpa))
    assert worst < 1e-3 * sdpa[0], f"loss curves differ: ours {ours[::10]}, sdpa {sdpa[::10]}"


# --- Dropout ---------------------------------------------------------------------------------

def dropout_call(seed, f, *args, **kw):
    """f(*args, **kw) right after torch.manual_seed(seed), and the (seed, offset) its dropout
    used: the package draws its state from torch's CPU generator (_op._dropout_rng), and
    nothing else in a call draws from it, so re-seeding and drawing again gives the same one."""
    torch.manual_seed(seed)
    result = f(*args, **kw)
    torch.manual_seed(seed)
    return result, _op._rng_words(_op._dropout_rng())


def keep_mask(b, h, s_q, s_k, p, state, lens=None):
    """oracle.py's keep mask of a call's state, on the device, as float64 [b, h, s_q, s_k]."""
    keep = dropout_keep(b, h, s_q, s_k, p, *state, q_lens=lens, k_lens=lens)
    return torch.from_numpy(keep).to(DEV, torch.float64)


def dropped(q, k, v, keep, p, causal=False):
    """float64 attention with dropout over [b, s, h, d] tensors: package.reference with P times
    the keep mask Z [b, h, s_q, s_k] and its rescale; differentiable."""
    return reference(q, k, v, causal=causal, keep=keep * dropout_rescale(p))[0]


@pytest.mark.parametrize("p", [0.17, 0.5])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dropout_forward_matches_the_oracle(p, causal, dtype):
    """O against oracle.py's attention_fp64 with the NumPy keep mask (P rounded to the dtype as
    the kernel feeds P V); the LSE is dropout's-free, every key in its sum. GQA, s_q < s_k, odd
    lengths."""
    torch.manual_seed(21 + causal)
    b, s_q, s_k, h, h_kv, d = 2, 77, 201, 4, 2, 64
    q, k, v = (torch.randn(b, s, n, d, device=DEV, dtype=dtype) for s, n in ((s_q, h), (s_k, h_kv), (s_k, h_kv)))
    (out, lse), state = dropout_call(31, fmha.flash_attn_func, q, k, v, causal=causal, dropout_p=p,
                                     return_attn_probs=True)
    keep = dropout_keep(b, h, s_q, s_k, p, *state)
    lens_q, lens_k = [s_q] * b, [s_k] * b
    visible = (lambda i, lq, lk: visible_fp64({"mask": "causal"}, lq, lk)) if causal else None
    name = "bf16" if dtype == torch.bfloat16 else "fp16"
    out64, _, lse64 = attention_fp64(*(t.cpu().double().numpy() for t in (q, k, v)), lens_q, lens_k,
                                     1 / math.sqrt(d), 1.0, visible, name, keep=keep, rescale=dropout_rescale(p))
    check(out, torch.from_numpy(out64).to(DEV), dtype, "out")
    assert rel(lse, torch.from_numpy(lse64).to(DEV)) < 1e-5
    plain, _ = reference(*(t.double() for t in (q, k, v)), causal=causal)
    assert rel(out, plain) > 5 * REL_L2[dtype], "the output is not dropped"


@pytest.mark.parametrize("p", [0.17, 0.5])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b, s_q, s_k, h, h_kv", [(2, 77, 77, 4, 4), (2, 128, 300, 8, 2), (1, 1000, 1000, 2, 2)])
def test_dropout_gradients_match_float64_autograd(p, dtype, d, causal, b, s_q, s_k, h, h_kv):
    """dQ, dK, dV with the forward's mask regenerated by the backward, against float64
    autograd through the same mask: MHA and GQA, odd lengths, s_q < s_k."""
    torch.manual_seed(s_q * 7 + d + causal)
    q, k, v = leaves((b, s_q, h, d), (b, s_k, h_kv, d), (b, s_k, h_kv, d), dtype=dtype)
    dout = torch.randn(b, s_q, h, d, device=DEV, dtype=dtype)
    out, state = dropout_call(s_q + d, fmha.flash_attn_func, q, k, v, causal=causal, dropout_p=p)
    out.backward(dout)
    q64, k64, v64 = as64((q, k, v))
    out64 = dropped(q64, k64, v64, keep_mask(b, h, s_q, s_k, p, state), p, causal)
    out64.backward(dout.double())
    check(out, out64, dtype, "out")
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        assert got.shape == want.shape and got.dtype == dtype
        check(got, want, dtype, name)


@pytest.mark.parametrize("p", [0.17, 0.5])
@pytest.mark.parametrize("causal", [False, True])
def test_dropout_varlen_gradients(p, causal):
    """Var-len: the mask indexes each sequence's own rows and keys (batch = the sequence)."""
    torch.manual_seed(12)
    lens = [1, 77, 300, 64, 129]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device=DEV, dtype=torch.int32)
    total, h, h_kv, d = sum(lens), 8, 2, 128
    q, k, v = leaves((total, h, d), (total, h_kv, d), (total, h_kv, d), dtype=torch.bfloat16)
    dout = torch.randn(total, h, d, device=DEV, dtype=torch.bfloat16)
    out, state = dropout_call(13, fmha.flash_attn_varlen_func, q, k, v, cu, cu, max(lens), max(lens), causal=causal,
                              dropout_p=p)
    out.backward(dout)
    keep = keep_mask(len(lens), h, max(lens), max(lens), p, state, lens)
    q64, k64, v64 = as64((q, k, v))
    outs = []
    for i, n in enumerate(lens):
        a, z = int(cu[i]), int(cu[i + 1])
        outs.append(dropped(q64[None, a:z], k64[None, a:z], v64[None, a:z], keep[i:i + 1, :, :n, :n], p, causal)[0])
    out64 = torch.cat(outs)
    out64.backward(dout.double())
    check(out, out64, torch.bfloat16, "out")
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        check(got, want, torch.bfloat16, name)


def test_dropout_follows_torch_manual_seed():
    """The same seed gives the same bits; the next call another mask; a prepared call of the
    same shapes without dropout does not serve a dropout call (nor the other way)."""
    torch.manual_seed(8)
    q, k, v = (torch.randn(2, 333, 4, 64, device=DEV, dtype=torch.bfloat16) for _ in range(3))
    plain = [fmha.flash_attn_func(q, k, v, causal=True) for _ in range(2)]  # the second a prepared call
    torch.manual_seed(5)
    a = fmha.flash_attn_func(q, k, v, causal=True, dropout_p=0.3)
    torch.manual_seed(5)
    b = fmha.flash_attn_func(q, k, v, causal=True, dropout_p=0.3)
    c = fmha.flash_attn_func(q, k, v, causal=True, dropout_p=0.3)
    assert torch.equal(a, b) and not torch.equal(b, c) and not torch.equal(a, plain[0])
    assert torch.equal(fmha.flash_attn_func(q, k, v, causal=True), plain[0])
    cu = torch.tensor([0, 100, 666], device=DEV, dtype=torch.int32)
    flat = [t.reshape(-1, 4, 64) for t in (q, k, v)]
    torch.manual_seed(6)
    a = fmha.flash_attn_varlen_func(*flat, cu, cu, 566, 566, dropout_p=0.5)
    torch.manual_seed(6)
    b = fmha.flash_attn_varlen_func(*flat, cu, cu, 566, 566, dropout_p=0.5)
    assert torch.equal(a, b) and not torch.equal(a, fmha.flash_attn_varlen_func(*flat, cu, cu, 566, 566, dropout_p=0.5))


def test_dropout_under_torch_compile():
    """fullgraph: the state is a graph op drawn on every call. aot_eager draws it as eager does
    (the gradients checked against the mask of that state); the default backend (inductor)
    draws its own bits, reproducible under torch.manual_seed and new every call."""
    torch.manual_seed(4)
    q, k, v = leaves((2, 256, 8, 64), (2, 256, 2, 64), (2, 256, 2, 64), dtype=torch.bfloat16)
    dout = torch.randn(2, 256, 8, 64, device=DEV, dtype=torch.bfloat16)

    def attend(q, k, v):
        return fmha.flash_attn_func(q, k, v, causal=True, dropout_p=0.17)

    out, state = dropout_call(9, torch.compile(attend, fullgraph=True, backend="aot_eager"), q, k, v)
    out.backward(dout)
    q64, k64, v64 = as64((q, k, v))
    dropped(q64, k64, v64, keep_mask(2, 8, 256, 256, 0.17, state), 0.17, True).backward(dout.double())
    for name, got, want in (("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad)):
        check(got, want, torch.bfloat16, name)

    compiled = torch.compile(attend, fullgraph=True)
    with torch.no_grad():
        torch.manual_seed(10)
        a = compiled(q, k, v)
        torch.manual_seed(10)
        b = compiled(q, k, v)
        c = compiled(q, k, v)
    assert torch.equal(a, b) and not torch.equal(b, c)


def test_dropout_refusals():
    """Under a CUDA graph capture (the host-drawn seed would be replayed), and with the score
    modifiers the dropout kernels lack (the library's reason)."""
    q = torch.randn(1, 64, 4, 64, device=DEV, dtype=torch.bfloat16)
    fmha.flash_attn_func(q, q, q, dropout_p=0.1)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="CUDA graph capture"):
        with torch.cuda.graph(graph):
            fmha.flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(NotImplementedError, match="dropout"):
        fmha.flash_attn_func(q, q, q, softcap=5.0, dropout_p=0.1)
    with pytest.raises(NotImplementedError, match="dropout"):
        fmha.flash_attn_func(q, q, q, attn_mask=torch.ones(1, 64, 64, device=DEV, dtype=torch.bool), dropout_p=0.1)
