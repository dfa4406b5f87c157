"""What bin/fmha.exe promises on its console and in its checks (SPEC.md "Console output"): the
regexes of its lines and the tolerances it applies by default.

The one copy on the Python side: the GPU tier, bench/run.py and the CPU tests read it. The
tolerances are C++ constants too; tests/test_contract.py checks that both sides agree (the
source, and what a built fmha.exe -help prints), and the -save-tensors re-check compares each
run's resolved epsilon with DEFAULT_EPSILON.
"""

import re


def line_re(pattern: str) -> re.Pattern:
    """A regex for one whole line, searchable in multi-line output."""
    return re.compile(rf"^{pattern}$", re.M)


# --- the four `-v 0` lines ------------------------------------------------------------------

FIRST_LINE_RE = line_re(
    r"v1=(?P<v1>\d+) il=(?P<il>\d+) s_q=(?P<s_q>\d+), s=(?P<s>\d+) b=(?P<b>\d+)"
    r" h=(?P<h>\d+)/(?P<h_kv>\d+) d=(?P<d>\d+)/(?P<dv>\d+)"
    r" dtype=(?P<dtype>\w+), output_dtype=(?P<output_dtype>\w+),"
    r" flash_attn=(?P<flash_attn>true|false), warp_spec=(?P<warp_spec>true|false),"
    r" mask=(?P<mask>\w+), alibi=(?P<alibi>true|false), attn=(?P<attn>\w+),"
    r" qkv_layout=(?P<qkv_layout>\w+), wm=(?P<wm>\d+) wn=(?P<wn>\d+)"
)
KERNEL_RE = line_re(r"Kernel\.{8}: (?P<kernel>\S+)")
CHECKS_RE = line_re(r"Checks\.{8}: (?P<checks>SUCCESS|FAILED|DISABLED)")
ELAPSED_RE = line_re(
    r"Elapsed \.{6}: (?P<us>\d+\.\d{6}) us \((?:(?P<speedup>\d+\.\d{2})x|n/a)\),"
    r" (?P<tflops>\d+\.\d{2}) Tflop/s, (?P<gbs>\d+\.\d{2}) GB/s"
)
# -v 0 prints exactly these, in this order.
COMPACT_LINES = (FIRST_LINE_RE, KERNEL_RE, CHECKS_RE, ELAPSED_RE)
# -v 1 adds, after the Kernel line, the kernel that ran: the row's own or one of its siblings
# (KernelMeta::siblings, the manifest's `siblings`).
TILE_RAN_RE = line_re(r"Tile ran\.{6}: (?P<tile>\S+)")


def parse_output(stdout: str) -> dict:
    """The fields of the four compact lines, wherever they are in `stdout` (a failed check
    prints mismatches after them). Raises AssertionError naming the missing line."""
    fields = {}
    for regex in COMPACT_LINES:
        match = regex.search(stdout)
        assert match, f"no line matching /{regex.pattern}/ in:\n{stdout}"
        fields.update({k: v for k, v in match.groupdict().items() if v is not None})
    return fields


# --- -list-kernels ----------------------------------------------------------------------------

# A row starts with the kernel's name; the header names the columns; the last line counts them.
LIST_ROW_RE = re.compile(r"^(fmha_v2_\w+)\s", re.M)
LIST_COLUMNS = ("name", "family", "sm", "dtype", "acc", "d", "dv", "tile", "warps", "masks",
                "warp_spec", "tma", "sched", "max_s_q", "min_s_kv", "archs", "siblings")


def parse_kernel_table(stdout: str) -> list[dict]:
    """-list-kernels as one dict a row, keyed by LIST_COLUMNS (values as printed)."""
    lines = stdout.splitlines()
    assert lines and tuple(lines[0].split()) == LIST_COLUMNS, f"unexpected -list-kernels header:\n{stdout}"
    assert re.fullmatch(r"\d+ kernels", lines[-1]), f"unexpected -list-kernels footer:\n{stdout}"
    rows = [dict(zip(LIST_COLUMNS, line.split())) for line in lines[1:-1]]
    assert all(len(row) == len(LIST_COLUMNS) for row in rows), stdout
    return rows


# --- default tolerances ---------------------------------------------------------------------

# -epsilon's default per input dtype (src/cli.cpp kDefaultEpsilonFp16 / kDefaultEpsilonBf16,
# floats there: compare with float32 rounding).
DEFAULT_EPSILON = {"fp16": 0.015, "bf16": 0.025, "e4m3": 0.15}
# How far a row's log-sum-exp may be from the reference's, absolute (src/check.h kLseTolerance).
LSE_TOLERANCE = 1e-3
# -help's sentence that states DEFAULT_EPSILON.
HELP_EPSILON_RE = re.compile(r"\(default fp16 (?P<fp16>[0-9.]+), bf16 (?P<bf16>[0-9.]+), e4m3 (?P<e4m3>[0-9.]+)\)")
