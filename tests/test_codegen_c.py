"""C generation from hand-built DPS kernels: compiled with -Wall -Wextra -Werror and the
sanitizers, run through cffi on random inputs, compared with numpy."""
from __future__ import annotations

import os
import pathlib
import re
import resource
import subprocess
import sys

import cffi
import numpy as np
import pytest
import sympy

from fsmooth.dpia.codegen_c import generate_c
from fsmooth.dpia.translate import dpia_program
from fsmooth.dps import ir as d
from fsmooth.core import Lit, Var
from fsmooth.options import Options
from fsmooth.types import Array, Bool, Card, Double, Index

ROOT = pathlib.Path(__file__).resolve().parents[1]
ASAN = os.environ.get("FSMOOTH_TEST_ASAN") == "1"
A = Array[Double]
AA = Array[Array[Double]]
AI = Array[Index]


def sym(name):
    return sympy.Symbol(name, integer=True, nonnegative=True)


def v(name, ty=Double):
    return Var(name, ty)


def aligned(nbytes):
    return (nbytes + d.ALIGN - 1) // d.ALIGN * d.ALIGN


n, m, k = sym("n"), sym("m"), sym("k")
j = sympy.Symbol("j", integer=True)


# ----------------------------------------------------------------------------- kernels


def vector_add():
    body = d.Build(d.RVar("out"), n, "i",
                   d.Let("x", d.Get(v("a", A), v("i", Index), Double),
                         d.Let("y", d.Get(v("b", A), v("i", Index), Double),
                               d.Prim("add", (v("x"), v("y")), Double), Double), Double), A)
    return d.Kernel("vector_add", "out", (("a", A, (n,)), ("b", A, (m,))), A, (n,), body, (n, m),
                    (d.SizeConstraint(sympy.Ge(m, n), "b", "b is shorter than a"),))


def dot():
    body = d.Ifold(d.Bullet(), "s", "i",
                   d.Let("x", d.Get(v("a", A), v("i", Index), Double),
                         d.Let("y", d.Get(v("b", A), v("i", Index), Double),
                               d.Let("p", d.Prim("mul", (v("x"), v("y")), Double),
                                     d.Prim("add", (v("s"), v("p")), Double), Double), Double), Double),
                   d.Atom_(Lit(0.0, Double)), n, Double)
    return d.Kernel("dot", "out", (("a", A, (n,)), ("b", A, (m,))), Double, (), body, (n, m),
                    (d.SizeConstraint(sympy.Ge(m, n), "b", "b is shorter than a"),))


def transpose():
    # a : n×m;  build m (λ j. build n (λ i. a[i][j]))
    inner = d.Build(d.Offset(d.RVar("out"), j * n), n, "i",
                    d.Let("row", d.Get(v("a", AA), v("i", Index), A),
                          d.Get(v("row", A), v("j", Index), Double), A, (m,)), A)
    body = d.Build(d.RVar("out"), m, "j", inner, AA)
    return d.Kernel("transpose", "out", (("a", AA, (n, m)),), AA, (m, n), body, (n, m))


def vector_norm_of_sum():
    """The DPS paper's running example: vectorNorm(vectorAdd(v1, v2)), vectorAdd a callee."""
    scratch = aligned(8 * n)
    squares = d.Ifold(d.Bullet(), "s", "i",
                      d.Let("x", d.Get(v("t", A), v("i", Index), Double),
                            d.Let("x2", d.Prim("mul", (v("x"), v("x")), Double),
                                  d.Prim("add", (v("s"), v("x2")), Double), Double), Double),
                      d.Atom_(Lit(0.0, Double)), n, Double)
    body = d.Alloc("r", Double, n,
                   d.Let("t", d.Call("vector_add", d.RVar("r"), (v("v1", A), v("v2", A)), A, scratch),
                         d.Let("ss", squares, d.Prim("sqrt", (v("ss"),), Double), Double), A, (n,)))
    callee = vector_add()
    entry = d.Kernel("norm_of_sum", "out", (("v1", A, (n,)), ("v2", A, (m,))), Double, (), body, (n, m),
                     (d.SizeConstraint(sympy.Ge(m, n), "v2", "v2 is shorter than v1"),), scratch)
    return d.Program({"vector_add": callee, "norm_of_sum": entry}, "norm_of_sum")


