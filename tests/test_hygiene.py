"""Hygienic names in the generated C (issue 13): kernels are exported as ``<module>_<kernel>``, so
a kernel may have any Python name (a libc or libm function, ``main``, a unicode name), and user
identifiers never collide with C keywords, macros, the C and CPython libraries or generated names.

Every kernel of one module is compiled into one library (one C compilation, as ``fsmooth compile``
does) and each is compared with its reference."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import fuzz_programs
from fsmooth import runtime
from fsmooth.embed import compile_module, exported_kernels
from fsmooth.options import Options

KERNEL_NAMES = sorted({"pow10", "kill", "open", "wait", "signal", "abs", "index", "j0", "y0", "gamma", "printf",
                       "sinf", "sqrt", "main", "größe", *fuzz_programs.KERNEL_NAMES})
PARAM_NAMES = sorted({"M_PI", "M_E", "CHAR_BIT", "RAND_MAX", "v_d0", "dims_out", "out", "scratch", "status",
                      "__x", "_X", "fs_t", "GC_x", "FP_x", "SIZE_x", "sqrt", "E2BIG", "linux",
                      *fuzz_programs.HOSTILE_NAMES} - {"v"})


def _groups() -> list:
    return [PARAM_NAMES[j:j + 8] for j in range(0, len(PARAM_NAMES), 8)]


def _source() -> str:
    lines = ["import fsmooth as fs", "from fsmooth import Array, Double, build, length", ""]
    for j, name in enumerate(KERNEL_NAMES):
        lines += ["@fs.kernel", f"def {name}(x: Double) -> Double:", f"    return x * {j + 2}.0", ""]
    for g, group in enumerate(_groups()):  # a few parameters a kernel: long sums are deep programs
        scalars = ", ".join(f"{name}: Double" for name in group)
        weighted = " + ".join(f"{j + 1}.0 * {name}" for j, name in enumerate(group))
        lines += ["@fs.kernel", f"def scalars_{g}(v: Array[Double], {scalars}) -> Array[Double]:",
                  f"    return build(length(v), lambda i: v[i] + {weighted})", ""]
        arrays = ", ".join(f"{name}: Array[Double]" for name in group)
        lasts = " + ".join(f"{j + 1}.0 * {name}[length({name}) - 1]" for j, name in enumerate(group))
        lines += ["@fs.kernel", f"def arrays_{g}({arrays}) -> Double:", f"    return {lasts}", ""]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """The module of hostile names, its kernels by name, and their executables from one library."""
    path = tmp_path_factory.mktemp("hostile") / "hostile.py"
    path.write_text(_source())
    spec = importlib.util.spec_from_file_location("hostile", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["hostile"] = module
    spec.loader.exec_module(module)
    kernels = exported_kernels(module)
    artifact = compile_module(kernels, Options(), "hostile")
    library = runtime.load_library(artifact)
    yield ({k.name: k for k in kernels},
           {name: runtime.Executable(interface, library) for name, interface in artifact.interfaces.items()})
    del sys.modules["hostile"]


def test_kernels_named_like_c_functions_compute_their_reference(hostile):
    kernels, executables = hostile
    for name in KERNEL_NAMES:
        assert executables[name].interface.symbol.startswith("hostile_")
        assert executables[name].call(1.5) == kernels[name].reference(1.5), name


def test_parameters_named_like_c_and_generated_names_compute_their_reference(hostile):
    kernels, executables = hostile
    v = np.linspace(0.0, 1.0, 3)
    for g, group in enumerate(_groups()):
        values = [0.25 * (j + 1) for j in range(len(group))]
        np.testing.assert_array_equal(executables[f"scalars_{g}"].call(v, *values),
                                      kernels[f"scalars_{g}"].reference(v, *values))
        arrays = [np.full(j % 3 + 1, float(j)) for j in range(len(group))]
        assert executables[f"arrays_{g}"].call(*arrays) == kernels[f"arrays_{g}"].reference(*arrays), group


def test_a_unicode_kernel_name_is_escaped_in_c(hostile):
    _, executables = hostile
    assert executables["größe"].interface.symbol == "hostile_gr_C3_B6_C3_9Fe"
