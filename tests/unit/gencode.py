#!/usr/bin/env python3
"""Print the nvcc -gencode flags for $TORCH_CUDA_ARCH_LIST, parsed exactly as setup.py parses
it (generator/env.py; unset or empty -> its default, 8.0;9.0).

The Makefile compiles the unit tests with these when generated/ is missing; once setup.py
ran, it uses generated/makefile's SRC_GENCODE instead. A malformed list prints setup.py's
message and exits 2.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from generator.env import DEFAULT_ARCH_LIST, EnvError, parse_arch_list  # noqa: E402
from generator.render import gencode  # noqa: E402


def main() -> int:
    try:
        archs = parse_arch_list(os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip() or DEFAULT_ARCH_LIST)
    except EnvError as err:
        print(err, file=sys.stderr)
        return 2
    print(gencode(archs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
