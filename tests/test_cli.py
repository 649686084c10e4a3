"""``python -m fsmooth``: explain, mem, demo, and its error reporting (one message, exit 1)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def fsmooth(*args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "fsmooth", *args], env=env, cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=300)



KERNELS = textwrap.dedent("""
    import fsmooth as fs
    from fsmooth import Array, Double, build, length

    @fs.kernel
    def add(a: Array[Double], b: Array[Double]) -> Array[Double]:
        return build(length(a), lambda i: a[i] + b[i])

    @fs.kernel
    def norm_of_sum(a: Array[Double], b: Array[Double]) -> Double:
        s = add(a, b)
        return fs.sqrt(fs.ifold(lambda acc, i: acc + s[i] * s[i], 0.0, length(s)))

    @fs.kernel
    def looping(a: Array[Double]) -> Double:
        total = 0.0
        for x in a:
            total = total + x
        return total

    not_a_kernel = 3
""")


@pytest.fixture
def kernels_file(tmp_path) -> pathlib.Path:
    path = tmp_path / "kernels.py"
    path.write_text(KERNELS)
    return path


# ----------------------------------------------------------------------------- errors

def _fails_cleanly(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_missing_file(tmp_path):
    _fails_cleanly(fsmooth("explain", f"{tmp_path}/absent.py:f"), "no such file")


def test_missing_kernel_lists_the_kernels(kernels_file):
    _fails_cleanly(fsmooth("mem", f"{kernels_file}:nope"), "no kernel 'nope'", "add", "norm_of_sum")


def test_not_a_kernel(kernels_file):
    _fails_cleanly(fsmooth("explain", f"{kernels_file}:not_a_kernel"), "not an @fsmooth.kernel")


def test_target_without_kernel_name(kernels_file):
    _fails_cleanly(fsmooth("explain", str(kernels_file)), "FILE.py:KERNEL")


def test_file_that_fails_to_import(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import fsmooth\nraise RuntimeError('boom at import')\n")
    _fails_cleanly(fsmooth("explain", f"{path}:f"), "cannot import", "boom at import")


def test_file_with_a_syntax_error(tmp_path):
    path = tmp_path / "bad_syntax.py"
    path.write_text("def f(:\n")
    _fails_cleanly(fsmooth("explain", f"{path}:f"), "SyntaxError")


def test_unknown_stage_is_an_argparse_error(kernels_file):
    result = fsmooth("explain", f"{kernels_file}:add", "--stage", "llvm")
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_compile_error_prints_location_without_traceback(kernels_file):
    result = fsmooth("explain", f"{kernels_file}:looping", "--stage", "core")
    _fails_cleanly(result, f"{kernels_file}:", "error:", "for x in a:")


# ----------------------------------------------------------------------------- explain

@pytest.mark.parametrize("stage", ["core", "anf", "shape", "dps", "dpia", "c"])
def test_explain_each_stage(kernels_file, stage):
    result = fsmooth("explain", f"{kernels_file}:norm_of_sum", "--stage", stage)
    assert result.returncode == 0, result.stderr
    assert "norm_of_sum" in result.stdout
    # a printer of the IR ran, not a dataclass's repr
    assert "object at 0x" not in result.stdout and "Program(" not in result.stdout
    if stage == "core":
        assert "build" in result.stdout and "ifold" in result.stdout
    if stage == "c":
        assert "int kernels_norm_of_sum(" in result.stdout and "kernels_norm_of_sum_scratch_bytes" in result.stdout


def test_explain_all_stages_by_module_name():
    result = fsmooth("explain", "fsmooth.examples:f")
    assert result.returncode == 0, result.stderr
    headers = [line for line in result.stdout.splitlines() if line.startswith("== ")]
    assert headers == [f"== {s} ==" for s in ("core", "anf", "shape", "dps", "dpia", "c")]


# ----------------------------------------------------------------------------- mem

def test_mem_formula_and_value(kernels_file):
    formula = fsmooth("mem", f"{kernels_file}:norm_of_sum")
    assert formula.returncode == 0, formula.stderr
    assert "scratch bytes:" in formula.stdout and "a_d0" in formula.stdout
    valued = fsmooth("mem", f"{kernels_file}:norm_of_sum", "--size", "a_d0=100", "--size", "b_d0=100")
    assert valued.returncode == 0, valued.stderr
    assert "with a_d0=100, b_d0=100:" in valued.stdout and "result dims ()" in valued.stdout
    assert int(valued.stdout.split("scratch ")[-1].split()[0]) >= 0
    assert "warning" not in valued.stdout  # the formula and the compiled scratch function agree


def test_mem_rejects_bad_sizes(kernels_file):
    target = f"{kernels_file}:norm_of_sum"
    _fails_cleanly(fsmooth("mem", target, "--size", "q=1"), "no size 'q'", "a_d0")
    _fails_cleanly(fsmooth("mem", target, "--size", "a_d0=x"), "not an integer")
    _fails_cleanly(fsmooth("mem", target, "--size", "a_d0=-1"), ">= 0")
    _fails_cleanly(fsmooth("mem", target, "--size", "a_d0=3"), "missing: b_d0")
    _fails_cleanly(fsmooth("mem", target, "--size", "a_d0=3", "--size", "b_d0=2"), "'b'")


# ----------------------------------------------------------------------------- demo

def test_demo(tmp_path):
    c_path = tmp_path / "f.c"
    result = fsmooth("demo", "--sizes", "1", "7", "--write-c", str(c_path))
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.split()[:1] in (["1"], ["7"])]
    assert len(rows) == 2
    for n, compiled, reference, difference, scratch in rows:
        assert abs(float(compiled) - float(reference)) <= 1e-12 * max(1.0, abs(float(reference)))
        assert float(difference) <= 1e-12 * max(1.0, abs(float(reference)))
        assert int(scratch) >= 0
    assert "int examples_f(" in c_path.read_text()


# ----------------------------------------------------------------------------- compile

def test_compile_writes_header_source_runtime_and_manifest(tmp_path):
    source = tmp_path / "vectors.py"
    source.write_text(KERNELS.split("@fs.kernel\ndef looping")[0])
    result = fsmooth("compile", str(source), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["fsmooth_rt.h", "fsmooth_scalar.h", "vectors.c", "vectors.h", "vectors.json"]
    assert "add, norm_of_sum" in result.stdout
    header = (tmp_path / "out" / "vectors.h").read_text()
    assert "int vectors_add(void *scratch, double *out, const double *a, int64_t a_d0, const double *b, int64_t b_d0);" in header
    assert "int64_t vectors_norm_of_sum_scratch_bytes(int64_t a_d0, int64_t b_d0);" in header


def test_compile_by_module_name_leaves_helpers_out(tmp_path):
    result = fsmooth("compile", "fsmooth.examples", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    header = (tmp_path / "examples.h").read_text()
    assert "int examples_f(" in header and "int examples_vector_add(" in header
    assert "vector_map2" not in header  # a helper: it takes a function


def test_compile_reports_the_kernel_that_does_not_compile(kernels_file, tmp_path):
    _fails_cleanly(fsmooth("compile", str(kernels_file), "-o", str(tmp_path / "out")), f"{kernels_file}:",
                   "for x in a:")
    assert not (tmp_path / "out").exists()


def test_compile_of_a_module_without_kernels(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("import fsmooth\nx = 1\n")
    _fails_cleanly(fsmooth("compile", str(path), "-o", str(tmp_path / "out")), "no exported kernels")


def test_compile_rejects_unknown_variants(kernels_file, tmp_path):
    result = fsmooth("compile", str(kernels_file), "-o", str(tmp_path), "--variant", "turbo")
    assert result.returncode == 2 and "invalid choice" in result.stderr


# ----------------------------------------------------------------------------- bad input, in process (issue 13)

def _main_fails_cleanly(capsys, argv: list[str], *fragments: str) -> None:
    from fsmooth.cli import main

    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    for fragment in fragments:
        assert fragment in captured.err, captured.err


HELPER_AND_OUTER = textwrap.dedent("""
    import typing
    import fsmooth as fs
    from fsmooth import Array, Double, build, length

    @fs.kernel
    def outer(a: Array[Double], b: Array[Double]) -> Array[Array[Double]]:
        return build(length(a), lambda i: build(length(b), lambda j: a[i] * b[j]))

    @fs.kernel
    def apply(x: Double, f: typing.Callable[[Double], Double]) -> Double:
        return f(x)
