"""Issue 11: a loop that strides by the length of rows read at constant columns only has a version
for rows exactly that wide (``fsmooth.dpia.row_versions``), taken where they are and the target
has AVX-512 (``FS_ROW_VERSIONS``).  The kernel is ADBench's skinning, tests/corpus/loop_work.py's
``skinned`` (compiled, reference and numpy at sizes 0, 1 and large are also tests/test_corpus.py's)."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
import sympy

import fsmooth as fs
from corpus import loop_work
from fsmooth import Array, Double, build, driver, length
from fsmooth.dpia import phrases as p
from fsmooth.dpia.row_versions import row_widths
from fsmooth.embed import library


def imperative_kernel(kernel: fs.Kernel, last: str = "row_versions") -> p.ImperativeKernel:
    trace = driver.run_passes(driver.c_passes(kernel.options), kernel.program())
    return trace.last(last).kernels[kernel.name]


def versions(body: p.Phrase) -> list[p.IfCmd]:
    """The versioned loops: ``if tight then L[d := K] else L``."""
    return [c for c in p.walk(body) if isinstance(c, p.IfCmd) and isinstance(c.cond, p.Ident)
            and c.cond.name.startswith("tight") and not isinstance(c.then, p.Assign)]


def run_time_strides(c_text: str, sizes: tuple[str, ...]) -> int:
    """How many subscripts of ``c_text`` multiply by one of ``sizes``: the work the version removes."""
    return sum(1 for subscript in re.findall(r"\[[^\]]*\]", c_text)
               if any(re.search(rf"\b{size}\b", subscript) for size in sizes))


def test_the_skinning_loop_has_a_version_with_constant_strides_and_the_loop_as_it_was():
    k = imperative_kernel(loop_work.skinned)
    widths = {s.name: width for s, width in row_widths(k).items()}
    assert widths == {"points_d1": 4, "transforms_d1": 3, "transforms_d2": 4}  # rows read at columns < 4, matrices at rows < 3
    (version,) = versions(k.body)
    before = imperative_kernel(loop_work.skinned, "single_trip").body
    assert version.orelse in list(p.walk(before))  # the general version is the loop as it was
    tight = {s.name for ph in p.walk(version.then) for s in
             (sympy.sympify(p.elements(ph.elem)).free_symbols if isinstance(ph, p.Idx) else ())}
    assert not tight & set(widths)
    source = loop_work.skinned.c_source()
    tight_c, general_c = source.split("} else {", 1)
    general_c = general_c.split("fs_exit:")[0]
    # the tight version's subscripts multiply by no row length; the general one's do, as before
    assert run_time_strides(tight_c.split("if (tight_) {", 1)[1], tuple(widths)) == 0
    assert run_time_strides(general_c, tuple(widths)) == 2
    assert "tight_ = FS_ROW_VERSIONS;" in source and "(points_d1 == INT64_C(4))" in source
    assert versions(imperative_kernel(loop_work.skinned.with_options(row_versions=False)).body) == []


@fs.kernel
def first_column_twice(m: Array[Array[Double]]) -> Array[Double]:
    """Reads column 0 only: nothing says how wide a row is, so nothing is guessed."""
    return build(length(m), lambda i: m[i][0] * 2.0)


def test_no_guess_from_the_first_column_or_from_a_row_read_by_its_length():
    assert row_widths(imperative_kernel(first_column_twice)) == {}
    assert versions(imperative_kernel(first_column_twice).body) == []
    # mat_mult reads its rows by their lengths: no constant bound, no version
    from corpus import adbench_hand
    assert row_widths(imperative_kernel(adbench_hand.mat_mult)) == {}


def skinning_args(vertices: int, width: int, bones: int = 5) -> tuple:
    """The inputs the C driver below makes, each exactly representable."""
    weights = (np.arange(bones * vertices) % 7 * 0.125).reshape(bones, vertices)
    transforms = (np.arange(bones * 3 * width) % 5 * 0.25 - 0.5).reshape(bones, 3, width)
    points = (np.arange(vertices * width) % 11 * 0.5 - 2.0).reshape(vertices, width)
    return weights, transforms, points


@pytest.mark.parametrize("vertices", [0, 1, 37])
@pytest.mark.parametrize("width", [4, 5])
def test_either_version_gives_the_reference_bits(vertices, width):
    args = skinning_args(vertices, width)
    got = loop_work.skinned(*args)
    np.testing.assert_array_equal(got, np.asarray(loop_work.skinned.reference(*args)).reshape(vertices, 3))
    np.testing.assert_allclose(got, loop_work.np_skinned(*args), rtol=1e-12, atol=1e-12)


DRIVER = """
#include <stdio.h>
#include <stdlib.h>
#include "skin.h"
int main(int argc, char **argv) {
    const int B = 5, V = argc > 2 ? atoi(argv[1]) : 0, W = argc > 2 ? atoi(argv[2]) : 4;
    double *weights = malloc(sizeof(double) * (B * V + 1)), *transforms = malloc(sizeof(double) * B * 3 * W);
    double *points = malloc(sizeof(double) * (V * W + 1)), *out = malloc(sizeof(double) * (V * 3 + 1));
    for (int i = 0; i < B * V; i++) weights[i] = (i % 7) * 0.125;
    for (int i = 0; i < B * 3 * W; i++) transforms[i] = (i % 5) * 0.25 - 0.5;
    for (int i = 0; i < V * W; i++) points[i] = (i % 11) * 0.5 - 2.0;
    void *scratch = malloc(skin_skinned_scratch_bytes(B, V, B, 3, W, V, W) + 1);
    printf("%d\\n", skin_skinned(scratch, out, weights, B, V, transforms, B, 3, W, points, V, W));
    for (int i = 0; i < V * 3; i++) printf("%a\\n", out[i]);
    free(weights); free(transforms); free(points); free(out); free(scratch);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="building the C driver needs gcc")
def test_the_tight_version_built_for_any_target_gives_the_reference_bits(tmp_path):
    """FS_ROW_VERSIONS forced on, so the tight version runs whatever this machine's CPU, under the
    address and undefined-behaviour sanitizers."""
    library("skin", [loop_work.skinned], loop_work.skinned.options, "loop_work.py").write(tmp_path)
    (tmp_path / "main.c").write_text(DRIVER)
    subprocess.run(["gcc", "-std=c99", "-O1", "-g", "-fwrapv", "-Wall", "-Wextra", "-Werror",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-DFS_ROW_VERSIONS=true", "-I", str(tmp_path),
                    str(tmp_path / "main.c"), str(tmp_path / "skin.c"), "-lm", "-o", str(tmp_path / "main")],
                   check=True)
    for vertices, width in ((0, 4), (37, 4), (37, 5)):
        printed = subprocess.run([str(tmp_path / "main"), str(vertices), str(width)], capture_output=True,
                                 text=True, check=True).stdout.split()
        assert printed[0] == "0"
        expected = np.asarray(loop_work.skinned.reference(*skinning_args(vertices, width))).reshape(-1)
        np.testing.assert_array_equal(np.array([float.fromhex(x) for x in printed[1:]]), expected)