def jacobi():
    """ifold (λ x t. build n (λ i. (x[max(i-1,0)] + x[i] + x[min(i+1,n-1)]) / 3)) v k"""
    I = Index
    step = d.Build(d.StateDest("x"), n, "i",
                   d.Let("im", d.Prim("sub", (v("i", I), Lit(1, I)), I),
                   d.Let("l", d.Prim("max", (v("im", I), Lit(0, I)), I),
                   d.Let("ip", d.Prim("add", (v("i", I), Lit(1, I)), I),
                   d.Let("last", d.Prim("sub", (v("len", I), Lit(1, I)), I),
                   d.Let("r", d.Prim("min", (v("ip", I), v("last", I)), I),
                   d.Let("xl", d.Get(v("x", A), v("l", I), Double, checked=True),
                   d.Let("xc", d.Get(v("x", A), v("i", I), Double),
                   d.Let("xr", d.Get(v("x", A), v("r", I), Double, checked=True),
                   d.Let("s1", d.Prim("add", (v("xl"), v("xc")), Double),
                   d.Let("s2", d.Prim("add", (v("s1"), v("xr")), Double),
                         d.Prim("div", (v("s2"), Lit(3.0, Double)), Double),
                         Double), Double), Double), Double), Double), I), I), I), I), I), A)
    loop = d.Ifold(d.RVar("out"), "x", "t", step, d.Copy(d.RVar("b0"), v("v", A), n, Double),
                   v("k", Card), A, ("b0", "b1"))
    body = d.Let("len", d.CardOf(n), d.Alloc("b0", Double, n, d.Alloc("b1", Double, n, loop, aligned(8 * n))),
                 Card)
    return d.Kernel("jacobi", "out", (("v", A, (n,)), ("k", Card, ())), A, (n,), body, (n, k),
                    (), 2 * aligned(8 * n))


def if_array():
    """if flag > 0 then build n (λ i. 2 * a[i]) else a"""
    double = d.Build(d.RVar("out"), n, "i",
                     d.Let("x", d.Get(v("a", A), v("i", Index), Double),
                           d.Prim("mul", (Lit(2.0, Double), v("x")), Double), Double), A)
    body = d.Let("c", d.Prim("gt", (v("flag"), Lit(0.0, Double)), Bool),
                 d.If(v("c", Bool), double, d.Copy(d.RVar("out"), v("a", A), n, Double), A), A)
    return d.Kernel("if_array", "out", (("a", A, (n,)), ("flag", Double, ())), A, (n,), body, (n,))


def gather():
    """build m (λ i. a[b[i]]) with a checked read, and an integer // by a parameter"""
    body = d.Build(d.RVar("out"), m, "i",
                   d.Let("bi", d.Get(v("b", AI), v("i", Index), Index),
                         d.Let("q", d.Prim("floordiv", (v("bi", Index), v("div", Index)), Index),
                               d.Get(v("a", A), v("q", Index), Double, checked=True), Index), Index), A)
    return d.Kernel("gather", "out", (("a", A, (n,)), ("b", AI, (m,)), ("div", Index, ())), A, (m,), body,
                    (n, m))


def clashing_names():
    """Parameters named like C keywords, the runtime prefix and the ABI's own names."""
    body = d.Build(d.RVar("out_"), n, "int",
                   d.Let("fs_x", d.Get(v("out", A), v("int", Index), Double),
                         d.Prim("add", (v("fs_x"), v("double")), Double), Double), A)
    return d.Kernel("clash", "out_", (("out", A, (n,)), ("double", Double, ())), A, (n,), body, (n,))


