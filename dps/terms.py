"""Traversals of DPS-F̃ terms shared by the storage passes, beyond ``ir.walk``: destination refs,
the regions and names a term uses, and moving a region's refs to another place."""
from __future__ import annotations

from dataclasses import replace

import sympy

from fsmooth.core import Var

from . import ir


def map_refs(t: ir.Term, f) -> ir.Term:
    """``t`` with ``f`` applied to every destination ref in it."""
    match t:
        case ir.Build() | ir.Ifold() | ir.Copy() | ir.Call() | ir.TupleOf():
            t = replace(t, dest=_map_ref(t.dest, f))
    return ir.map_children(lambda u: map_refs(u, f), t)


def _map_ref(ref: ir.Ref, f) -> ir.Ref:
    if isinstance(ref, ir.RTuple):
        return ir.RTuple(tuple(_map_ref(r, f) for r in ref.items))
    return f(ref)


def split_ref(ref: ir.Ref) -> tuple[ir.Ref, sympy.Expr]:
    """(the region or destination under ``ref``, its offset from there in elements)."""
    if isinstance(ref, ir.Offset):
        base, elems = split_ref(ref.base)
        return base, elems + ref.elems
    return ref, sympy.Integer(0)


def regions_used(t: ir.Term) -> set[str]:
    used: set[str] = set()

    def see(ref):
        base, _ = split_ref(ref)
        if isinstance(base, ir.RVar):
            used.add(base.name)
        return ref

    map_refs(t, see)
    for u in ir.walk(t):
        if isinstance(u, ir.Ifold):
            used.update(ir.buffer_names(u.buffers))
    return used


def ifold_buffers(t: ir.Term) -> set[str]:
    """The regions that array-state ifolds in ``t`` double-buffer (named, not ref'd, by the
    ifold: they cannot be moved into another region)."""
    return {b for u in ir.walk(t) if isinstance(u, ir.Ifold) for b in ir.buffer_names(u.buffers)}


def rebase(t: ir.Term, region: str, base: ir.Ref, shift: sympy.Expr) -> ir.Term:
    """``t`` with each ref ``region + k`` replaced by ``base + shift + k``."""
    def move(ref):
        under, elems = split_ref(ref)
        if under != ir.RVar(region):
            return ref
        return ir.Offset(base, sympy.expand(shift + elems))
    return map_refs(t, move)


def names_used(t: ir.Term) -> set[str]:
    """The variables ``t`` reads: as atoms, and as symbols of the sizes and offsets in it."""
    names: set[str] = set()

    def atom(a):
        if isinstance(a, Var):
            names.add(a.name)

    def size(e):
        if isinstance(e, sympy.Basic):
            names.update(s.name for s in e.free_symbols)
        elif e is not None:
            atom(e)

    def ref(r):
        size(split_ref(r)[1])
        return r

    for u in ir.walk(t):
        match u:
            case ir.Atom_(a):
                atom(a)
            case ir.Prim(_, args) | ir.Call(_, _, args):
                for a in args:
                    atom(a)
            case ir.Get(arr, idx):
                atom(arr)
                atom(idx)
            case ir.TupleOf(items):
                for a in items:
                    atom(a)
            case ir.Proj(tup):
                atom(tup)
            case ir.CardOf(value):
                size(value)
            case ir.If(c):
                atom(c)
            case ir.Copy(_, src, n):
                atom(src)
                size(n)
            case ir.Alloc(_, _, n, _, offset):
                size(n)
                size(offset)
            case ir.Build(_, n):
                size(n)
            case ir.Ifold(count=n):
                size(n)
        for d in _flat_dims(getattr(u, "dims", None) or ()):
            size(d)
        if isinstance(u, ir.Call):
            size(u.scratch_offset)
    map_refs(t, ref)
    return names


def _flat_dims(dims) -> list:
    """The sizes in ``dims`` (a tuple's dims are nested: one tuple of dims per component)."""
    return [x for d in dims for x in (_flat_dims(d) if isinstance(d, tuple) else [d])]
