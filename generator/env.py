"""The environment flags of SPEC.md, parsed once into a frozen Config.

An unknown or malformed value raises EnvError; setup.py turns that into one line on stderr
and exit code 2. Nothing falls back silently to a default except an unset (or empty) flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Mapping

DEFAULT_ARCH_LIST = "8.0;9.0"

# Real GPU archs nvcc 13 compiles for (nvcc --list-gpu-arch), as major*10+minor. Listed by
# hand so that a typo like 8.5 is an error here and not a confusing nvcc failure later.
KNOWN_ARCHS = (80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121)
# The oldest arch any family (existing or planned) targets: flash needs mma.sync + ldmatrix
# + cp.async, all SM80.
MIN_ARCH = 80
# Arch-specific ("a", e.g. sm_90a for wgmma) exist from Hopper on; family-portable ("f")
# from Blackwell on. An entry names a GPU: 9.0 and 9.0a both mean Hopper. The ws family needs
# the 'a' target and is built for sm_90a whenever either is listed (rules.family_archs); the
# portable flash family takes each entry as written (9.0 -> sm_90, 9.0a -> sm_90a).
SUFFIX_MIN_ARCH = {"a": 90, "f": 100}

_ARCH_RE = re.compile(r"(?P<major>\d+)\.(?P<minor>\d)(?P<suffix>[af]?)(?P<ptx>\+PTX)?", re.IGNORECASE)
_TRUE = ("1", "true", "on")
_FALSE = ("0", "false", "off")


class EnvError(ValueError):
    """A flag value setup.py cannot use; the message names the flag and what is accepted."""


@dataclass(frozen=True, order=True)
class Arch:
    """One TORCH_CUDA_ARCH_LIST entry, e.g. 9.0a+PTX."""

    number: int          # 90 for 9.0 and 9.0a
    suffix: str = ""     # "", "a" (arch-specific) or "f" (family-portable)
    ptx: bool = False    # also embed PTX so newer GPUs can JIT it

    def __str__(self) -> str:
        return f"{self.number // 10}.{self.number % 10}{self.suffix}{'+PTX' if self.ptx else ''}"

    def gencode(self) -> list[str]:
        """nvcc flags for this entry: SASS for the arch, plus PTX with +PTX."""
        arch = f"{self.number}{self.suffix}"
        flags = [f"-gencode arch=compute_{arch},code=sm_{arch}"]
        if self.ptx:
            flags.append(f"-gencode arch=compute_{arch},code=compute_{arch}")
        return flags


@dataclass(frozen=True)
class Config:
    archs: tuple = None                 # tuple[Arch], sorted, no duplicates
    enable_hmma_fp32: bool = False
    enable_sm89_qmma: bool = False
    enable_sm100: bool = False
    enable_sm120: bool = False
    scheduling_mode: int = 1
    use_ccache: bool = False
    fmha_filter: tuple = ()             # fnmatch globs on kernel names; empty = all

    def __post_init__(self):
        if self.archs is None:
            object.__setattr__(self, "archs", parse_arch_list(DEFAULT_ARCH_LIST))

    def selects(self, name: str) -> bool:
        """Whether FMHA_FILTER lets the kernel `name` through."""
        return not self.fmha_filter or any(fnmatchcase(name, g) for g in self.fmha_filter)

    def to_dict(self) -> dict:
        """The config as JSON values, for generated/manifest.json."""
        return {
            "torch_cuda_arch_list": [str(a) for a in self.archs],
            "enable_hmma_fp32": self.enable_hmma_fp32,
            "enable_sm89_qmma": self.enable_sm89_qmma,
            "enable_sm100": self.enable_sm100,
            "enable_sm120": self.enable_sm120,
            "scheduling_mode": self.scheduling_mode,
            "use_ccache": self.use_ccache,
            "fmha_filter": list(self.fmha_filter),
        }


def parse_arch_list(text: str) -> tuple:
    """'8.0;9.0a+PTX' (separators ; , or blanks) -> sorted, de-duplicated Arch tuple."""
    entries = [e for e in re.split(r"[;,\s]+", text.strip()) if e]
    if not entries:
        raise EnvError("TORCH_CUDA_ARCH_LIST is empty: give archs like 8.0;9.0")
    merged = {}
    for entry in entries:
        arch = _parse_arch(entry)
        key = (arch.number, arch.suffix)
        # The same arch twice ("9.0;9.0+PTX") is one arch that keeps PTX if any entry asked.
        merged[key] = Arch(arch.number, arch.suffix, arch.ptx or merged.get(key, arch).ptx)
    return tuple(sorted(merged.values()))


def _parse_arch(entry: str) -> Arch:
    match = _ARCH_RE.fullmatch(entry)
    if match is None:
        raise EnvError(
            f"TORCH_CUDA_ARCH_LIST entry {entry!r} is not an arch: "
            "expected MAJOR.MINOR with an optional a/f suffix and +PTX, e.g. 8.0;9.0a;12.0+PTX"
        )
    number = int(match["major"]) * 10 + int(match["minor"])
    suffix = match["suffix"].lower()
    if number < MIN_ARCH:
        # CUDA 13 dropped every target below Turing: Volta (7.0, 7.2) cannot be built at all.
        why = "CUDA 13 cannot compile for it (Volta and older were dropped); " if number < 75 else ""
        raise EnvError(
            f"TORCH_CUDA_ARCH_LIST entry {entry!r}: {why}no kernel family supports it "
            f"(the oldest arch any family targets is {MIN_ARCH // 10}.{MIN_ARCH % 10})"
        )
    if number not in KNOWN_ARCHS:
        known = " ".join(f"{n // 10}.{n % 10}" for n in KNOWN_ARCHS)
        raise EnvError(f"TORCH_CUDA_ARCH_LIST entry {entry!r} is not a known arch (known: {known})")
    if suffix and number < SUFFIX_MIN_ARCH[suffix]:
        raise EnvError(
            f"TORCH_CUDA_ARCH_LIST entry {entry!r}: the '{suffix}' suffix needs an arch >= "
            f"{SUFFIX_MIN_ARCH[suffix] // 10}.{SUFFIX_MIN_ARCH[suffix] % 10}"
        )
    return Arch(number, suffix, match["ptx"] is not None)


def _flag(environ: Mapping[str, str], key: str) -> str | None:
    """The flag's value, or None when unset. Empty counts as unset (`FOO= make` idiom)."""
    value = environ.get(key, "").strip()
    return value or None


