"""Every program outside the F̃ subset is a CompileError at the offending construct, and nothing else.

Each error kernel marks its offending line with a comment ``# E:<name>``; the test finds the
line in this file and the column from a snippet of the offending construct on it.
"""
from __future__ import annotations

import importlib.util
import itertools
import re
import math
import sys
import textwrap
import warnings
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fsmooth as fs
from fsmooth import Array, Bool, Card, CompileError, Double, Index, build, ifold, kernel, length
from fsmooth.driver import compile_to_c
from fsmooth.frontend import parse_program

SCALE = 2.0  # a global that is neither a kernel nor a built-in


def not_a_kernel(x):
    return x


# ----------------------------------------------------------------------------- error kernels

@kernel
def for_loop(a: Array[Double]) -> Double:
    s = 0.0
    for i in range(length(a)):  # E:for
        s = s + a[i]
    return s


@kernel
def while_loop(n: Card) -> Card:
    while n > 0:  # E:while
        n = n - 1
    return n


@kernel
def direct_recursion(n: Card) -> Card:
    return 0 if n == 0 else direct_recursion(n - 1)  # E:direct-recursion


@kernel
def ping(n: Card) -> Card:
    return pong(n)


@kernel
def pong(n: Card) -> Card:
    return 1 + ping(n)  # E:mutual-recursion


@kernel
def subscript_assignment(a: Array[Double]) -> Array[Double]:
    a[0] = 1.0  # E:subscript-assignment
    return a


@kernel
def attribute_assignment(a: Array[Double]) -> Array[Double]:
    a.flags = 1  # E:attribute-assignment
    return a


@kernel
def rebinding(x: Double) -> Double:
    y = x + 1.0
    y = y * 2.0  # E:rebinding
    return y


@kernel
def rebinding_parameter(x: Double) -> Double:
    x = x + 1.0  # E:rebinding-parameter
    return x


@kernel
def augmented_assignment(x: Double) -> Double:
    y = x
    y += 1.0  # E:augmented
    return y


@kernel
def returns_lambda(x: Double) -> Double:
    return lambda y: x + y  # E:returns-function


@kernel
def annotated_function_result(x: Double) -> Callable[[Double], Double]:  # E:function-result
    return x


@kernel
def calls_plain_function(x: Double) -> Double:
    return not_a_kernel(x)  # E:not-a-kernel


@kernel
def calls_numpy(a: Array[Double]) -> Double:
    return np.sum(a)  # E:numpy-call


@kernel
def two_args(x: Double, y: Double) -> Double:
    return x + y


@kernel
def wrong_kernel_arity(x: Double) -> Double:
    return two_args(x)  # E:kernel-arity


@kernel
def wrong_builtin_arity(x: Double) -> Double:
    return math.sqrt(x, x)  # E:builtin-arity


@kernel
def double_plus_bool(x: Double, b: Bool) -> Double:
    return x + b  # E:double-plus-bool


@kernel
def index_with_double(a: Array[Double], x: Double) -> Double:
    return a[x]  # E:index-double


@kernel
def wrong_result(a: Array[Double]) -> Double:
    return a  # E:wrong-result


@kernel
def wrong_result_index(x: Double) -> Index:
    return x * 2.0  # E:wrong-result-index


@kernel
def missing_return(x: Double) -> Double:  # E:missing-return
    y = x + 1.0


@kernel
def branch_without_return(x: Double) -> Double:
    if x > 0.0:  # E:branch-return
        y = x
    return x


@kernel
def build_index_size(a: Array[Double], i: Index) -> Array[Double]:
    return build(i, lambda j: a[j])  # E:build-index


@kernel
def ifold_double_count(x: Double) -> Double:
    return ifold(lambda s, j: s + 1.0, 0.0, x)  # E:ifold-double


@kernel
def reads_global(x: Double) -> Double:
    return x * SCALE  # E:global


@kernel
def calls_print(x: Double) -> Double:
    print(x)  # E:print
    return x


