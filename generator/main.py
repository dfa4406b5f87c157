"""setup.py's body: env flags -> specs -> rules -> FMHA_FILTER -> generated/."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import rules
from .enumerate import candidates
from .env import Config, EnvError, parse
from .render import render_all
from .spec import FAMILIES, KernelSpec

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "generated"

# What each arch flag built, said so that nobody believes they built FP8 kernels or a
# Blackwell-specific design.
PLANNED_FAMILIES = {
    "ENABLE_SM89_QMMA": "the qmma family (FP8 e4m3, mma.sync m16n8k32) is built for the listed archs from 8.9 on; "
                        "on sm_90 it runs without native QMMA, after the ws family's e4m3 kernels in dispatch",
    "ENABLE_SM100": "flash and decode are also compiled for sm_100; no Blackwell-specific family "
                    "(tcgen05, TMEM) exists yet",
    "ENABLE_SM120": "flash and decode are also compiled for sm_120; no Blackwell-specific family "
                    "(FP8/FP4 mma.sync) exists yet",
}


@dataclass
class Selection:
    """One family's candidates, split by what happened to them."""

    kept: list = field(default_factory=list)        # generated
    rejected: list = field(default_factory=list)    # (spec, [Rule]) a rule refused
    filtered: list = field(default_factory=list)    # valid, but FMHA_FILTER left it out


def select(config: Config) -> dict[str, Selection]:
    """Candidates of every family through the rules and FMHA_FILTER."""
    selections = {}
    seen = set()
    for family, specs in candidates(config).items():
        selection = Selection()
        for spec in specs:
            if spec.name in seen:
                raise RuntimeError(f"two candidates are named {spec.name}: enumeration bug")
            seen.add(spec.name)
            broken = rules.broken(spec, config)
            if broken:
                selection.rejected.append((spec, broken))
            elif config.selects(spec.name):
                selection.kept.append(spec)
            else:
                selection.filtered.append(spec)
        selections[family] = selection
    return selections


def kernels(config: Config) -> list[KernelSpec]:
    """The generated specs in registry (dispatch) order."""
    return [spec for selection in select(config).values() for spec in selection.kept]


def _display(path: Path) -> str:
    try:
        return f"{path.resolve().relative_to(Path.cwd().resolve())}/"
    except ValueError:
        return f"{path}/"


def main(argv=None, environ=None) -> int:
    parser = argparse.ArgumentParser(
        prog="setup.py", description="Generate the FMHA kernels into generated/ (then run make)."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every rejected spec and why")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output dir (default: generated/)")
    args = parser.parse_args(argv)
    environ = os.environ if environ is None else environ

    try:
        config = parse(environ)
    except EnvError as error:
        print(f"setup.py: error: {error}", file=sys.stderr)
        return 2

    selections = select(config)
    specs = [spec for selection in selections.values() for spec in selection.kept]
    outcome = render_all(specs, config, args.out)

    where = _display(args.out)
    for name, selection in selections.items():
        family = FAMILIES[name]
        line = f"{name} ({family.description}): {len(selection.kept)} kernels -> {where}"
        if selection.filtered:
            line += f" ({len(selection.filtered)} more left out by FMHA_FILTER)"
        print(line)
        if args.verbose:
            archs = " ".join(str(a) for a in rules.family_archs(name, config))
            print(f"  compiled for: {archs or 'nothing (no arch of this family in TORCH_CUDA_ARCH_LIST)'}")
            for spec, broken in selection.rejected:
                print(f"  rejected {spec.name}: " + "; ".join(r.why(spec) for r in broken))
            for spec in selection.filtered:
                print(f"  filtered {spec.name}: matches no FMHA_FILTER glob")
    for flag, what in PLANNED_FAMILIES.items():
        if getattr(config, flag.lower()):
            print(f"{flag}=1: {what}")
    scheduled = [name for name in selections if FAMILIES[name].scheduled and selections[name].kept]
    if scheduled:
        how = "persistent CTAs, dynamic tile counter" if config.scheduling_mode == 1 else "static grid, one CTA per tile"
        print(f"SCHEDULING_MODE={config.scheduling_mode}: {', '.join(scheduled)} kernels use {how}")
    changed = len(outcome.written) + len(outcome.removed)
    print(
        f"{where}: {len(outcome.written)} files written, {len(outcome.removed)} stale kernels removed"
        if changed else f"{where}: up to date"
    )
    return 0
