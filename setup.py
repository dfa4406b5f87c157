#!/usr/bin/env python3
"""Generate the FMHA kernels: python3 setup.py [-v] [--out DIR], then make -j.

Not setuptools: reads the environment flags of SPEC.md (TORCH_CUDA_ARCH_LIST,
ENABLE_HMMA_FP32, FMHA_FILTER, ...) and renders generated/.
"""

import sys

from generator import main

if __name__ == "__main__":
    sys.exit(main())
