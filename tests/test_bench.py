"""bench/: suite definitions, FLOP and byte counts, CSV/markdown writers, plots, the runner with
fake timers. Pure Python, no GPU, no torch."""

import io
import math
import tarfile
from itertools import product
from types import SimpleNamespace

import pytest

from bench import report, run, timing
from bench.suites import ALL, DTYPES, SUITES, Problem, mha, only, select

NAN = float("nan")


# ---------------------------------------------------------------------------------------------
# Suites

def test_suite_sizes():
    assert {name: len(s.problems) for name, s in SUITES.items()} == {
        "readme": 1, "fa3": 36, "seed": 6, "decode": 32, "variants": 14, "heads": 12, "grid": 48}


def test_variants_pair_each_window_and_cap_with_the_dense_problem():
    problems = SUITES["variants"].problems
    windows = [p for p in problems if p.window]
    assert sorted((p.s, p.window) for p in windows) == sorted(product((8192, 32768), (1024, 4096)))
    for p in windows:  # the dense causal problem of the same size is in the suite
        assert Problem(p.b, p.h, p.h_kv, p.s_q, p.s, p.d, True) in problems
        assert p.fmha_args()[-2:] == ["-sliding-window-size", str(p.window)]
    capped = [p for p in problems if p.softcap]
    assert capped and all(Problem(p.b, p.h, p.h_kv, p.s_q, p.s, p.d, p.causal) in problems or p.causal
                          for p in capped)
    paged = [p for p in problems if p.paged]
    assert sorted(p.paged for p in paged) == [16, 128]
    for p in paged:  # the dense problem of the same size is in the suite; paged is a layout of its own
        assert Problem(p.b, p.h, p.h_kv, p.s_q, p.s, p.d, p.causal) in problems
        assert p.fmha_args()[-3:] == ["-paged-kv", "-tokens-per-block", str(p.paged)]
    others = windows + capped + paged
    assert all(p.variant for p in others) and not any(p.variant for p in problems if p not in others)


def test_bias_and_custom_mask_rows_are_measured_by_sdpa_and_pair_with_dense():
    problems = SUITES["variants"].problems
    masked = [p for p in problems if p.bias or p.custom]
    assert sorted((p.bias, p.custom) for p in masked) == [(False, True), (True, False)]
    for p in masked:
        assert not p.variant  # SDPA takes them as an attn_mask
        assert Problem(p.b, p.h, p.h_kv, p.s_q, p.s, p.d, False) in problems
        assert ("-attention-bias" in p.fmha_args()) == p.bias and ("-custom-mask" in p.fmha_args()) == p.custom
    dense = Problem(2, 16, 16, 4096, 4096, 128, False)
    assert Problem(2, 16, 16, 4096, 4096, 128, False, custom=True).flop() == dense.flop() / 2
    with pytest.raises(ValueError, match="non-causal"):
        Problem(2, 16, 16, 4096, 4096, 128, True, bias=True)
    # the new columns round-trip through a CSV row
    p = Problem(2, 16, 16, 4096, 4096, 128, False, bias=True)
    row = {f: str(getattr(p, f)) for f in ("b", "h", "h_kv", "s_q", "s", "d", "causal", "bias", "custom", "paged")}
    assert Problem.from_row(row) == p


def test_paged_decode_rows_pair_with_dense():
    problems = SUITES["decode"].problems
    paged = [p for p in problems if p.paged]
    assert len(paged) == 3 and all(Problem(p.b, p.h, p.h_kv, p.s_q, p.s, p.d, False) in problems for p in paged)
    assert paged[0].fmha_args()[-5:] == ["-paged-kv", "-tokens-per-block", "16", "-s-q", "1"]


def test_window_pairs_count_min_of_position_and_window():
    p = Problem(1, 1, 1, 8, 8, 64, True, window=3)
    assert p.pairs() == 1 + 2 + 3 * 6  # positions 0, 1, then 3 keys each
    assert Problem(1, 1, 1, 8, 8, 64, True, window=8).pairs() == Problem(1, 1, 1, 8, 8, 64, True).pairs()
    with pytest.raises(ValueError, match="sliding window"):
        Problem(1, 1, 1, 8, 8, 64, False, window=3)
    # a CSV row with the variant columns round-trips; one without them reads as no variant
    row = {**{f: str(getattr(p, f)) for f in ("b", "h", "h_kv", "s_q", "s", "d", "causal")},
           "window": "3", "softcap": "0.0"}
    assert Problem.from_row(row) == p
    del row["window"], row["softcap"]
    assert Problem.from_row(row) == Problem(1, 1, 1, 8, 8, 64, True)


def test_fa3_is_16k_tokens_and_hidden_2048():
    fa3 = SUITES["fa3"].problems
    assert all(p.b * p.s == 16384 and p.h * p.d == 2048 and p.s_q == p.s for p in fa3)
    assert {(p.d, p.causal, p.s) for p in fa3} == set(product(
        (64, 128, 256), (False, True), (512, 1024, 2048, 4096, 8192, 16384)))


