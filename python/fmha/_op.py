"""The custom ops over libfmha.so: torch.ops.fmha.fwd, a call's problem checked and planned
once (_prepare) and kept for the calls that repeat its shapes, strides, dtypes, devices and
options (_Prepared: allocate the output, write the pointers, launch), the per-stream workspace,
and the eager path that skips the dispatcher; torch.ops.fmha.bwd, its backward pass
(registered as fwd's autograd formula: dQ, dK, dV from dO and the forward's O and LSE).
Dropout (dropout_p > 0) takes an RNG state drawn per call on the host (_dropout_rng), which
the backward gets back to regenerate the mask; such calls are never kept as prepared calls.
interface.py checks the arguments FA3's way and comes here."""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

from . import _lib

_so = None
_forward = None  # fmha_forward over plain addresses (no ctypes structs to convert on the call path)
_devices: dict[int, tuple[int, int]] = {}
_DTYPES = {torch.float16: _lib.FP16, torch.bfloat16: _lib.BF16}
if hasattr(torch, "float8_e4m3fn"):
    _DTYPES[torch.float8_e4m3fn] = _lib.E4M3  # O in bf16 (include/fmha.h)


def _out_dtype(dtype: torch.dtype, o_e4m3: bool = False) -> torch.dtype:
    """O's dtype for inputs of `dtype`: the same; for e4m3 bf16, or e4m3 with o_e4m3."""
    if _DTYPES.get(dtype) != _lib.E4M3:
        return dtype
    return dtype if o_e4m3 else torch.bfloat16


def _library():
    global _so, _forward
    if _so is None:
        _so = _lib.load()
        _forward = _lib.forward_by_address(_so)
    return _so


def _device(t: torch.Tensor) -> tuple[int, int]:
    """(sm, SM count) of a tensor's device, asked once per device."""
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if index not in _devices:
        props = torch.cuda.get_device_properties(index)
        _devices[index] = (props.major * 10 + props.minor, props.multi_processor_count)
    return _devices[index]


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    """(batch, token, head) strides of a [b, s, h, d] view. A dimension of size 1 has no
    stride of its own (torch may report any): a lone token steps like a whole sequence, and a
    lone sequence is s tokens long."""
    b, s = t.shape[0], t.shape[1]
    token = t.stride(1) if s > 1 else (t.stride(0) if b > 1 else t.stride(2) * t.shape[2])
    batch = t.stride(0) if b > 1 else token * s
    return batch, token, t.stride(2)


def _tensor(t: torch.Tensor, batch: bool) -> _lib.Tensor:
    if batch:  # [b, s, h, d]
        return _lib.Tensor(t.data_ptr(), *_strides(t))
    return _lib.Tensor(t.data_ptr(), 0, t.stride(0), t.stride(1))  # [tokens, h, d]


_workspaces: dict[tuple[bool, int, int], torch.Tensor] = {}


def _workspace(device: torch.device, stream: int, nbytes: int) -> torch.Tensor:
    """Zero-filled scratch for the library. The parts that must start at zero (tile counter,
    split counters) are left at zero by every call, so a stream keeps one and its calls reuse
    it. One made during a graph capture is zeroed by the graph (a memset node) and serves only
    captures: eager calls never see it before a replay has zeroed it."""
    key = (torch._C._cuda_isCurrentStreamCapturing(), device.index, stream)
    ws = _workspaces.get(key)
    if ws is None or ws.numel() < nbytes:
        ws = torch.zeros(max(nbytes, 4096), dtype=torch.uint8, device=device)
        _workspaces[key] = ws
    return ws


# Pointer fields of fmha_problem_t that change from call to call, as 64-bit word indices (the
# four tensors' data pointers lead their fmha_tensor_t): a prepared call rewrites only these.
_WORD = ctypes.sizeof(ctypes.c_uint64)
_Words = ctypes.c_uint64 * (ctypes.sizeof(_lib.Problem) // _WORD)
_INPUT_WORDS = tuple((getattr(_lib.Problem, f).offset + (_lib.Tensor.data.offset if f in ("q", "k", "v") else 0)) // _WORD
                     for f in ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table",
                               "alibi_slopes", "sinks", "bias", "custom_mask", "q_descale", "k_descale",
                               "v_descale"))
_O_WORD = (_lib.Problem.o.offset + _lib.Tensor.data.offset) // _WORD
_LSE_WORD = _lib.Problem.lse.offset // _WORD


