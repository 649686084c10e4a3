"""``fsmooth compile``: the embeddable C of a module, built with plain ``cc`` and run with no Python.

The example program (examples/embed: blur.py and main.c) is built as a C user would build it,
its output is checked against the kernels' reference semantics, and the same program runs
under AddressSanitizer/UBSan and valgrind.  Every corpus module compiles with -Werror.
"""
from __future__ import annotations

import json
import math
import operator
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

from test_cli import REPO, fsmooth

EXAMPLE = REPO / "examples" / "embed"
CORPUS = sorted(p for p in (REPO / "tests" / "corpus").glob("*.py") if p.name != "__init__.py")
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
SIZES = [(1, 1), (4, 5), (7, 3), (2, 9)]
# What the example's C may include: the header's two, the runtime header's, main.c's libc.
LIBC_HEADERS = {"stdint.h", "stdbool.h", "math.h", "stdio.h", "stdlib.h"}


def compile_module(source: pathlib.Path, out: pathlib.Path, *options: str) -> pathlib.Path:
    result = fsmooth("compile", str(source), "-o", str(out), *options)
    assert result.returncode == 0, result.stderr
    return out


def cc(out: pathlib.Path, sources, *flags: str) -> pathlib.Path:
    result = subprocess.run(["cc", *WARNINGS, *flags, "-o", str(out), *map(str, sources), "-lm"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return out


def build_main(build: pathlib.Path, name: str, *flags: str) -> pathlib.Path:
    return cc(build / name, [EXAMPLE / "main.c", build / "blur.c"], f"-I{build}", *flags)


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> pathlib.Path:
    return compile_module(EXAMPLE / "blur.py", tmp_path_factory.mktemp("embed") / "build")


@pytest.fixture(scope="module")
def main_program(build) -> pathlib.Path:
    return build_main(build, "main", "-O2")


@pytest.fixture(scope="module")
def blur():
    """The example module, imported as Python: its kernels' reference semantics are the oracle."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("embed_example_blur", EXAMPLE / "blur.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- the example's inputs

def example_inputs(rows: int, cols: int):
    """What main.c builds from ROWS and COLS."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    img = 1.0 + (r * 7 + c * 3) % 10
    weights = 1.0 + np.arange(cols) % 3
    at = np.arange(5) * 7 % (rows * cols)
    return img.astype(np.float64), weights.astype(np.float64), at.astype(np.int64)


def run_main(program: pathlib.Path, rows: int, cols: int, *wrapper: str) -> dict:
    result = subprocess.run([*wrapper, str(program), str(rows), str(cols)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return parse_output(result.stdout)


def parse_output(text: str) -> dict:
    lines = text.splitlines()
    out = {"scratch_bytes": int(lines[0].split()[1])}
    rows, cols = map(int, lines[1].split()[1:])
    out["blur_normalised"] = np.array([[float(x) for x in line.split()] for line in lines[2:2 + rows]])
    assert out["blur_normalised"].shape == (rows, cols)
    rest = lines[2 + rows:]
    out["weighted_mean"] = float(rest[0].split()[1])
    out["gather"] = np.array([float(x) for x in rest[1].split()[1:]])
    out["bad_calls"] = [re.search(r"status (\d+) \((.*)\)$", line).groups() for line in rest[2:]]
    return out


def check_against_reference(out: dict, blur, manifest: dict, rows: int, cols: int) -> None:
    img, weights, at = example_inputs(rows, cols)
    np.testing.assert_allclose(out["blur_normalised"], blur.blur_normalised.reference(img), rtol=1e-14)
    assert math.isclose(out["weighted_mean"], blur.weighted_mean.reference(img[0], weights), rel_tol=1e-14)
    np.testing.assert_array_equal(out["gather"], blur.gather.reference(img.ravel(), at))
    # main.c sizes its arena by the *_scratch_bytes functions: they agree with the manifest's formulas
    # (a --parallel library's at main.c's thread count, 4)
    sizes = {"img_d0": rows, "img_d1": cols, "v_d0": rows * cols, "at_d0": 5, "w_d0": cols, "nthreads": 4}
    assert out["scratch_bytes"] == max(scratch(manifest, "blur_normalised", sizes),
                                       scratch(manifest, "weighted_mean", {**sizes, "v_d0": cols}),
                                       scratch(manifest, "gather", sizes))
    codes = {text: int(code) for code, text in manifest["status_codes"].items()}
    # a short w breaks weighted_mean's size constraint; an index past the end is caught at the read
    assert out["bad_calls"] == [(str(codes["size constraint violated"]), "size constraint violated"),
                                (str(codes["index out of range"]), "index out of range")]


def scratch(manifest: dict, kernel: str, sizes: dict) -> int:
    return evaluate(manifest["kernels"][kernel]["scratch_expr"], sizes)


def _exact_quotient(a: int, b: int) -> int:
    assert a % b == 0, (a, b)
    return a // b


# The operations of a size tree in the manifest (fsmooth.shape.size_printer.JSON), as a tool that
# generates bindings would implement them.
_TREE_OPERATIONS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "neg": operator.neg, "/": _exact_quotient,
    "floordiv": operator.floordiv, "ceildiv": lambda a, b: -(-a // b), "mod": operator.mod, "max": max, "min": min,
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq, "!=": operator.ne,
    "&&": lambda a, b: a and b, "||": lambda a, b: a or b, "!": operator.not_,
}


def evaluate(tree, sizes: dict):
    """A size expression or condition tree of the manifest, at the size symbols' values ``sizes``."""
    if isinstance(tree, str):
        return sizes[tree]
    if isinstance(tree, list):
        operation, *operands = tree
        return _TREE_OPERATIONS[operation](*(evaluate(t, sizes) for t in operands))
    return tree  # a number, or true/false


def manifest_of(build: pathlib.Path, name: str) -> dict:
    return json.loads((build / f"{name}.json").read_text())


# ----------------------------------------------------------------------------- the example, in C

@pytest.mark.parametrize("rows, cols", SIZES)
def test_example_matches_the_reference(main_program, build, blur, rows, cols):
    check_against_reference(run_main(main_program, rows, cols), blur, manifest_of(build, "blur"), rows, cols)


def test_example_is_clean_under_address_and_undefined_sanitizers(build, blur):
    program = build_main(build, "main_asan", "-O1", "-g", "-fsanitize=address,undefined",
                         "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")
    for rows, cols in SIZES:
        check_against_reference(run_main(program, rows, cols), blur, manifest_of(build, "blur"), rows, cols)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_example_is_clean_under_valgrind(build, blur):
    program = build_main(build, "main_valgrind", "-O0", "-g")
    out = run_main(program, 6, 4, "valgrind", "-q", "--error-exitcode=1", "--leak-check=full",
                   "--errors-for-leak-kinds=all")
    check_against_reference(out, blur, manifest_of(build, "blur"), 6, 4)


def test_a_failed_size_check_is_a_status_not_a_read(build):
    """K_check_sizes numbers the failed constraint; K returns the size status and writes nothing."""
    test = build / "size_check.c"
    test.write_text("""
        #include <stdio.h>
        #include "blur.h"
        int main(void) {
            double v[3] = {1, 2, 3}, w[2] = {1, 1}, out = -1.0;
            int check = blur_weighted_mean_check_sizes(3, 2), ok = blur_weighted_mean_check_sizes(3, 3);
            int status = blur_weighted_mean(NULL, &out, v, 3, w, 2);
            printf("%d %d %d %g\\n", check, ok, status, out);
            return 0;
        }
    """)
    program = cc(build / "size_check", [test, build / "blur.c"], f"-I{build}", "-fsanitize=address,undefined",
                 "-fno-sanitize-recover=all")
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "0", "3", "-1"]


def test_variant_and_parallel_builds_give_the_same_results(tmp_path, blur):
    for options, flags in ((["--variant", "malloc"], []), (["--parallel"], ["-fopenmp"])):
        build = compile_module(EXAMPLE / "blur.py", tmp_path / options[-1], *options)
        manifest = manifest_of(build, "blur")
        assert all(flag in manifest["build"]["cflags"] for flag in flags)
        program = build_main(build, "main", "-O2", *flags)
        check_against_reference(run_main(program, 4, 5), blur, manifest, 4, 5)


# ----------------------------------------------------------------------------- the files

def test_manifest_describes_every_kernel(build):
    manifest = manifest_of(build, "blur")
    assert manifest["module"] == "blur" and manifest["files"]["header"] == "blur.h"
    assert list(manifest["kernels"]) == ["box_blur", "normalise", "blur_normalised", "weighted_mean", "gather"]
    mean = manifest["kernels"]["weighted_mean"]
    assert (mean["cfun"], mean["scratch_fun"], mean["check_fun"]) == (
        "blur_weighted_mean", "blur_weighted_mean_scratch_bytes", "blur_weighted_mean_check_sizes")
    assert mean["params"] == [
        {"name": "v", "type": "Array<Double>", "rank": 1, "ctype": "const double *", "cname": "v", "dims": ["v_d0"]},
        {"name": "w", "type": "Array<Double>", "rank": 1, "ctype": "const double *", "cname": "w", "dims": ["w_d0"]}]
    assert mean["result"] == {"type": "Double", "rank": 0, "ctype": "double", "dims": []}
    assert mean["sizes"] == [{"symbol": "v_d0", "param": "v", "dim": 0}, {"symbol": "w_d0", "param": "w", "dim": 0}]
    assert [c["param"] for c in mean["constraints"]] == ["w"]
    assert mean["constraints"][0]["c_expr"] == "((v_d0 - 1) < w_d0)"
    assert [evaluate(mean["constraints"][0]["cond"], {"v_d0": 5, "w_d0": w}) for w in (4, 5, 6)] == [False, True, True]
    blurred = manifest["kernels"]["blur_normalised"]
    assert blurred["result"]["dims"] == ["img_d0", "img_d1"]
    # the blurred image is the one intermediate: rows x cols doubles, rounded up to the alignment
    for rows, cols in SIZES:
        expected = -(-8 * rows * cols // manifest["scratch_align"]) * manifest["scratch_align"]
        assert scratch(manifest, "blur_normalised", {"img_d0": rows, "img_d1": cols}) == expected
    assert scratch(manifest, "box_blur", {"img_d0": 3, "img_d1": 3}) == 0
    gather = manifest["kernels"]["gather"]
    assert gather["params"][1]["ctype"] == "const int64_t *" and gather["result"]["ctype"] == "double"


def test_header_is_a_library_header(build):
    header = (build / "blur.h").read_text()
    manifest = manifest_of(build, "blur")
    assert header.startswith("/*") and "---- Overview" in header and "---- Status codes" in header
    assert re.findall(r"#include <(.*?)>", header) == ["stdbool.h", "stdint.h"]
    assert "#ifndef FSMOOTH_BLUR_H" in header and header.rstrip().endswith("#endif /* FSMOOTH_BLUR_H */")
    assert 'extern "C" {' in header
    for name, entry in manifest["kernels"].items():
        for prototype in entry["prototypes"]:
            assert prototype in header.splitlines()
        assert f"---- {name}(" in header  # each kernel's documented block
    assert "Scratch: 16*ceiling(img_d0*img_d1/2) bytes" in header
    assert "The box blur, normalised" in header  # the kernel's docstring
    assert "(w has length w_d0 but is read at indices 0..v_d0 - 1)" in header
    source = (build / "blur.c").read_text()
    assert re.findall(r'#include "(.*?)"', source) == ["blur.h", "fsmooth_rt.h"]
    assert manifest["files"]["runtime"] == ["fsmooth_rt.h", "fsmooth_scalar.h"]
    runtime = "".join((build / name).read_text() for name in manifest["files"]["runtime"])
    assert re.findall(r'#include "(.*?)"', runtime) == ["fsmooth_scalar.h"]
    assert set(re.findall(r"#include <(.*?)>", source + runtime)) <= LIBC_HEADERS


def test_header_compiles_as_cpp(build):
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler")
    test = build / "use.cpp"
    test.write_text('#include "blur.h"\nint main() { return blur_blur_normalised_check_sizes(2, 2); }\n')
    result = subprocess.run(["c++", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{build}", "-c", "-o",
                             str(build / "use.o"), str(test)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# ----------------------------------------------------------------------------- the corpus

@pytest.mark.parametrize("module", CORPUS, ids=lambda p: p.stem)
def test_every_corpus_module_compiles_with_werror(tmp_path, module):
    build = compile_module(module, tmp_path)
    cc(tmp_path / f"{module.stem}.o", [build / f"{module.stem}.c"], "-O2", "-c")
    manifest = manifest_of(build, module.stem)
    header = (build / f"{module.stem}.h").read_text()
    # helpers (kernels that take functions) are inlined, never exported
    assert manifest["kernels"] and all("⇒" not in p["type"]
                                       for k in manifest["kernels"].values() for p in k["params"])
    for entry in manifest["kernels"].values():
        assert all(prototype in header for prototype in entry["prototypes"])


def test_a_kernel_spelling_a_library_function_with_its_module_is_kept_off_it(tmp_path):
    # module pthread, kernel create: pthread_create would take the place of libc's in the program
    source = tmp_path / "pthread.py"
    source.write_text("import fsmooth as fs\nfrom fsmooth import Double\n\n\n"
                      "@fs.kernel\ndef create(x: Double) -> Double:\n    return x * 3.0\n")
    build = compile_module(source, tmp_path / "build")
    main = tmp_path / "main.c"
    main.write_text('#include <pthread.h>\n#include <stdio.h>\n#include "build/pthread.h"\n\n'
                    "static void *work(void *arg) {\n    double *x = arg;\n"
                    "    return m_pthread_create(NULL, &x[1], x[0]) == 0 ? arg : NULL;\n}\n\n"
                    "int main(void) {\n    double x[2] = {1.5, 0.0};\n    pthread_t thread;\n    void *done;\n"
                    "    if (pthread_create(&thread, NULL, work, x) != 0 || pthread_join(thread, &done) != 0)\n"
                    "        return 1;\n"
                    '    printf("%g\\n", x[1]);\n    return done == x ? 0 : 2;\n}\n')
    program = cc(tmp_path / "main", [main, build / "pthread.c"], "-pthread")  # no -I: <pthread.h> is libc's
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and float(result.stdout) == 4.5, result
    assert manifest_of(build, "pthread")["kernels"]["create"]["cfun"] == "m_pthread_create"
