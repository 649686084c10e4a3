"""An array-state ifold whose step reads the state only where it writes it updates it in place:
one buffer, not two; and an element the step copies to its own place is not written at all
(issue 11: ADBench Hand's walk of the bone hierarchy rewrote all B transforms at every one of
its B steps, where a hand-written loop writes one).

The step (the ifold's body) is matched as its lets, then one build of the whole new state:

    lets ...; build next(s) n (λ k. E)

The lets run before anything is written, so they may read the state ``s`` as they like.  E may
read it only pointwise: every scalar of ``s`` it reads (through views such as ``let row = s[k]``
too) lies where the scalar being computed is written, so no iteration reads what another has
already changed; the state then has one buffer (``Ifold.buffers`` is ``(b, b)``, the other
region goes).  In that buffer a scalar written from the same place of ``s`` is already there:

- E = ``... let t = (k == j) in B`` (any Bool t that B tests), where B with ``t`` false copies
  element k of ``s`` to its own place: B becomes ``if t then B[t ↦ true] else keep``, so the
  other n - 1 elements are left as they are (``ir.Keep``), not copied, whatever depth of builds
  B has under the test (and the other way round where B with t true copies);
- an ``if`` of a scalar whose branch is that scalar read from its own place: that branch is
  ``keep``.

A state read elsewhere in E (``s[k - 1]``, a view passed to a call) keeps its two buffers.  The
C back end then runs a loop whose body acts at one index only, ``if k == j then P else keep``,
for that one trip (``dpia.single_trip``).

The same reasoning writes a build over an array it reads: in

    alloc r (let a = build r ... in alloc r' (let b = build r' n (λ k. E) in body))

where E reads ``a`` only pointwise, ``body`` does not use ``a`` and the regions are alike, ``b`` is
built in r (r' goes), and a scalar of E that copies ``a``'s from its own place is ``keep`` (Hand's
mirrored positions over the skinned ones: only a mirrored hand's x is written, negated).  Where E
(element k, a row) reads only row k of ``a``, but reads it while it writes it (a 3x3 matrix times
the row), it reads a C-local copy of the row instead (``through_row_copy``); and a kernel's result
built so over a dead array builds that array in the result (``result_over_dead_array``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from fsmooth.core import Lit, Var
from fsmooth.shape.sizes import size_symbol
from fsmooth.types import BYTES, ArrayT, Bool, Index

from . import ir
from .local_arrays import small_constant_size
from .terms import UseSets, names_used, rebase, split_ref


def update_in_place(t: ir.Term, row_locals: bool = True) -> ir.Term:
    """``t`` with every ifold of an array state whose step reads it pointwise updating it in place,
    and every build that reads an array dead after it only pointwise written over that array,
    innermost first; ``row_locals``: small arrays are C locals (``dps.local_arrays``), so a build
    whose element i reads only row i of a dead array is written over it through a copy of the row
    (``through_row_copy``)."""
    t = ir.map_children(lambda u: update_in_place(u, row_locals), t)
    match t:
        case ir.Alloc(region, body=ir.Ifold(buffers=(str() as first, str() as second), ty=ArrayT(),
                                            trace=None) as fold) if region == second != first:
            step = in_place_step(fold)
            if step is not None:  # the second buffer is no longer used: its alloc goes
                return replace(fold, body=step, buffers=(first, first))
        case ir.Alloc(region, elem, count, ir.Let(name, ir.Build(dest=ir.RVar(written)) as rhs, ir.Alloc(
                inner, inner_elem, inner_count, ir.Let(_, ir.Build(dest=ir.RVar(dest)) as build, after) as use)) as scope) \
                if written == region and dest == inner and (inner_elem, inner_count) == (elem, count) \
                and name not in names_used(after) and inner not in UseSets().regions(after):
            reads = Pointwise(name, scope.dims, ir.RVar(inner))
            over = reads.array_term(build, {name: reads.whole})
            if over is None and t.dims == scope.dims:
                over = through_row_copy(build, Var(name, rhs.ty), scope.dims, elem, f"{region}_row", row_locals)
            if over is not None:  # written over ``name``, in its region: the other alloc goes
                moved = rebase(over, inner, ir.RVar(region), sympy.Integer(0))
                return replace(t, body=replace(scope, body=replace(use, rhs=moved)))
    return t


def result_over_dead_array(t: ir.Term, dest: str, dims: tuple, row_locals: bool = True) -> ir.Term:
    """The kernel body ``t`` (its result, of ``dims``, written to ``dest``) with the build of its
    result that reads an array dead after it only pointwise, or only its row i at element i
    (``through_row_copy``), written over that array, which is then built in ``dest`` and its alloc
    goes:

        alloc r (lets ...; let a = build r ... in lets' ...; build dest n (λ i. E))

    where the lets' use neither ``a`` nor r nor ``dest``, and r is not a C local (``row_locals`` and
    small: its scalars are registers to the C compiler, where the result is memory).  ``update_in_place`` writes a build over
    an array when both are allocated; a kernel's result has no alloc, so here the array moves into
    the result instead (Hand's global transform of its skinned vertices, inlined, written over
    them in the caller's positions, as ADBench's manual C++ transforms its vertices in place)."""
    match t:
        case ir.Alloc(region, elem, count, body) if t.dims == tuple(dims) \
                and not (row_locals and small_constant_size(count, BYTES[elem])):  # a local stays one
            moved = _over_region(body, region, elem, dest, dims, row_locals)
            if moved is not None:
                return moved
    if isinstance(t, (ir.Let, ir.Alloc)):
        return replace(t, body=result_over_dead_array(t.body, dest, dims, row_locals))
    return t


def _over_region(body: ir.Term, region: str, elem, dest: str, dims: tuple, row_locals: bool) -> ir.Term | None:
    """``body`` (in ``alloc region``) with its last array written in ``region`` built in ``dest``
    and the build of the result written over it; None where that is not sound."""
    chain = _prefix(body)
    writes = [k for k, u in enumerate(chain) if isinstance(u, ir.Let)
              and any(split_ref(ref)[0] == ir.RVar(region) for ref in _refs(u.rhs))]
    build = _last(body)
    if not writes or not isinstance(build, ir.Build) or build.dest != ir.RVar(dest):
        return None
    last = chain[writes[-1]]
    uses = UseSets()
    between = [u.rhs for u in chain[writes[-1] + 1:] if isinstance(u, ir.Let)]
    if any(last.name in uses.names(u) or not uses.regions(u).isdisjoint({region, dest}) for u in between) \
            or any(dest in uses.regions(u.rhs) for u in chain if isinstance(u, ir.Let)) \
            or region in uses.regions(build):
        return None
    reads = Pointwise(last.name, dims, ir.RVar(dest))
    over = reads.array_term(build, {last.name: reads.whole})
    if over is None:
        over = through_row_copy(build, Var(last.name, last.ty), dims, elem, f"{region}_row", row_locals)
    return None if over is None else rebase(_with_last(body, over), region, ir.RVar(dest), sympy.Integer(0))


def through_row_copy(build: ir.Build, array: Var, dims: tuple, elem, row_region: str,
                     copies: bool = True) -> ir.Build | None:
    """``build`` (element i written from row i of ``array``, of ``dims`` as the build) made to write
    over ``array``: None unless ``array`` is read only as the view ``array[i]``.

    Where element i reads row i only in the lets before its write (Hand's mirrored vertex, a local
    row the transform then reads), the row is read before anything of it is written: ``build``
    as it is.  Else element i reads its row while it writes it (a 3x3 matrix times the row: each
    output reads all three inputs), so written in place its first output would clobber an input
    its second reads: element i then reads a copy of row i made before it writes, where
    ``copies`` (small arrays are C locals) and the row is small (``small_constant_size``): a C
    local of the row's few scalars, which the C compiler keeps in registers, in place of the
    whole array's scratch (ADBench's manual C++ transforms its vertices so, through a 3-element
    copy of each)."""
    match build:
        case ir.Build(body=body, index=index, ty=ArrayT(ArrayT() as row_ty)) if len(dims) >= 2:
            copied = f"{row_region}_copy"
            rows = _rows_read(body, array.name, index, copied)
            if array.name in names_used(rows):
                return None
            views = {copied} | {u.name for u in _prefix(rows)
                                if isinstance(u, ir.Let) and u.rhs == ir.Atom_(Var(copied, u.ty))}
            if views.isdisjoint(names_used(_last(rows))):
                return build
            row_dims, count = tuple(dims[1:]), _count(dims[1:])
            if not copies or not small_constant_size(count, BYTES[elem]):
                return None
            view = f"{row_region}_view"
            copy = ir.Alloc(row_region, elem, count, ir.Let(
                copied, ir.Copy(ir.RVar(row_region), Var(view, row_ty), count, elem), rows, row_ty, row_dims),
                dims=row_dims)
            return replace(build, body=ir.Let(view, ir.Get(array, Var(index, Index), row_ty),
                                              copy, row_ty, row_dims))
    return None


def _rows_read(t: ir.Term, name: str, index: str, copied: str) -> ir.Term:
    """``t`` with each view ``let x = name[index]`` bound to the row's copy instead."""
    match t:
        case ir.Let(_, ir.Get(Var(arr), Var(i)), body) if arr == name and i == index:
            return replace(t, rhs=ir.Atom_(Var(copied, t.ty)), body=_rows_read(body, name, index, copied))
    return ir.map_children(lambda u: _rows_read(u, name, index, copied), t)


