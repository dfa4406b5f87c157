"""bench/sass_loop.py on a hand-written `cuobjdump -sass` excerpt (no GPU, no cuobjdump)."""

from bench.sass_loop import key_loops, main, parse, stall, summary, waits


def hi(stall_cycles: int, wait_mask: int = 0) -> str:
    return f"0x{(stall_cycles << 41) | (wait_mask << 52):016x}"


def insn(addr: int, text: str, stall_cycles: int, wait_mask: int = 0) -> str:
    return (f"        /*{addr:04x}*/                   {text} ;   /* 0x0000000000000000 */\n"
            f"                                                    /* {hi(stall_cycles, wait_mask)} */\n")


DUMP = ("\t\tFunction : kernel_a\n"
        + insn(0x00, "MOV R1, RZ", 1)
        + insn(0x10, "QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], RZ, !UPT", 2)
        + insn(0x20, "QGMMA.64x256x32.F32.E4M3.E4M3 R40, R8, gdesc[UR8], R40", 3, wait_mask=1)
        + insn(0x30, "FADD R3, R6, R161", 7)
        + insn(0x40, "@!P0 BRA 0x10", 5)
        + insn(0x50, "@P1 BRA 0x0", 1)
        + insn(0x60, "EXIT", 5)
        + "\t\tFunction : kernel_b\n"
        + insn(0x00, "FADD R1, R2, R3", 4)
        + insn(0x10, "BRA 0x0", 1))


def test_control_bits():
    assert stall(int(hi(7), 16)) == 7 and not waits(int(hi(7), 16)) and waits(int(hi(0, 4), 16))


def test_key_loops_and_their_stalls():
    funcs = parse(DUMP)
    assert list(funcs) == ["kernel_a", "kernel_b"] and len(funcs["kernel_a"]) == 7
    loops = key_loops(funcs["kernel_a"])
    assert [(s, e, len(b)) for s, e, b in loops] == [(0x10, 0x40, 4), (0x0, 0x50, 6)]  # smallest first
    n, cycles, scoreboard, by_op, count = summary(loops[0][2])
    assert (n, cycles, scoreboard) == (4, 17, 1)
    assert by_op["FADD"] == 7 and by_op["BRA"] == 5 and count["QGMMA.64x128x32"] == 1
    assert key_loops(funcs["kernel_b"]) == []  # a loop without wgmma is not a key loop


def test_cli_skips_a_range(tmp_path, capsys):
    path = tmp_path / "x.sass"
    path.write_text(DUMP)
    assert main([str(path), "--name", "kernel_a", "--skip", "30:30"]) == 0
    out = capsys.readouterr().out
    assert "kernel_b" not in out and "smallest: 3 instructions, 10 stall cycles, 1 scoreboard waits" in out
