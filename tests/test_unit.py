"""The device unit tests (tests/unit/, GoogleTest) as pytest items: one item per GTest case.

bin/unit_tests comes from `make test` in the repository (incremental; GTEST_ROOT and
TORCH_CUDA_ARCH_LIST reach make through the environment). At collection, an existing
bin/unit_tests lists its cases (--gtest_list_tests) and each becomes an item that runs
`bin/unit_tests --gtest_filter=Suite.Case` after the build; where the binary does not exist
yet, one item builds it and runs every case. Those items are marked `gpu`: without a GPU the
root conftest skips them, and the CPU tests below still check that `make test` builds, that
the binary lists exactly the cases the sources define (read here with regular expressions,
independently of GoogleTest), and that it skips its device tests instead of failing.
"""

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNIT_DIR = ROOT / "tests" / "unit"
UNIT_TESTS = ROOT / "bin" / "unit_tests"
ALL = "all"  # the one item collected when bin/unit_tests does not exist yet
GTEST_MISSING = "GoogleTest not found"


def parse_gtest_list(text: str) -> list[str]:
    """`--gtest_list_tests` output -> ['Suite.Case', 'Prefix/Suite.Case/param', ...]."""
    cases, suite = [], None
    for line in text.splitlines():
        name = line.split("#", 1)[0].rstrip()  # drop "  # GetParam() = ..." comments
        if not name.strip():
            continue
        if line.startswith(" "):
            if suite:
                cases.append(suite + name.strip())
        else:  # a suite line ends with '.'; anything else (gtest_main's banner) resets
            suite = name if name.endswith(".") else None
    return cases


# --- the cases the sources define ---------------------------------------------------------
# Read from tests/unit/**/*.cu with regular expressions, independently of GoogleTest, so that
# a case that stops registering (a file left out of the build, a parameter list cut short)
# shows as a difference from what bin/unit_tests lists.

# A string literal or a comment: comments are blanked, so that a commented-out TEST is not one.
LITERAL_OR_COMMENT_RE = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.S)
STRING_RE = re.compile(r'"((?:\\.|[^"\\\n])*)"')
CASE_RE = re.compile(r"\b(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)")
INSTANTIATE_RE = re.compile(r"\b(INSTANTIATE_TEST_SUITE_P|INSTANTIATE_TYPED_TEST_SUITE_P)\s*\(")
OPEN, CLOSE = "([{", ")]}"


def blank(text: str, strings: bool) -> str:
    """Comments (and string literals' contents, if `strings`) as spaces: positions are kept."""
    def sub(m: re.Match) -> str:
        token = m.group(0)
        if token.startswith('"'):
            return '"' + " " * (len(token) - 2) + '"' if strings else token
        return re.sub(r"[^\n]", " ", token)
    return LITERAL_OR_COMMENT_RE.sub(sub, text)


def call_args(text: str, start: int) -> list[str]:
    """The arguments of the call whose '(' ends just before `start`, split at its top-level
    commas (brackets counted; string literals skipped)."""
    args, depth, i, begin = [], 0, start, start
    while True:
        literal = STRING_RE.match(text, i)
        if literal:
            i = literal.end()
            continue
        c = text[i]
        if c in OPEN:
            depth += 1
        elif c in CLOSE:
            if depth == 0:
                return args + [text[begin:i].strip()]
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[begin:i].strip())
            begin = i + 1
        i += 1


def param_names(text: str, generator: str, where: str) -> list[str]:
    """The names of an instantiation's parameters: ::testing::Values(...) (or a constant set
    to one in the same file) of values that each name themselves in their one string literal
    (the name generator returns info.param.name)."""
    if re.fullmatch(r"\w+", generator):
        found = re.search(rf"\b{generator}\s*=\s*([^;]*);", text)
        assert found, f"{where}: cannot find the definition of {generator}"
        generator = found.group(1).strip()
    assert re.match(r"(::)?testing::Values\s*\(", generator), f"{where}: count the parameters of {generator[:60]}"
    names = STRING_RE.findall(generator)
    assert names and len(set(names)) == len(names), f"{where}: parameter names {names}"
    return names


