"""Tuples beyond the corpus: the C ABI of tuple results and parameters, components written in
place, a fold over a tuple state that runs no step, argument checks, every stage printed, and
the embeddable library's description of each component."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import fsmooth as fs
from corpus import tuples
from fsmooth.dps.interp import run_kernel
from fsmooth import Array, Card, Double, build, ifold, length
from fsmooth.driver import run_pipeline
from test_corpus import assert_close


@fs.kernel
def sum_and_difference(a: Array[Double], b: Array[Double]) -> tuple[Array[Double], Array[Double]]:
    return build(length(a), lambda i: a[i] + b[i]), build(length(a), lambda i: a[i] - b[i])


def test_a_tuple_result_is_one_out_parameter_and_shape_function_per_component():
    source = tuples.argmax.c_source()
    assert "int tuples_argmax(void *restrict scratch, double *restrict out_0, int64_t *restrict out_1," in source
    assert "void tuples_argmax_shape_0(" in source and "void tuples_argmax_shape_1(" in source
    source = tuples.scale_and_sum.c_source()
    assert "const double *restrict v, int64_t v_d0, double p_0, const double *restrict p_1" in source


def test_components_are_written_in_place_with_no_scratch_and_no_copy(rng):
    a, b = rng.standard_normal(9), rng.standard_normal(9)
    total, difference = sum_and_difference(a, b)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)
    assert sum_and_difference.scratch_bytes(a, b) == 0
    body = sum_and_difference.c_source().split("static int test_tuples_sum_and_difference_body(", 2)[2]
    assert body.count("for (") == 2  # the two builds, no copy loop


def test_a_tuple_fold_of_no_step_returns_its_initial_state(rng):
    v = rng.standard_normal(5)
    for args in ((v, 0), (v[:1], 0)):
        expected = tuples.np_smooth_count(*args)
        assert_close(tuples.smooth_count(*args), expected, rtol=1e-12)
        assert_close(tuples.smooth_count.reference(*args), expected, rtol=1e-12)
    stages = run_pipeline(tuples.smooth_count.program())
    assert_close(run_kernel(stages.dps, "smooth_count", [v, 0]).result, tuples.np_smooth_count(v, 0), rtol=1e-12)


def test_tuple_arguments_are_checked(rng):
    v = rng.standard_normal(3)
    with pytest.raises(TypeError, match="'p' must be a tuple of 2"):
        tuples.scale_and_sum(v, v)
    with pytest.raises(TypeError, match="tuple of 2, got one of 3"):
        tuples.scale_and_sum(v, (1.0, v, v))
    with pytest.raises(TypeError, match="'p_1'"):  # the C parameter of component 1
        tuples.scale_and_sum(v, (1.0, 2.0))
    with pytest.raises(ValueError, match="p_1"):  # the second component is read up to length(v) - 1
        tuples.scale_and_sum(v, (1.0, v[:2]))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        tuples.scale_and_sum(v)


def test_every_stage_prints_a_tuple_kernel():
    text = subprocess.run([sys.executable, "-m", "fsmooth", "explain", f"{tuples.__file__}:welford",
                           "--stage", "all"], capture_output=True, text=True, timeout=600)
    assert text.returncode == 0, text.stderr
    for piece in ("⟨∘, ∘⟩", "(mean, ", "out_0", "out_1"):
        assert piece in text.stdout, piece


def test_the_library_describes_each_component(tmp_path):
    done = subprocess.run([sys.executable, "-m", "fsmooth", "compile", tuples.__file__, "-o", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "tuples.json").read_text())
    result = manifest["kernels"]["scale_and_sum"]["result"]
    assert [c["cname"] for c in result["components"]] == ["out_0", "out_1"]
    assert result["components"][0]["dims"] == ["v_d0"] and result["components"][1]["rank"] == 0
    assert manifest["kernels"]["scale_and_sum"]["shape_fun"] == ["tuples_scale_and_sum_shape_0", "tuples_scale_and_sum_shape_1"]
    assert [p["name"] for p in manifest["kernels"]["scale_and_sum"]["params"]] == ["v", "p_0", "p_1"]
    header = (tmp_path / "tuples.h").read_text()
    assert "Result (component 0): `out_0` (double *), Array<Double>, dims v_d0" in header


def test_memory_report_of_a_tuple_result():
    done = subprocess.run([sys.executable, "-m", "fsmooth", "mem", f"{tuples.__file__}:min_max_rows",
                           "--size", "m_d0=3", "--size", "m_d1=4"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "result dims: ⟨⟨(m_d0), (m_d0)⟩, ()⟩" in done.stdout
    assert "result dims ⟨⟨(3), (3)⟩, ()⟩" in done.stdout


@fs.kernel
def nested_state(v: Array[Double], n: Card) -> tuple[tuple[Array[Double], Double], Card]:
    """A tuple variable whose component is a tuple holding an array, written to a destination
    whole (the fold's initial state)."""
    start = ((build(length(v), lambda i: 2.0 * v[i]), 1.0), 0)
    return ifold(lambda s, k: ((build(length(v), lambda i: s[0][0][i] + 1.0), s[0][1] * 2.0), s[1] + 1), start, n)


def test_a_nested_tuple_holding_an_array_is_written_whole(rng):
    v = rng.standard_normal(4)
    for n in (0, 1, 3):
        expected = ((2.0 * v + n, 2.0 ** n), n)
        assert_close(nested_state(v, n), expected, rtol=1e-12)
        assert_close(nested_state.reference(v, n), expected, rtol=1e-12)
        stages = run_pipeline(nested_state.program())
        assert_close(run_kernel(stages.dps, "nested_state", [v, n]).result, expected, rtol=1e-12)
