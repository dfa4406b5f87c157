"""One line per flash_sm80 kernel from an `nvcc -Xptxas -v` log: tile, registers, spills.

Usage: python3 tests/kernel_dev/ptxas_summary.py .devbuild/ptxas.log
"""
import re
import sys

ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
TRAITS = re.compile(r"TraitsI(\w+?)Li(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELb(\d)ELi(\d+)EEELb(\d)")
SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"Used (\d+) registers")


def main(path):
    name, spills, rows = None, None, set()
    for line in open(path):
        if m := ENTRY.search(line):
            t = TRAITS.search(m.group(1))
            if t:
                elem = "bf16" if "bfloat16" in t.group(1) else "fp16"
                acc = "acc16" if t.group(8) == "1" else "acc32"
                mask = "causal" if t.group(10) == "1" else "padding"
                name = (f"{elem} {acc} d{t.group(2)}/{t.group(3)} {t.group(4)}x{t.group(5)} w{t.group(6)} "
                        f"stages={t.group(9) if t.group(9) != '0' else 'auto'} {mask} {m.group(2)}")
            else:
                name = None
        elif m := SPILLS.search(line):
            spills = m.groups()
        elif (m := REGS.search(line)) and name:
            rows.add(f"{name:60s} regs={m.group(1):>3s} stack={spills[0]:>3s} "
                     f"spill_st={spills[1]:>3s} spill_ld={spills[2]:>3s}")
            name = None
    print("\n".join(sorted(rows)))


if __name__ == "__main__":
    main(sys.argv[1])
