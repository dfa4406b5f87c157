"""bench/ncu.py reads Nsight Compute's CSV and splits it into the marked ranges: no GPU needed."""

import math

import pytest

from bench import ncu

HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
         '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'


def row(i, name, value, unit="nsecond", metric="gpu__time_duration.sum"):
    return f'"{i}","1","python3","h","{name}","1","7","(128, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler ' \
           f'metrics","{metric}","{unit}","{value}"\n'


def test_kernels_in_launch_order_with_units_and_separators():
    text = "==PROF== Connected to process 1\nprogram output\n" + HEADER + row(1, "fwd_kernel", "1,536,960") + \
        row(0, "spin_kernel", "1,024") + row(2, "combine_kernel", "2.5", unit="usecond") + \
        row(3, "fwd_kernel", "7", metric="sm__cycles_elapsed.avg") + "==PROF== Disconnected\n"
    assert ncu.kernels(text) == [("spin_kernel", 1024.0), ("fwd_kernel", 1536960.0), ("combine_kernel", 2500.0)]
    assert ncu.kernels("no table here") == []


def test_ranges_sum_the_kernels_of_a_call():
    launched = [("spin_kernel", 1.0), ("lengths_kernel", 2000.0), ("fwd_kernel", 10000.0), ("lengths_kernel", 2000.0),
                ("fwd_kernel", 12000.0), ("spin_kernel", 1.0), ("spin_kernel", 1.0), ("flash_fwd", 9000.0)]
    got = ncu.per_range([("a|ours", 2), ("a|fa3", 1), ("b|fa3", 1)], launched)
    assert got == {"a|ours": pytest.approx(13.0), "b|fa3": pytest.approx(9.0)}  # a|fa3 launched nothing
    with pytest.raises(ValueError, match="2 markers for 3 ranges"):
        ncu.per_range([("a", 1), ("b", 1), ("c", 1)], launched[:6])


def test_fmha_exe_median_of_its_launches(monkeypatch):
    class Done:
        def __init__(self, rc, stdout):
            self.returncode, self.stdout, self.stderr = rc, stdout, ""

    seen = []

    def fake(cmd, **kwargs):
        seen.append(cmd)
        return Done(0, "fmha.exe output\n" + HEADER + row(0, "void fmha::ws::fwd_kernel<T>(Params)", "9,000")
                    + row(1, "fwd_kernel", "1,000") + row(2, "fwd_kernel", "3,000") + row(3, "fwd_kernel", "1,100"))

    monkeypatch.setattr(ncu.subprocess, "run", fake)
    assert ncu.fmha_exe_us(["bin/fmha.exe", "-runs", "3"]) == pytest.approx(1.1)  # the warm-up call skipped
    assert seen[0][0] == "ncu" and seen[0][-3:] == ["bin/fmha.exe", "-runs", "3"]
    assert seen[0][seen[0].index("--clock-control") + 1] == "none"  # beside CUDA events: clocks as they run
    ncu.fmha_exe_us(["bin/fmha.exe", "-runs", "3"], locked=True)
    assert seen[1][seen[1].index("--clock-control") + 1] == "base" and ncu.FLAGS[1] == "none"  # A/B: one clock

    def split(cmd, **kwargs):  # decode with splits: the combine kernel belongs to the call before it
        return Done(0, HEADER + row(0, "decode_kernel", "5,000") + row(1, "combine_kernel", "1,000")
                    + row(2, "decode_kernel", "2,000") + row(3, "combine_kernel", "500")
                    + row(4, "decode_kernel", "2,100") + row(5, "combine_kernel", "500"))

    monkeypatch.setattr(ncu.subprocess, "run", split)
    assert ncu.fmha_exe_us(["bin/fmha.exe"]) == pytest.approx(2.55)
    monkeypatch.setattr(ncu.subprocess, "run", lambda cmd, **kwargs: Done(1, ""))
    assert math.isnan(ncu.fmha_exe_us(["bin/fmha.exe"]))


def test_profile_calls_warms_up_then_marks_its_calls(monkeypatch, capsys):
    import sys
    import types
    events = []
    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(
        synchronize=lambda: events.append("sync"), _sleep=lambda n: events.append("marker"),
        profiler=types.SimpleNamespace(start=lambda: events.append("start"), stop=lambda: events.append("stop")))
    monkeypatch.setitem(sys.modules, "torch", fake)
    ncu.profile_calls("fa3|b=1|ours", lambda i: events.append(f"call {i}"), calls=2)
    assert events == ["call 0", "call 1", "sync", "start", "marker", "call 0", "call 1", "sync", "stop"]
    assert capsys.readouterr().out == f"{ncu.MARK}\tfa3|b=1|ours\t2\n"
