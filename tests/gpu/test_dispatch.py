"""Which kernel runs without -kernel (the first registry row that fits and loads), the compact
output's exact format, and exit code 1 on a failed check."""

import pytest

from generator.spec import FAMILIES

from .cases import VARIANT_FLAGS
from .contract import COMPACT_LINES, TILE_RAN_RE
from .driver import describe, parse_output, registry_names, run_fmha
from .manifest import dtype_flags, is_decode, kernel_or_skip, kernels_or_skip, pick_kernel, require_arch, runs_on, \
    warp_spec

KERNELS = kernels_or_skip()
ONE_RUN = ["-v", "0", "-runs", "1", "-warm-up-runs", "0"]


def is_ws(kernel: dict) -> bool:
    return FAMILIES[kernel["family"]].warp_specialized


def run_checked(exe, args: list[str], kernel: dict | None = None) -> dict:
    """The fields of a run that must exit 0, pass its checks and (given one) run `kernel`."""
    proc = run_fmha(exe, args)
    assert proc.returncode == 0, describe(proc)
    fields = parse_output(proc.stdout)
    assert fields["checks"] == "SUCCESS", describe(proc)
    assert kernel is None or fields["kernel"] == kernel["name"], describe(proc)
    return fields


def test_binary_matches_manifest(exe):
    # Needs no GPU: -list-kernels prints the registry. The check itself is in the fixture.
    assert registry_names(exe) == {k["name"] for k in KERNELS}


@pytest.mark.gpu
def test_compact_output_format(exe, gpu_sm):
    kernel = kernel_or_skip(KERNELS, dtype="fp16", acc="fp16")
    require_arch(kernel, gpu_sm)
    d, wm, wn = kernel["d"], kernel["warps_m"], kernel["warps_n"]
    proc = run_fmha(exe, ["-d", str(d), "-b", "2", "-h", "4", "-s", "128", "-fp16", "-causal-mask",
                          "-kernel", kernel["name"], "-v", "0", "-runs", "2", "-warm-up-runs", "1"])
    assert proc.returncode == 0, describe(proc)
    lines = proc.stdout.splitlines()
    assert len(lines) == 4, describe(proc)
    assert lines[0] == (
        f"v1=0 il=0 s_q=128, s=128 b=2 h=4/4 d={d}/{d} dtype=FP16, output_dtype=FP16, flash_attn=true,"
        f" warp_spec={warp_spec(kernel)}, mask=causal, alibi=false, attn=mha, qkv_layout=packed_qkv, wm={wm} wn={wn}"
    )
    for regex, line in zip(COMPACT_LINES[1:], lines[1:]):
        assert regex.fullmatch(line), f"{line!r} does not match /{regex.pattern}/"
    assert lines[1] == f"Kernel........: {kernel['name']}"
    assert lines[2] == "Checks........: SUCCESS"


@pytest.mark.gpu
def test_skip_checks_output(exe, gpu_sm):
    """-skip-checks: Checks DISABLED, and no speedup (there is no reference time)."""
    kernel = kernel_or_skip(KERNELS, dtype="fp16")
    require_arch(kernel, gpu_sm)
    proc = run_fmha(exe, ["-d", str(kernel["d"]), "-b", "2", "-h", "4", "-s", "256", *dtype_flags(kernel),
                          "-kernel", kernel["name"], "-skip-checks", "-v", "0"])
    assert proc.returncode == 0, describe(proc)
    fields = parse_output(proc.stdout)
    assert fields["checks"] == "DISABLED"
    assert "(n/a)" in proc.stdout and "speedup" not in fields


@pytest.mark.gpu
def test_force_non_ws(exe, gpu_sm):
    """Without -kernel the first registry row that fits and loads runs: the ws row of its
    problem on Hopper (a non-Hopper GPU has no sm_90a image and falls through to the next
    row). -force-non-warp-specialization skips the ws row on any GPU."""
    ws = sorted((k for k in KERNELS if is_ws(k)), key=lambda k: (k["d"], k["name"]))
    if not ws:
        pytest.skip("no warp-specialised kernel in this build (TORCH_CUDA_ARCH_LIST without 9.0, or FMHA_FILTER)")
    kernel = ws[0]

    def fits(k: dict) -> bool:
        return all(k[f] == kernel[f] for f in ("dtype", "acc", "d", "dv")) and "causal" in k["masks"]

    # The manifest lists the kernels in registry order: the first fit is what dispatch picks
    # (decode rows serve s_q <= 16 only, not this problem's 257).
    others = [k for k in KERNELS if fits(k) and not is_ws(k) and not is_decode(k)]
    if not others:
        pytest.skip(f"no non-warp-specialised kernel in this build fits {kernel['name']}'s problem")
    flash = others[0]
    args = ["-d", str(kernel["d"]), "-dv", str(kernel["dv"]), *dtype_flags(kernel), "-b", "2", "-h", "4",
            "-s", "257", "-causal-mask", *ONE_RUN]
    for extra, expected in (([], kernel if runs_on(kernel, gpu_sm) else flash),
                            (["-force-non-warp-specialization"], flash)):
        fields = run_checked(exe, [*args, *extra], expected)
        got = (fields["warp_spec"], int(fields["wm"]), int(fields["wn"]))
        assert got == (warp_spec(expected), expected["warps_m"], expected["warps_n"]), fields
    assert warp_spec(flash) == "false"