def in_place_step(fold: ir.Ifold) -> ir.Term | None:
    """``fold``'s step writing its new state into the state's own buffer, or None where it reads
    the state elsewhere than where it writes (or writes it elsewhere than in its last build)."""
    state = Pointwise(fold.state, fold.dims, ir.StateDest(fold.state))
    last = _last(fold.body)
    if not isinstance(last, ir.Build) or last.dest != ir.StateDest(fold.state):
        return None
    before = [u for u in _prefix(fold.body) if isinstance(u, ir.Let)]
    if any(_writes_state(u.rhs, fold.state) for u in before):
        return None
    build = state.array_term(last, state.views_before(before))
    return None if build is None else _with_last(fold.body, build)


@dataclass(frozen=True)
class _View:
    """A view of the state: where in it (flat, in scalars), and its dims."""

    offset: sympy.Expr
    dims: tuple


def _index(a) -> sympy.Expr:
    """An index atom as a size expression (a loop variable or an integer let is its symbol)."""
    return sympy.Integer(a.value) if isinstance(a, Lit) else size_symbol(a.name)


def _count(dims) -> sympy.Expr:
    return sympy.Mul(*dims) if dims else sympy.Integer(1)


class Pointwise:
    """The reads of the array ``name`` (dims ``dims``) in a build writing over it: into ``dest``
    (an ifold's new state, or a region of the same size)."""

    def __init__(self, name: str, dims: tuple, dest: ir.Ref):
        self.name = name
        self.dest = dest
        self.whole = _View(sympy.Integer(0), tuple(dims))

    def views_before(self, lets: list) -> dict:
        """The views of the state the lets before the build bind (``let row = s[i]``)."""
        views = {self.name: self.whole}
        for u in lets:
            view = self.view(u, views)
            if view is not None:
                views[u.name] = view
        return views

    def view(self, u: ir.Let, views: dict) -> _View | None:
        """The view of the state that ``u`` binds, if it binds one (an array read from a view)."""
        match u.rhs:
            case ir.Get(Var(arr), idx) if arr in views and isinstance(u.ty, ArrayT):
                at = views[arr]
                return _View(sympy.expand(at.offset + _index(idx) * _count(at.dims[1:])), at.dims[1:])
            case ir.Atom_(Var(arr)) if arr in views:
                return views[arr]
        return None

    def read(self, t: ir.Term, views: dict) -> sympy.Expr | None:
        """The flat place of the state that ``t`` reads, if it is a scalar read of a view."""
        match t:
            case ir.Get(Var(arr), idx) if arr in views and not isinstance(t.ty, ArrayT):
                return sympy.expand(views[arr].offset + _index(idx))
        return None

    def array_term(self, t: ir.Term, views: dict) -> ir.Term | None:
        """``t``, which writes into the state, rewritten for one buffer; None unless pointwise."""
        match t:
            case ir.Build(dest, _, index, body, ArrayT(elem)):
                base, offset = split_ref(dest)
                if base != self.dest:
                    return None if self.reads_state(t, views) else t
                if isinstance(elem, ArrayT):
                    inner = self.array_term(body, views)
                else:
                    inner = self.scalar_term(body, views, sympy.expand(offset + size_symbol(index)))
                return None if inner is None else replace(t, body=inner)
            case ir.Let(name, rhs, body):
                view = self.view(t, views)
                if view is None and self.reads_state(rhs, views):
                    return None
                inner_views = views if view is None else {**views, name: view}
                inner = self.array_term(body, inner_views)
                if inner is None:
                    return None
                kept = self.keep_unless(t, inner, inner_views)
                return kept if kept is not None else replace(t, body=inner)
            case ir.If(_, then, orelse):
                then, orelse = self.array_term(then, views), self.array_term(orelse, views)
                return None if then is None or orelse is None else replace(t, then=then, orelse=orelse)
            case ir.Alloc(body=body):
                inner = self.array_term(body, views)
                return None if inner is None else replace(t, body=inner)
        return None if self.reads_state(t, views) else t

    def keep_unless(self, guard: ir.Let, body: ir.Term, views: dict) -> ir.Term | None:
        """``let t = c in body`` (t a Bool that ``body`` tests) as ``let t = c in if t then
        body[t ↦ true] else keep`` where ``body`` with t false only copies the state to its own
        place (or the other way round); None where neither does."""
        if guard.ty != Bool or guard.name not in names_used(body):
            return None
        for copying in (False, True):
            if self.copies(_specialise(body, guard.name, copying), views):
                changed = _specialise(body, guard.name, not copying)
                then, orelse = (ir.Keep(), changed) if copying else (changed, ir.Keep())
                return replace(guard, body=ir.If(Var(guard.name, Bool), then, orelse, body_type(body)))
        return None

    def copies(self, t: ir.Term, views: dict) -> bool:
        """Whether ``t`` (a term writing into the state) writes only scalars read from their own place."""
        match t:
            case ir.Keep():
                return True
            case ir.Build(dest, _, index, body, ArrayT(elem)):
                base, offset = split_ref(dest)
                if base != self.dest:
                    return False
                if isinstance(elem, ArrayT):
                    return self.copies(body, views)
                return self.copied(body, views, sympy.expand(offset + size_symbol(index)))
            case ir.Let(name, _, body):
                view = self.view(t, views)
                return view is not None and self.copies(body, {**views, name: view})
        return False

    def copied(self, t: ir.Term, views: dict, place: sympy.Expr) -> bool:
        """Whether the scalar term ``t`` is the state's scalar at ``place`` (a read, or a let of it)."""
        match t:
            case ir.Keep():
                return True
            case ir.Let(name, rhs, ir.Atom_(Var(result))) if result == name:
                return self.copied(rhs, views, place)
            case ir.Let(name, rhs, body) if self.view(t, views) is not None:
                return self.copied(body, {**views, name: self.view(t, views)}, place)
        return self.read(t, views) == place

    def scalar_term(self, t: ir.Term, views: dict, place: sympy.Expr) -> ir.Term | None:
        """The scalar term ``t``, written to the state at ``place``, for one buffer: None if it reads
        the state elsewhere; a branch that is the scalar already there becomes ``keep``."""
        match t:
            case ir.If(_, then, orelse):
                then, orelse = (self.scalar_term(b, views, place) for b in (then, orelse))
                if then is None or orelse is None:
                    return None
                then, orelse = (ir.Keep() if self.copied(b, views, place) else b for b in (then, orelse))
                return replace(t, then=then, orelse=orelse)
            case ir.Let(name, rhs, body):
                view = self.view(t, views)
                inner_views = views if view is None else {**views, name: view}
                if view is None and self.reads_state(rhs, views) and self.read(rhs, views) != place:
                    return None
                inner = self.scalar_term(body, inner_views, place)
                return None if inner is None else replace(t, body=inner)
        if self.read(t, views) == place or not self.reads_state(t, views):
            return t
        return None

    def reads_state(self, t: ir.Term, views: dict) -> bool:
        return not names_used(t).isdisjoint(views)