def program(kernel):
    return d.Program({kernel.name: kernel}, kernel.name)


# ----------------------------------------------------------------------------- build and load


def compile_and_load(artifact, tmp: pathlib.Path):
    src = tmp / "kernels.c"
    src.write_text(artifact.source)
    lib = tmp / "libkernels.so"
    sanitize = "address,undefined" if ASAN else "undefined"
    libraries = [f"-l{name}" for name in artifact.libraries]
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-shared", "-fPIC",
                    f"-fsanitize={sanitize}", "-fno-sanitize-recover=all", *artifact.compile_args,
                    f"-I{ROOT / 'clib'}", str(src), "-o", str(lib), "-lm", *libraries],
                   check=True, capture_output=True, text=True)
    ffi = cffi.FFI()
    ffi.cdef(artifact.cdef)
    return ffi, ffi.dlopen(str(lib))


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


def ptr(ffi, arr: np.ndarray):
    ctype = {np.float64: "double *", np.int64: "int64_t *", np.bool_: "bool *"}[arr.dtype.type]
    return ffi.cast(ctype, ffi.from_buffer(arr))


class Runner:
    """Calls kernel ``name`` the way the ABI says: sizes from the interface, scratch, out."""

    def __init__(self, artifact, tmp, name):
        self.ffi, self.lib = compile_and_load(artifact, tmp)
        self.iface = artifact.interfaces[name]
        self.name = self.iface.symbol  # the exported name: t_<kernel> (the tests' module is t)

    def sizes(self, args):
        by_name = dict(zip((p for p, _ in self.iface.params), args))
        return [np.shape(by_name[s.param])[s.dim] if s.dim is not None else by_name[s.param]
                for s in self.iface.sizes]

    def __call__(self, *args):
        ffi, lib = self.ffi, self.lib
        sizes = self.sizes(args)
        check = getattr(lib, f"{self.name}_check_sizes")(*sizes)
        if check:
            return ("size", check)
        rank = len(self.iface.result_dims)
        dims = ffi.new("int64_t[]", max(rank, 1))
        getattr(lib, f"{self.name}_shape")(dims, *sizes)
        scratch_bytes = getattr(lib, f"{self.name}_scratch_bytes")(*sizes)
        scratch = np.zeros(max(scratch_bytes, 1), dtype=np.uint8)
        out = np.zeros(tuple(dims[q] for q in range(rank)), dtype=np.float64)
        cargs = []
        for a in args:
            if isinstance(a, np.ndarray):
                cargs.append(ptr(ffi, a))
                cargs.extend(a.shape)
            else:
                cargs.append(a)
        status = getattr(lib, self.name)(ffi.from_buffer(scratch), ptr(ffi, out), *cargs)
        if status:
            return ("status", status)
        return out if rank else float(out)


def runner(prog, tmp, name=None):
    return Runner(generate_c(dpia_program(prog), "t"), tmp, name or prog.entry)


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("size", [0, 1, 7])
def test_vector_add(tmp, size):
    run = runner(program(vector_add()), tmp)
    rng = np.random.default_rng(size)
    a, b = rng.standard_normal(size), rng.standard_normal(size + 2)
    np.testing.assert_array_equal(run(a, b), a + b[:size])


def test_vector_add_size_constraint(tmp):
    artifact = generate_c(dpia_program(program(vector_add())), "t")
    run = Runner(artifact, tmp, "vector_add")
    assert run(np.ones(5), np.ones(4)) == ("size", 1)
    assert run.iface.constraints[0].param == "b"
    assert run.iface.constraints[0].cond == sympy.Ge(m, n)  # over the size symbols, not the C names
    assert "if (!fs_size_ge(b_d0, a_d0)) return 1;" in artifact.source  # checked: no wrapped size passes


