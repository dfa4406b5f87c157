#!/bin/bash
# Builds the ws family's kernel-level test: tests/kernel_dev/build_sm90.sh [OUT_DIR] (default
# .devbuild/sm90, git-ignored) for sm_90a (wgmma, setmaxnreg); extra nvcc flags via NVCC_FLAGS. The
# ptxas report (registers, spills, setmaxnreg warnings C7508) lands in OUT_DIR/ptxas.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/.devbuild/sm90}
mkdir -p "$out"
if ! ${NVCC:-nvcc} -std=c++17 -O3 --expt-relaxed-constexpr -I"$root/src" -gencode arch=compute_90a,code=sm_90a -Xptxas -v ${NVCC_FLAGS:-} \
    "$root/tests/kernel_dev/sm90_dev.cu" "$root/src/reference/reference.cu" -o "$out/sm90_dev" 2> "$out/ptxas.log"; then
    grep -v "^ptxas info" "$out/ptxas.log" >&2
    exit 1
fi
grep -iE "warning|C7508" "$out/ptxas.log" >&2 || true
echo "built $out/sm90_dev (ptxas report: $out/ptxas.log)"