def source_cases(unit_dir: Path = UNIT_DIR) -> list[str]:
    """Every case the sources define, named as --gtest_list_tests names them: Suite.Case, and
    Prefix/Fixture.Case/param for each parameter of each instantiation of a TEST_P fixture."""
    cases, param_tests, instantiations = [], {}, []
    for path in sorted(unit_dir.rglob("*.cu")):
        raw, where = path.read_text(), path.relative_to(unit_dir)
        text, code = blank(raw, strings=False), blank(raw, strings=True)  # the macros are searched in code
        for macro, suite, name in CASE_RE.findall(code):
            if macro in ("TEST", "TEST_F"):
                cases.append(f"{suite}.{name}")
            elif macro == "TEST_P":
                param_tests.setdefault(suite, []).append(name)
            else:
                raise AssertionError(f"{where}: {macro}({suite}, {name}): count its type instantiations here")
        for call in INSTANTIATE_RE.finditer(code):
            args = call_args(text, call.end())
            assert call.group(1) == "INSTANTIATE_TEST_SUITE_P" and len(args) == 4, \
                f"{where}: {call.group(1)}({', '.join(args)[:80]}): expected a prefix, a fixture, Values and a namer"
            instantiations.append((where, args[0], args[1], param_names(text, args[2], where)))
    for where, prefix, fixture, names in instantiations:
        assert fixture in param_tests, f"{where}: {prefix}/{fixture} instantiates no TEST_P"
        cases += [f"{prefix}/{fixture}.{test}/{name}" for test in param_tests[fixture] for name in names]
    instantiated = {fixture for _, _, fixture, _ in instantiations}
    assert set(param_tests) <= instantiated, f"TEST_P fixtures never instantiated: {set(param_tests) - instantiated}"
    return cases