@kernel
def uses_try(x: Double) -> Double:
    try:  # E:try
        return x
    except ValueError:
        return 0.0


@kernel
def uses_with(x: Double) -> Double:
    with open("f") as f:  # E:with
        return x


@kernel
def comprehension(a: Array[Double]) -> Array[Double]:
    return [a[i] for i in range(length(a))]  # E:comprehension


@kernel
def missing_parameter_annotation(a, n: Card) -> Card:  # E:missing-annotation
    return n


@kernel
def missing_result_annotation(n: Card):  # E:missing-result-annotation
    return n


@kernel
def unsupported_annotation(x: float) -> Double:  # E:unsupported-annotation
    return x


@kernel
def undefined_name(x: Double) -> Double:
    return x + y_undefined  # E:undefined  # noqa: F821


@kernel
def condition_not_bool(x: Double) -> Double:
    return x if x else 0.0  # E:condition


@kernel
def lambda_arity(a: Array[Double]) -> Array[Double]:
    return build(length(a), lambda i, j: a[i])  # E:lambda-arity


@kernel
def slicing(a: Array[Double]) -> Array[Double]:
    return a[1:]  # E:slice


@kernel
def unicode_columns(α: Double, β: Bool) -> Double:
    γ = α * 2.0
    return γ + (γ + β)  # E:unicode


@kernel
def declared_wrong(x: Double) -> Double:
    y: Index = x  # E:declared
    return y


@kernel
def keyword_argument(x: Double, y: Double) -> Double:
    return two_args(x, y=y)  # E:keyword


@kernel
def build_of_tuples(a: Array[Double]) -> Array[Double]:
    pairs = build(length(a), lambda i: (a[i], 2.0 * a[i]))  # E:build-tuple
    return a


@kernel
def tuple_index_variable(x: Double, i: Index) -> Double:
    t = (x, x)
    return t[i]  # E:tuple-index


@kernel
def tuple_index_range(x: Double) -> Double:
    t = (x, x)
    return t[2]  # E:tuple-range


@kernel
def unpack_arity(x: Double) -> Double:
    a, b, c = (x, x)  # E:unpack-arity
    return a


@kernel
def unpack_scalar(x: Double) -> Double:
    a, b = x  # E:unpack-scalar
    return a


@kernel
def tuple_compare(x: Double) -> Bool:
    return (x, x) < (x, 1.0)  # E:tuple-compare


@kernel
def tuple_branch_shapes(a: Array[Double], c: Bool) -> tuple[Array[Double], Double]:
    return (a, 1.0) if c else (build(length(a) + 1, lambda i: 0.0), 2.0)  # E:tuple-if-shape


@kernel
def tuple_state_shape(a: Array[Double], n: Card) -> tuple[Array[Double], Double]:
    return ifold(lambda s, i: (build(length(s[0]) + 1, lambda j: 0.0), s[1]), (a, 0.0), n)  # E:tuple-ifold-shape


@kernel
def tuple_branch_types(x: Double, c: Bool) -> tuple[Double, Double]:
    return (x, x) if c else (x, x, x)  # E:tuple-branch-types


@kernel
def math_binary_arity(x: Double) -> Double:
    return fs.atan2(x) + x  # E:atan2-arity


@kernel
def math_unary_arity(x: Double) -> Double:
    return x + math.tanh(x, x)  # E:tanh-arity


@kernel
def int_arity(x: Double) -> Index:
    return int(x, 10)  # E:int-arity


@kernel
def isnan_of_bool(b: Bool) -> Bool:
    return fs.isnan(b)  # E:isnan-bool


@kernel
def hypot_of_array(a: Array[Double], x: Double) -> Double:
    return x * math.hypot(x, a)  # E:hypot-array


@kernel
def lgamma_of_bool(b: Bool) -> Double:
    return fs.lgamma(b)  # E:lgamma-bool


@kernel
def int_of_array(a: Array[Double]) -> Index:
    return int(a)  # E:int-array


