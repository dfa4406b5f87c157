"""bench/per_tile.py: the problems that add whole tiles an SM at a fixed length (no GPU)."""

import sys
import types

import pytest

from bench.per_tile import BLOCK_M, heads_for, main, problems


@pytest.mark.parametrize("s", [512, 1024, 2048, 4096, 8192])
@pytest.mark.parametrize("sms", [132, 114, 78])
def test_every_problem_fills_whole_waves(s, sms):
    probs = problems(s, 256, False, list(range(1, 40)), sms)
    assert probs
    for x, p in probs:
        assert p.b * p.h * (s // BLOCK_M) == x * sms
        assert p.s == p.s_q == s and p.h == p.h_kv == heads_for(s, sms)


def test_heads_and_counts_on_132_sms():
    assert heads_for(1024, 132) == 33  # 8 tiles a head: 33 heads fill two waves
    assert [x for x, _ in problems(1024, 256, False, [1, 2, 3, 4, 16], 132)] == [2, 4, 16]
    assert heads_for(2048, 132) == 33 and [p.b for _, p in problems(2048, 128, True, [4, 8], 132)] == [1, 2]
    with pytest.raises(ValueError):
        heads_for(1000, 132)


def test_list_needs_no_gpu_and_refuses_a_single_count(capsys):
    assert main(["--list", "--s", "1024", "--tiles", "2", "4", "--causal", "--d", "128"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["s=1024 tiles/SM=2 -b 1 -h 33 -d 128 -s 1024 -causal-mask",
                   "s=1024 tiles/SM=4 -b 2 -h 33 -d 128 -s 1024 -causal-mask"]
    with pytest.raises(SystemExit):
        main(["--list", "--s", "1024", "--tiles", "1", "2"])


def test_the_timed_path_fits_each_sides_cost_a_tile(monkeypatch, capsys):
    """The GPU path with both timers replaced: t = 5 + 3 x (ours), 4 + 2.5 x (fa3)."""
    from bench import fa3 as fa3_wheel
    from bench import run as runner

    def timer(a, c):
        return lambda p, dtype: runner.Timing(a + c * p.b * p.h * (p.s // BLOCK_M) / 132)

    fake_cuda = types.SimpleNamespace(is_available=lambda: True, get_device_name=lambda: "Fake GPU")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=fake_cuda))
    monkeypatch.setattr(fa3_wheel, "load", lambda: (object(), ""))
    monkeypatch.setattr(runner, "fmha_timer", lambda *a, **k: timer(5.0, 3.0))
    monkeypatch.setattr(runner, "fa3_timer", lambda *a, **k: timer(4.0, 2.5))
    assert main(["--s", "1024", "--tiles", "2", "4", "8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Fake GPU, e4m3, d = 256, not causal")
    assert "| 1024 | 4 | 2 | 33 | 17.0 | 14.0 | 0.824 |" in out
    assert "| 1024 | ours | 5.0 | 3.00 |" in out and "| 1024 | fa3 | 4.0 | 2.50 |" in out
