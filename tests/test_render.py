"""Rendering generated/: golden files, write-if-changed, stale removal, strict templates."""

import json
import os
import re
from pathlib import Path

import jinja2
import pytest

from generator.env import parse
from generator.main import kernels, main
from generator.render import (environment, kernel_path, render_all, render_kernel,
                              render_makefile, render_registry, write_if_changed)
from generator.spec import KernelSpec

GOLDEN = Path(__file__).resolve().parent / "golden"
# FMHA_UPDATE_GOLDEN=1 pytest tests/test_render.py rewrites the golden files after a
# deliberate template change; review the diff before committing it.
UPDATE = os.environ.get("FMHA_UPDATE_GOLDEN") == "1"

SPEC = KernelSpec.parse("fmha_v2_flash_fp16_d128_128x64_w4x1_sm80")
BF16 = KernelSpec.parse("fmha_v2_flash_bf16_d64_128x64_w4x1_sm80")


def check_golden(name, text):
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from tests/golden/ (FMHA_UPDATE_GOLDEN=1 to accept)"


def test_kernel_golden():
    check_golden(f"{SPEC.name}.cu", render_kernel(environment(), SPEC))


def test_registry_golden():
    check_golden("registry.cpp", render_registry(environment(), [SPEC, BF16]))


def test_empty_registry_is_valid_cpp():
    text = render_registry(environment(), [])
    assert "const int kNumKernels = 0;" in text
    # A zero-length array is ill-formed: the table keeps one zeroed sentinel row.
    assert re.search(r"kKernels\[\] = \{\s*\{\},", text)


def test_registry_row_fields():
    text = render_registry(environment(), [KernelSpec.parse("fmha_v2_flash_bf16_d64_128x64_w4x1_sm80",
                                                            masks=("causal",))])
    assert "DataType::kBf16, DataType::kFp32" in text
    assert "mask_bit(MaskType::kCausal), /*warp_specialized=*/false" in text
    assert "const int kNumKernels = 1;" in text


def makefile_vars(text):
    return dict(re.findall(r"^(\w+) := (.*)$", text, re.MULTILINE))


@pytest.mark.parametrize("arch_list, gencode", [
    ("8.0;9.0", "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90"),
    ("9.0", "-gencode arch=compute_90,code=sm_90"),
    ("8.6", "-gencode arch=compute_86,code=sm_86"),
    ("9.0a+PTX;8.0", "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a "
                     "-gencode arch=compute_90a,code=compute_90a"),
    ("8.9 12.0", "-gencode arch=compute_89,code=sm_89 -gencode arch=compute_120,code=sm_120"),
])
def test_makefile_gencode(arch_list, gencode):
    config = parse({"TORCH_CUDA_ARCH_LIST": arch_list})
    text = render_makefile(environment(), kernels(config), config)
    variables = makefile_vars(text)
    assert variables["GENCODE_flash"] == gencode
    assert variables["SRC_GENCODE"] == gencode      # the flash family covers every arch >= 8.0
    for spec in kernels(config):
        assert f"$(call obj,$(GEN_DIR)/{kernel_path(spec)}): GENCODE := $(GENCODE_flash)" in text
        assert f"$(GEN_DIR)/{kernel_path(spec)}" in text.split("KERNEL_SRCS :=")[1]


def test_makefile_records_use_ccache_as_default():
    config = parse({"USE_CCACHE": "on"})
    assert "USE_CCACHE ?= 1" in render_makefile(environment(), [], config)


def test_manifest(tmp_path):
    config = parse({"TORCH_CUDA_ARCH_LIST": "9.0;8.0", "FMHA_FILTER": "*_d64_*"})
    render_all(kernels(config), config, tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["config"]["torch_cuda_arch_list"] == ["8.0", "9.0"]
    assert manifest["config"]["fmha_filter"] == ["*_d64_*"]
    assert [k["name"] for k in manifest["kernels"]] == [s.name for s in kernels(config)]
    for entry in manifest["kernels"]:
        assert KernelSpec.parse(entry["name"], masks=entry["masks"]).to_dict() == \
            {k: v for k, v in entry.items() if k != "archs"}
        assert entry["archs"] == ["8.0", "9.0"]


def test_second_run_writes_nothing(tmp_path, capsys):
    out = tmp_path / "gen"
    assert main(["--out", str(out)], environ={}) == 0
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert len(files) == len(kernels(parse({}))) + 4     # + registry, makefile, manifest, stamp
    # Age every file so a rewrite, even within the same second, shows in the mtime.
    for path in files:
        os.utime(path, (1_000_000_000, 1_000_000_000))
    capsys.readouterr()
    assert main(["--out", str(out)], environ={}) == 0
    assert capsys.readouterr().out.rstrip().endswith(": up to date")
    assert all(path.stat().st_mtime == 1_000_000_000 for path in files)
    assert sorted(p for p in out.rglob("*") if p.is_file()) == files


def test_changed_flag_rewrites_only_what_it_changes(tmp_path):
    render_all(kernels(parse({})), parse({}), tmp_path)
    outcome = render_all(kernels(parse({})), parse({"TORCH_CUDA_ARCH_LIST": "9.0"}), tmp_path)
    # New gencode: kernel sources are the same, the makefile, manifest and arch stamp are not.
    assert sorted(p.name for p in outcome.written) == ["archs.stamp", "makefile", "manifest.json"]


def test_stale_kernels_are_removed(tmp_path):
    both = kernels(parse({"FMHA_FILTER": "*_d64_*"}))
    render_all(both, parse({}), tmp_path)
    (tmp_path / "kernels" / "README").write_text("not a kernel: left alone\n")
    outcome = render_all(both[:1], parse({}), tmp_path)
    assert [p.name for p in outcome.removed] == [f"{both[1].name}.cu"]
    assert sorted(p.name for p in (tmp_path / "kernels").iterdir()) == ["README", f"{both[0].name}.cu"]


def test_write_if_changed(tmp_path):
    path = tmp_path / "a" / "b.txt"
    assert write_if_changed(path, "x\n") is True
    assert write_if_changed(path, "x\n") is False
    assert write_if_changed(path, "y\n") is True and path.read_text() == "y\n"
    assert [p.name for p in path.parent.iterdir()] == ["b.txt"]     # no temp file left behind


def test_strict_undefined(tmp_path):
    (tmp_path / "t.j2").write_text("launch_{{ nmae }}\n")
    with pytest.raises(jinja2.UndefinedError):
        environment(tmp_path).get_template("t.j2").render(name="x")


def test_real_templates_are_strict():
    with pytest.raises(jinja2.UndefinedError):
        environment().get_template("kernel.cu.j2").render(name=SPEC.name)   # no spec, family...
