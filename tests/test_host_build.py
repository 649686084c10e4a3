"""Builds for the host CPU (``Options.native``, ``fsmooth.cache.host_flags``) and reassociating
float arithmetic (``Options.fastmath``), README "Building for this CPU"."""
from __future__ import annotations

import json
import pathlib
import platform
import subprocess

import numpy as np
import pytest

import fsmooth as fs
from fsmooth import Array, Double, cache, runtime
from fsmooth.cli import main as cli_main
from fsmooth.clib import HEADER_DIR
from fsmooth.driver import compile_to_c
from fsmooth.options import Options


@fs.kernel
def total(v: Array[Double]) -> Double:
    return fs.ifold(lambda acc, i: acc + v[i], 0.0, fs.length(v))


@fs.kernel
def dot(a: Array[Double], b: Array[Double]) -> Double:
    return fs.ifold(lambda acc, i: acc + a[i] * b[i], 0.0, fs.length(a))


@fs.kernel
def has_nan(v: Array[Double]) -> fs.Bool:
    return fs.ifold(lambda acc, i: acc or fs.isnan(v[i]), False, fs.length(v))


# ----------------------------------------------------------------------------- -march=native

def test_host_flags_build_for_this_cpu_unless_turned_off(monkeypatch):
    assert cache.host_cpu(tuple(cache.c_compiler())) is not None  # gcc and clang both say what native means
    monkeypatch.delenv(cache.NATIVE_ENV, raising=False)
    assert cache.host_flags() == cache.NATIVE_FLAGS
    monkeypatch.setenv(cache.NATIVE_ENV, "0")
    assert cache.host_flags() == ()


def test_a_compiler_without_native_builds_portably(monkeypatch):
    monkeypatch.delenv(cache.NATIVE_ENV, raising=False)
    monkeypatch.setenv("CC", "false")  # rejects every command line, -march=native included
    assert cache.host_cpu(("false",)) is None
    assert cache.host_flags() == ()


def test_host_cpu_names_the_resolved_target():
    described = cache.host_cpu(tuple(cache.c_compiler()))
    assert platform.machine() in described
    assert "-march=native" not in described.split()  # what it means here, not the flag itself


def test_cache_key_of_a_native_build_names_the_host_cpu(monkeypatch):
    source, cdef = "int f(void) { return 0; }\n", "int f(void);\n"
    keys = {}
    for cpu in ("cpu A", "cpu B"):
        monkeypatch.setattr(cache, "host_cpu", lambda compiler, cpu=cpu: cpu)
        keys[cpu] = (cache.cache_key(source, cdef, cache.NATIVE_FLAGS), cache.cache_key(source, cdef))
    # a cache shared by two machines: the native builds are two entries, the portable one is one
    assert keys["cpu A"][0] != keys["cpu B"][0]
    assert keys["cpu A"][1] == keys["cpu B"][1]
    assert keys["cpu A"][0] != keys["cpu A"][1]


def _built_flags(kernel, monkeypatch, args) -> tuple:
    """The compile flags the in-process build of ``kernel`` asks for, and its result on ``args``."""
    seen = []
    load = cache.load_module

    def recording(source, cdef, compile_args=(), libraries=()):
        seen.append(compile_args)
        return load(source, cdef, compile_args, libraries)

    monkeypatch.setattr(runtime, "_libraries", {})  # this process's table would answer without loading
    monkeypatch.setattr(cache, "load_module", recording)
    result = kernel(*args)
    assert len(seen) == 1
    return seen[0], result


def test_kernels_are_built_for_the_host_unless_told_not(monkeypatch, rng):
    monkeypatch.delenv(cache.NATIVE_ENV, raising=False)
    v = rng.standard_normal(1001)
    native = fs.Kernel(total.fn)  # a fresh kernel: built (or loaded) in this test
    flags, result = _built_flags(native, monkeypatch, (v,))
    assert "-march=native" in flags
    assert result == pytest.approx(total.reference(v), rel=1e-12)
    flags, result = _built_flags(native.with_options(native=False), monkeypatch, (v,))
    assert "-march=native" not in flags
    assert result == pytest.approx(total.reference(v), rel=1e-12)
    monkeypatch.setenv(cache.NATIVE_ENV, "0")
    flags, _ = _built_flags(fs.Kernel(total.fn), monkeypatch, (v,))
    assert "-march=native" not in flags


# ----------------------------------------------------------------------------- fastmath