@pytest.mark.gpu
def test_fp16_takes_ws_fp32_acc(exe, gpu_sm):
    """-fp16 asks for at least fp16 accumulation: on Hopper the ws fp16 kernel (fp32
    accumulation, first in the registry) serves it; without warp specialisation the flash
    family's fp16-accumulating kernel does."""
    ws = pick_kernel(KERNELS, dtype="fp16", acc="fp32", family="ws")
    if ws is None or not runs_on(ws, gpu_sm):
        pytest.skip("no ws fp16 kernel for this GPU in this build")
    flash = next((k for k in KERNELS if k["family"] == "flash" and k["dtype"] == "fp16" and k["acc"] == "fp16"
                  and k["d"] == ws["d"] and k["dv"] == ws["dv"]), None)
    args = ["-d", str(ws["d"]), "-fp16", "-b", "2", "-h", "4", "-s", "300", "-causal-mask", *ONE_RUN]
    for extra, expected in (([], ws), (["-force-non-warp-specialization"], flash)):
        if expected is not None:
            run_checked(exe, [*args, *extra], expected)


@pytest.mark.gpu
def test_use_tma(exe, gpu_sm):
    """-use-tma keeps only the families that load through TMA (ws): on Hopper it runs one;
    on a GPU where no such kernel loads it exits 2 with the reason."""
    ws = pick_kernel(KERNELS, dtype="bf16", family="ws")
    if ws is None:
        pytest.skip("no TMA kernel in this build")
    args = ["-d", str(ws["d"]), "-bf16", "-b", "2", "-h", "4", "-s", "200", "-use-tma", *ONE_RUN]
    if runs_on(ws, gpu_sm):
        run_checked(exe, args, ws)
    else:
        proc = run_fmha(exe, args)
        assert proc.returncode == 2 and "no kernel fits" in proc.stderr, describe(proc)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["softcap", "alibi", "bias", "sinks", "softmax_stats", "paged_kv"])
def test_variants_stay_on_ws(name, exe, gpu_sm):
    """Every variant of the ws family (generator/spec.py) keeps a Hopper problem on it: dispatch
    takes the first row that has the variant, and the ws row comes first."""
    variant = VARIANT_FLAGS[name] + (" 30" if name == "softcap" else "")
    having = [k for k in KERNELS if k["family"] == "ws" and k["dtype"] == "bf16" and name in k["variants"]]
    ws = min(having, key=lambda k: (k["d"], k["name"]), default=None)
    if ws is None or not runs_on(ws, gpu_sm):
        pytest.skip(f"no ws kernel with {name} for this GPU in this build")
    fields = run_checked(exe, ["-d", str(ws["d"]), "-bf16", "-b", "2", "-h", "6", "-s", "333", "-causal-mask",
                               *variant.split(), *ONE_RUN], ws)
    assert fields["alibi"] == ("true" if variant == "-alibi" else "false"), fields


@pytest.mark.gpu
def test_decode_dispatch(exe, gpu_sm):
    """Without -kernel: s_q <= 16 takes a decode row. A cache of at least a row's min_s_kv
    keys takes that row (the mma path); a shorter one the warp-path row with the fewest rows
    per warp that holds h / h_kv * s_q (here 32 / 8 * 1 = 4); s_q = 17 goes to a prefill family."""
    dec = [k for k in KERNELS if is_decode(k) and k["dtype"] == "bf16" and k["d"] == 128 and not k.get("kv_dtype")]
    long_rows = [k for k in dec if k["min_s_kv"]]
    short_rows = [k for k in dec if not k["min_s_kv"] and (k["max_rows"] == 0 or k["max_rows"] >= 4)]
    if not long_rows or not short_rows:
        pytest.skip("no bf16 d=128 decode kernels of both paths in this build")
    require_arch(dec[0], gpu_sm)
    base = ["-d", "128", "-bf16", "-b", "2", "-h", "32", "-gqa", "8", "-separate-q-k-v", *ONE_RUN]
    long_s = max(k["min_s_kv"] for k in long_rows)
    for s, expected in ((long_s, long_rows[0]),
                        (long_s - 1, min(short_rows, key=lambda k: k["max_rows"] or 1 << 30))):
        run_checked(exe, [*base, "-s", str(s), "-s-q", "1"], expected)
    if not any(not is_decode(k) and k["dtype"] == "bf16" and k["d"] == 128 for k in KERNELS):
        return  # no prefill kernel for s_q = 17 in this build
    assert "_decode_" not in run_checked(exe, [*base, "-s", "2000", "-s-q", "17"])["kernel"]


