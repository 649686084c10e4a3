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

import bisect
import math
from dataclasses import dataclass, field, replace

import sympy

from fsmooth.core import Lit, Var
from fsmooth.dps import ir as d
from fsmooth.types import Scalar


def mark_beta_reducible(program: d.Program) -> d.Program:
    """``program`` with every β-reducible scalar let marked ``inline``."""
    return replace(program, kernels={name: replace(k, body=_marked(k.body, EventLog.of(k.body)))
                                     for name, k in program.kernels.items()})


def _marked(t: d.Term, log: "EventLog") -> d.Term:
    """``t`` with its β-reducible scalar lets marked, each decided on the term as ``log`` saw it
    (marking changes no event)."""
    reducible = isinstance(t, d.Let) and isinstance(t.ty, Scalar) and _inlinable(t.rhs) and log.inline_safe(t)
    t = d.map_children(lambda u: _marked(u, log), t)
    return replace(t, inline=True) if reducible else t


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


IN_EVERY_LOOP = math.inf
"""The loop depth of a use in a size expression: a size is evaluated wherever it is printed,
so such a use counts as one in a loop, whatever the let's depth."""


@dataclass
class EventLog:
    """The uses of variables and the writes to memory of a kernel body, in evaluation order,
    recorded in one walk: asking each let's body for its own events made the pass quadratic in a
    chain of lets (issue 13).  A let's body is a contiguous stretch of the log, so its events are
    those between its ``bodies`` bounds."""

    uses: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # name -> (position, loop depth)
    writes: list[int] = field(default_factory=list)  # positions
    bodies: dict[int, tuple[int, int, int, d.Let]] = field(default_factory=dict)  # id(let) -> (start, end, depth, let)
    length: int = 0

    @staticmethod
    def of(body: d.Term) -> "EventLog":
        log = EventLog()
        log._record(body, 0)
        return log

    def inline_safe(self, let: d.Let) -> bool:
        """``let``'s variable is used at most once in its body, not under a loop, and before
        anything in its body writes memory (a region may be reused once the array read from it
        is dead)."""
        start, end, depth, _ = self.bodies[id(let)]
        positions = self.uses.get(let.name, [])
        inside = positions[bisect.bisect_left(positions, (start, -1)):bisect.bisect_left(positions, (end, -1))]
        if len(inside) > 1 or any(use_depth > depth for _, use_depth in inside):
            return False
        return not inside or bisect.bisect_left(self.writes, inside[0][0]) == bisect.bisect_left(self.writes, start)

    def _use(self, name: str, depth: float) -> None:
        self.uses.setdefault(name, []).append((self.length, depth))
        self.length += 1

    def _write(self) -> None:
        self.writes.append(self.length)
        self.length += 1

    def _atom(self, a, depth: int) -> None:
        if isinstance(a, Var):
            self._use(a.name, depth)

    def _size(self, e) -> None:
        for s in sympy.sympify(e).free_symbols:
            self._use(s.name, IN_EVERY_LOOP)

    def _ref(self, r: d.Ref) -> None:
        match r:
            case d.Offset(base, elems):
                self._ref(base)
                self._size(elems)
            case d.RTuple(items):
                for ref in items:
                    self._ref(ref)

    def _record(self, t: d.Term, depth: int) -> None:
        match t:
            case d.Atom_(a):
                self._atom(a, depth)
            case d.Prim(_, args):
                for a in args:
                    self._atom(a, depth)
            case d.Call(_, dest, args):
                for a in args:
                    self._atom(a, depth)
                self._ref(dest)
                self._write()
            case d.Get(arr, idx):
                self._atom(arr, depth)
                self._atom(idx, depth)
            case d.TupleOf(items, _, _, written):  # in result position each component is written in turn
                for k, a in enumerate(items):
                    if k not in written:
                        self._atom(a, depth)
                        self._write()
            case d.Proj(tup):
                self._atom(tup, depth)
            case d.CardOf(value):
                self._size(value)
            case d.Let(_, rhs, body):
                self._record(rhs, depth)
                start = self.length
                self._record(body, depth)
                self.bodies[id(t)] = (start, self.length, depth, t)  # t kept: its id stays its own
            case d.If(cond, then, orelse):
                self._atom(cond, depth)
                self._record(then, depth)
                self._record(orelse, depth)
            case d.Alloc(_, _, count, body, offset):
                self._size(count)
                if offset is not None:  # None: a C local (dps.local_arrays)
                    self._size(offset)
                self._record(body, depth)
            case d.Build(dest, size, _, body):
                self._ref(dest)
                self._size(size)
                self._write()
                self._record(body, depth + 1)
            case d.Ifold(dest, _, _, body, init, count):
                self._ref(dest)
                if t.trace is not None:  # an iscan's states
                    self._ref(t.trace)
                if isinstance(count, (Var, Lit)):
                    self._atom(count, depth)
                else:
                    self._size(count)
                self._record(init, depth)
                self._write()
                self._record(body, depth + 1)
            case d.Filter(dest, _, _, body, arr):
                self._ref(dest)
                self._atom(arr, depth)
                self._write()
                self._record(body, depth + 1)
            case d.Copy(dest, src, count):
                self._ref(dest)
                self._atom(src, depth)
                self._size(count)
                self._write()
            case d.Keep():  # writes nothing
                pass
            case _:
                raise AssertionError(t)
