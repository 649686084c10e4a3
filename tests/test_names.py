"""The one supply of fresh names (fsmooth/names.py), in each pass's spelling."""
from __future__ import annotations

import copy
import re
import subprocess
import sysconfig

from fsmooth.clib import HEADER_DIR
from fsmooth.dpia.emit import Namer, c_module_name, exported_name, is_reserved
from fsmooth.names import NameSupply, destination_name


def test_a_free_base_is_given_as_is_then_numbered_past_taken_names():
    names = NameSupply(["x", "x_2"])
    assert [names.fresh("x"), names.fresh("x"), names.fresh("y"), names.fresh("y")] == ["x_1", "x_3", "y", "y_1"]


def test_suffix_and_separator_spell_dpia_and_opencl_names():
    primes = NameSupply(suffix="'", separator="")
    assert [primes.fresh("i"), primes.fresh("i"), primes.fresh("o")] == ["i'", "i'1", "o'"]
    buffers = NameSupply({"r_buf"}, suffix="_buf", separator="")
    assert [buffers.fresh("r"), buffers.fresh("r")] == ["r_buf1", "r_buf2"]


def test_numbered_names_share_one_count():
    names = NameSupply(numbered=True, separator="")
    assert [names.fresh("r"), names.fresh("view_"), names.fresh("r")] == ["r1", "view_2", "r3"]


def test_made_up_names_avoid_the_users_but_a_base_is_kept():
    names = NameSupply({"i"}, made_up_avoid={"i", "i_1", "j"})
    assert names.fresh("j") == "j"
    assert names.fresh("i") == "i_2"


def test_a_copy_forgets_what_the_original_gives_later():
    names = NameSupply()
    before = copy.deepcopy(names)
    assert names.fresh("x") == "x" and names.fresh("x") == "x_1"
    assert before.fresh("x") == "x"


def test_c_names_are_identifiers_and_never_reserved():
    namer = Namer({"n"})
    assert [namer.fresh("int"), namer.fresh("2x"), namer.fresh("a.b"), namer.fresh("n")] == [
        "int_1", "v2x", "a_b", "n_1"]


HOSTILE = ("__x", "_X", "fs_t", "GC_x", "FP_x", "SIZE_x", "M_PI", "M_PI_2", "M_E", "CHAR_BIT", "RAND_MAX",
           "NULL", "EOF", "errno", "linux", "sqrt", "fmin", "int", "v_d0", "größe", "Py_None", "N", "E2BIG")


def test_c_names_of_hostile_identifiers_end_and_are_never_reserved():
    namer = Namer({"scratch", "out"})
    names = [namer.fresh(name) for name in HOSTILE + HOSTILE]  # the second time numbered
    assert len(set(names)) == len(names)
    assert not [name for name in names if is_reserved(name) or not re.fullmatch(r"[A-Za-z_]\w*", name, re.ASCII)]
    assert names[:3] == ["v__x", "v_X", "vfs_t"]


def test_every_object_macro_of_the_runtime_header_and_python_h_is_reserved():
    # gcc's own list, in the dialects of the cffi build (c99, after Python.h) and of embedding users (gnu)
    macros = set()
    for std in ("c99", "gnu11"):
        listing = subprocess.run(["cc", f"-std={std}", "-dM", "-E", "-I", str(HEADER_DIR),
                                  "-I", sysconfig.get_paths()["include"], "-"],
                                 input='#include <Python.h>\n#include "fsmooth_rt.h"\n', capture_output=True,
                                 text=True, check=True)
        macros |= {m.group(1) for m in re.finditer(r"^#define (\w+)\b(?!\()", listing.stdout, re.MULTILINE)}
    assert len(macros) > 1000 and not sorted(m for m in macros if not is_reserved(m))


def test_kernels_are_exported_with_the_module_prefix_and_escaped():
    assert exported_name("blur", "gather") == "blur_gather"
    assert exported_name("m", "größe") == "m_gr_C3_B6_C3_9Fe"
    # a library function spelt by module and kernel together, or one exported beside it
    assert [exported_name(m, k) for m, k in [("pthread", "create"), ("getc", "unlocked"), ("clock", "get"),
                                             ("omp", "get_num_threads")]] == [
        "m_pthread_create", "m_getc_unlocked", "clock_get", "m_omp_get_num_threads"]
    assert [c_module_name(m) for m in ("blur", "__main__", "fs", "2d", "my-mod")] == [
        "blur", "main", "m_fs", "m_2d", "my_mod"]


def test_the_destination_is_named_apart_from_the_parameters():
    assert destination_name(["a", "b"]) == "out"
    assert destination_name(["out", "out1_0", "x"]) == "out2"