@pytest.mark.gpu
def test_kv_e4m3_dispatch(exe, gpu_sm):
    """-kv-e4m3 takes the e4m3-cache row at every cache length (it has no warp path), and a
    16-bit cache never takes it."""
    rows = [k for k in KERNELS if k.get("kv_dtype") == "e4m3" and k["dtype"] == "bf16" and k["d"] == 128]
    if not rows:
        pytest.skip("no bf16 d=128 e4m3-cache decode kernel in this build")
    require_arch(rows[0], gpu_sm)
    base = ["-d", "128", "-bf16", "-b", "2", "-h", "32", "-gqa", "8", "-separate-q-k-v", "-s-q", "1", *ONE_RUN]
    for s in ("1", "63", "4096"):
        run_checked(exe, [*base, "-kv-e4m3", "-s", s], rows[0])
        assert "_kve4m3_" not in run_checked(exe, [*base, "-s", s])["kernel"]


@pytest.mark.gpu
def test_failed_check_exits_1(exe, gpu_sm):
    # fp16 output can never be within 1e-9 of an fp32 reference on random data.
    kernel = kernel_or_skip(KERNELS, dtype="fp16", acc="fp16")
    require_arch(kernel, gpu_sm)
    proc = run_fmha(exe, ["-d", str(kernel["d"]), "-b", "2", "-h", "4", "-s", "128", "-fp16",
                          "-kernel", kernel["name"], "-epsilon", "1e-9", "-v", "0"])
    assert proc.returncode == 1, describe(proc)
    assert parse_output(proc.stdout)["checks"] == "FAILED", describe(proc)


@pytest.mark.gpu
def test_verbose_names_the_tile_that_ran(exe, gpu_sm):
    """A decode row of several KV heads a CTA names its one-head sibling first; -v 1 says it
    ran where the problem's one-head units fit a wave (b = 1, 8 KV heads: 8 units)."""
    rows = [k for k in KERNELS if k["family"] == "decode" and k.get("siblings") and k["dtype"] == "bf16" and
            runs_on(k, gpu_sm)]
    if not rows:
        pytest.skip("no decode row with siblings in this build for this GPU")
    kernel = min(rows, key=lambda k: k["d"])
    proc = run_fmha(exe, ["-d", str(kernel["d"]), "-b", "1", "-h", "32", "-gqa", "8", "-s-q", "1", "-s", "4096",
                          "-separate-q-k-v", "-bf16", "-kernel", kernel["name"], "-v", "1", *ONE_RUN[2:]])
    assert proc.returncode == 0, describe(proc)
    match = TILE_RAN_RE.search(proc.stdout)
    assert match and match["tile"] == kernel["siblings"][0], describe(proc)


@pytest.mark.gpu
@pytest.mark.parametrize("args, short", [(["-causal-mask", "-s", "1000"], True), (["-causal-mask", "-s", "1025"], False),
                                         (["-s", "1000"], False)])
def test_ws_short_sibling_runs_for_short_causal_problems(exe, gpu_sm, args, short):
    """A 192-row ws row runs its 128-row sibling (Short) for causal problems of at most 1024
    keys (its manifest's short_max_keys), its own tile otherwise; -v 1 names the tile, and the
    checks pass either way."""
    rows = [k for k in KERNELS if k["family"] == "ws" and k.get("siblings") and k["block_m"] == 192 and
            runs_on(k, gpu_sm)]
    if not rows:
        pytest.skip("no 192-row ws row in this build for this GPU")
    kernel = min(rows, key=lambda k: (k["d"], k["dtype"]))
    assert kernel["short_max_keys"] == 1024, kernel["name"]
    flag = "-bf16" if kernel["dtype"] == "bf16" else "-fp16-fp32"
    proc = run_fmha(exe, ["-d", str(kernel["d"]), "-b", "2", "-h", "4", *args, flag, "-kernel", kernel["name"],
                          "-v", "1", *ONE_RUN[2:]])
    assert proc.returncode == 0, describe(proc)
    match = TILE_RAN_RE.search(proc.stdout)
    assert match and match["tile"] == (kernel["siblings"][0] if short else kernel["name"]), describe(proc)


