"""bench/structure_report.py measures function lengths the way a reader counts them."""

from bench.structure_report import cpp_functions, py_functions

CPP = """namespace fmha {
template <class Tr, int kX = 3>
__global__ void __launch_bounds__(128, 2)
kernel(const Params p) {  // a { in a comment
    if (p.b) {
        auto f = [&](int i) { return i; };
    }
    const char* s = "}";
}

struct S {
    int size() const { return 1; }
};
}  // namespace fmha
"""

PY = '''def a():
    x = 1

    return x


def b():
    pass
'''


def test_cpp_functions():
    assert list(cpp_functions(CPP)) == [("kernel", 2, 8), ("size", 12, 1)]


def test_py_functions():
    assert list(py_functions(PY)) == [("a", 1, 4), ("b", 7, 2)]
