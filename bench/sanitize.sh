#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck over kernels of bin/fmha.exe, one small problem per
# kernel that exercises var-len lengths, GQA, s_q < s and the causal mask (and a padding-mask
# run), so every kernel path (tails, diagonal blocks, persistent tile hand-over; decode: row
# tiles, key splits and their combine, the persistent one-step kernel) runs under the tools. Needs a built bin/fmha.exe and
# compute-sanitizer; logs under $OUT.
#
#   bash bench/sanitize.sh [kernel glob, default *_ws_*]
#   SANITIZE_MASKS="causal padding window chunked"   the masks to run (default: causal padding)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/fmha_sanitize}
mkdir -p "$OUT"
glob=${1:-*_ws_*}
kernels=$(bin/fmha.exe -list-kernels | awk 'NR > 1 && NF > 3 {print $1}')
status=0
printf '| kernel | tool | mask | errors |\n|---|---|---|---|\n' >"$OUT/sanitize.md"
for k in $kernels; do
    [[ $k == $glob ]] || continue
    d=$(echo "$k" | sed -E 's/.*_d([0-9]+)_.*/\1/')
    dtype=(-fp16)
    [[ $k == *_bf16_* ]] && dtype=(-bf16)
    [[ $k == *_fp16_fp32_* ]] && dtype=(-fp16-fp32)
    [[ $k == *_e4m3_* ]] && dtype=(-e4m3 -bf16-output)
    for tool in memcheck racecheck; do
        for mask in ${SANITIZE_MASKS:-causal padding}; do
            args=(-kernel "$k" -d "$d" "${dtype[@]}" -b 3 -h 4 -gqa 2 -s 333 -min-s 1 -s-q 200 -separate-q-k-v
                  -runs 1 -warm-up-runs 1)
            if [[ $k == *_decode_* ]]; then  # query rows per KV head within the kernel's block_m
                rows=$(echo "$k" | sed -E 's/.*_d[0-9]+_([0-9]+)x[0-9]+_.*/\1/')
                case $rows in
                    1) heads=(-h 4 -s-q 1) ;;
                    4) heads=(-h 8 -gqa 4 -s-q 2) ;;
                    *) heads=(-h 8 -gqa 2 -s-q 5) ;;
                esac
                # causal: a long cache (key splits, the combine); padding on the warp path: a
                # 2-key cache, which runs the persistent one-step kernel
                s=3000
                if [[ $mask == padding && $k != *_16x64_* ]]; then
                    s=2
                    [[ $rows == 8 ]] && heads=(-h 8 -gqa 2 -s-q 2)  # s_q <= s
                fi
                args=(-kernel "$k" -d "$d" "${dtype[@]}" -b 3 "${heads[@]}" -s "$s" -min-s 1 -separate-q-k-v
                      -runs 1 -warm-up-runs 1)
            fi
            [[ $mask == causal ]] && args+=(-causal-mask)
            [[ $mask == window ]] && args+=(-sliding-window-size 100)   # both window edges, splits
            [[ $mask == chunked ]] && args+=(-chunked-attention-size 64)
            log="$OUT/${k}_${tool}_${mask}.log"
            compute-sanitizer --tool "$tool" --error-exitcode 9 bin/fmha.exe "${args[@]}" >"$log" 2>&1
            rc=$?
            errors=$(grep -oE 'ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: [0-9]+ hazards?' "$log" | tail -1)
            printf '| %s | %s | %s | rc %s, %s |\n' "$k" "$tool" "$mask" "$rc" "${errors:-no summary}" \
                | tee -a "$OUT/sanitize.md"
            [[ $rc == 0 ]] || status=1
        done
    done
done
exit $status
