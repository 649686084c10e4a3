"""``verify`` of every IR: each stage's output over every corpus kernel is well formed, and each
malformed program raises ``IRError``, naming what is wrong."""
from __future__ import annotations

import dataclasses
import importlib
import pathlib
from dataclasses import replace

import pytest
import sympy

import fsmooth as fs
from fsmooth import core
from fsmooth.core import Build, Lam, Let, Lit, PrimApp, Var
from fsmooth.dpia import phrases as p
from fsmooth.dps import ir as dps
from fsmooth.driver import run_pipeline
from fsmooth.errors import IRError
from fsmooth.shape import ir as shape
from fsmooth.types import ArrayT, Card, Double, FunT, Index

CORPUS = sorted(path.stem for path in (pathlib.Path(__file__).parent / "corpus").glob("*.py")
                if path.stem != "__init__")


@pytest.mark.parametrize("module", CORPUS)
def test_every_stage_of_every_corpus_kernel_verifies(module):
    kernels = [k for k in vars(importlib.import_module(f"corpus.{module}")).values()
               if isinstance(k, fs.Kernel) and not k.program().main.is_helper]
    # A kernel another one calls is compiled, whole, inside that one's program.
    called = {name for k in kernels for name in k.program().kernels if name != k.name}
    roots = [k for k in kernels if k.name not in called]
    assert roots
    for k in roots:
        # the driver verifies every pass's output, each F̃ rewrite's included
        run_pipeline(k.program(), dataclasses.replace(k.options, verify_passes=True))


def _program(body: core.Expr, params=(("a", ArrayT(Double)),)) -> core.Program:
    return core.Program({"k": core.KernelDef("k", params, body.ty, body)}, "k")


def _build(index: str, body: core.Expr) -> Build:
    return Build(Lit(3, Card), Lam(((index, Index),), body, FunT((Index,), body.ty)), ArrayT(body.ty))


def test_core_unbound_variable():
    with pytest.raises(IRError, match="variable 'b' is not in scope"):
        core.verify(_program(Var("b", Double)))


def test_core_call_of_an_unknown_kernel():
    with pytest.raises(IRError, match="call of 'g'"):
        core.verify(_program(core.Call("g", (), Double)))


def test_core_variable_of_a_let_out_of_its_scope():
    body = PrimApp("add", (Let("x", Lit(1.0, Double), Var("x", Double), Double), Var("x", Double)), Double)
    with pytest.raises(IRError, match="'x' is not in scope"):
        core.verify(_program(body))


def test_core_duplicated_binder_after_anf():
    one = Lit(1.0, Double)
    body = Let("x", one, _build("x", one), ArrayT(Double))
    core.verify(_program(body))  # fine before the anf stage, where shadowing is allowed
    with pytest.raises(IRError, match="binders not unique: x"):
        core.verify_anf(_program(body))


def test_core_operand_that_is_not_an_atom_after_anf():
    inner = PrimApp("add", (Lit(1.0, Double), Lit(2.0, Double)), Double)
    with pytest.raises(IRError, match="operand 'args' of PrimApp is not an atom"):
        core.verify_anf(_program(PrimApp("mul", (inner, inner), Double)))


def test_shape_unbound_variable():
    function = shape.SLam(("a_shp",), shape.SFst(shape.SVar("b_shp")))
    k = shape.ShapeKernel("k", ("a_shp",), function, shape.SCirc(), (), shape.CIRC, ())
    with pytest.raises(IRError, match="shape variable 'b_shp' is not in scope"):
        shape.verify(shape.ShapeProgram({"k": k}, "k"))


def _dps_program(body: dps.Term) -> dps.Program:
    n = sympy.Symbol("n")
    k = dps.Kernel("k", "out", (("a", ArrayT(Double), (n,)),), ArrayT(Double), (n,), body, (n,))
    return dps.Program({"k": k}, "k")


def _copy(region: str) -> dps.Copy:
    return dps.Copy(dps.RVar(region), Var("a", ArrayT(Double)), sympy.Symbol("n"), Double)


def test_dps_well_formed_program_verifies():
    dps.verify(_dps_program(dps.Alloc("r", Double, sympy.Symbol("n"), _copy("r"))))


def test_dps_region_out_of_scope():
    with pytest.raises(IRError, match="region 'r' is not allocated here"):
        dps.verify(_dps_program(_copy("r")))


def test_dps_region_used_after_its_alloc():
    body = dps.Let("x", dps.Alloc("r", Double, sympy.Integer(1), dps.Atom_(Lit(1.0, Double))), _copy("r"),
                   ArrayT(Double))
    with pytest.raises(IRError, match="region 'r'"):
        dps.verify(_dps_program(body))


def test_dps_unbound_variable_and_size():
    with pytest.raises(IRError, match="variable 'b' is not in scope"):
        dps.verify(_dps_program(dps.Atom_(Var("b", Double))))
    with pytest.raises(IRError, match="size variable 'm' is not in scope"):
        dps.verify(_dps_program(dps.CardOf(sympy.Symbol("m") + 1)))


def test_dps_state_destination_outside_its_ifold():
    copy = replace(_copy("out"), dest=dps.StateDest("s"))
    with pytest.raises(IRError, match="ifold state 's' outside that ifold"):
        dps.verify(_dps_program(copy))


def _dpia_program(body: p.Phrase) -> p.ImperativeProgram:
    data = p.Num(Double)
    k = p.ImperativeKernel("k", "out", (("a", Double, ()),), {"a": p.Ident("a", p.ExpT(data))}, Double, data, (),
                           (), (), sympy.Integer(0), p.Ident("a", p.ExpT(data)), body)
    return p.ImperativeProgram({"k": k}, "k")


def test_dpia_well_formed_program_verifies():
    p.verify(_dpia_program(p.Assign(p.Ident("out", p.AccT(p.Num(Double))), p.Ident("a", p.ExpT(p.Num(Double))))))


def test_dpia_unbound_identifier():
    body = p.Assign(p.Ident("out", p.AccT(p.Num(Double))), p.Ident("tmp", p.ExpT(p.Num(Double))))
    with pytest.raises(IRError, match="identifier 'tmp' is not in scope"):
        p.verify(_dpia_program(body))


def test_dpia_body_that_is_not_a_command():
    with pytest.raises(IRError, match="not a command"):
        p.verify(_dpia_program(p.Ident("a", p.ExpT(p.Num(Double)))))
