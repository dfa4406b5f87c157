"""libfmha.so through ctypes: the structs of include/fmha.h and the library's functions.
Needs no torch. FMHA_LIBRARY names the library; else the copy inside this package (pip
install), else the repository's lib/ (usable in place)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

SUCCESS, INVALID_VALUE, NOT_SUPPORTED, WORKSPACE, CUDA = range(5)
FP16, BF16, FP32, E4M3 = range(4)
MASK_NONE, MASK_CAUSAL, MASK_SLIDING, MASK_BIDIRECTIONAL, MASK_CHUNKED, MASK_CUSTOM = range(6)
API_VERSION = 6


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("batch_stride", ctypes.c_int64),
                ("token_stride", ctypes.c_int64), ("head_stride", ctypes.c_int64)]


class Problem(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32), ("dtype", ctypes.c_int), ("acc", ctypes.c_int),
        ("b", ctypes.c_int), ("h", ctypes.c_int), ("h_kv", ctypes.c_int),
        ("d", ctypes.c_int), ("dv", ctypes.c_int), ("max_s_q", ctypes.c_int), ("max_s_kv", ctypes.c_int),
        ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p), ("seqused_k", ctypes.c_void_p),
        ("q_tokens", ctypes.c_int64), ("kv_tokens", ctypes.c_int64),
        ("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor),
        ("mask", ctypes.c_int), ("window", ctypes.c_int), ("chunk", ctypes.c_int),
        ("custom_mask", ctypes.c_void_p), ("custom_mask_row_words", ctypes.c_int),
        ("scale", ctypes.c_float), ("softcap", ctypes.c_float), ("wide_logits", ctypes.c_int),
        ("alibi_slopes", ctypes.c_void_p), ("sinks", ctypes.c_void_p), ("bias", ctypes.c_void_p),
        ("bias_batch_stride", ctypes.c_int64), ("bias_head_stride", ctypes.c_int64),
        ("bias_row_stride", ctypes.c_int64),
        ("block_table", ctypes.c_void_p), ("block_table_stride", ctypes.c_int), ("block_size", ctypes.c_int),
        ("num_blocks", ctypes.c_int), ("k_block_stride", ctypes.c_int64), ("v_block_stride", ctypes.c_int64),
        ("lse", ctypes.c_void_p),
        ("q_descale", ctypes.c_void_p), ("k_descale", ctypes.c_void_p), ("v_descale", ctypes.c_void_p),
        ("o_e4m3", ctypes.c_int),
        ("dropout_p", ctypes.c_float), ("dropout_seed", ctypes.c_uint64), ("dropout_offset", ctypes.c_uint64),
        ("kv_e4m3", ctypes.c_int),
    ]


class BackwardArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("d_o", Tensor), ("d_lse", ctypes.c_void_p), ("dq", Tensor),
                ("dk", Tensor), ("dv", Tensor), ("deterministic", ctypes.c_int)]


class Plan(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_char * 128), ("workspace_bytes", ctypes.c_size_t), ("sm", ctypes.c_int),
                ("num_sms", ctypes.c_int), ("index", ctypes.c_int)]


def library_path() -> Path:
    env = os.environ.get("FMHA_LIBRARY")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for candidate in (here / "libfmha.so", here.parent.parent / "lib" / "libfmha.so"):
        if candidate.is_file():
            return candidate
    raise ImportError("libfmha.so not found: run `make lib` in the repository, `pip install ./python`, "
                      "or set FMHA_LIBRARY to its path")


def load(path: Path | None = None) -> ctypes.CDLL:
    so = ctypes.CDLL(str(path or library_path()))
    so.fmha_version.restype = ctypes.c_int
    so.fmha_last_error.restype = ctypes.c_char_p
    so.fmha_kernel_name.restype = ctypes.c_char_p
    so.fmha_kernel_name.argtypes = [ctypes.c_int]
    so.fmha_problem_init.argtypes = [ctypes.POINTER(Problem)]
    so.fmha_plan.argtypes = [ctypes.POINTER(Problem), ctypes.c_int, ctypes.c_int, ctypes.POINTER(Plan)]
    so.fmha_plan.restype = ctypes.c_int
    so.fmha_forward.argtypes = [ctypes.POINTER(Problem), ctypes.POINTER(Plan), ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_void_p]
    so.fmha_forward.restype = ctypes.c_int
    so.fmha_backward_args_init.argtypes = [ctypes.POINTER(BackwardArgs)]
    so.fmha_plan_backward.argtypes = [ctypes.POINTER(Problem), ctypes.POINTER(BackwardArgs), ctypes.c_int,
                                      ctypes.c_int, ctypes.POINTER(Plan)]
    so.fmha_plan_backward.restype = ctypes.c_int
    so.fmha_backward.argtypes = [ctypes.POINTER(Problem), ctypes.POINTER(BackwardArgs), ctypes.POINTER(Plan),
                                 ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    so.fmha_backward.restype = ctypes.c_int
    if so.fmha_version() != API_VERSION:
        raise ImportError(f"{path or library_path()} has API version {so.fmha_version()}, this package "
                          f"speaks {API_VERSION}: rebuild the library or reinstall the package")
    return so


def forward_by_address(so: ctypes.CDLL):
    """fmha_forward taking the problem and plan as addresses (or ctypes arrays): the package's
    call path, where converting Structure arguments would cost more than the call itself."""
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.c_void_p)
    return proto(ctypes.cast(so.fmha_forward, ctypes.c_void_p).value)


class FmhaError(RuntimeError):
    """A status from the library with its one-line reason."""


def raise_for(so: ctypes.CDLL, status: int, what: str) -> None:
    if status == SUCCESS:
        return
    reason = so.fmha_last_error().decode()
    if status == NOT_SUPPORTED:
        raise NotImplementedError(f"{what}: {reason}")
    if status in (INVALID_VALUE, WORKSPACE):
        raise ValueError(f"{what}: {reason}")
    raise FmhaError(f"{what}: {reason}")