def test_seed_is_bf16_whatever_dtype_is_asked():
    seed = SUITES["seed"]
    assert seed.dtype == "bf16"
    assert sorted((p.s, p.causal) for p in seed.problems) == sorted(product((2048, 4096, 8192), (False, True)))
    assert {(p.b, p.h, p.h_kv, p.d) for p in seed.problems} == {(1, 12, 12, 128)}
    assert run.plan([seed], ["fp16", "fp16-fp32"]) == [(seed, "bf16")]


def test_grid_is_2x2x3x2_per_mask():
    grid = SUITES["grid"].problems
    for causal in (False, True):
        cells = [(p.b, p.h, p.s, p.d) for p in grid if p.causal == causal]
        assert len(cells) == 2 * 2 * 3 * 2 == 24
        assert set(cells) == set(product((8, 16), (8, 16), (256, 512, 1024), (64, 128)))
    assert all(p.h_kv == p.h and p.s_q == p.s for p in grid)


def test_decode_is_single_query_against_short_and_long_kv():
    decode = SUITES["decode"]
    assert decode.metric == "gbs" and decode.dtype is None
    assert all(p.s_q == 1 and not p.causal for p in decode.problems)
    short = {(p.h, p.d) for p in decode.problems if (p.b, p.s) == (30720, 2)}
    assert short == set(product((16, 32), (128, 256)))  # ANCHORS.md's tiny-KV rows
    assert Problem(64, 32, 8, 1, 16384, 128, False) in decode.problems  # its long GQA row


def test_select_all_and_plan():
    assert select([ALL]) == list(SUITES.values())
    assert [s.name for s in select(["fa3", ALL])] == ["fa3", *(n for n in SUITES if n != "fa3")]
    fa3, seed = SUITES["fa3"], SUITES["seed"]
    assert run.plan([fa3, seed], ["fp16", "bf16"]) == [(fa3, "fp16"), (fa3, "bf16"), (seed, "bf16")]


def test_only_cuts_each_suite_to_the_labels_a_glob_matches():
    decode, readme = SUITES["decode"], SUITES["readme"]
    assert only([decode, readme], []) == [decode, readme]  # no glob: every problem
    [cut] = only([decode, readme], ["b=64 *d=64", "b=8 h=32/8 s=1/4096 d=128"])
    assert cut.name == "decode-part" and cut.metric == "gbs" and cut.dtype is None
    assert [p.label() for p in cut.problems] == [
        "b=8 h=32/8 s=1/4096 d=128", "b=64 h=32/8 s=1/4096 d=64", "b=64 h=32/8 s=1/16384 d=64",
        "b=64 h=32/8 s=1/65536 d=64"]  # the suite's order; readme matched nothing and is dropped
    assert "'b=64 *d=64'" in cut.about and cut.about.endswith(decode.about)
    assert only([decode], ["B=64 *"]) == []  # case-sensitive, as the labels are written
    assert SUITES["decode"] is decode and len(decode.problems) == 32  # the suite itself is untouched