class _Prepared:
    """One call's problem (pointers aside) and plan. A call whose tensors have the same shapes,
    strides, dtypes and device and whose options are the same reuses it: it only allocates
    the output, writes the pointers and launches (the host cost of a small call)."""

    __slots__ = ("words", "plan", "plan_address", "out_shape", "lse_shape", "dtype", "device", "index",
                 "inputs", "like_q")

    def __init__(self, problem, plan, out_shape, lse_shape, dtype, device, inputs, like_q):
        self.plan = plan
        self.words = _Words.from_buffer_copy(problem)  # the problem as words, the copy run() starts from
        self.plan_address = ctypes.addressof(plan)
        self.out_shape, self.lse_shape, self.dtype, self.device = out_shape, lse_shape, dtype, device
        self.index = device.index
        self.inputs = inputs  # (word, position in the op's tensor arguments) of each tensor given
        self.like_q = like_q  # the output is q's shape and q is contiguous: empty_like, the cheap allocation

    def run(self, tensors) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        out = torch.empty_like(tensors[0]) if self.like_q else \
            torch.empty(self.out_shape, dtype=self.dtype, device=self.device)
        words = _Words.from_buffer_copy(self.words)  # a copy per call: threads may share this
        for word, i in self.inputs:
            words[word] = tensors[i].data_ptr()
        words[_O_WORD] = out.data_ptr()
        lse = None
        if self.lse_shape is not None:
            lse = torch.empty(self.lse_shape, dtype=torch.float32, device=self.device)
            words[_LSE_WORD] = lse.data_ptr()
        stream = torch._C._cuda_getCurrentRawStream(self.index)
        workspace = _workspace(self.device, stream, self.plan.workspace_bytes)
        status = _forward(words, self.plan_address, workspace.data_ptr(), workspace.numel(), stream)
        if status:
            _lib.raise_for(_so, status, "fmha")
        return out, lse


def _prepare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
             cu_seqlens_k: Optional[torch.Tensor], seqused_k: Optional[torch.Tensor], page_table: Optional[torch.Tensor],
             max_seqlen_q: int, max_seqlen_k: int, scale: float, mask: int, window: int, chunk: int, softcap: float,
             alibi_slopes: Optional[torch.Tensor], sinks: Optional[torch.Tensor], bias: Optional[torch.Tensor],
             mask_bits: Optional[torch.Tensor], want_lse: bool, q_descale: Optional[torch.Tensor] = None,
             k_descale: Optional[torch.Tensor] = None, v_descale: Optional[torch.Tensor] = None,
             o_e4m3: bool = False, deterministic: bool = False, dropout_p: float = 0.0,
             rng: Optional[torch.Tensor] = None) -> _Prepared:
    """The problem of the op's arguments, planned (a NotImplementedError or ValueError with the
    library's reason where no kernel serves it). `deterministic` is the backward's."""
    so = _library()
    p = _problem(q, k, v, cu_seqlens_q, cu_seqlens_k, page_table, max_seqlen_q, max_seqlen_k, scale, mask, window,
                 chunk, softcap, bias, mask_bits, o_e4m3, dropout_p, rng)
    b, h, dv = p.b, p.h, p.dv
    out_shape = q.shape[:-1] + (dv,)
    tensors = (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, alibi_slopes, sinks, bias, mask_bits,
               q_descale, k_descale, v_descale)
    inputs = tuple((word, i) for i, (word, t) in enumerate(zip(_INPUT_WORDS, tensors)) if t is not None)
    # Planning looks at which pointers are set (a variant's kernel), not where they point: an
    # aligned stand-in until run() writes the call's own (and fmha_forward checks those).
    words = _Words.from_buffer(p)
    for word, _ in inputs:
        words[word] = 256
    words[_O_WORD] = 256
    if want_lse:
        words[_LSE_WORD] = 256

    sm, num_sms = _device(q)
    plan = _lib.Plan()
    status = so.fmha_plan(p, sm, num_sms, plan)
    if status == _lib.NOT_SUPPORTED and p.dtype == _lib.FP16:
        # A build without ENABLE_HMMA_FP32 has fp16 kernels that accumulate P V in fp16 only.
        p.acc = _lib.FP16
        status = so.fmha_plan(p, sm, num_sms, plan)
        if status != _lib.SUCCESS:
            p.acc = _lib.FP32
            status = so.fmha_plan(p, sm, num_sms, plan)
    _lib.raise_for(so, status, "fmha")
    out_dtype = _out_dtype(q.dtype, o_e4m3)
    like_q = tuple(out_shape) == tuple(q.shape) and q.is_contiguous() and out_dtype == q.dtype
    return _Prepared(p, plan, out_shape, (b, h, max_seqlen_q) if want_lse else None, out_dtype, q.device, inputs,
                     like_q)


