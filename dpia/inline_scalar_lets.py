"""β-reduction of scalar lets, the pass between DPS-F̃ and DPIA (DPIA's βη reasoning), so that
``build n (λ i. a[i] + b[i])`` reads as in the paper instead of through one variable per ANF
temporary.

``mark_beta_reducible`` marks each scalar ``let`` that may be β-reduced (``Let.inline``, shown
``let x := rhs``); ``fsmooth.dpia.from_dps`` then uses the phrase of its right-hand side in
place of the variable.  The decision is made on the DPS term, whose effects are explicit (which
terms write memory, which sizes name the variable), and whose operands stay atoms: the
right-hand side must be pure, unable to fail and cheap, and the variable used at most once, not
under a loop and before anything writes memory (a region may be reused once the array read
from it is dead).
"""
from __future__ import annotations

from dataclasses import replace

import sympy

from fsmooth.core import Lit, Var
from fsmooth.dps import ir as d
from fsmooth.types import Scalar


def mark_beta_reducible(program: d.Program) -> d.Program:
    """``program`` with every β-reducible scalar let marked ``inline``."""
    def mark(t: d.Term) -> d.Term:
        t = d.map_children(mark, t)
        match t:
            case d.Let(name, rhs, body, Scalar()) if beta_reducible(name, rhs, body):
                return replace(t, inline=True)
        return t

    return replace(program, kernels={name: replace(k, body=mark(k.body)) for name, k in program.kernels.items()})


def beta_reducible(name: str, rhs: d.Term, body: d.Term) -> bool:
    """Whether ``let name = rhs in body`` (a scalar let) may be β-reduced."""
    return _inlinable(rhs) and _inline_safe(body, name)


def nonzero_literal(a) -> bool:
    """A literal other than 0: ``//`` and ``%`` by it cannot fail."""
    return isinstance(a, Lit) and a.value != 0


def _inlinable(t: d.Term) -> bool:
    """Pure, cannot fail, cheap: evaluating it where it is used instead changes nothing."""
    match t:
        case d.Atom_() | d.CardOf():
            return True
        case d.Get(_, _, ty, checked):
            return isinstance(ty, Scalar) and not checked
        case d.Prim(op, args):
            return op not in ("floordiv", "mod") or nonzero_literal(args[1])
        case d.Proj(_, _, ty):
            return isinstance(ty, Scalar)
    return False


def _inline_safe(body: d.Term, name: str) -> bool:
    """``name`` is used at most once in ``body``, not under a loop, and before anything in
    ``body`` writes memory (a region may be reused once the array read from it is dead)."""
    events = _events(body, name)
    if events.count("use") > 1 or "use in loop" in events:
        return False
    return "use" not in events or "write" not in events[:events.index("use")]


def _events(t: d.Term, name: str) -> list:
    """Uses of ``name`` and writes to memory in ``t``, in evaluation order."""
    match t:
        case d.Atom_(a):
            return _atom_uses(a, name)
        case d.Prim(_, args):
            return [e for a in args for e in _atom_uses(a, name)]
        case d.Call(_, dest, args):
            return [e for a in args for e in _atom_uses(a, name)] + _ref_uses(dest, name) + ["write"]
        case d.Get(arr, idx):
            return _atom_uses(arr, name) + _atom_uses(idx, name)
        case d.TupleOf(items, _, _, written):  # in result position each component is written in turn
            return [e for k, a in enumerate(items) if k not in written for e in _atom_uses(a, name) + ["write"]]
        case d.Proj(tup):
            return _atom_uses(tup, name)
        case d.CardOf(value):
            return _sym_uses(value, name)
        case d.Let(_, rhs, body):
            return _events(rhs, name) + _events(body, name)
        case d.If(cond, then, orelse):
            return _atom_uses(cond, name) + _events(then, name) + _events(orelse, name)
        case d.Alloc(_, _, count, body, offset):
            return _sym_uses(count, name) + _sym_uses(offset, name) + _events(body, name)
        case d.Build(dest, size, _, body):
            return (_ref_uses(dest, name) + _sym_uses(size, name) + ["write"]
                    + _in_loop(_events(body, name)))
        case d.Ifold(dest, _, _, body, init, count):
            counted = _atom_uses(count, name) if isinstance(count, (Var, Lit)) else _sym_uses(count, name)
            return (_ref_uses(dest, name) + counted + _events(init, name) + ["write"]
                    + _in_loop(_events(body, name)))
        case d.Copy(dest, src, count):
            return _ref_uses(dest, name) + _atom_uses(src, name) + _sym_uses(count, name) + ["write"]
    raise AssertionError(t)


def _in_loop(events: list) -> list:
    return ["use in loop" if e != "write" else e for e in events]


def _atom_uses(a, name: str) -> list:
    return ["use"] if isinstance(a, Var) and a.name == name else []


def _sym_uses(e, name: str) -> list:
    """A size expression is evaluated wherever it is printed: the variable must stay."""
    return ["use in loop"] if any(s.name == name for s in sympy.sympify(e).free_symbols) else []


def _ref_uses(r: d.Ref, name: str) -> list:
    match r:
        case d.Offset(base, elems):
            return _ref_uses(base, name) + _sym_uses(elems, name)
        case d.RTuple(items):
            return [e for ref in items for e in _ref_uses(ref, name)]
    return []