def _parse_bool(environ: Mapping[str, str], key: str) -> bool:
    value = _flag(environ, key)
    if value is None:
        return False
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise EnvError(f"{key}={value!r}: expected one of 0/1/true/false/on/off")


# ENABLE_SM100 / ENABLE_SM120: the Blackwell archs they add to TORCH_CUDA_ARCH_LIST. The
# portable families (mma.sync: flash, decode) run there unchanged; no family uses tcgen05 or
# TMEM yet, and ws (wgmma, sm_90a) exists on Hopper alone.
BLACKWELL_FLAGS = {"ENABLE_SM100": Arch(100), "ENABLE_SM120": Arch(120)}


def with_blackwell(archs: tuple, flags: dict) -> tuple:
    """archs plus the Blackwell arch of each flag that is on, unless the list names it already."""
    extra = [arch for flag, arch in BLACKWELL_FLAGS.items()
             if flags[flag] and all(a.number != arch.number for a in archs)]
    return tuple(sorted(archs + tuple(extra)))


def parse(environ: Mapping[str, str]) -> Config:
    """All flags of SPEC.md from `environ` (os.environ or a test's dict)."""
    arch_list = _flag(environ, "TORCH_CUDA_ARCH_LIST") or DEFAULT_ARCH_LIST
    scheduling = _flag(environ, "SCHEDULING_MODE") or "1"
    if scheduling not in ("0", "1"):
        raise EnvError(
            f"SCHEDULING_MODE={scheduling!r}: expected 0 (static grid) or 1 (persistent, dynamic tile counter)"
        )
    globs = tuple(g.strip() for g in (_flag(environ, "FMHA_FILTER") or "").split(",") if g.strip())
    blackwell = {flag: _parse_bool(environ, flag) for flag in BLACKWELL_FLAGS}
    return Config(
        archs=with_blackwell(parse_arch_list(arch_list), blackwell),
        enable_hmma_fp32=_parse_bool(environ, "ENABLE_HMMA_FP32"),
        enable_sm89_qmma=_parse_bool(environ, "ENABLE_SM89_QMMA"),
        enable_sm100=blackwell["ENABLE_SM100"],
        enable_sm120=blackwell["ENABLE_SM120"],
        scheduling_mode=int(scheduling),
        use_ccache=_parse_bool(environ, "USE_CCACHE"),
        fmha_filter=globs,
    )