def body_type(t: ir.Term):
    """The type of the value that the array term ``t`` writes."""
    match t:
        case ir.Let(body=body) | ir.Alloc(body=body):
            return body_type(body)
        case ir.If(_, then, orelse):
            return body_type(then) if not isinstance(then, ir.Keep) else body_type(orelse)
    return t.ty


def _specialise(t: ir.Term, guard: str, value: bool) -> ir.Term:
    """``t`` with every ``if guard`` taking its ``value`` branch."""
    match t:
        case ir.If(Var(name), then, orelse) if name == guard:
            return _specialise(then if value else orelse, guard, value)
    return ir.map_children(lambda u: _specialise(u, guard, value), t)


def _prefix(t: ir.Term) -> list:
    """The lets and allocs around the last term of a step, outermost first."""
    found = []
    while isinstance(t, (ir.Let, ir.Alloc)):
        found.append(t)
        t = t.body
    return found


def _last(t: ir.Term) -> ir.Term:
    while isinstance(t, (ir.Let, ir.Alloc)):
        t = t.body
    return t


def _with_last(t: ir.Term, last: ir.Term) -> ir.Term:
    if isinstance(t, (ir.Let, ir.Alloc)):
        return replace(t, body=_with_last(t.body, last))
    return last


def _writes_state(t: ir.Term, state: str) -> bool:
    """Whether ``t`` writes into the new state (its last build is meant to write all of it)."""
    return any(split_ref(ref)[0] == ir.StateDest(state)
               for u in ir.walk(t) for ref in _refs(u))


def _refs(u: ir.Term) -> list:
    refs = []
    for name in ("dest", "trace"):
        ref = getattr(u, name, None)
        if isinstance(ref, ir.RTuple):
            refs.extend(ref.items)
        elif isinstance(ref, ir.Ref):
            refs.append(ref)
    return refs