@kernel
def float_of_array(a: Array[Double]) -> Double:
    return float(a)  # E:float-array


@kernel
def isinf_is_bool(x: Double) -> Double:
    return fs.isinf(x)  # E:isinf-result


@kernel
def int_is_index(x: Double) -> Card:
    return int(x)  # E:int-result


# ----------------------------------------------------------------------------- the checks

SOURCE = open(__file__, encoding="utf-8").read().splitlines()


def marked_line(marker: str) -> int:
    (line,) = [n for n, text in enumerate(SOURCE, 1) if text.rstrip().endswith(f"# E:{marker}")
               or f"# E:{marker} " in text]
    return line


CASES = [
    # (kernel, marker, snippet at the reported column, words the message must contain)
    (for_loop, "for", "for i", ["for-loop"]),
    (while_loop, "while", "while", ["while-loop"]),
    (direct_recursion, "direct-recursion", "direct_recursion(n - 1)", ["recursion", "direct_recursion"]),
    (ping, "mutual-recursion", "ping(n)", ["recursion", "ping → pong → ping"]),
    (subscript_assignment, "subscript-assignment", "a[0]", ["array element", "immutable"]),
    (attribute_assignment, "attribute-assignment", "a.flags", ["attribute"]),
    (rebinding, "rebinding", "y = y", ["rebinding", "y"]),
    (rebinding_parameter, "rebinding-parameter", "x = x", ["rebinding the parameter x"]),
    (augmented_assignment, "augmented", "y +=", ["rebinds y"]),
    (returns_lambda, "returns-function", "lambda", ["returns a function"]),
    (annotated_function_result, "function-result", "Callable[[Double], Double]:", ["returns a function"]),
    (calls_plain_function, "not-a-kernel", "not_a_kernel", ["not_a_kernel", "neither"]),
    (calls_numpy, "numpy-call", "np.sum", ["np.sum", "neither"]),
    (wrong_kernel_arity, "kernel-arity", "two_args(x)", ["two_args takes 2 arguments", "1 was given"]),
    (wrong_builtin_arity, "builtin-arity", "math.sqrt(x, x)", ["math.sqrt takes 1 argument"]),
    (double_plus_bool, "double-plus-bool", "x + b", ["'+'", "Double", "Bool"]),
    (index_with_double, "index-double", "x]", ["index", "Double"]),
    (wrong_result, "wrong-result", "a  #", ["Array<Double>", "annotated Double"]),
    (wrong_result_index, "wrong-result-index", "x * 2.0", ["returns a Double", "annotated Index"]),
    (missing_return, "missing-return", "def", ["does not end in `return`"]),
    (branch_without_return, "branch-return", "if", ["must end in `return`"]),
    (build_index_size, "build-index", "i,", ["build size must be a Card", "Index"]),
    (ifold_double_count, "ifold-double", "x)", ["ifold count must be a Card or an Index", "Double"]),
    (reads_global, "global", "SCALE", ["SCALE", "neither a kernel nor a built-in"]),
    (calls_print, "print", "print", ["print"]),
    (uses_try, "try", "try", ["try"]),
    (uses_with, "with", "with", ["with"]),
    (comprehension, "comprehension", "[a[i]", ["comprehension", "build"]),
    (missing_parameter_annotation, "missing-annotation", "a,", ["parameter a", "no type annotation"]),
    (missing_result_annotation, "missing-result-annotation", "def", ["no result annotation"]),
    (unsupported_annotation, "unsupported-annotation", "float", ["unsupported annotation"]),
    (undefined_name, "undefined", "y_undefined", ["y_undefined", "not defined"]),
    (condition_not_bool, "condition", "x else", ["must be a Bool", "Double"]),
    (lambda_arity, "lambda-arity", "lambda i, j", ["2 parameters", "given 1"]),
    (slicing, "slice", "1:", ["slices"]),
    (keyword_argument, "keyword", "y=y", ["keyword"]),
    (unicode_columns, "unicode", "γ + β", ["'+'", "Bool"]),
    (declared_wrong, "declared", "x  #", ["declared Index", "Double"]),
    (build_of_tuples, "build-tuple", "lambda i: (a[i]", ["array of tuples", "build each component"]),
    (tuple_index_variable, "tuple-index", "i]", ["tuple index must be an integer constant"]),
    (tuple_index_range, "tuple-range", "2]", ["tuple index 2 out of range", "tuple of 2"]),
    (unpack_arity, "unpack-arity", "a, b, c", ["cannot unpack a tuple of 2 into 3 names"]),
    (unpack_scalar, "unpack-scalar", "a, b", ["cannot unpack a Double"]),
    (tuple_compare, "tuple-compare", "(x, x) <", ["tuple cannot be compared"]),
    (tuple_branch_shapes, "tuple-if-shape", "(a, 1.0) if", ["different shapes"]),
    (tuple_state_shape, "tuple-ifold-shape", "ifold(", ["state of this ifold changes shape"]),
    (tuple_branch_types, "tuple-branch-types", "(x, x) if", ["different types"]),
    (math_binary_arity, "atan2-arity", "fs.atan2(x)", ["fs.atan2 takes 2 arguments", "1 was given"]),
    (math_unary_arity, "tanh-arity", "math.tanh(x, x)", ["math.tanh takes 1 argument", "2 were given"]),
    (int_arity, "int-arity", "int(x, 10)", ["int takes 1 argument", "2 were given"]),
    (isnan_of_bool, "isnan-bool", "fs.isnan(b)", ["isnan needs a number", "Bool"]),
    (hypot_of_array, "hypot-array", "math.hypot(x, a)", ["hypot needs numbers", "Array<Double>"]),
    (lgamma_of_bool, "lgamma-bool", "fs.lgamma(b)", ["lgamma needs a number", "Bool"]),
    (int_of_array, "int-array", "int(a)", ["int() needs a number or a Bool", "Array<Double>"]),
    (float_of_array, "float-array", "float(a)", ["float() needs a number or a Bool", "Array<Double>"]),
    (isinf_is_bool, "isinf-result", "fs.isinf(x)", ["returns a Bool", "annotated Double"]),
    (int_is_index, "int-result", "int(x)", ["returns an Index", "annotated Card"]),
]


