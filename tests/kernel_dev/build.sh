#!/bin/bash
# Builds the kernel-level test: tests/kernel_dev/build.sh [OUT_DIR] (default .devbuild/, git-ignored)
# ARCHS="80 90" selects the gencode targets (default 90); extra nvcc flags via NVCC_FLAGS.
# Registers and spills per kernel: python3 tests/kernel_dev/ptxas_summary.py OUT_DIR/ptxas.log
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/.devbuild}
mkdir -p "$out"
gencode=()
for a in ${ARCHS:-90}; do gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
if ! ${NVCC:-nvcc} -std=c++17 -O3 --expt-relaxed-constexpr -I"$root/src" "${gencode[@]}" -Xptxas -v ${NVCC_FLAGS:-} \
    "$root/tests/kernel_dev/kernel_dev.cu" -o "$out/kernel_dev" 2> "$out/ptxas.log"; then
    grep -v "^ptxas info" "$out/ptxas.log" >&2
    exit 1
fi
echo "built $out/kernel_dev (ptxas report: $out/ptxas.log)"
