#!/usr/bin/env bash
# The README's build as a user runs it, measured: wall time, peak memory, binary size.
#
#   bash bench/build_report.sh MACHINE [OUT_DIR]     e.g. bash bench/build_report.sh "2-core VM"
#
# Runs `make clean`, then the README quick start's build line (`python3 setup.py && make -j`)
# under the environment's flags (the README's by default), and writes
# OUT_DIR/build_<cores>c.json (default bench/results/). Peak memory is the largest drop of
# MemAvailable below its value before the build, sampled every 0.2 s: what the build took
# from the machine, page cache it could drop excluded. bench/readme_tables.py puts the JSON
# files in the README.
set -euo pipefail
cd "$(dirname "$0")/.."
machine=${1:?usage: build_report.sh MACHINE [OUT_DIR]}
out_dir=${2:-bench/results}
: "${TORCH_CUDA_ARCH_LIST:=9.0}" "${ENABLE_HMMA_FP32:=1}" "${SCHEDULING_MODE:=1}"
export TORCH_CUDA_ARCH_LIST ENABLE_HMMA_FP32 SCHEDULING_MODE

avail_kib() { awk '/^MemAvailable:/ {print $2}' /proc/meminfo; }
make clean >/dev/null
before=$(avail_kib)
lowest=$before
start=$(date +%s.%N)
( python3 setup.py && make -j ) >"$out_dir/build.log" 2>&1 &
build=$!
while kill -0 "$build" 2>/dev/null; do
    now=$(avail_kib)
    (( now < lowest )) && lowest=$now
    sleep 0.2
done
wait "$build" || { tail -30 "$out_dir/build.log"; exit 1; }
end=$(date +%s.%N)
rm -f "$out_dir/build.log"

cores=$(nproc)
python3 - "$machine" "$cores" "$before" "$lowest" "$start" "$end" "$out_dir" <<'EOF'
import json, os, sys
machine, cores, before, lowest, start, end, out_dir = sys.argv[1:]
mem_kib = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
manifest = json.load(open("generated/manifest.json"))
flags = " ".join(f"{k}={os.environ[k]}" for k in ("TORCH_CUDA_ARCH_LIST", "ENABLE_HMMA_FP32", "SCHEDULING_MODE"))
report = {
    "machine": machine,
    "cores": int(cores),
    "mem_gib": mem_kib / 2**20,
    "command": f"{flags} python3 setup.py && make -j",
    "kernels": len(manifest["kernels"]),
    "wall_s": float(end) - float(start),
    "peak_mem_gib": (int(before) - int(lowest)) / 2**20,
    "exe_mib": os.path.getsize("bin/fmha.exe") / 2**20,
    # The kernels live in lib/libfmha.so since issue #30 (in bin/fmha.exe before).
    "lib_mib": os.path.getsize("lib/libfmha.so") / 2**20 if os.path.exists("lib/libfmha.so") else 0.0,
}
path = os.path.join(out_dir, f"build_{cores}c.json")
json.dump(report, open(path, "w"), indent=2, sort_keys=True)
print(path, json.dumps(report))
EOF