@pytest.mark.parametrize("k, marker, snippet, words", CASES, ids=[c[1] for c in CASES])
def test_compile_error_is_located(k, marker, snippet, words):
    with pytest.raises(CompileError) as info:
        compile_to_c(parse_program(k))  # the shape errors (S-If, S-Ifold) come after the front end
    err = info.value
    line = marked_line(marker)
    text = SOURCE[line - 1]
    assert (err.filename, err.lineno) == (__file__, line), str(err)
    assert err.col_offset == text.index(snippet), str(err)
    for word in words:
        assert word in err.message, err.message
    rendered = str(err).splitlines()
    assert rendered[0].startswith(f"{__file__}:{line}:{err.col_offset + 1}: error: ")
    assert rendered[1] == f"    {text}"
    assert rendered[2].startswith(" " * (4 + err.col_offset) + "^")
    assert rendered[2].strip("~ ") == "^"


def test_recursion_is_found_from_either_end():
    with pytest.raises(CompileError) as info:
        parse_program(pong)
    assert "pong → ping → pong" in info.value.message
    assert info.value.lineno == marked_line("mutual-recursion") - 5  # the call pong(n) in ping


def test_errors_in_indented_kernels_point_into_the_file():
    @kernel
    def nested(a: Array[Double], k: Index) -> Array[Double]:
        return build(k, lambda j: a[j])  # E:nested

    with pytest.raises(CompileError) as info:
        parse_program(nested)
    line = marked_line("nested")
    assert (info.value.lineno, info.value.col_offset) == (line, SOURCE[line - 1].index("k, lambda"))


