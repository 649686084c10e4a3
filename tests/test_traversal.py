"""The generic traversal of the IRs (fsmooth.traversal): children in field order, through tuples,
never into non-node fields; map_children rebuilds with every field kept; walk is pre-order."""
from __future__ import annotations

import sympy

from fsmooth import core
from fsmooth.core import Build, Lam, Let, Lit, PrimApp, Var
from fsmooth.dpia import phrases as p
from fsmooth.dps import ir as dps
from fsmooth.strategies import Strategy
from fsmooth.types import ArrayT, Double, FunT, Index

X, ONE = Var("x", Double), Lit(1.0, Double)
ADD = PrimApp("add", (X, ONE), Double)


def test_core_children_in_field_order_and_lambda_body():
    lam = Lam((("i", Index),), ADD, FunT((Index,), Double))
    build = Build(Var("n", Index), lam, ArrayT(Double), strategy=Strategy())
    assert core.children(build) == (Var("n", Index), lam)
    assert core.children(lam) == (ADD,)
    assert core.children(Let("x", ONE, ADD, Double)) == (ONE, ADD)
    assert core.children(X) == ()


def test_core_map_children_keeps_the_other_fields():
    build = Build(Var("n", Index), Lam((("i", Index),), ADD, FunT((Index,), Double)), ArrayT(Double),
                  strategy=Strategy())
    renamed = core.map_children(lambda e: Var("m", Index) if e == Var("n", Index) else e, build)
    assert renamed.size == Var("m", Index) and renamed.fn is build.fn and renamed.strategy is build.strategy
    assert core.map_children(lambda e: ONE, ADD).args == (ONE, ONE)


def test_walk_is_pre_order():
    e = Let("x", ONE, ADD, Double)
    assert list(core.walk(e)) == [e, ONE, ADD, X, ONE]


def test_dps_children_are_terms_not_atoms_or_refs():
    copy = dps.Copy(dps.RVar("r"), Var("a", ArrayT(Double)), sympy.Integer(2), Double)
    alloc = dps.Alloc("r", Double, sympy.Integer(2), copy)
    branch = dps.If(Var("c", Double), alloc, copy, ArrayT(Double))
    assert dps.children(branch) == (alloc, copy)
    assert dps.children(copy) == ()
    assert list(dps.walk(branch)) == [branch, alloc, copy, copy]


def test_dpia_children_inside_tuples_and_none_kept():
    a, b = p.Ident("a", p.ExpT(p.Num(Double))), p.Ident("b", p.ExpT(p.Num(Double)))
    record = p.Record((a, None, b), p.Rec((p.Num(Double),) * 3))
    assert p.children(record) == (a, b)
    swapped = p.map_children(lambda ph: b if ph == a else a, record)
    assert swapped.items == (b, None, a) and swapped.data == record.data
