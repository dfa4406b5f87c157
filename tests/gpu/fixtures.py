"""The GPU tier's fixtures: the binary under test and the perf table's recorder. tests/gpu/
conftest.py and fmha_test.py (the entry SPEC.md names) both take them from here."""

import os
from pathlib import Path

import pytest

from .cases import Case
from .driver import registry_names
from .manifest import kernels_or_skip, manifest_path


@pytest.fixture(scope="session")
def exe() -> Path:
    """The binary of the build the manifest describes ($FMHA_EXE, else bin/ beside generated/),
    checked to hold exactly the manifest's kernels: a stale binary would make every result
    here mean something else. (conftest's fmha_exe may build a small subset instead; that
    one cannot match the manifest, so this tier does not use it.)"""
    path = Path(os.environ.get("FMHA_EXE") or manifest_path().parent.parent / "bin" / "fmha.exe")
    if not path.is_file():
        pytest.skip(f"{path} is not built: run `make -j`")
    built, listed = registry_names(path), {k["name"] for k in kernels_or_skip()}
    if built != listed:
        pytest.fail(f"{path} and {manifest_path()} disagree (only in the binary: {sorted(built - listed)}, "
                    f"only in the manifest: {sorted(listed - built)}): run `make -j`", pytrace=False)
    return path


@pytest.fixture(scope="session")
def perf_record(perf_rows):
    """Appends one run to the session's perf table (conftest.py writes it with --perf-csv and
    compares its -m perf rows with --perf-baseline). `runs`: how many runs `fields` is the
    best of."""

    def record(node: pytest.Item, case: Case, fields: dict, runs: int = 1):
        k = case.kernel
        perf_rows.append({
            "test": node.name, "perf": node.get_closest_marker("perf") is not None,
            "config": case.config, "runs": runs, "kernel": k["name"], "dtype": k["dtype"], "acc": k["acc"],
            "d": k["d"], "dv": k["dv"], "mask": case.mask, "layout": case.layout, "attn": case.attn,
            "b": case.shape.b, "h": case.h, "h_kv": case.h_kv, "s": case.shape.s,
            "s_q": case.shape.s_q or case.shape.s, "min_s": case.shape.min_s, "pad_s": case.shape.pad_s,
            "extra": " ".join(case.extra), "us": float(fields["us"]),
            "tflops": float(fields["tflops"]), "gbs": float(fields["gbs"]),
            "speedup": float(fields["speedup"]) if "speedup" in fields else float("nan"),
        })
    return record