def _dropout_rng() -> torch.Tensor:
    """A dropout call's RNG state, [seed, offset]: CPU int64 from torch's default CPU generator,
    so torch.manual_seed reproduces a run, and under torch.compile it is a graph op drawn anew
    on every call. Non-negative (a range whose width fits int64), read as unsigned words."""
    return torch.randint(0, 2**63 - 1, (2,), dtype=torch.int64)


def _rng_words(rng: torch.Tensor) -> tuple[int, int]:
    """(seed, offset) of an RNG state as the library's uint64 fields."""
    seed, offset = rng.tolist()
    return seed & 0xFFFF_FFFF_FFFF_FFFF, offset & 0xFFFF_FFFF_FFFF_FFFF


def _set_dropout(p: "_lib.Problem", dropout_p: float, rng: Optional[torch.Tensor]) -> None:
    """Writes the dropout fields. Refused under a CUDA graph capture: the state is read on the
    host, so every replay would drop the same elements."""
    if dropout_p <= 0:
        return
    if torch._C._cuda_isCurrentStreamCapturing():
        raise RuntimeError("fmha: dropout_p > 0 under CUDA graph capture: the dropout seed is drawn on the host "
                           "and would be frozen into the graph (every replay the same mask); capture with "
                           "dropout_p=0")
    if rng is None or rng.numel() != 2:
        raise ValueError("fmha: dropout_p > 0 needs its RNG state, [seed, offset] int64 (_dropout_rng)")
    p.dropout_p = dropout_p
    p.dropout_seed, p.dropout_offset = _rng_words(rng)


def _problem(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
             cu_seqlens_k: Optional[torch.Tensor], page_table: Optional[torch.Tensor], max_seqlen_q: int,
             max_seqlen_k: int, scale: float, mask: int, window: int, chunk: int, softcap: float,
             bias: Optional[torch.Tensor], mask_bits: Optional[torch.Tensor], o_e4m3: bool, dropout_p: float = 0.0,
             rng: Optional[torch.Tensor] = None) -> "_lib.Problem":
    """The library's problem of the op's arguments: shapes, strides, lengths, options and the
    pointers of q, k and v (the other inputs' and O's unset). _prepare plans it (with stand-in
    pointers); the backward sets every pointer itself and plans its own kernel."""
    so = _library()
    varlen = cu_seqlens_q is not None
    paged = page_table is not None
    b = cu_seqlens_q.shape[0] - 1 if varlen else q.shape[0]
    h, d = q.shape[-2], q.shape[-1]
    h_kv, dv = k.shape[-2], v.shape[-1]

    p = _lib.Problem()
    so.fmha_problem_init(p)
    p.dtype = _DTYPES[q.dtype]
    # an e4m3 KV cache under 16-bit queries (flash_attn_with_kvcache)
    p.kv_e4m3 = int(_DTYPES.get(k.dtype) == _lib.E4M3 and p.dtype != _lib.E4M3)
    p.b, p.h, p.h_kv, p.d, p.dv = b, h, h_kv, d, dv
    p.max_s_q, p.max_s_kv = max_seqlen_q, max_seqlen_k
    p.q = _tensor(q, not varlen)
    # The output is a fresh contiguous tensor: [b, s_q, h, dv] or [total_q, h, dv].
    p.o = _lib.Tensor(0, q.shape[1] * h * dv if not varlen else 0, h * dv, dv)
    if varlen:
        p.q_tokens = q.shape[0]
    if paged:  # k, v: [blocks, block_size, h_kv, d]
        p.k = _lib.Tensor(k.data_ptr(), 0, k.stride(1), k.stride(2))
        p.v = _lib.Tensor(v.data_ptr(), 0, v.stride(1), v.stride(2))
        p.block_table_stride = page_table.stride(0)
        p.block_size = k.shape[1]
        p.num_blocks = k.shape[0]
        p.k_block_stride, p.v_block_stride = k.stride(0), v.stride(0)
    elif cu_seqlens_k is not None:
        p.k, p.v = _tensor(k, False), _tensor(v, False)
        p.kv_tokens = k.shape[0]
    else:
        p.k, p.v = _tensor(k, True), _tensor(v, True)
    p.mask, p.window, p.chunk = mask, window, chunk
    p.o_e4m3 = int(o_e4m3)
    p.scale, p.softcap = scale, softcap
    if bias is not None:  # [b or 1, h or 1, s_q, s_k]; a dimension of size 1 broadcasts
        p.bias_batch_stride = bias.stride(0) if bias.shape[0] > 1 else 0
        p.bias_head_stride = bias.stride(1) if bias.shape[1] > 1 else 0
        p.bias_row_stride = bias.stride(2)
    if mask_bits is not None:  # [b, s_q, words] int32: bit j % 32 of word j / 32, key j visible
        p.custom_mask_row_words = mask_bits.shape[2]
    _set_dropout(p, dropout_p, rng)
    return p