# ----------------------------------------------------------------------------- fuzzing

_COUNTER = itertools.count()

_HEADER = textwrap.dedent("""\
    import math
    from typing import Callable
    import numpy as np
    import fsmooth as fs
    from fsmooth import Array, Bool, Card, Double, Float, Index, build, ifold, kernel, length


    @fs.kernel
    def helper(f: Callable[[Double], Double], x: Double) -> Double:
        return f(x)


    @fs.kernel
    def other(x: Double, n: Card) -> Double:
        return x * n


    @fs.kernel
    def k(a: Array[Double], m: Array[Array[Double]], n: Card, i: Index, x: Double, f: Float,
          b: Bool) -> {result}:
    """)


def _compile_source(source: str, tmp_path):
    """Import ``source`` as a module and compile its kernel ``k``: only CompileError may escape."""
    name = f"fuzz_kernel_{next(_COUNTER)}"
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings of the random source
            spec.loader.exec_module(module)
        target = module.k
    except Exception:  # not even Python (or fails at import): not the front end's input
        return None
    finally:
        sys.modules.pop(name, None)
    if not isinstance(target, fs.Kernel):
        return None
    try:
        program = parse_program(target)
    except CompileError as err:
        assert err.loc is not None and err.message
        return err
    for definition in program.kernels.values():
        _assert_typed(definition.body)
    return program


def _assert_typed(e):
    import dataclasses

    from fsmooth.core import Expr

    assert e.ty is not None and e.loc is not None, e
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, Expr):
                _assert_typed(item)


_NAMES = ["a", "m", "n", "i", "x", "f", "b", "t", "u", "q", "undefined_zz", "SCALE_ZZ", "np", "math", "fs"]
_CALLEES = ["build", "ifold", "length", "math.sqrt", "fs.exp", "abs", "min", "max", "print", "len",
            "helper", "other", "k", "np.sum", "float", "fs.floor", "pow", "int", "fs.atan2", "math.isnan",
            "fs.lgamma"]
_BINOPS = ["+", "-", "*", "/", "//", "%", "**", "<", "<=", "==", "!=", ">", " and ", " or ", "@", "&", " is ", " in "]
_ATOMS = st.one_of(
    st.sampled_from(_NAMES),
    st.integers(-3, 5).map(str),
    st.sampled_from(["0.5", "2.0", "True", "False", "None", "'s'", "1j", "99999999999999999999999"]),
)


def _expressions():
    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(_BINOPS), inner).map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
            st.tuples(st.sampled_from(["-", "not ", "+", "~"]), inner).map(lambda t: f"({t[0]}{t[1]})"),
            st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
            st.tuples(st.sampled_from(_CALLEES), st.lists(inner, max_size=3))
            .map(lambda t: f"{t[0]}({', '.join(t[1])})"),
            st.tuples(st.sampled_from(["t", "u", "i", "t, u", "n"]), inner).map(lambda t: f"(lambda {t[0]}: {t[1]})"),
            st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
            st.tuples(inner, inner).map(lambda t: f"[{t[0]} for q in {t[1]}]"),
            inner.map(lambda e: f"{e}.shape"),
            inner.map(lambda e: f"{e}[1:]"),
        )

    return st.recursive(_ATOMS, extend, max_leaves=8)


def _statements(expr):
    simple = st.one_of(
        st.tuples(st.sampled_from(["t", "u", "q", "x", "a[0]", "t.v", "t, u"]), expr).map(lambda t: f"{t[0]} = {t[1]}"),
        expr.map(lambda e: f"return {e}"),
        expr.map(lambda e: f"t += {e}"),
        expr.map(lambda e: f"print({e})"),
        st.just("pass"),
    )
    compound = st.tuples(st.sampled_from(["if {}:", "for q in {}:", "while {}:", "with {}:"]), expr,
                         st.lists(simple, min_size=1, max_size=2)).map(
        lambda t: "\n".join([t[0].format(t[1])] + ["    " + s for s in t[2]]))
    return st.lists(st.one_of(simple, compound), min_size=0, max_size=4)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(result=st.sampled_from(["Double", "Index", "Array[Double]", "Bool", "Float", "Card", "float"]),
       statements=_statements(_expressions()), final=_expressions())