def test_fastmath_reassociates_but_keeps_nan_and_inf():
    flags = compile_to_c(total.program(), Options(fastmath=True)).compile_args
    assert "-fassociative-math" in flags
    assert "-ffp-contract=fast" in flags  # multiply-adds fused, as g++ -O3 fuses them by default
    # -ffast-math would bring -ffinite-math-only: isnan folded to false
    assert not {"-ffast-math", "-ffinite-math-only", "-fno-honor-nans", "-fno-honor-infinities"} & set(flags)
    assert compile_to_c(total.program(), total.options).compile_args == ()


@pytest.mark.parametrize("n", [0, 1, 7, 64, 1001, 1_000_003])
def test_fastmath_results_match_the_reference(rng, n):
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    fast_total, fast_dot = total.with_options(fastmath=True), dot.with_options(fastmath=True)
    # reassociation changes the rounding only: within n ulps of the sum of magnitudes
    bound = 4 * max(n, 1) * np.finfo(np.float64).eps
    assert abs(fast_total(a) - total.reference(a)) <= bound * np.abs(a).sum() + 1e-300
    assert abs(fast_total(a) - np.sum(a)) <= bound * np.abs(a).sum() + 1e-300
    assert abs(fast_dot(a, b) - dot.reference(a, b)) <= bound * np.abs(a * b).sum() + 1e-300
    if n == 0:
        assert fast_total(a) == 0.0


def test_fastmath_keeps_nan_and_inf(rng):
    fast_total, fast_has_nan = total.with_options(fastmath=True), has_nan.with_options(fastmath=True)
    v = rng.standard_normal(1000)
    for k, special in ((0, np.nan), (517, np.nan), (999, np.inf), (3, -np.inf)):
        w = v.copy()
        w[k] = special
        assert fast_has_nan(w) is bool(np.isnan(special)) is has_nan.reference(w)
        result, expected = fast_total(w), total.reference(w)
        assert np.isnan(result) == np.isnan(expected) and (np.isnan(result) or result == expected)
    w = v.copy()
    w[10], w[900] = np.inf, -np.inf
    assert np.isnan(fast_total(w)) and np.isnan(total.reference(w))
    assert fast_has_nan(v) is False


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86-64 assembly")
def test_fastmath_vectorises_a_float_reduction():
    """The work a sum's loop does: packed adds (two or more doubles an instruction) only with
    fastmath; without it, IEEE's order of additions leaves one add per element."""
    def assembly(options) -> str:
        artifact = compile_to_c(total.program(), options)
        command = [*cache.c_compiler(), *cache.COMPILE_ARGS, *artifact.compile_args, f"-I{HEADER_DIR}",
                   "-S", "-x", "c", "-", "-o", "-"]
        return subprocess.run(command, input=artifact.source, capture_output=True, text=True, check=True).stdout

    plain, fast = assembly(total.options), assembly(Options(fastmath=True))
    assert "addpd" not in plain and "addsd" in plain
    assert "addpd" in fast


# ----------------------------------------------------------------------------- fsmooth compile

def test_compile_is_portable_unless_given_march(tmp_path, capsys):
    module = tmp_path / "sums.py"
    module.write_text(pathlib.Path(__file__).read_text().split("# ---")[0])
    arch = "x86-64-v3" if platform.machine() in ("x86_64", "AMD64") else "native"
    assert cli_main(["compile", str(module), "-o", str(tmp_path / "portable")]) == 0
    manifest = json.loads((tmp_path / "portable" / "sums.json").read_text())
    assert not any(flag.startswith("-march") for flag in manifest["build"]["cflags"])
    assert manifest["options"]["native"] is False
    assert cli_main(["compile", str(module), "-o", str(tmp_path / "v3"), "--march", arch, "--fastmath"]) == 0
    manifest = json.loads((tmp_path / "v3" / "sums.json").read_text())
    assert manifest["build"]["cflags"][:2] == ["-std=c99", f"-march={arch}"]
    assert "-fassociative-math" in manifest["build"]["cflags"]
    header = (tmp_path / "v3" / "sums.h").read_text()
    assert f"cc -std=c99 -march={arch} -fassociative-math" in header
    capsys.readouterr()
    assert cli_main(["compile", str(module), "-o", str(tmp_path / "bad"), "--march", "no-such-cpu"]) == 1
    assert "--march no-such-cpu" in capsys.readouterr().err