def _tensors(args) -> tuple:
    """The op's tensor arguments in _INPUT_WORDS order."""
    return args[:7] + args[14:18] + args[19:22]


def _fwd_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
              cu_seqlens_k: Optional[torch.Tensor], seqused_k: Optional[torch.Tensor], page_table: Optional[torch.Tensor],
              max_seqlen_q: int, max_seqlen_k: int, scale: float, mask: int, window: int, chunk: int, softcap: float,
              alibi_slopes: Optional[torch.Tensor], sinks: Optional[torch.Tensor], bias: Optional[torch.Tensor],
              mask_bits: Optional[torch.Tensor], want_lse: bool, q_descale: Optional[torch.Tensor],
              k_descale: Optional[torch.Tensor], v_descale: Optional[torch.Tensor],
              o_e4m3: bool, deterministic: bool, dropout_p: float,
              rng: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, max_seqlen_q, max_seqlen_k, scale, mask,
            window, chunk, softcap, alibi_slopes, sinks, bias, mask_bits, want_lse, q_descale, k_descale, v_descale,
            o_e4m3, deterministic, dropout_p, rng)
    out, lse = _prepare(*args).run(_tensors(args))
    return out, lse if lse is not None else q.new_empty((0,), dtype=torch.float32)


_fwd = torch.library.custom_op("fmha::fwd", _fwd_impl, mutates_args=(), device_types="cuda")

# Prepared calls by their key (the arguments' shapes, strides, dtypes, devices and options,
# as each function spells them); cleared when it grows past _MAX_PREPARED.
_prepared: dict[tuple, _Prepared] = {}
_MAX_PREPARED = 1024


_PLAIN = (type(None), bool, int, float, str)


def _plain(options: tuple) -> bool:
    """Whether a key's options (key[1]) are plain values (numbers, strings, tuples of them):
    only such a key is kept (a tensor as softmax_scale, say, hashes by identity, not value)."""
    return all(type(o) in _PLAIN or (type(o) is tuple and all(type(x) in _PLAIN for x in o)) for o in options)


def _lookup(key_of, *args) -> tuple[Optional[tuple], Optional["_Prepared"]]:
    """(key, prepared call) of an eager call; (None, None) under torch.compile or where the
    arguments make no key (not tensors, unhashable: the full path says what is wrong)."""
    if torch.compiler.is_compiling():
        return None, None
    try:
        key = key_of(*args)
        return key, _prepared.get(key)
    except (AttributeError, TypeError):
        return None, None


def _ready(prepared: Optional[_Prepared], q, k, v) -> bool:
    """Whether the inputs may take a prepared call: on the current device, and not requiring a
    gradient (the full path refuses those with the reason)."""
    if prepared is None or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        return False
    return prepared.index == torch._C._cuda_getDevice()