def test_random_programs_raise_only_compile_errors(tmp_path, result, statements, final):
    body = "\n".join(statements + [f"return {final}"])
    source = _HEADER.format(result=result) + textwrap.indent(body, "    ") + "\n"
    _compile_source(source, tmp_path)


_VALID_BODY = textwrap.indent(textwrap.dedent("""\
    s = ifold(lambda acc, j: acc + a[j] * m[j][0], 0, length(a))
    r = build(n, lambda j: helper(lambda y: y * f, 1.0 * j))
    if b and i < n:
        return s + r[i] + other(x, n)
    return math.sqrt(abs(s)) if s > x else fs.exp(-x)
"""), "    ")
_VALID = _HEADER.format(result="Double") + _VALID_BODY


_WORDS = list(re.finditer(r"[A-Za-z_][A-Za-z_0-9]*|[0-9.]+|[-+*/<>]=?|==", _VALID_BODY))
_REPLACEMENTS = ["a", "m", "n", "i", "x", "f", "b", "s", "r", "j", "acc", "y", "0", "1", "-1", "0.5", "True",
                 "length", "build", "ifold", "helper", "other", "k", "math.sqrt", "abs", "+", "/", "//",
                 "<", "==", "and", "not", "lambda: 0", "a[0]", "m[0]", "(lambda y: y)", "print", "SCALE"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.integers(0, len(_WORDS) - 1), st.sampled_from(_REPLACEMENTS)),
                      min_size=1, max_size=3, unique_by=lambda e: e[0]))
def test_mutated_programs_raise_only_compile_errors(tmp_path, edits):
    """Words of a valid kernel replaced by others: mostly still Python, often not F̃."""
    body = _VALID_BODY  # the header stays intact, so that the kernel k still exists
    for word, replacement in sorted(((_WORDS[w], r) for w, r in edits), key=lambda e: -e[0].start()):
        body = body[:word.start()] + replacement + body[word.end():]
    _compile_source(_HEADER.format(result="Double") + body, tmp_path)


def test_the_unmutated_fuzz_program_compiles(tmp_path):
    from fsmooth.core import run_kernel

    program = _compile_source(_VALID, tmp_path)
    assert not isinstance(program, CompileError) and program is not None, program
    assert set(program.kernels) == {"helper", "other", "k"}
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(4), rng.standard_normal((4, 2)), 3, 2, 0.5, 1.5, True]
    assert run_kernel(program, "k", args) == pytest.approx(sum(args[0] * args[1][:, 0]) + 2 * 1.5 + 0.5 * 3)


# ----------------------------------------------------------------------------- deep programs, divisions by zero,
# helpers from Python, errors located (issue 13)

