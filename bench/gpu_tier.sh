#!/usr/bin/env bash
# The GPU tier in one call on a machine with a GPU: build (timed), rebuild after touching one
# kernel header (timed), fmha_v2's README problem, the whole pytest GPU tier, a SASS summary.
# Logs go to $OUT (default /tmp/fmha_gpu_tier); a short table is printed last.
#
#   bash bench/gpu_tier.sh [extra pytest args]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fmha_gpu_tier}
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} ENABLE_HMMA_FP32=${ENABLE_HMMA_FP32:-1} ENABLE_SM89_QMMA=${ENABLE_SM89_QMMA:-1}
export PYTHONUNBUFFERED=1 NO_COLOR=1
jobs=$(nproc)

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"

t0=$(date +%s.%N)
python3 setup.py | tee "$OUT/setup.log"
make -j"$jobs" >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
t1=$(date +%s.%N)
touch src/fmha/softmax/online_softmax.h
make -j"$jobs" >"$OUT/rebuild.log" 2>&1 || { tail -40 "$OUT/rebuild.log"; exit 1; }
t2=$(date +%s.%N)
rebuilt=$(grep -c 'generated/kernels/.*\.cu' "$OUT/rebuild.log" || true)

bin/fmha.exe -d 128 -b 4 -h 32 -s 1024 -min-s 1024 -fp16 -runs 10 -warm-up-runs 100 -causal-mask -v 0 \
    | tee "$OUT/readme_run.txt"
readme_rc=${PIPESTATUS[0]}

python3 -m pytest -q -p no:cacheprovider -n "$jobs" -m "not perf" --perf-csv "$OUT/perf.csv" "$@" \
    >"$OUT/pytest.log" 2>&1
pytest_rc=$?
tail -25 "$OUT/pytest.log"

# SASS: every kernel must use the tensor cores (flash: HMMA, ws: HGMMA); count local-memory
# traffic (LDL/STL).
if command -v cuobjdump >/dev/null; then
    # One object a process: the whole 200 MB binary in one cuobjdump took over 6 minutes.
    ls obj/generated/kernels/*.o | xargs -P "$jobs" -I{} sh -c 'cuobjdump -sass {} > {}.sass 2>/dev/null'
    cat obj/generated/kernels/*.o.sass >"$OUT/sass.txt" && rm -f obj/generated/kernels/*.o.sass
    python3 - "$OUT/sass.txt" <<'EOF' | tee "$OUT/sass_summary.txt"
import re, sys
kernels, cur = {}, None
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m:
        cur = m.group(1); kernels[cur] = {"HMMA": 0, "HGMMA": 0, "LDL": 0, "STL": 0}
    elif cur:
        for op in kernels[cur]:
            if re.search(rf"\b{op}\b", line):
                kernels[cur][op] += 1
flash = {k: v for k, v in kernels.items() if "flash_sm80" in k}
print(f"sass: {len(flash)} flash kernels, {sum(v['HMMA'] == 0 for v in flash.values())} without HMMA, "
      f"{sum(v['LDL'] + v['STL'] > 0 for v in flash.values())} with local memory (LDL/STL)")
ws = {k: v for k, v in kernels.items() if "_ZN4fmha2ws" in k}
print(f"sass: {len(ws)} ws kernels, {sum(v['HGMMA'] == 0 for v in ws.values())} without HGMMA, "
      f"{sum(v['LDL'] + v['STL'] > 0 for v in ws.values())} with local memory (LDL/STL)")
dec = {k: v for k, v in kernels.items() if "decode_mma_kernel" in k}
print(f"sass: {len(dec)} decode mma kernels, {sum(v['HMMA'] == 0 for v in dec.values())} without HMMA, "
      f"{sum(v['LDL'] + v['STL'] > 0 for v in dec.values())} with local memory (LDL/STL)")
warp = {k: v for k, v in kernels.items() if "decode_kernel" in k or "combine_kernel" in k}
print(f"sass: {len(warp)} decode warp/combine kernels, "
      f"{sum(v['LDL'] + v['STL'] > 0 for v in warp.values())} with local memory (LDL/STL)")
EOF
fi

printf '\n| step | result |\n|---|---|\n'
printf '| build (%s kernels, %s cores) | %.1f s |\n' "$(grep -o '[0-9]* kernels' "$OUT/setup.log" | awk '{n += $1} END {print n}')" "$jobs" "$(awk "BEGIN{print $t1 - $t0}")"
printf '| rebuild after touching online_softmax.h | %.1f s (%s kernel TUs) |\n' "$(awk "BEGIN{print $t2 - $t1}")" "$rebuilt"
printf '| README problem | exit %s |\n' "$readme_rc"
printf '| pytest GPU tier | exit %s: %s |\n' "$pytest_rc" "$(tail -1 "$OUT/pytest.log")"
exit $pytest_rc