def _call(key: Optional[tuple], *args):
    """The op under torch.compile (which needs its fake implementation) or where a gradient is
    wanted (autograd goes through the dispatcher; the LSE is kept for the backward, and a
    problem no backward kernel serves is refused here, before the forward runs); otherwise its
    body directly, without the dispatcher's ~30 µs (bench/NOTES.md §41), on the inputs' device,
    and the prepared call kept under `key` (None: not kept; nor is a dropout call, whose RNG
    state is in the problem and differs every call)."""
    q, k, v = args[:3]
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        args = args[:18] + (True,) + args[19:]
        alibi_slopes = args[14]
        if alibi_slopes is not None and alibi_slopes.requires_grad:
            raise NotImplementedError("fmha: no gradient for alibi_slopes (detach them)")
        if torch.compiler.is_compiling():
            return torch.ops.fmha.fwd(*args)
        with torch.cuda.device(q.device):
            _check_backward(_prepare(*args), q)
            return torch.ops.fmha.fwd(*args)
    if torch.compiler.is_compiling():
        return torch.ops.fmha.fwd(*args)
    with torch.cuda.device(q.device):
        prepared = _prepare(*args)
        if key is not None and _plain(key[1]) and not args[24]:  # key[1]: the call's options; 24: dropout_p
            if len(_prepared) >= _MAX_PREPARED:
                _prepared.clear()
            _prepared[key] = prepared
        return prepared.run(_tensors(args))


@_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, max_seqlen_q, max_seqlen_k, scale, mask,
      window, chunk, softcap, alibi_slopes, sinks, bias, mask_bits, want_lse, q_descale, k_descale, v_descale, o_e4m3,
      deterministic, dropout_p, rng):
    b = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q is not None else q.shape[0]
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],), dtype=_out_dtype(q.dtype, o_e4m3))
    lse = q.new_empty((b, q.shape[-2], max_seqlen_q) if want_lse else (0,), dtype=torch.float32)
    return out, lse


# --- The backward pass --------------------------------------------------------------------

def _grad_args(problem: _lib.Problem) -> _lib.BackwardArgs:
    """Backward arguments laid out as the problem's tensors (dO as O, dQ as Q, dK as K, dV as
    V), their pointers the problem's: stand-ins for planning, or what the caller rewrites."""
    g = _lib.BackwardArgs()
    _so.fmha_backward_args_init(g)
    g.d_o, g.dq, g.dk, g.dv = problem.o, problem.q, problem.k, problem.v
    return g


def _check_backward(prepared: _Prepared, q: torch.Tensor) -> None:
    """NotImplementedError (the library's reason) where no backward kernel serves the forward
    problem `prepared` describes (its pointers stand-ins)."""
    problem = _lib.Problem.from_buffer_copy(prepared.words)
    plan = _lib.Plan()
    sm, num_sms = _device(q)
    _lib.raise_for(_so, _so.fmha_plan_backward(problem, _grad_args(problem), sm, num_sms, plan), "fmha")


