"""Issue 11: a fold nested in builds that reads down columns runs outermost (``fsmooth.dpia.interchange``),
bit for bit the same result, proven less work by counting the instructions of the generated C
under callgrind.  The kernel is ADBench's skinning, tests/corpus/loop_work.py's ``skinned``
(compiled, reference and numpy at sizes 0, 1 and large are tests/test_corpus.py's)."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import fsmooth as fs
from corpus import loop_work
from fsmooth import Array, Card, Double, build, driver, ifold, length
from fsmooth.dpia import phrases as p
from fsmooth.embed import library


def imperative_body(kernel: fs.Kernel) -> p.Phrase:
    """The kernel's imperative DPIA as the C generator gets it."""
    trace = driver.run_passes(driver.c_passes(kernel.options), kernel.program())
    return trace.last("interchange").kernels[kernel.name].body


def folds_around_builds(body: p.Phrase) -> list[str]:
    """The index of every ``for`` (a fold's loop) that has a ``parfor`` (a build's) inside it."""
    return [c.index for c in p.walk(body)
            if isinstance(c, p.For) and any(isinstance(inner, p.ParFor) for inner in p.walk(c.body))]


def skinning_args(rng, vertices: int, bones: int = 22) -> tuple:
    return (rng.uniform(0.0, 1.0, (bones, vertices)), rng.uniform(-2.0, 2.0, (bones, 3, 4)),
            rng.uniform(-2.0, 2.0, (vertices, 4)))


@pytest.mark.parametrize("vertices", [0, 1, 544])
def test_skinning_folds_outermost_with_the_same_bits(vertices):
    plain = loop_work.skinned.with_options(interchange=False)
    assert folds_around_builds(imperative_body(loop_work.skinned)) == ["b"]
    assert folds_around_builds(imperative_body(plain)) == []
    args = skinning_args(np.random.default_rng(vertices), vertices)
    got = loop_work.skinned(*args)
    # each element folded by the same steps in the same order: no rounding changes
    np.testing.assert_array_equal(got, plain(*args))
    np.testing.assert_array_equal(got, np.asarray(loop_work.skinned.reference(*args)).reshape(vertices, 3))
    np.testing.assert_allclose(got, loop_work.np_skinned(*args), rtol=1e-12, atol=1e-12)


@fs.kernel
def row_sums(m: Array[Array[Double]]) -> Array[Double]:
    return build(length(m), lambda i: ifold(lambda a, j: a + m[i][j], 0.0, length(m[i])))


@fs.kernel
def matrix_product(a: Array[Array[Double]], b: Array[Array[Double]]) -> Array[Array[Double]]:
    return build(length(a), lambda i: build(length(b[0]), lambda j: ifold(
        lambda acc, k: acc + a[i][k] * b[k][j], 0.0, length(b))))


@fs.kernel
def column_sums_scaled(m: Array[Array[Double]], q: Card) -> Array[Double]:
    """A step that may fail (i // q with q = 0): the first error must stay the reference's."""
    return build(length(m[0]), lambda j: ifold(lambda a, i: a + m[i][j] * float(i // q), 0.0, length(m)))


@fs.kernel
def sums_of_three_rows(m: Array[Array[Double]]) -> Array[Double]:
    """A fold of a constant count: the C compiler unrolls it, there is nothing to gain."""
    return build(length(m[0]), lambda j: ifold(lambda a, i: a + m[i][j], 0.0, 3))


def test_a_fold_along_rows_of_a_constant_count_or_that_may_fail_keeps_its_place_and_threads_stay_outermost():
    assert folds_around_builds(imperative_body(row_sums)) == []
    assert folds_around_builds(imperative_body(sums_of_three_rows)) == []
    # a[i][k] is read along its row already: the product keeps its order
    assert folds_around_builds(imperative_body(matrix_product)) == []
    assert folds_around_builds(imperative_body(column_sums_scaled)) == []
    # the loop on threads stays outermost; inside it, weights[b][v] is read down a column either way
    on_threads = imperative_body(loop_work.skinned.with_options(parallel=True))
    assert any(isinstance(c, p.ParFor) and c.parallel for c in p.walk(on_threads))
    assert folds_around_builds(on_threads) == []
    m = np.random.default_rng(1).uniform(-1.0, 1.0, (6, 5))
    np.testing.assert_allclose(column_sums_scaled(m, 2), (m * (np.arange(6) // 2)[:, None]).sum(axis=0))
    with pytest.raises(ZeroDivisionError):
        column_sums_scaled(m, 0)


DRIVER = """
#include <stdio.h>
#include <stdlib.h>
#include "skin.h"
int main(void) {
    enum { B = 22, V = 544 };
    static double weights[B * V], transforms[B * 12], points[V * 4], out[V * 3];
    for (int i = 0; i < B * V; i++) weights[i] = (i % 7) * 0.125;
    for (int i = 0; i < B * 12; i++) transforms[i] = (i % 5) * 0.25 - 0.5;
    for (int i = 0; i < V * 4; i++) points[i] = (i % 11) * 0.5 - 2.0;
    void *scratch = malloc(skin_skinned_scratch_bytes(B, V, B, 3, 4, V, 4) + 1);
    int status = skin_skinned(scratch, out, weights, B, V, transforms, B, 3, 4, points, V, 4);
    double sum = 0.0;
    for (int i = 0; i < V * 3; i++) sum += out[i];
    printf("%d %.17g\\n", status, sum);
    free(scratch);
    return 0;
}
"""


def instructions(kernel: fs.Kernel, where) -> tuple[int, str]:
    """The instructions ``skin_skinned`` executes on one 22-bone, 544-vertex call (ADBench's hand),
    built as ``fsmooth compile`` would build it, and what the program printed."""
    library("skin", [kernel], kernel.options, "loop_work.py").write(where)
    (where / "main.c").write_text(DRIVER)
    subprocess.run(["gcc", "-std=c99", "-O3", "-fwrapv", "-I", str(where), str(where / "main.c"),
                    str(where / "skin.c"), "-lm", "-o", str(where / "main")], check=True)
    run = subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=skin_skinned",
                          f"--callgrind-out-file={where / 'callgrind.out'}", str(where / "main")],
                         capture_output=True, text=True, check=True)
    totals = re.search(r"^(?:summary|totals): (\d+)", (where / "callgrind.out").read_text(), re.M)
    return int(totals.group(1)), run.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("gcc") is None,
                    reason="counting instructions needs valgrind and gcc")
def test_skinning_runs_far_fewer_instructions_outermost(tmp_path):
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    on, printed_on = instructions(loop_work.skinned, tmp_path / "on")
    off, printed_off = instructions(loop_work.skinned.with_options(interchange=False), tmp_path / "off")
    assert printed_on == printed_off and printed_on.startswith("0 ")  # the same bits
    # gcc 12, portable (SSE2): 464,608 against 541,924; built for AVX2 (-march=x86-64-v3), where
    # the rows vectorise: 274,891 against 535,396
    assert on < 0.9 * off, (on, off)