def test_only_flag_lists_the_cut_and_rejects_a_glob_that_matches_nothing(capsys):
    assert run.main(["--suite", "decode", "--only", "b=64 *paged=16", "--list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("decode-part (fp16, 1 problem):") and "-tokens-per-block 16" in out
    with pytest.raises(SystemExit) as exit_info:
        run.main(["--suite", "decode", "--only", "b=7 *", "--list"])
    assert exit_info.value.code == 2
    assert "no problem of decode matches" in capsys.readouterr().err


def test_help_lists_every_suite():
    parser, _ = run.parse_args(["--list"])
    text = parser.format_help()
    for name in (*SUITES, ALL, "--tar", "--out", "--time-budget"):
        assert name in text


def test_list_prints_problems_without_a_gpu(capsys):
    assert run.main(["--suite", "seed", "--list"]) == 0
    out = capsys.readouterr().out
    assert "seed (bf16, 6 problems)" in out
    assert "fmha.exe -b 1 -h 12 -d 128 -s 8192 -causal-mask -bf16" in out


def test_problems_reject_what_sdpa_cannot_compare():
    with pytest.raises(ValueError, match="s_q == s"):
        Problem(1, 8, 8, 1, 64, 64, True)  # SDPA's causal is top-left aligned, ours bottom-right
    with pytest.raises(ValueError, match="multiple"):
        Problem(1, 8, 3, 1, 64, 64, False)


def test_fmha_args():
    assert mha(4, 32, 1024, 128, True).fmha_args() == "-b 4 -h 32 -d 128 -s 1024 -causal-mask".split()
    assert Problem(64, 32, 8, 1, 16384, 128, False).fmha_args() == \
        "-b 64 -h 32 -d 128 -s 16384 -gqa 8 -s-q 1 -separate-q-k-v".split()


# ---------------------------------------------------------------------------------------------
# FLOP and bytes, by hand

def test_flop_non_causal():
    p = mha(2, 4, 8, 16, False)  # 8·8 = 64 pairs per (batch, head), 2·(16+16) FLOP each
    assert p.flop() == 2 * 4 * 64 * 64 == 32768


def test_flop_causal_keeps_the_diagonal():
    p = mha(2, 4, 8, 16, True)  # rows keep 1..8 keys: 36 pairs
    assert p.pairs() == 36
    assert p.flop() == 2 * 4 * 36 * 64 == 18432


def test_flop_matches_what_fmha_exe_reports():
    # bench/results/readme_nvidia-h200_fp16.csv: 149.694395 us, fmha.exe printed 229.76 Tflop/s
    p = SUITES["readme"].problems[0]
    assert p.flop() == 4 * 4 * 32 * 128 * (1024 * 1025 / 2) == 34_393_292_800
    assert p.flop() / 149.694395 / 1e6 == pytest.approx(229.76, abs=0.005)


def test_bytes_non_causal_and_decode():
    # Q and O: 2·b·h·s_q·d elements; K and V: 2·b·h_kv·s·d; 2 bytes each
    assert mha(2, 4, 8, 16, False).bytes(2) == 2 * (2 * 2 * 4 * 8 * 16 + 2 * 2 * 4 * 8 * 16) == 8192
    assert mha(2, 4, 8, 16, True).bytes(2) == 8192  # the mask moves no fewer bytes
    gqa = Problem(64, 32, 8, 1, 16384, 128, False)  # ANCHORS.md: 4.3 GB
    assert gqa.bytes(DTYPES["bf16"].bytes) == 2 * (2 * 64 * 32 * 128 + 2 * 64 * 8 * 16384 * 128) == 4_296_015_872
    tiny = Problem(30720, 16, 16, 1, 2, 128, False)  # ANCHORS.md: 755 MB
    assert tiny.bytes(2) == 754_974_720


# ---------------------------------------------------------------------------------------------
# Writers

META = {"suite": "fa3", "about": "synthetic", "dtype": "fp16", "metric": "tflops", "gpu": "NVIDIA H200",
        "driver": "580.159.04", "torch": "2.11.0", "cuda": "13.0", "cudnn": "9.19.0",
        "clocks_start": "SM 345 MHz, memory 3201 MHz, max SM 1980 MHz",
        "clocks_end": "SM 1980 MHz, memory 3201 MHz, max SM 1980 MHz",
        "sdpa": "median of 10", "ours": "fmha.exe -runs 20"}


def synthetic_rows():
    """ours at 300, flash at 270 TFLOP/s, cuDNN at 400, efficient refused on causal rows."""
    rows = []
    for p in SUITES["fa3"].problems:
        us = {who: p.flop() / rate / 1e6 for who, rate in (("ours", 300), ("flash", 270), ("cudnn", 400))}
        if not p.causal:
            us["efficient"] = p.flop() / 200 / 1e6
        notes = ["", "efficient: refused"] if p.causal else []
        rows.append(report.result_row(p, "fp16", us, kernel="k", notes=notes))
    return rows


def test_result_row_derives_rates_and_keeps_nan():
    p = mha(2, 4, 8, 16, False)
    row = report.result_row(p, "fp16", {"ours": 2.0, "flash": 0.0}, kernel="k", notes=["", "a", "b"])
    assert row["ours_tflops"] == pytest.approx(32768 / 2.0 / 1e6)
    assert row["ours_gbs"] == pytest.approx(8192 / 2.0 / 1e3)
    assert all(math.isnan(row[f"{who}_{m}"]) for who in ("flash", "cudnn", "efficient") for m in report.METRICS)
    assert row["note"] == "a; b"
    assert set(row) == set(report.COLUMNS)  # write_csv orders them


def test_csv_round_trip(tmp_path):
    rows = synthetic_rows()
    path = report.write_csv(tmp_path / "x.csv", META, rows)
    text = path.read_text().splitlines()
    assert text[0] == "# suite: fa3" and "# clocks_start: SM 345 MHz, memory 3201 MHz, max SM 1980 MHz" in text
    assert text[len(META)] == ",".join(report.COLUMNS)
    meta, back = report.read_csv(path)
    assert meta == META
    assert len(back) == 36 and back[0]["b"] == 32 and back[0]["causal"] is False
    assert back[6]["causal"] is True and math.isnan(back[6]["efficient_tflops"])
    assert back[0]["ours_tflops"] == pytest.approx(300)
    assert back[6]["note"] == "efficient: refused"


def test_read_csv_of_the_older_format(tmp_path):
    # bench/run.py before suites: no `#` preamble, no efficient columns, versions in every row
    path = tmp_path / "fa3_nvidia-h200_fp16.csv"
    path.write_text("b,h,h_kv,s_q,s,d,causal,dtype,gpu,driver,ours_us,flash_us,cudnn_us,ours_tflops,"
                    "flash_tflops,cudnn_tflops,note\n"
                    "32,32,32,512,512,64,False,fp16,NVIDIA H200,580,241.8,254.5,172.4,284.2,270.0,398.6,\n")
    meta, rows = report.read_csv(path)
    assert meta == {}
    assert rows[0]["ours_tflops"] == pytest.approx(284.2) and math.isnan(rows[0]["efficient_tflops"])
    assert math.isnan(rows[0]["ours_gbs"])
    with pytest.raises(ValueError, match="not a bench/run.py CSV"):
        (tmp_path / "other.csv").write_text("test,kernel,us\nx,y,1\n")
        report.read_csv(tmp_path / "other.csv")


def test_markdown_columns_ratios_and_notes():
    text = report.markdown(META, synthetic_rows())
    lines = text.splitlines()
    assert "NVIDIA H200, driver 580.159.04" in text and "clocks at start: SM 345 MHz" in text
    header = next(line for line in lines if line.startswith("| b |"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells == ["b", "h/h_kv", "s_q/s", "d", "causal", "ours", "fa3", "flash", "cudnn", "efficient",
                     "ours/fa3", "ours/flash", "ours/cudnn", "ours/efficient"]
    first = [c.strip() for c in lines[lines.index(header) + 2].strip("|").split("|")]
    assert first == ["32", "32/32", "512/512", "64", "no", "300", "—", "270", "400", "200", "—", "1.11", "0.75",
                     "1.50"]
    causal = [c.strip() for c in lines[lines.index(header) + 8].strip("|").split("|")]
    assert causal[9] == "—" and causal[13] == "— [1]"
    assert "1. row 7 (b=32 h=32 s=512 d=64 causal): efficient: refused" in text
    assert "ncu" not in text  # no --ncu figures: no second table


def test_markdown_ncu_table_beside_the_events():
    rows = synthetic_rows()
    rows[0]["ours_ncu_us"] = rows[0]["ours_us"] / 1.05
    rows[0]["cudnn_ncu_us"] = rows[0]["cudnn_us"]
    lines = report.markdown(META, rows).splitlines()
    header = lines.index("| problem | ours | cudnn |")
    first = [c.strip() for c in lines[header + 2].strip("|").split("|")]
    assert first[0] == "b=32 h=32 s=512 d=64" and first[1].endswith("(1.050)") and first[2].endswith("(1.000)")
    assert lines[header + 3].count("—") == 2  # a row ncu did not measure


def test_summary_is_a_geometric_mean():
    line = report.summary(META, synthetic_rows())
    assert "ours/flash 1.11 (36 rows)" in line and "ours/efficient 1.50 (18 rows)" in line


# ---------------------------------------------------------------------------------------------
# Plots

def test_panels_one_per_head_size_and_mask_split_where_b_or_h_vary():
    from bench.plot import panels

    def rows_of(name):
        return [report.result_row(p, "fp16", {"ours": 1.0}) for p in SUITES[name].problems]

    fa3 = panels(rows_of("fa3"))
    assert [(shared["causal"], shared["d"]) for shared, _ in fa3] == list(product((False, True), (64, 128, 256)))
    assert all(len(members) == 6 and "b" not in shared for shared, members in fa3)  # b follows s
    assert len(panels(rows_of("grid"))) == 2 * 2 * 2 * 2  # mask x d x b x h, 3 lengths each
    decode = panels(rows_of("decode"))
    # tiny KV by (d, h); long KV by b (b 1/8/64 over 3 lengths, b 20/24 two each, 40 one), d = 64
    # by b (b 8/64 over 3 lengths, 40 one, 48 two), d = 256 by b (one length each), and the paged
    # rows by (b, block size)
    assert len(decode) == 4 + 3 + 3 + 4 + 2 + 3 and max(len(m) for _, m in decode) == 3
    for _, members in [*fa3, *decode]:  # a line never joins two problems at one s
        assert len({r["s"] for r in members}) == len(members)


def test_plot_writes_a_png_from_a_csv(tmp_path):
    pytest.importorskip("matplotlib")
    from bench.plot import main, plot_csv

    csv_path = report.write_csv(tmp_path / "fa3_test_fp16.csv", META, synthetic_rows())
    png = plot_csv(csv_path)
    assert png == tmp_path / "fa3_test_fp16.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    png.unlink()
    assert main([str(csv_path)]) == 0 and png.is_file()


def test_plot_of_an_older_csv_without_efficient(tmp_path):
    pytest.importorskip("matplotlib")
    from bench.plot import plot_csv

    path = tmp_path / "readme_nvidia-h200_fp16.csv"
    path.write_text("b,h,h_kv,s_q,s,d,causal,dtype,gpu,ours_us,flash_us,cudnn_us,ours_tflops,flash_tflops,"
                    "cudnn_tflops,note\n4,32,32,1024,1024,128,True,fp16,NVIDIA H200,149.7,153.6,84.8,229.8,"
                    "224.0,405.6,\n")
    assert plot_csv(path).read_bytes()[:4] == b"\x89PNG"


def test_plot_without_any_measurement(tmp_path):
    pytest.importorskip("matplotlib")
    from bench.plot import plot

    rows = [report.result_row(p, "bf16", {}, notes=["skipped"]) for p in SUITES["seed"].problems]
    png = plot({**META, "suite": "seed", "dtype": "bf16"}, rows, tmp_path / "seed.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------------------------
# Runner, with fake timers

def fake_timer(us):
    def timer(p, dtype):
        return timing.Timing(us, "" if us == us else "refused", kernel="fake")
    return timer


def test_run_suite_records_nan_and_notes_and_counts_progress():
    stream = io.StringIO()  # not a terminal: the fallback line counter
    progress = run.Progress(len(SUITES["seed"].problems), stream=stream)
    timers = {"ours": fake_timer(100.0), "flash": fake_timer(110.0), "cudnn": fake_timer(NAN),
              "efficient": fake_timer(200.0)}
    rows = run.run_suite(SUITES["seed"], "bf16", timers, progress)
    assert len(rows) == 6 and all(r["dtype"] == "bf16" and r["kernel"] == "fake" for r in rows)
    assert all(math.isnan(r["cudnn_tflops"]) and r["note"] == "refused" for r in rows)
    assert report.ratio(rows[0], "tflops", "flash") == pytest.approx(1.1)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 6 and lines[0].startswith("[1/6] seed bf16 b=1 h=12 s=2048 d=128")


def test_run_suite_past_the_deadline_skips():
    progress = run.Progress(1, stream=io.StringIO())
    rows = run.run_suite(SUITES["readme"], "fp16", {"ours": fake_timer(1.0)}, progress, deadline=0.0)
    assert math.isnan(rows[0]["ours_us"]) and rows[0]["note"] == "skipped: --time-budget spent"


def test_write_suite_and_pack(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "out").mkdir()
    written = run.write_suite(tmp_path / "out", {**META, "gpu": "NVIDIA H200 (x)"}, synthetic_rows())
    assert [p.name for p in written] == [f"fa3_nvidia-h200-x_fp16.{ext}" for ext in ("csv", "md", "png")]
    tar_path = run.pack(written, tmp_path / "archive" / "bench.tar.gz")
    with tarfile.open(tar_path) as tar:
        assert sorted(tar.getnames()) == sorted(p.name for p in written)


def test_refusal_quotes_the_asked_backends_reasons():
    def warning(text):
        return SimpleNamespace(message=UserWarning(f"{text} (Triggered internally at sdp_utils.cpp:123.)"))

    caught = [warning("Memory efficient kernel not used because:"),
              warning("Memory Efficient attention requires q, k and v to have the same number of heads"),
              warning("Flash attention kernel not used because:"),
              warning("Flash attention has been runtime disabled."),
              warning("CuDNN attention kernel not used because:"),
              warning("CuDNN attention has been runtime disabled.")]
    error = RuntimeError("No available kernel. Aborting execution.")
    assert timing.refusal("efficient", error, caught) == \
        "Memory Efficient attention requires q, k and v to have the same number of heads"
    assert timing.refusal("efficient", error, []) == "No available kernel. Aborting execution."
    assert timing.refusal("flash", error, caught) == "Flash attention has been runtime disabled."


# ---------------------------------------------------------------------------------------------
# One burst rule for ours and SDPA

def test_burst_is_about_measure_ms_of_launches_after_a_capped_warm_up():
    assert timing.burst(100.0, 20, 10) == (20, 10)        # short calls: every requested launch
    assert timing.burst(3400.0, 20, 10) == (7, 10)        # 25 ms of 3.4 ms calls
    assert timing.burst(30_000.0, 20, 10) == (1, 7)       # warm-up stops past 200 ms
    assert timing.burst(150_000.0, 20, 10) == (1, 2)      # at least one timed, two warm-up
    assert timing.burst(0.0, 20, 1) == (20, 2)


def test_only_problems_that_may_pass_measure_ms_are_probed():
    short = mha(1, 16, 512, 128, False)                # 2.1 GFLOP: 20 x 43 us at 50 TFLOP/s
    long = mha(1, 16, 16384, 128, False)               # 2.2 TFLOP: one call may take 44 ms
    assert not timing.needs_probe(short, "bf16", 20)
    assert timing.needs_probe(long, "bf16", 20)
    assert not timing.needs_probe(long, "bf16", 1)        # one launch is what the probe would give
    decode = SUITES["decode"].problems[0]              # b = 30720 against 2 keys: bytes, not FLOPs
    assert timing.needs_probe(decode, "fp16", 20) == (20 * decode.bytes(2) / timing.PROBE_ABOVE_BYTES > 0.025)


def test_measure_ms_sets_the_burst_and_the_probe_threshold():
    assert timing.burst(3400.0, 1000, 10, measure_ms=500) == (147, 10)   # 500 ms of 3.4 ms calls
    assert timing.burst(3400.0, 20, 10, measure_ms=500) == (20, 10)      # still at most --runs
    assert timing.burst(3400.0, 20, 10, measure_ms=run.MEASURE_MS) == timing.burst(3400.0, 20, 10)
    long = mha(1, 16, 16384, 128, False)               # one call at most 44 ms at 50 TFLOP/s
    assert timing.needs_probe(long, "bf16", 20)
    assert not timing.needs_probe(long, "bf16", 20, measure_ms=1000)     # 20 x 44 ms < 1 s


def test_measure_ms_flag_defaults_to_measure_ms_and_rejects_non_positive():
    _, args = run.parse_args([])
    assert args.measure_ms == run.MEASURE_MS
    _, args = run.parse_args(["--measure-ms", "500"])
    assert args.measure_ms == 500.0
    for bad in ("0", "-5", "inf", "nan", "x"):
        with pytest.raises(SystemExit):
            run.parse_args(["--measure-ms", bad])


def test_ours_takes_the_burst_of_measure_ms(monkeypatch, tmp_path):
    calls = []

    def run_fmha(exe, args, timeout):  # a 3.4 ms call, whatever is asked
        calls.append(int(args[args.index("-runs") + 1]))
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(timing.driver, "run_fmha", run_fmha)
    monkeypatch.setattr(timing.driver, "parse_output", lambda out: {"us": "3400", "tflops": "0", "kernel": "k"})
    long = mha(1, 16, 16384, 128, False)
    for measure_ms, runs, timed in ((run.MEASURE_MS, 20, 7), (500.0, 1000, 147)):
        calls.clear()
        got = timing.fmha_timer(tmp_path / "fmha.exe", [], runs, 10, measure_ms=measure_ms, cool_ms=0)(long, "bf16")
        assert calls == [1, timed]  # the one-launch probe, then the burst
        assert (got.us, got.kernel) == (3400.0, "k")


def test_sdpa_takes_the_burst_of_measure_ms():
    class FakeTorch:  # a clock that each launch advances by 3.4 ms
        now = 0.0

        class cuda:
            class Event:
                def __init__(self, enable_timing=True):
                    self.at = 0.0

                def record(self):
                    self.at = FakeTorch.now

                def synchronize(self):
                    pass

                def elapsed_time(self, end):
                    return end.at - self.at

            @staticmethod
            def synchronize():
                pass

            @staticmethod
            def _sleep(cycles):
                pass

    launches = []

    def launch(i):
        launches.append(i)
        FakeTorch.now += 3.4

    us = timing.median_us_per_call(FakeTorch, launch, 1000, 3, 10, measure_ms=500, cool_ms=0)
    assert us == pytest.approx(3400.0)
    assert len(launches) == 10 + 1 + 3 * 147  # warm-up, the length probe, three bursts of 500 ms


def test_every_measurement_starts_from_an_idle_gpu(monkeypatch, tmp_path):
    """COOL_MS of host sleep, the GPU synchronized first, before each torch burst and before
    each measured fmha.exe run (not the length probe), so no side's measurement starts nearer
    the power limit than another's (bench/NOTES.md §103)."""
    events = []
    monkeypatch.setattr(timing.time, "sleep", lambda s: events.append(("sleep", s)))

    class FakeTorch:
        class cuda:
            class Event:
                def __init__(self, enable_timing=True):
                    pass

                def record(self):
                    events.append(("record",))

                def synchronize(self):
                    pass

                def elapsed_time(self, end):
                    return 1.0

            @staticmethod
            def synchronize():
                events.append(("sync",))

            @staticmethod
            def _sleep(cycles):
                events.append(("spin",))

    timing.median_us_per_call(FakeTorch, lambda i: events.append(("launch",)), 20, 3, 2, cool_ms=250)
    first_burst = events.index(("spin",))
    bursts = [i for i, e in enumerate(events) if e == ("spin",)]
    assert len(bursts) == 3
    for i in bursts:  # the GPU drained, the sleep, two warm-up launches, then the spin that queues the burst
        assert events[i - 4:i] == [("sync",), ("sleep", 0.25), ("launch",), ("launch",)]
    assert ("sleep", 0.25) not in events[:first_burst - 4]  # not before the first warm-up or the probe

    events.clear()
    monkeypatch.setattr(timing.driver, "run_fmha", lambda exe, args, timeout: events.append(
        ("fmha", int(args[args.index("-runs") + 1]))) or SimpleNamespace(returncode=0, stdout="", stderr=""))
    monkeypatch.setattr(timing.driver, "parse_output", lambda out: {"us": "3400", "tflops": "0", "kernel": "k"})
    timing.fmha_timer(tmp_path / "fmha.exe", [], 20, 10, repeats=2, cool_ms=100)(mha(1, 16, 16384, 128, False), "bf16")
    assert events == [("fmha", 1), ("sleep", 0.1), ("fmha", 7), ("sleep", 0.1), ("fmha", 7)]


def test_cool_ms_flag_defaults_to_cool_ms_and_takes_zero():
    _, args = run.parse_args([])
    assert (args.cool_ms, args.repeats) == (run.COOL_MS, 5)
    _, args = run.parse_args(["--cool-ms", "0"])
    assert args.cool_ms == 0.0
    for bad in ("-1", "inf", "nan", "x"):
        with pytest.raises(SystemExit):
            run.parse_args(["--cool-ms", bad])


def test_ours_is_the_median_run_and_a_failure_ends_it():
    times = iter([30.0, 10.0, 20.0, 40.0])
    calls = []

    def measure():
        calls.append(1)
        return {"us": str(next(times)), "kernel": "k"}, ""

    fields, why = timing.median_of_runs(measure, 3)
    assert (float(fields["us"]), why, len(calls)) == (20.0, "", 3)
    assert float(timing.median_of_runs(lambda: ({"us": "5"}, ""), 0)[0]["us"]) == 5.0   # at least one run
    outcomes = iter([({"us": "1"}, ""), (None, "ours: exit 1: boom"), ({"us": "2"}, "")])
    assert timing.median_of_runs(lambda: next(outcomes), 3) == (None, "ours: exit 1: boom")


def test_ours_repeats_flag_defaults_to_three_and_is_named_in_the_results_header(monkeypatch):
    _, args = run.parse_args([])
    assert args.ours_repeats == 3
    _, args = run.parse_args(["--ours-repeats", "5"])
    assert args.ours_repeats == 5

    class FakeTorch:  # what run_context reads of torch
        __version__ = "t"

        class cuda:
            @staticmethod
            def get_device_name():
                return "GPU"

        class version:
            cuda = "c"

    monkeypatch.setattr(run, "nvidia_smi", lambda *query: ["driver"])
    monkeypatch.setattr(run, "cudnn_version", lambda torch: "9")
    assert run.run_context(FakeTorch, args)["ours"].startswith("median of 5 runs of fmha.exe -skip-checks")
    assert "(about 25 ms each, each after 500 ms of an idle GPU" in run.run_context(FakeTorch, args)["sdpa"]
    _, args = run.parse_args(["--measure-ms", "500", "--cool-ms", "0"])
    assert "(about 500 ms each, each after 0 ms of an idle GPU" in run.run_context(FakeTorch, args)["sdpa"]
    assert "would pass 500 ms" in run.run_context(FakeTorch, args)["ours"]
    assert "each run after 0 ms of an idle GPU" in run.run_context(FakeTorch, args)["ours"]


def test_package_bench_problems():
    """bench/package_bench.py's suites: the FA3 grid (36), decode (9), tiny KV (2), with the
    FLOP counts of FA3's convention (causal halves)."""
    pytest.importorskip("torch", reason="bench/package_bench.py needs torch")
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "bench" / "package_bench.py"
    spec = importlib.util.spec_from_file_location("package_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = list(module.problems(["fa3", "decode", "tiny"]))
    assert [sum(r[0] == s for r in rows) for s in ("fa3", "decode", "tiny")] == [36, 9, 2]
    flops = {r[1]: r[2] for r in rows}
    assert flops["b=1 h=16 s=16384 d=128"] == 4 * 16 * 16384**2 * 128
    assert flops["b=1 h=16 s=16384 d=128 causal"] == 2 * 16 * 16384**2 * 128


def test_fp8_accuracy_quantises_per_kv_head_and_measures_relative_error():
    """bench/fp8_accuracy.py's helpers on the CPU: one descale per (batch, KV head) that brings
    each group's largest value to e4m3's 448, values back within e4m3's rounding, and errors
    relative to the reference's RMS."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn")
    from bench import fp8_accuracy as acc
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 4, 8, generator=gen)
    x8, scale = acc.quantise(torch, x, 2)
    assert x8.dtype == torch.float8_e4m3fn and scale.shape == (2, 2)
    back = x8.float() * scale.repeat_interleave(2, 1)[:, None, :, None]
    assert torch.allclose(back, x, rtol=2.0 ** -4, atol=1e-6)  # 3 mantissa bits: half an ulp
    top = x8.float().abs().reshape(2, 5, 2, 2, 8).amax(dim=(1, 3, 4))
    assert torch.equal(top, torch.full((2, 2), 448.0))
    want = torch.ones(2, 3, dtype=torch.float64)
    assert acc.errors(want * 1.5, want) == pytest.approx((0.5, 0.5))
    q = torch.randn(1, 4, 2, 8, generator=gen, dtype=torch.float64)
    o = acc.attention_fp64(torch, q, q[:, :, :1], q[:, :, :1], causal=True)
    assert torch.allclose(o[:, 0], q[:, 0, :1].expand(1, 2, 8))  # row 0 sees key 0 only


def test_bwd_bench_runs_the_fa3_grid_at_two_and_a_half_forwards():
    from bench import bwd
    assert bwd.problems([]) == list(SUITES["fa3"].problems)
    picked = bwd.problems(["*d=128 causal"])
    assert len(picked) == 6 and all(p.d == 128 and p.causal for p in picked)
    p = picked[0]
    assert bwd.bwd_flop(p) == 2.5 * p.flop()


def test_bwd_bench_times_only_the_sides_asked_for(monkeypatch, capsys):
    """--sides fmha: an A/B of two libraries times ours alone; the table has its column only."""
    import sys
    from bench import bwd
    fake = SimpleNamespace(__version__="0", bfloat16="bf16", float16="fp16",
                           cuda=SimpleNamespace(get_device_name=lambda: "Fake GPU", empty_cache=lambda: None),
                           backends=SimpleNamespace(cudnn=SimpleNamespace(version=lambda: 1)))
    monkeypatch.setitem(sys.modules, "torch", fake)
    made = []
    monkeypatch.setattr(bwd, "make_side", lambda torch, name, p, *a: made.append(name) or (None, None))
    monkeypatch.setattr(bwd, "time_backward", lambda torch, forward, inputs: 2.0)
    assert bwd.main(["--sides", "fmha", "--only", "*d=64 causal"]) == 0
    assert made == ["fmha"] * 6
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "| dtype | problem | fmha | fmha / cudnn |"
    assert all(row.endswith("| - |") for row in lines[3:])  # no cuDNN column, so no ratio
    with pytest.raises(SystemExit):
        bwd.main(["--sides", "sdpa"])


def test_ab_turns_the_order_and_idles_before_each_run(monkeypatch, capsys):
    from bench import ab
    calls, sleeps = [], []

    def fake_run(exe, args):
        calls.append((exe, "-runs" in args and args[args.index("-runs") + 1] == "1"))
        return (100.0 if exe == "A" else 90.0), "k"

    monkeypatch.setattr(ab, "run", fake_run)
    monkeypatch.setattr(ab.time, "sleep", sleeps.append)
    assert ab.main(["A", "B", "--only", "b=32 h=16 s=512 d=128", "--repeats", "4", "--cool-ms", "250"]) == 0
    timed = [exe for exe, probe in calls if not probe]
    assert timed == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert sleeps == [0.25] * 8
    out = capsys.readouterr().out
    assert "| 100.0 | 90.0 | 0.900 | 0.900-0.900 |" in out


def test_ab_pairs_each_repeat_and_takes_the_same_exe_twice(monkeypatch, capsys):
    from bench import ab
    times = iter([10.0, 100.0, 101.0, 99.0, 102.0, 108.0, 105.0, 106.0, 100.0])  # the probe, then A B, B A, ...

    monkeypatch.setattr(ab, "run", lambda exe, args: (next(times), "k"))
    monkeypatch.setattr(ab.time, "sleep", lambda s: None)
    assert ab.main(["X", "X", "--only", "b=32 h=16 s=512 d=128", "--repeats", "4"]) == 0
    # A: 100, 102, 108, 100 (median 101); B: 101, 99, 105, 106 (103); pairs 1.010, 0.971, 0.972, 1.060
    out = capsys.readouterr().out
    assert "| k | 101.0 | 103.0 | 0.991 | 0.971-1.060 |" in out


def test_ab_rejects_no_repeats():
    from bench import ab
    with pytest.raises(SystemExit):
        ab.main(["A", "B", "--repeats", "0"])


def test_kv_e4m3_times_ours_as_run_py_does_with_the_decode_flags(monkeypatch, tmp_path):
    from bench import kv_e4m3
    seen = []

    def run_fmha(exe, args, timeout):
        seen.append(args)
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(timing.driver, "run_fmha", run_fmha)
    monkeypatch.setattr(timing.driver, "parse_output", lambda out: {"us": "50", "tflops": "0", "kernel": "k"})
    p = kv_e4m3.problem(128, 8, 16384)
    got = timing.fmha_timer(tmp_path / "fmha.exe", ["-kv-e4m3"], kv_e4m3.RUNS, kv_e4m3.WARM_UP, cool_ms=0)(p, "bf16")
    assert got.us == 50.0
    args = " ".join(seen[-1])
    for flags in ("-b 8 -h 32 -d 128 -s 16384 -gqa 8 -s-q 1 -separate-q-k-v", "-bf16 -kv-e4m3 -skip-checks"):
        assert flags in args
    # fmha.exe's byte count (src/metrics.cu): bf16 Q and O, K and V at 2 or 1 byte
    q_and_o, k_and_v = 2 * 8 * 32 * 1 * 128, 2 * 8 * 8 * 16384 * 128
    assert kv_e4m3.cache_bytes(p, False) == 2 * (q_and_o + k_and_v)
    assert kv_e4m3.cache_bytes(p, True) == 2 * q_and_o + k_and_v
    assert kv_e4m3.cell(got, p, True) == f"50.0 | {(2 * q_and_o + k_and_v) / 50e3:.0f}"
    assert kv_e4m3.cell(timing.Timing(NAN, "ours: exit 2: no kernel"), p, True) == "— (ours: exit 2: no kernel) | —"


def test_ab_locked_times_by_ncu_at_the_base_clock(monkeypatch, capsys):
    from bench import ab
    seen = []

    def fmha_exe_us(cmd, locked=False, timeout=300):
        seen.append((cmd[0], locked, cmd[cmd.index("-runs") + 1], cmd[cmd.index("-warm-up-runs") + 1]))
        return 100.0 if cmd[0] == "A" else 98.0

    monkeypatch.setattr(ab.ncu, "fmha_exe_us", fmha_exe_us)
    monkeypatch.setattr(ab, "run", lambda exe, args: (1.0, "k"))  # the kernel's name only
    monkeypatch.setattr(ab.time, "sleep", lambda s: None)
    assert ab.main(["A", "B", "--only", "b=32 h=16 s=512 d=128", "--repeats", "2", "--locked"]) == 0
    assert seen == [("A", True, "6", "0"), ("B", True, "6", "0"), ("B", True, "6", "0"), ("A", True, "6", "0")]
    assert "| k | 100.0 | 98.0 | 0.980 | 0.980-0.980 |" in capsys.readouterr().out
