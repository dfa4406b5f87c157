"""The kernels under test: generated/manifest.json (written by `python3 setup.py`), never a
list kept here, and what an entry implies: its dtype flag, its first-line labels, the GPUs its
code loads on."""

import json
import os
import re
from functools import lru_cache
from pathlib import Path

import pytest

from generator.spec import FAMILIES

REPO = Path(__file__).resolve().parents[2]


def manifest_path() -> Path:
    """generated/manifest.json beside the binary under test ($FMHA_EXE's tree, else the repo's)."""
    if os.environ.get("FMHA_EXE"):
        beside = Path(os.environ["FMHA_EXE"]).resolve().parent.parent / "generated" / "manifest.json"
        if beside.is_file():
            return beside
    return REPO / "generated" / "manifest.json"


@lru_cache(maxsize=None)
def _manifest(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _load(path: Path) -> tuple:
    return tuple(_manifest(path).get("kernels", ()))


def kernels_or_skip() -> list[dict]:
    """The manifest's kernels, in registry order; without a manifest the calling test module
    skips whole (one entry that says why, rather than hundreds)."""
    path = manifest_path()
    kernels = list(_load(path))
    if not kernels:
        why = ("lists no kernel (FMHA_FILTER?)" if path.is_file()
               else "not found: run `python3 setup.py && make -j` first")
        pytest.skip(f"{path} {why}", allow_module_level=True)
    return kernels


def _config(path: Path) -> dict:
    return _manifest(path).get("config", {})


# The library's reason when no kernel of the build serves a valid problem (src/api/api.cpp).
NO_KERNEL_TEXT = "no kernel of this build serves"


def partial_build_skip(exc: BaseException, config: dict, gpu_arch=lambda: None) -> str | None:
    """The skip reason for a test that failed with `exc` on a build that leaves kernels out on
    purpose: the library found no kernel (NotImplementedError with NO_KERNEL_TEXT) and the
    build's config (generated/manifest.json) had an FMHA_FILTER, or an arch list without the
    GPU's (gpu_arch(): "9.0", asked only then). On a whole build that is a failure, and None
    keeps it one."""
    if not (isinstance(exc, NotImplementedError) and NO_KERNEL_TEXT in str(exc)):
        return None
    filters = config.get("fmha_filter") or []
    archs = [a.split("+")[0].rstrip("af") for a in config.get("torch_cuda_arch_list") or []]
    if filters:
        why = f"FMHA_FILTER={','.join(filters)}"
    elif archs and (arch := gpu_arch()) is not None and arch not in archs:
        why = f"TORCH_CUDA_ARCH_LIST={';'.join(config['torch_cuda_arch_list'])} on a {arch} GPU"
    else:
        return None
    return f"a partial build ({why}): {exc}"


def library_config() -> dict:
    """The manifest's config of the library the package loads (FMHA_LIBRARY's tree, else the
    repository's), or of the binary under test."""
    lib = os.environ.get("FMHA_LIBRARY")
    beside = Path(lib).resolve().parent.parent / "generated" / "manifest.json" if lib else None
    return _config(beside if beside is not None and beside.is_file() else manifest_path())


def is_decode(kernel: dict) -> bool:
    """A family that serves a few query rows only (max_s_q): the decode family."""
    return bool(FAMILIES[kernel["family"]].max_s_q)


def dtype_flags(kernel: dict, e4m3_out: bool = False) -> list[str]:
    """fmha.exe's flags for the kernel's dtype (e4m3: O in bf16, or with e4m3_out in e4m3, the
    driver's default for e4m3 inputs; the e4m3 kernels write either); -kv-e4m3 for a kernel
    over an e4m3 KV cache."""
    if kernel["dtype"] == "e4m3":
        return ["-e4m3"] if e4m3_out else ["-e4m3", "-bf16-output"]
    kv = ["-kv-e4m3"] if kernel.get("kv_dtype") == "e4m3" else []
    if kernel["dtype"] == "bf16":
        return ["-bf16", *kv]
    return ["-fp16-fp32" if kernel["acc"] == "fp32" else "-fp16", *kv]


def warp_spec(kernel: dict) -> str:
    """The first line's warp_spec= value, a property of the kernel's family."""
    return "true" if FAMILIES[kernel["family"]].warp_specialized else "false"


def dtype_label(kernel: dict) -> str:
    """The first line's dtype= value: FP16, FP16_FP32 or BF16 (bf16 always accumulates in fp32)."""
    return "FP16_FP32" if kernel["dtype"] == "fp16" and kernel["acc"] == "fp32" else kernel["dtype"].upper()


ARCH_RE = re.compile(r"(?P<major>\d+)\.(?P<minor>\d)(?P<suffix>[af]?)(?P<ptx>\+PTX)?")


def loads_on(arch: str, gpu_sm: int) -> bool:
    """Whether code built for `arch` (a TORCH_CUDA_ARCH_LIST entry) runs on an sm_<gpu_sm>:
    SASS runs on the same major at an equal or higher minor ('a' archs: that one GPU only),
    PTX on anything at or above it."""
    m = ARCH_RE.fullmatch(arch)
    number = int(m["major"]) * 10 + int(m["minor"])
    if m["ptx"] and number <= gpu_sm:
        return True
    if m["suffix"] == "a":
        return number == gpu_sm
    return number // 10 == gpu_sm // 10 and number <= gpu_sm


def runs_on(kernel: dict, gpu_sm: int) -> bool:
    archs = kernel.get("archs") or [f"{kernel['sm'] // 10}.{kernel['sm'] % 10}+PTX"]
    return kernel["sm"] <= gpu_sm and any(loads_on(a, gpu_sm) for a in archs)


def require_arch(kernel: dict, gpu_sm: int):
    if not runs_on(kernel, gpu_sm):
        archs = kernel.get("archs") or [f"{kernel['sm'] // 10}.{kernel['sm'] % 10}+PTX"]
        pytest.skip(f"{kernel['name']} was built for {', '.join(archs)}: nothing runs on sm_{gpu_sm}")


def pick_kernel(kernels, dtype: str = "fp16", acc: str | None = None, mask: str = "causal",
                family: str | None = None) -> dict | None:
    """The smallest-head kernel of a dtype (and family) that supports `mask` (deterministic).
    Without a family, a prefill kernel: the callers' problems have s_q = s, beyond decode's."""
    fits = [k for k in kernels if k["dtype"] == dtype and (acc is None or k["acc"] == acc) and mask in k["masks"]
            and (k["family"] == family if family is not None else not is_decode(k))]
    return min(fits, key=lambda k: (k["d"], k["dv"], k["name"])) if fits else None


def kernel_or_skip(kernels, **kw) -> dict:
    kernel = pick_kernel(kernels, **kw)
    if kernel is None:
        pytest.skip(f"no kernel in the build fits {kw}")
    return kernel