@pytest.mark.parametrize("size", [1, 100])
def test_dot(tmp, size):
    run = runner(program(dot()), tmp)
    rng = np.random.default_rng(size)
    a, b = rng.standard_normal(size), rng.standard_normal(size)
    assert run(a, b) == pytest.approx(float(np.dot(a, b)), rel=1e-12)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (6, 2)])
def test_transpose(tmp, shape):
    artifact = generate_c(dpia_program(program(transpose())), "t")
    run = Runner(artifact, tmp, "transpose")
    a = np.random.default_rng(0).standard_normal(shape)
    np.testing.assert_array_equal(run(a), a.T)
    subscripts = re.findall(r"\[([^\]]*)\]", artifact.source.split("static int t_transpose_body(")[-1])
    assert subscripts and all("/" not in s and "%" not in s and "fs_" not in s for s in subscripts)


def test_running_example_with_callee_and_alloc(tmp):
    prog = vector_norm_of_sum()
    run = runner(prog, tmp)
    rng = np.random.default_rng(3)
    v1, v2 = rng.standard_normal(9), rng.standard_normal(9)
    assert run(v1, v2) == pytest.approx(float(np.linalg.norm(v1 + v2)), rel=1e-12)
    assert getattr(run.lib, "t_norm_of_sum_scratch_bytes")(9, 9) == 80
    (tmp / "callee").mkdir()
    callee = Runner(generate_c(dpia_program(prog), "t"), tmp / "callee", "vector_add")
    np.testing.assert_array_equal(callee(v1, v2), v1 + v2)
    source = generate_c(dpia_program(prog), "t").source
    assert "t_vector_add_body((char *)scratch + " in source
    assert "malloc" not in source


def jacobi_numpy(x, steps):
    x = x.copy()
    for _ in range(steps):
        left = np.concatenate([x[:1], x[:-1]])
        right = np.concatenate([x[1:], x[-1:]])
        x = (left + x + right) / 3.0
    return x


@pytest.mark.parametrize("size,steps", [(1, 3), (8, 0), (8, 1), (10, 5)])
def test_jacobi_double_buffer(tmp, size, steps):
    run = runner(program(jacobi()), tmp)
    x = np.random.default_rng(size).standard_normal(size)
    np.testing.assert_allclose(run(x, steps), jacobi_numpy(x, steps), rtol=1e-13)
    assert run.lib.t_jacobi_scratch_bytes(size, steps) == 2 * aligned(8 * size)


def test_if_writing_an_array(tmp):
    run = runner(program(if_array()), tmp)
    a = np.arange(5.0)
    np.testing.assert_array_equal(run(a, 1.0), 2 * a)
    np.testing.assert_array_equal(run(a, -1.0), a)


