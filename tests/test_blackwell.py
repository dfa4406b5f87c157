"""ENABLE_SM100 / ENABLE_SM120: the portable families (flash, decode: mma.sync) are compiled for
Blackwell too. No such GPU is lent, so this is compile-only: setup.py's archs, the registry's
archs column, and nvcc building one kernel of each family with sm_100 and sm_120 SASS inside.
"""

import glob
import json
import shutil
import subprocess
import sysconfig

import pytest

from generator.env import Arch, parse
from generator.main import kernels
from generator.rules import family_archs
from tests.test_build import copy_tree, run, setup

def cuobjdump() -> str | None:
    """The toolkit's cuobjdump, or PyPI's (nvidia-cuda-cuobjdump, which .ci/run installs)."""
    found = shutil.which("cuobjdump")
    wheel = glob.glob(f"{sysconfig.get_paths()['purelib']}/nvidia/cu*/bin/cuobjdump")
    return found or (wheel[0] if wheel else None)


FLASH = "fmha_v2_flash_bf16_d64_128x64_w4x1_sm80"
DECODE = "fmha_v2_decode_bf16_d64_1x8_w4x1_sm80"


@pytest.mark.parametrize("flags, blackwell", [
    ({}, set()),
    ({"ENABLE_SM100": "1"}, {100}),
    ({"ENABLE_SM120": "on"}, {120}),
    ({"ENABLE_SM100": "1", "ENABLE_SM120": "1"}, {100, 120}),
    ({"ENABLE_SM100": "0"}, set()),
])
def test_flags_add_their_arch_to_the_portable_families(flags, blackwell):
    config = parse({"TORCH_CUDA_ARCH_LIST": "9.0", **flags})
    assert {a.number for a in config.archs} == {90} | blackwell
    for family in ("flash", "decode"):
        assert {a.number for a in family_archs(family, config)} == {90} | blackwell
    assert family_archs("ws", config) == (Arch(90, "a"),)  # wgmma code runs on Hopper alone


def test_flag_keeps_an_arch_the_list_already_names():
    config = parse({"TORCH_CUDA_ARCH_LIST": "10.0a+PTX", "ENABLE_SM100": "1"})
    assert config.archs == (Arch(100, "a", True),)


def test_blackwell_adds_no_kernel_only_targets():
    # The same kernels with and without the flags: Blackwell gets the existing families' code.
    base = [s.name for s in kernels(parse({"TORCH_CUDA_ARCH_LIST": "9.0"}))]
    both = [s.name for s in kernels(parse({"TORCH_CUDA_ARCH_LIST": "9.0", "ENABLE_SM100": "1", "ENABLE_SM120": "1"}))]
    assert base == both


def test_volta_is_refused_with_the_reason():
    with pytest.raises(Exception, match="CUDA 13 cannot compile for it"):
        parse({"TORCH_CUDA_ARCH_LIST": "7.0"})


@pytest.mark.build
@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("make") is None, reason="nvcc or make not found")
@pytest.mark.skipif(cuobjdump() is None, reason="cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
def test_compiles_flash_and_decode_for_sm100_and_sm120(tmp_path):
    copy_tree(tmp_path)
    setup(tmp_path, TORCH_CUDA_ARCH_LIST="8.0", ENABLE_SM100="1", ENABLE_SM120="1", FMHA_FILTER=f"{FLASH},{DECODE}")
    manifest = json.loads((tmp_path / "generated" / "manifest.json").read_text())
    assert {k["name"]: k["archs"] for k in manifest["kernels"]} == {
        DECODE: ["8.0", "10.0", "12.0"], FLASH: ["8.0", "10.0", "12.0"]}
    assert f'"{FLASH}"' in (tmp_path / "generated" / "registry.cpp").read_text()
    assert '/*archs=*/"sm_80,sm_100,sm_120"' in (tmp_path / "generated" / "registry.cpp").read_text()
    objs = [f"obj/generated/kernels/{name}.o" for name in (FLASH, DECODE)]
    result = run(["make", *objs], tmp_path, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for obj in objs:
        elf = subprocess.run([cuobjdump(), "--list-elf", str(tmp_path / obj)], capture_output=True, text=True)
        assert elf.returncode == 0, elf.stderr
        targets = {t for t in ("sm_80", "sm_100", "sm_120") if f".{t}." in elf.stdout}
        assert targets == {"sm_80", "sm_100", "sm_120"}, elf.stdout