# The problems of the e4m3 sibling test: its -s relative to the row's short_max_keys (T).
E4M3_SHORT_CASES = {
    "under": (lambda t: ["-s", str(t - 24)], True, False),
    "at-causal": (lambda t: ["-causal-mask", "-s", str(t)], True, False),
    "past": (lambda t: ["-s", str(t + 1)], False, False),
    "long-causal": (lambda t: ["-causal-mask", "-s", "1500"], False, False),
    "softcap": (lambda t: ["-s", "1500", "-softcapping-scale-bmm1", "2"], True, False),
    "paged": (lambda t: ["-s", "1500", "-paged-kv", "-tokens-per-block", "64"], True, True),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(E4M3_SHORT_CASES))
@pytest.mark.parametrize("lean", [True, False], ids=["lean", "wide"])
def test_ws_e4m3_wide_tile_runs_its_sibling_for_short_problems(exe, gpu_sm, case, lean):
    """An e4m3 ws tile on more keys than short problems reward (a 128-key block with dv > 128 and a
    24-register producer, "lean", or a block past 128 keys, "wide") runs its sibling for every
    problem of at most its manifest's short_max_keys keys (384 lean, 1024 wide) and for
    softcapping, which its kernel lacks; the lean one also for a paged KV cache. Its own tile
    otherwise. -v 1 names the tile, and the checks pass either way."""
    rows = [k for k in KERNELS if k["family"] == "ws" and k["dtype"] == "e4m3" and k.get("siblings") and
            k["block_m"] == 128 and (k["block_n"] == 128) == lean and runs_on(k, gpu_sm)]
    if not rows:
        pytest.skip(f"no {'lean' if lean else 'wide'} e4m3 ws row in this build for this GPU")
    kernel = rows[0]
    make_args, short, lean_only = E4M3_SHORT_CASES[case]
    assert kernel["short_max_keys"] > 0, kernel["name"]
    proc = run_fmha(exe, ["-d", str(kernel["d"]), "-dv", str(kernel["dv"]), "-b", "2", "-h", "2",
                          *make_args(kernel["short_max_keys"]), *dtype_flags(kernel), "-kernel", kernel["name"],
                          "-v", "1", *ONE_RUN[2:]])
    assert proc.returncode == 0, describe(proc)
    match = TILE_RAN_RE.search(proc.stdout)
    runs_sibling = short and (lean or not lean_only)
    assert match and match["tile"] == (kernel["siblings"][0] if runs_sibling else kernel["name"]), describe(proc)


# Problems that leave an e4m3 row of the padding mask alone for the next row of its (d, dv).
E4M3_PADDING_ROW_CASES = {
    "padding": ([], True),
    "padding-short": (["-s", "300"], True),
    "causal": (["-causal-mask"], False),
    "window": (["-sliding-window-size", "256"], False),
    "softcap": (["-softcapping-scale-bmm1", "2"], False),  # the 192-row tile has no softcapping
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(E4M3_PADDING_ROW_CASES))
def test_ws_e4m3_padding_row_comes_first(exe, gpu_sm, case):
    """d = 64 e4m3 has a registry row for the padding mask alone (192 x 128 over three consumer
    warpgroups, generator/families/ws.py FP8_PADDING_TILE) ahead of the row for every mask:
    without -kernel a padding problem runs the first, the rest the second (or its sibling), and
    the checks pass."""
    rows = [k for k in KERNELS if k["family"] == "ws" and k["dtype"] == "e4m3" and runs_on(k, gpu_sm)]
    first = next((k for k in rows if k["masks"] == ["padding"]), None)
    if first is None:
        pytest.skip("no e4m3 ws row of the padding mask alone in this build for this GPU")
    rest = [k for k in rows if (k["d"], k["dv"]) == (first["d"], first["dv"]) and k is not first]
    assert rest and rows.index(rest[0]) > rows.index(first), "the padding row must come first"
    args, takes_first = E4M3_PADDING_ROW_CASES[case]
    proc = run_fmha(exe, ["-d", str(first["d"]), "-b", "2", "-h", "2", "-s", "1500", *args, *dtype_flags(first),
                          "-v", "1", *ONE_RUN[2:]])
    assert proc.returncode == 0, describe(proc)
    fields = parse_output(proc.stdout)
    assert fields["checks"] == "SUCCESS", describe(proc)
    assert fields["kernel"] == (first if takes_first else rest[0])["name"], describe(proc)