def test_checked_gather_and_division(tmp):
    run = runner(program(gather()), tmp)
    a = np.arange(10.0) * 1.5
    b = np.array([0, 9, 3, 19, 4], dtype=np.int64)
    np.testing.assert_array_equal(run(a, b, 2), a[b // 2])
    assert run(a, b, -3) == ("status", 1)  # 9 // -3 == -3: out of range
    np.testing.assert_array_equal(run(a, -b[1:3], -1), a[b[1:3]])
    assert run(a, b, 0) == ("status", 2)
    assert run(a, np.array([10], dtype=np.int64), 1) == ("status", 1)
    assert run(a, np.array([-1], dtype=np.int64), 1) == ("status", 1)


def test_names_that_clash_in_c(tmp):
    run = runner(program(clashing_names()), tmp)
    a = np.arange(4.0)
    np.testing.assert_array_equal(run(a, 0.5), a + 0.5)


RUNTIME_PROBE = r"""
#include <stdio.h>
#include "fsmooth_rt.h"
int main(void) {
    int64_t xs[] = {7, -7, 0, 5, -5, 9223372036854775807LL};
    int64_t ys[] = {2, -2, 3, -3, 1, -1};
    for (int a = 0; a < 6; a++) for (int b = 0; b < 6; b++)
        printf("%lld %lld\n", (long long)fs_floordiv_i64(xs[a], ys[b]), (long long)fs_mod_i64(xs[a], ys[b]));
    double fx[] = {7.5, -7.5, 0.0, 1e300, -0.25};
    double fy[] = {2.0, -2.0, 0.1, -3.0, 7.0};
    for (int a = 0; a < 5; a++) for (int b = 0; b < 5; b++)
        printf("%.17g %.17g\n", fs_floordiv_f64(fx[a], fy[b]), fs_mod_f64(fx[a], fy[b]));
    printf("%g %g %g\n", fs_min_f64(1.0, 2.0), fs_max_f64(1.0, 2.0), (double)fs_abs_i64(-3));
    for (int a = 0; a < 6; a++) for (int b = 0; b < 6; b++)
        printf("%lld\n", (long long)fs_ceildiv_i64(xs[a], ys[b]));
    return 0;
}
"""


def test_runtime_header_has_python_semantics(tmp):
    (tmp / "probe.c").write_text(RUNTIME_PROBE)
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'clib'}",
                    "-fsanitize=undefined", "-fno-sanitize-recover=all",
                    str(tmp / "probe.c"), "-o", str(tmp / "probe"), "-lm"], check=True)
    lines = subprocess.run([str(tmp / "probe")], check=True, capture_output=True, text=True).stdout.split("\n")
    xs, ys = [7, -7, 0, 5, -5, 2**63 - 1], [2, -2, 3, -3, 1, -1]
    expected = [f"{x // y} {x % y}" for x in xs for y in ys]
    assert lines[:36] == expected
    fx, fy = [7.5, -7.5, 0.0, 1e300, -0.25], [2.0, -2.0, 0.1, -3.0, 7.0]
    got = [tuple(float(t) for t in line.split()) for line in lines[36:61]]
    assert got == [(x // y, x % y) for x in fx for y in fy]
    assert lines[61] == "1 2 3"
    assert lines[62:98] == [str(-(-x // y)) for x in xs for y in ys]  # fs_ceildiv_i64


def run_under_address_sanitizer(test_file: str, selection: str) -> subprocess.CompletedProcess:
    """pytest on ``test_file -k selection`` in a process with libasan preloaded (FSMOOTH_TEST_ASAN=1
    makes ``compile_and_load`` build with -fsanitize=address)."""
    env = {**os.environ, "FSMOOTH_TEST_ASAN": "1", "ASAN_OPTIONS": "detect_leaks=0", "OMP_NUM_THREADS": "2",
           "LD_PRELOAD": subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                        text=True, check=True).stdout.strip()}

    def larger_stack():  # the front end recurses deeply, and AddressSanitizer's frames are larger
        resource.setrlimit(resource.RLIMIT_STACK, (256 << 20, resource.getrlimit(resource.RLIMIT_STACK)[1]))

    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           test_file, "-k", selection],
                          cwd=ROOT, env=env, capture_output=True, text=True, preexec_fn=larger_stack)


@pytest.mark.skipif(ASAN, reason="already running under AddressSanitizer")
def test_everything_under_address_sanitizer():
    result = run_under_address_sanitizer(__file__, "not address_sanitizer and not runtime_header")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]



def test_corpus_c_is_warning_free(tmp):
    """The C of every exported kernel of tests/corpus, through the whole pipeline."""
    import fsmooth as fs
    from corpus import ba, gmm, image, iterate, linalg, ml
    from fsmooth.driver import compile_to_c

    kernels = [k for mod in (ba, gmm, image, iterate, linalg, ml) for k in vars(mod).values()
               if isinstance(k, fs.Kernel) and not k.program().main.is_helper]
    assert len(kernels) > 20
    for kern in kernels:
        src = tmp / f"{kern.name}.c"
        src.write_text(compile_to_c(kern.program()).source)
        result = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                                 f"-I{ROOT / 'clib'}", str(src)], capture_output=True, text=True)
        assert result.returncode == 0, (kern.name, result.stderr)