def _module(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text("import typing\nimport fsmooth as fs\nfrom fsmooth import Array, Card, Double, build\n\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dependent_lines(count: int) -> str:
    lines = [f"    x{k} = x{k - 1} + 1.0" if k % 2 else f"    x{k} = x{k - 1} * 0.5" for k in range(1, count + 1)]
    return "@fs.kernel\ndef chain(x0: Double) -> Double:\n" + "\n".join(lines) + f"\n    return x{count}\n"


def test_two_hundred_dependent_lines_compile(tmp_path):
    chain = _module(tmp_path, "deep_chain", _dependent_lines(200)).chain
    assert chain(3.0) == chain.reference(3.0)


def test_a_long_sum_compiles(tmp_path):
    terms = " + ".join(f"a[{i}]" for i in range(60))
    total = _module(tmp_path, "deep_sum", f"@fs.kernel\ndef total(a: Array[Double]) -> Double:\n    return {terms}\n").total
    assert total(np.arange(60.0)) == sum(range(60))


def test_too_deep_a_program_is_a_compile_error_at_its_def(tmp_path, monkeypatch):
    import fsmooth.deep_stack

    monkeypatch.setattr(fsmooth.deep_stack, "RECURSION_LIMIT", 1000)  # the same failure, reached sooner
    chain = _module(tmp_path, "too_deep", _dependent_lines(1500)).chain
    with pytest.raises(CompileError, match="nested too deeply") as err:
        chain.program()
    assert (err.value.lineno, err.value.col_offset) == (6, 0)
    assert "def chain" in str(err.value) and "^" in str(err.value)


@pytest.mark.parametrize("body, args", [("return 7 % 0", (1,)), ("return 1 // 0", (1,)), ("return n % 0", (3,)),
                                        ("return n // (n - n)", (3,)), ("return n + 1 if n > 5 else n % 0", (3,))])
def test_an_integer_division_by_zero_is_a_run_time_error(tmp_path, body, args):
    k = _module(tmp_path, "divide_by_zero", f"@fs.kernel\ndef k(n: Card) -> Card:\n    {body}\n").k
    with pytest.raises(ZeroDivisionError):
        k.reference(*args)
    with pytest.raises(ZeroDivisionError):
        k(*args)


def test_a_build_sized_by_a_division_by_zero_is_a_located_compile_error(tmp_path):
    k = _module(tmp_path, "build_by_zero",
                "@fs.kernel\ndef k(n: Card) -> Array[Double]:\n    return build(n // 0, lambda i: 1.0)\n").k
    with pytest.raises(CompileError, match="dividing by zero") as err:
        k.c_source()
    assert (err.value.lineno, err.value.col_offset) == (7, 11)


def test_a_helper_called_from_python_is_a_type_error(tmp_path):
    helper = _module(tmp_path, "helper_from_python", "@fs.kernel\ndef apply(x: Double, f: typing.Callable[[Double], Double]) -> Double:\n"
                     "    return f(x)\n").apply
    with pytest.raises(TypeError, match="helper.*only from kernels"):
        helper(1.0, lambda x: x)
    assert helper.reference(2.0, lambda x: x * 3.0) == 6.0


BAD_PROGRAMS = {
    "build_by_zero": "@fs.kernel\ndef k(n: Card) -> Array[Double]:\n    return build(n // 0, lambda i: 1.0)\n",
    "data_size": "@fs.kernel\ndef k(v: Array[Double]) -> Array[Double]:\n    return build(int(v[0]), lambda i: 1.0)\n",
    "type": "@fs.kernel\ndef k(x: Double) -> Double:\n    return x + (x < 1.0)\n",
}


@pytest.mark.parametrize("name", sorted(BAD_PROGRAMS))
def test_every_compile_error_is_located(tmp_path, name):
    module = _module(tmp_path, f"bad_{name}", BAD_PROGRAMS[name])
    kernel = next(v for v in vars(module).values() if isinstance(v, fs.Kernel))
    with pytest.raises(CompileError) as err:
        kernel.c_source()
    e = err.value
    assert e.filename == str(tmp_path / f"bad_{name}.py") and e.lineno >= 5 and e.col_offset is not None
    source_line, caret = str(e).splitlines()[1:3]
    assert source_line.strip() and caret.strip().startswith("^")


def test_a_kernel_name_clashing_with_the_library_is_located(tmp_path):
    from fsmooth.embed import library
    from fsmooth.options import default_options

    # exported as clash_status_message, the library's own status function
    module = _module(tmp_path, "clash", "@fs.kernel\ndef status_message(x: Double) -> Double:\n    return x\n")
    with pytest.raises(CompileError, match="clashes with the library") as err:
        library("clash", [module.status_message], default_options(), "clash.py")
    assert (err.value.filename, err.value.lineno, err.value.col_offset) == (str(tmp_path / "clash.py"), 6, 0)
