# `pip install ./python` after `make lib`: copies ../lib/libfmha.so into the package, so the
# installed package carries its library (pyproject.toml has the rest).
import shutil
from pathlib import Path

from setuptools import setup

here = Path(__file__).resolve().parent
built = here.parent / "lib" / "libfmha.so"
if not built.is_file():
    raise SystemExit(f"{built} is missing: run `make lib` (after python3 setup.py) in {here.parent} first")
shutil.copy2(built, here / "fmha" / "libfmha.so")
setup()
