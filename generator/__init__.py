"""The FMHA kernel generator: env flags -> KernelSpecs -> generated/ (see setup.py)."""

from .main import main

__all__ = ["main"]
