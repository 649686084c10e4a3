"""Traversals of DPS-F̃ terms shared by the storage passes, beyond ``ir.walk``: destination refs,
the regions and names a term uses, and moving a region's refs to another place."""
from __future__ import annotations

from dataclasses import replace

import sympy

from fsmooth.core import Var

from . import ir


def map_refs(t: ir.Term, f) -> ir.Term:
    """``t`` with ``f`` applied to every destination ref in it."""
    return ir.map_children(lambda u: map_refs(u, f), map_own_refs(t, f))


def map_own_refs(t: ir.Term, f) -> ir.Term:
    """``t`` with ``f`` applied to its own destination refs, not to those of its sub-terms."""
    match t:
        case ir.Ifold(trace=ir.Ref() as trace):  # an iscan: its states' destination too
            return replace(t, dest=_map_ref(t.dest, f), trace=_map_ref(trace, f))
        case ir.Build() | ir.Ifold() | ir.Copy() | ir.Call() | ir.TupleOf() | ir.Filter():
            return replace(t, dest=_map_ref(t.dest, f))
    return t


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


def ifold_buffers(t: ir.Term) -> set[str]:
    """The regions that ifolds in ``t`` name, not ref (array states' double buffers, parallel
    reductions' partials): they cannot be moved into another region."""
    return {b for u in ir.walk(t) if isinstance(u, ir.Ifold) for b in ir.named_regions(u)}


def rebase(t: ir.Term, region: str, base: ir.Ref, shift: sympy.Expr) -> ir.Term:
    """``t`` with each ref ``region + k`` replaced by ``base + shift + k``."""
    def move(ref):
        under, elems = split_ref(ref)
        if under != ir.RVar(region):
            return ref
        return ir.Offset(base, sympy.expand(shift + elems))
    return map_refs(t, move)


def names_used(t: ir.Term) -> frozenset[str]:
    """The variables ``t`` reads: as atoms, and as symbols of the sizes and offsets in it."""
    return UseSets().names(t)


class UseSets:
    """The variables (``names_used``) and the regions each term of one rewrite uses, each set made once
    from its own fields and its children's sets.  A bottom-up rewrite asks for the set of a body,
    then of the terms around it: made from scratch each time, the sets made the storage
    simplification quadratic (cubic with its re-rewrites) in the length of a let chain (issue 13).
    Memoised by identity, each term kept alive with its set so that its id is not reused."""

    def __init__(self):
        self._names: dict[int, tuple[ir.Term, frozenset[str]]] = {}
        self._regions: dict[int, tuple[ir.Term, frozenset[str]]] = {}

    def names(self, t: ir.Term) -> frozenset[str]:
        return self._memoised(self._names, _own_names, t)

    def regions(self, t: ir.Term) -> frozenset[str]:
        return self._memoised(self._regions, _own_regions, t)

    def _memoised(self, table: dict, own, t: ir.Term) -> frozenset[str]:
        known = table.get(id(t))
        if known is not None:
            return known[1]
        found = frozenset(own(t)).union(*(self._memoised(table, own, u) for u in ir.children(t)))
        table[id(t)] = (t, found)
        return found


def _own_names(u: ir.Term) -> set[str]:
    """The variables ``u`` itself reads, not those of its sub-terms."""
    names: set[str] = set()

    def atom(a):
        if isinstance(a, Var):
            names.add(a.name)

    def size(e):
        if isinstance(e, sympy.Basic):
            names.update(s.name for s in e.free_symbols)
        elif e is not None:
            atom(e)

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
        case ir.Filter(arr=arr):
            atom(arr)
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
    for ref in _own_refs(u):
        size(split_ref(ref)[1])
    return names


def _own_regions(u: ir.Term) -> set[str]:
    """The regions ``u``'s own destination is in, and those it double-buffers."""
    used = {base.name for base in (split_ref(ref)[0] for ref in _own_refs(u)) if isinstance(base, ir.RVar)}
    if isinstance(u, ir.Ifold):
        used.update(ir.named_regions(u))
    return used


def _own_refs(u: ir.Term) -> list[ir.Ref]:
    """The destination refs of ``u`` itself (a tuple's flattened), those ``map_refs`` maps."""
    match u:
        case ir.Ifold(trace=ir.Ref() as trace):
            return _flat_refs(u.dest) + _flat_refs(trace)
        case ir.Build() | ir.Ifold() | ir.Copy() | ir.Call() | ir.TupleOf() | ir.Filter():
            return _flat_refs(u.dest)
    return []


def _flat_refs(ref: ir.Ref) -> list[ir.Ref]:
    if isinstance(ref, ir.RTuple):
        return [r for item in ref.items for r in _flat_refs(item)]
    return [ref]


def _flat_dims(dims) -> list:
    """The sizes in ``dims`` (a tuple's dims are nested: one tuple of dims per component)."""
    return [x for d in dims for x in (_flat_dims(d) if isinstance(d, tuple) else [d])]