""")


def test_mem_with_sizes_too_large_for_c_is_one_line(tmp_path, capsys):
    path = tmp_path / "outer_kernels.py"
    path.write_text(HELPER_AND_OUTER)
    _main_fails_cleanly(capsys, ["mem", f"{path}:outer", "--size", f"a_d0={2 ** 70}", "--size", "b_d0=1"],
                        "a_d0=1180591620717411303424")
    _main_fails_cleanly(capsys, ["mem", f"{path}:outer", "--size", "a_d0=1.5", "--size", "b_d0=1"], "not an integer")
    _main_fails_cleanly(capsys, ["mem", f"{path}:apply"], "helper")
    _main_fails_cleanly(capsys, ["mem", f"{path}:absent"], "no kernel 'absent'")
    _main_fails_cleanly(capsys, ["mem", f"{tmp_path / 'absent.py'}:outer"], "no such file")


def test_demo_with_sizes_too_large_for_memory_is_one_line(capsys):
    _main_fails_cleanly(capsys, ["demo", "--sizes", str(10 ** 14)], "MemoryError")


def test_compile_fails_when_the_written_c_does_not_compile(kernels_file, tmp_path, capsys, monkeypatch):
    import dataclasses

    import fsmooth.cli

    def broken_library(*args):
        lib = fsmooth.embed.library(*args)
        return dataclasses.replace(lib, source=lib.source + "\nint broken(\n")

    monkeypatch.setattr(fsmooth.cli, "library", broken_library)
    _main_fails_cleanly(capsys, ["compile", str(tmp_path / "none.py"), "-o", str(tmp_path / "out")], "no such file")
    kernels_file.write_text(KERNELS.replace("@fs.kernel\ndef looping", "def looping"))
    _main_fails_cleanly(capsys, ["compile", str(kernels_file), "-o", str(tmp_path / "out")], "does not compile")


def test_compile_of_the_gc_variant_without_libgc_says_so(kernels_file, tmp_path, capsys, monkeypatch):
    import fsmooth.cache

    monkeypatch.setattr(fsmooth.cache, "system_library_available", lambda header, library: False)
    kernels_file.write_text(KERNELS.replace("@fs.kernel\ndef looping", "def looping"))
    _main_fails_cleanly(capsys, ["compile", str(kernels_file), "-o", str(tmp_path / "out"), "--variant", "gc"],
                        "libgc")
