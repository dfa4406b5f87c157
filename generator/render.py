"""Render generated/ from the templates: kernels, registry, makefile, manifest.

Every file is written only when its content changes, and kernels that are no longer
selected are removed, so `python3 setup.py` twice touches nothing and `make` stays
incremental.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from .env import Config
from .families import constants, cpp_value, short_max_keys, sibling_block_ns, sibling_names
from .enumerate import decode_max_rows, decode_min_s_kv
from .rules import family_archs, kernel_variants
from .spec import ACCS, DTYPES, FAMILIES, KV_DTYPES, MASKS, VARIANTS, KernelSpec

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
KERNEL_DIR = "kernels"     # under the output dir: one <name>.cu per spec
ARCH_STAMP = "archs.stamp"  # under the output dir: the arch list the objects are built for


def kernel_path(spec: KernelSpec) -> str:
    """Where a spec's translation unit lives, relative to the output dir."""
    return f"{KERNEL_DIR}/{spec.name}.cu"


def environment(templates: Path = TEMPLATES) -> jinja2.Environment:
    # StrictUndefined: a misspelt variable is an error, never an empty string in C++.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def _kernel_vars(spec: KernelSpec, config: Config) -> dict:
    """The C++ spellings of one spec, shared by the kernel and registry templates.

    config.scheduling_mode is SCHEDULING_MODE (env.py): families with `scheduled` get it as
    their Traits' kPersistent; the others ignore it (their KernelMeta::persistent is false).
    config.archs decide the SASS targets the row lists (KernelMeta::archs).
    """
    scheduling_mode = config.scheduling_mode
    family = FAMILIES[spec.family]
    element, dtype_enum = DTYPES[spec.dtype]
    return {
        "spec": spec,
        "name": spec.name,
        # The family's Config template arguments (generator/families/), in order.
        "config": [(key, cpp_value(value)) for key, value in constants(spec).items()],
        "family": family,
        "element": element,
        "dtype_enum": dtype_enum,
        "kv_dtype_enum": KV_DTYPES[spec.kv_dtype] if spec.kv_dtype else dtype_enum,
        "acc_enum": ACCS[spec.acc],
        "acc_fp16": "true" if spec.acc == "fp16" else "false",
        "mask_bits": " | ".join(f"mask_bit({MASKS[m]})" for m in spec.masks) or "0u",
        "variants": kernel_variants(spec),
        "variant_bits": " | ".join(VARIANTS[v] for v in kernel_variants(spec)) or "0u",
        "warp_specialized": "true" if family.warp_specialized else "false",
        "uses_tma": "true" if family.uses_tma else "false",
        "persistent": "true" if family.scheduled and scheduling_mode == 1 else "false",
        "max_rows": decode_max_rows(spec),
        "min_s_kv": decode_min_s_kv(spec),
        "archs": ",".join(f"sm_{a.number}{a.suffix}" for a in family_archs(spec.family, config)),
        # Tiles its launch may run instead of its own (decode's OneHead, Quad), by kernel name.
        "siblings": sibling_names(spec),
        "sibling_block_n": sibling_block_ns(spec),
    }


def render_kernel(env: jinja2.Environment, spec: KernelSpec, scheduling_mode: int = 1) -> str:
    config = Config(scheduling_mode=scheduling_mode)
    return env.get_template(FAMILIES[spec.family].template).render(**_kernel_vars(spec, config))


def render_registry(env: jinja2.Environment, specs: list[KernelSpec], scheduling_mode: int = 1,
                    config: Config | None = None) -> str:
    """config: the build's flags (default: the default flags with this scheduling_mode)."""
    config = config or Config(scheduling_mode=scheduling_mode)
    return env.get_template("registry.cpp.j2").render(kernels=[_kernel_vars(s, config) for s in specs])


def gencode(archs) -> str:
    return " ".join(flag for arch in archs for flag in arch.gencode())


def render_makefile(env: jinja2.Environment, specs: list[KernelSpec], config: Config) -> str:
    families = sorted({s.family for s in specs})
    return env.get_template("makefile.j2").render(
        arch_list=";".join(str(a) for a in config.archs),
        arch_stamp=ARCH_STAMP,
        use_ccache=int(config.use_ccache),
        # Hand-written .cu files (the reference) run wherever the driver runs: every arch.
        src_gencode=gencode(config.archs),
        family_gencode={f: gencode(family_archs(f, config)) for f in families},
        kernels=[{"path": kernel_path(s), "family": s.family} for s in specs],
    )


def render_manifest(specs: list[KernelSpec], config: Config) -> str:
    kernels = []
    for spec in specs:
        entry = spec.to_dict()
        entry["archs"] = [str(a) for a in family_archs(spec.family, config)]
        row = _kernel_vars(spec, config)  # KernelMeta fields the tests select by
        entry["max_rows"], entry["min_s_kv"] = row["max_rows"], row["min_s_kv"]
        entry["variants"] = list(row["variants"])
        entry["siblings"] = list(row["siblings"])
        entry["short_max_keys"] = short_max_keys(spec)
        kernels.append(entry)
    # Sorted keys and a fixed indent: the same config always gives the same bytes.
    return json.dumps({"config": config.to_dict(), "kernels": kernels}, indent=2, sort_keys=True) + "\n"


def render_arch_stamp(config: Config) -> str:
    # Every device object depends on this file: a new arch list changes the -gencode flags
    # but no source, and make would otherwise keep the objects built for the old list.
    return ";".join(str(a) for a in config.archs) + "\n"


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` unless the file already holds exactly it; True when written."""
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)      # atomic: make never sees a half-written file
    return True


@dataclass
class Outcome:
    written: list = field(default_factory=list)    # paths rewritten
    removed: list = field(default_factory=list)    # stale kernels deleted


def render_all(specs: list[KernelSpec], config: Config, out: Path) -> Outcome:
    """Bring `out` in line with `specs`: write what changed, remove stale kernels."""
    env = environment()
    files = {kernel_path(s): render_kernel(env, s, config.scheduling_mode) for s in specs}
    files["registry.cpp"] = render_registry(env, specs, config=config)
    files["makefile"] = render_makefile(env, specs, config)
    files["manifest.json"] = render_manifest(specs, config)
    files[ARCH_STAMP] = render_arch_stamp(config)

    outcome = Outcome()
    for rel, text in files.items():
        if write_if_changed(out / rel, text):
            outcome.written.append(out / rel)
    kernel_dir = out / KERNEL_DIR
    for path in sorted(kernel_dir.glob("*.cu")) if kernel_dir.is_dir() else []:
        if path.relative_to(out).as_posix() not in files:
            path.unlink()
            outcome.removed.append(path)
    return outcome