def list_cases(binary: Path) -> list[str]:
    run = subprocess.run([str(binary), "--gtest_list_tests"], capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        raise RuntimeError(f"{binary} --gtest_list_tests exited {run.returncode}: {run.stderr[-2000:]}")
    return parse_gtest_list(run.stdout)


def collected_cases() -> list[str]:
    if not os.access(UNIT_TESTS, os.X_OK):
        return [ALL]
    try:
        return list_cases(UNIT_TESTS) or [ALL]
    except (OSError, RuntimeError, subprocess.TimeoutExpired):
        return [ALL]  # an unusable binary: the build replaces it, then everything runs


CASES = collected_cases()


@contextmanager
def build_lock():
    """One `make test` at a time in this checkout (pytest-xdist workers share it)."""
    key = hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]  # str hash() differs per process
    path = Path(tempfile.gettempdir()) / f"fmha_unit_tests_{key}.lock"
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def unit_tests() -> Path:
    """bin/unit_tests, brought up to date by `make test`; skips where nvcc, make or
    GoogleTest is missing (the skip, like a failure, is cached for the session)."""
    for tool in ("make", os.environ.get("NVCC", "nvcc")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found: cannot build bin/unit_tests")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    with build_lock():
        run = subprocess.run(["make", f"-j{min(os.cpu_count() or 2, 8)}", "test"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=1800)
    output = run.stdout + run.stderr
    if run.returncode != 0:
        missing = next((line for line in output.splitlines() if GTEST_MISSING in line), None)
        if missing:
            pytest.skip(missing)
        pytest.fail(f"`make test` failed ({run.returncode}):\n{output[-4000:]}", pytrace=False)
    return UNIT_TESTS


def run_unit_tests(binary: Path, gtest_filter: str = "*") -> tuple[subprocess.CompletedProcess, str]:
    run = subprocess.run([str(binary), f"--gtest_filter={gtest_filter}", "--gtest_color=no"],
                         capture_output=True, text=True, timeout=600)
    return run, run.stdout + run.stderr


def count(output: str, label: str) -> int:
    """The number in gtest's summary line `[  PASSED  ] N tests.` (label PASSED, SKIPPED, FAILED)."""
    found = re.search(rf"^\[\s*{label}\s*\] (\d+) tests?", output, re.MULTILINE)
    return int(found.group(1)) if found else 0


# --- the cases (GPU) ---------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.build
@pytest.mark.parametrize("case", CASES)
def test_unit(unit_tests, case):
    run, output = run_unit_tests(unit_tests, "*" if case == ALL else case)
    if run.returncode != 0:
        pytest.fail(f"bin/unit_tests --gtest_filter={case} exited {run.returncode}:\n{output[-6000:]}", pytrace=False)
    ran = re.search(r"^\[==========\] (\d+) tests? from", output, re.MULTILINE)
    if ran is None or int(ran.group(1)) == 0:
        pytest.fail(f"{case} is not a case of the rebuilt bin/unit_tests: run pytest again to collect its cases",
                    pytrace=False)
    if case != ALL and count(output, "SKIPPED"):
        reason = re.search(r": Skipped\n(.*)", output)
        pytest.skip(reason.group(1) if reason else "skipped by bin/unit_tests")


# --- the build (CPU) ---------------------------------------------------------------------

@pytest.mark.build
def test_make_test_lists_every_source_case(unit_tests):
    """bin/unit_tests registers exactly the cases the sources define, each once."""
    cases = list_cases(unit_tests)
    expected = source_cases()
    assert sorted(cases) == sorted(expected), (f"only in the binary: {sorted(set(cases) - set(expected))}, "
                                               f"only in the sources: {sorted(set(expected) - set(cases))}")
    if CASES != [ALL] and set(CASES) != set(cases):
        warnings.warn("bin/unit_tests changed since collection: run pytest again to collect its new cases")


@pytest.mark.build
def test_no_gpu_skips_device_cases(unit_tests, has_gpu):
    """Without a GPU the device cases skip and the host-only ones pass."""
    if has_gpu:
        pytest.skip("there is a GPU: the gpu-marked items run every case")
    run, output = run_unit_tests(unit_tests)
    assert run.returncode == 0, output[-6000:]
    assert count(output, "FAILED") == 0, output[-6000:]
    assert count(output, "SKIPPED") > 0 and "no CUDA device" in output, output[-3000:]
    assert count(output, "PASSED") > 0, "the host-only cases (layouts, key_limit, block schedule) run anywhere"


def test_parse_gtest_list():
    text = ("Running main() from gtest_main.cc\n"
            "KeyLimit.\n  PaddingIsTheKeyLengthOnEveryRow\n"
            "Mask/MaskApply.\n  MatchesThePredicate/causal  # GetParam() = causal\n"
            "Typed/0.  # TypeParam = float\n  Works\n")
    assert parse_gtest_list(text) == ["KeyLimit.PaddingIsTheKeyLengthOnEveryRow",
                                      "Mask/MaskApply.MatchesThePredicate/causal", "Typed/0.Works"]


SOURCE = """
TEST(Plain, One) {}
// TEST(Plain, CommentedOut) {}
/* TEST_F(Fix, AlsoCommentedOut) {} */
TEST_F(Fix, Two) { EXPECT_EQ(f("TEST(Not, ACase)"), 1); }
TEST_P(Param, Three) {}
TEST_P(Param, Four) {}
const auto kCases = ::testing::Values(make<1, 2>("a"), make<3, 4>("b"));
INSTANTIATE_TEST_SUITE_P(P, Param, kCases, [](const ::testing::TestParamInfo<C>& i) { return i.param.name; });
INSTANTIATE_TEST_SUITE_P(Q, Param, ::testing::Values(C{"x", {1, 2}}, C{"y", {3}}, C{"z", {}}), namer);
"""


def test_source_cases_reads_tests_and_instantiations(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_x.cu").write_text(SOURCE)
    assert sorted(source_cases(tmp_path)) == sorted(
        ["Plain.One", "Fix.Two"] + [f"{p}/Param.{t}/{n}" for t in ("Three", "Four")
                                    for p, names in (("P", "ab"), ("Q", "xyz")) for n in names])


def test_the_sources_define_cases():
    cases = source_cases()
    assert cases and len(set(cases)) == len(cases), "duplicate case names"