def _grad_buffer(t: torch.Tensor, batch: bool, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(gradient, what the library writes): a contiguous gradient of t's shape, written in
    place unless t's sequences are `step` > s tokens apart (fixed lengths), where the library
    writes a buffer of that step and the gradient is its copy."""
    if batch and t.shape[0] > 1 and step != t.shape[1]:
        buf = t.new_empty((t.shape[0], step) + tuple(t.shape[2:]))
        return buf, buf[:, :t.shape[1]]
    g = t.new_empty(t.shape)
    return g, g


def _bwd_impl(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
              lse: torch.Tensor, d_lse: Optional[torch.Tensor], cu_seqlens_q: Optional[torch.Tensor],
              cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int, scale: float, mask: int,
              window: int, chunk: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
              sinks: Optional[torch.Tensor], deterministic: bool, dropout_p: float,
              rng: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch = cu_seqlens_q is None
    with torch.cuda.device(q.device):
        # The forward's problem, not its plan: the backward plans its own kernel below. The
        # forward's dropout fields regenerate its mask.
        problem = _problem(q, k, v, cu_seqlens_q, cu_seqlens_k, None, max_seqlen_q, max_seqlen_k, scale, mask, window,
                           chunk, softcap, None, None, False, dropout_p, rng)
        problem.q.data, problem.k.data, problem.v.data = q.data_ptr(), k.data_ptr(), v.data_ptr()
        problem.o.data, problem.lse = out.data_ptr(), lse.data_ptr()
        if not batch:
            problem.cu_seqlens_q, problem.cu_seqlens_k = cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()
        if alibi_slopes is not None:
            problem.alibi_slopes = alibi_slopes.data_ptr()
        if sinks is not None:
            problem.sinks = sinks.data_ptr()
        g = _grad_args(problem)
        dout = dout.contiguous()  # O's layout, as the problem describes it
        g.d_o.data = dout.data_ptr()
        if d_lse is not None:
            d_lse = d_lse.to(torch.float32).contiguous()
            g.d_lse = d_lse.data_ptr()
        grads = []
        for name, t, like in (("dq", q, problem.q), ("dk", k, problem.k), ("dv", v, problem.v)):
            step = like.batch_stride // like.token_stride if like.token_stride else 0
            buf, grad = _grad_buffer(t, batch, step)
            getattr(g, name).data = buf.data_ptr()
            if batch:  # the buffer's own strides, its sequences the forward tensor's step apart
                getattr(g, name).batch_stride, getattr(g, name).token_stride, getattr(g, name).head_stride = \
                    buf.stride(0), buf.stride(1), buf.stride(2)
            else:
                getattr(g, name).token_stride, getattr(g, name).head_stride = buf.stride(0), buf.stride(1)
            grads.append((buf, grad))
        g.deterministic = int(deterministic)
        plan = _lib.Plan()
        sm, num_sms = _device(q)
        _lib.raise_for(_so, _so.fmha_plan_backward(problem, g, sm, num_sms, plan), "fmha")
        workspace = torch.empty(max(plan.workspace_bytes, 256), dtype=torch.uint8, device=q.device)
        stream = torch._C._cuda_getCurrentRawStream(q.device.index)
        _lib.raise_for(_so, _so.fmha_backward(problem, g, plan, workspace.data_ptr(), workspace.numel(), stream),
                       "fmha")
    return tuple(grad.contiguous() for _, grad in grads)


_bwd = torch.library.custom_op("fmha::bwd", _bwd_impl, mutates_args=(), device_types="cuda")


@_bwd.register_fake
def _(dout, q, k, v, out, lse, d_lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, mask, window,
      chunk, softcap, alibi_slopes, sinks, deterministic, dropout_p, rng):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, _seqused_k, _page_table, max_seqlen_q, max_seqlen_k, scale, mask, window,
     chunk, softcap, alibi_slopes, sinks) = inputs[:16]
    out, lse = output
    rng = inputs[25]  # dropout's RNG state (None without dropout): the backward regenerates the mask from it
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks, rng)
    ctx.options = (max_seqlen_q, max_seqlen_k, scale, mask, window, chunk, softcap)
    ctx.deterministic, ctx.dropout_p = inputs[23], inputs[24]


def _sinks_grad(sinks, d_out, out, lse, d_lse, cu_seqlens_q):
    """d loss / d sink per head: each row's sink share P_sink = exp(sink - LSE) times (dLSE -
    rowsum(dO O)), summed over the head's rows (torch ops on the device)."""
    d = (d_out.float() * out.float()).sum(-1)  # [b, s, h] or [total, h]
    if cu_seqlens_q is None:  # rows as [h, b, s]
        d, rows = d.permute(2, 0, 1), lse.transpose(0, 1)
        d_lse = d_lse.transpose(0, 1) if d_lse is not None else None
    else:  # rows as [h, total], the LSE gathered as the varlen functions do
        from .interface import _varlen_lse
        d, rows = d.t(), _varlen_lse(lse, cu_seqlens_q, out.shape[0])
        d_lse = _varlen_lse(d_lse, cu_seqlens_q, out.shape[0]) if d_lse is not None else None
    share = torch.exp(sinks.float().view(-1, *([1] * (rows.dim() - 1))) - rows)
    terms = d_lse.float() - d if d_lse is not None else -d
    return (share * terms).flatten(1).sum(-1).to(sinks.dtype)


def _backward(ctx, d_out, d_lse):
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, alibi_slopes, sinks, rng = ctx.saved_tensors
    if d_out is None:
        d_out = torch.zeros_like(out)
    dq, dk, dv = torch.ops.fmha.bwd(d_out, q, k, v, out, lse, d_lse, cu_seqlens_q, cu_seqlens_k, *ctx.options,
                                    alibi_slopes, sinks, ctx.deterministic, ctx.dropout_p, rng)
    d_sinks = None
    if sinks is not None and ctx.needs_input_grad[15]:
        d_sinks = _sinks_grad(sinks, d_out, out, lse, d_lse, cu_seqlens_q)
    return (dq, dk, dv) + (None,) * 12 + (d_sinks,) + (None,) * 10


torch.library.register_autograd("fmha::fwd", _backward, setup_context=_setup_context)