def test_array_state_ifold_swaps_buffers_without_copying():
    """RISE & Shine's double buffer: inside the iteration loop, the step writes one buffer from the
    other and the pointers trade places; no loop copies a state (the one copy is after the loop)."""
    from corpus import iterate
    from fsmooth.driver import compile_to_c

    for options in (None, Options(fusion=False, inline_kernels=False)):
        source = compile_to_c(iterate.jacobi.program(), options or Options()).source
        body = source.split("static int t_jacobi_body(")[-1]
        start = body.index("for (int64_t step")
        depth, end = 0, start
        for end in range(start, len(body)):
            depth += {"{": 1, "}": -1}.get(body[end], 0)
            if depth == 0 and body[end] == "}":
                break
        loop, after = body[start:end + 1], body[end + 1:]
        assert "fs_swap" in loop
        copy_loop = r"for \(int64_t (\w+) = 0; \1 < [^;]+; \1\+\+\) \{\s*\w+\[\1\] = \w+\[\1\];\s*\}"
        assert not re.search(copy_loop, loop), loop
        assert re.search(copy_loop, after)  # the final state goes to out once


def test_status_variable_instead_of_early_returns():
    """Every failure sets the status and jumps to the exit of its scope (a parallel iteration may not
    return): no `return` but the last one in a kernel body."""
    for prog in (program(gather()), program(jacobi()), vector_norm_of_sum()):
        for options in (Options(), Options(allocation="malloc"), Options(parallel=True)):
            source = generate_c(dpia_program(prog), "t", options).source
            bodies = re.findall(r"static int \w+_body\([^;]*?\{\n.*?\n\}\n", source, re.S)
            assert len(bodies) == len(prog.kernels)
            assert all(body.count("return ") == 1 for body in bodies), bodies
            assert any("goto fs_exit;" in body for body in bodies)


def test_divisions_of_nonnegative_indices_are_plain_c():
    """Inside loops whose variables are ≥ 0, a modulo or quotient by a positive constant is C's own
    `%` or `/` (they agree with Python's there); elsewhere the floor-semantics helpers remain."""
    import sympy

    from fsmooth.dps.ranges import Ranges, truncating_divisions
    from fsmooth.shape.size_printer import NonnegativeMod, NonnegativeQuotient

    i, n = sympy.Symbol("i", integer=True), sympy.Symbol("n", integer=True, nonnegative=True)
    ranges = Ranges().inside(i, n - 1)
    assert truncating_divisions(sympy.Mod(i + 1, 3), ranges) == NonnegativeMod(i + 1, 3)
    assert truncating_divisions(sympy.floor((i + 1) / 3), ranges) == NonnegativeQuotient(i + 1, 3)
    assert truncating_divisions(sympy.Mod(i - n, 3), ranges) == sympy.Mod(i - n, 3)  # may be negative
    assert truncating_divisions(sympy.Mod(i, n), ranges) == NonnegativeMod(i, n)  # the loop runs: n ≥ 1


def test_void_casts_only_for_unused_parameters():
    """``(void)p;`` silences -Wunused-parameter; a parameter the function reads gets none."""
    from corpus import linalg

    source = linalg.vector_add.c_source()

    def definition(head: str) -> str:
        return re.search(rf"^{re.escape(head)}\([^)]*\) {{\n(.*?)^}}", source, re.M | re.S).group(1)

    body = definition("static int examples_vector_add_body")
    assert "(void)scratch;" in body and "(void)v2_d0;" in body  # no arena; the loop runs to v1_d0
    for used in ("out", "v1", "v2", "v1_d0"):
        assert re.search(rf"\b{used}\b", body) and f"(void){used};" not in body
    assert "(void)" not in definition("int examples_vector_add_check_sizes")  # both lengths are constrained
    shape = definition("void examples_vector_add_shape")
    assert "(void)dims_out;" not in shape and "(void)v2_d0;" in shape  # the result is v1's length
