"""The one supply of fresh names (fsmooth/names.py), in each pass's spelling."""
from __future__ import annotations

import copy

from fsmooth.dpia.emit import Namer
from fsmooth.names import NameSupply


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
