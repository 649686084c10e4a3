"""Which ifolds are reductions: ``ifold(λ acc i. acc ⊕ f(i), init, n)`` with ⊕ associative.

An ifold is a *reduction* when its body combines the state with an element that does not
depend on the state: ``acc ⊕ f(i)`` or ``f(i) ⊕ acc``, ``acc`` occurring nowhere else in the body,
for ⊕ one of

    +  *  on Double, Float, Index, Card        (identity -0.0 / 1.0, 0 / 1)
    min max on Double and Float (``acc`` first), Index, Card   (identity ±inf, the int64 extremes, 0 for Card max)

or a tuple state whose every component is such a reduction of its own component
(``(max(acc[0], v[i]), acc[1] + w[i])``): component k reads only ``acc[k]``, once, in its own
combination, and no element reads the state or another component's new value.  Then the
iterations can be split into contiguous chunks, each folded from the identity of ⊕ into a
partial, and the partials combined in order with ``init``: ``init ⊕ p_0 ⊕ … ⊕ p_{T-1}``.

What that changes, per operator:
- ``+`` and ``*`` on Double (and Float) are associative only up to rounding: a regrouped sum may round
  differently (and overflow to ±inf, or not, where the sequential one does the other).  That is
  the reassociation ``Options.parallel`` allows (README).  -0.0 is the identity of IEEE addition
  (-0.0 + x is x for every x, -0.0 included; 0.0 + -0.0 is 0.0), 1.0 that of multiplication.
- ``min``/``max`` keep the first of equal operands (Python's ``max(a, b)`` is b only if b > a,
  ``fs_max_d``), so ``max(acc, x)`` folds to the leftmost maximum, and a NaN element is never
  taken (``x > acc`` is false): the regrouped fold gives the same bits, signed zeros and NaN
  included, from the identity ±inf.  ``max(x, acc)`` is not associative once a NaN occurs
  (``max(max(3, NaN), 1)``, taken that way, is 1, and 3 regrouped): on Double or Float it is not a
  reduction.  On integers both orders are (equal integers are indistinguishable).
- ``+`` and ``*`` on Index and Card are associative, but one grouping may overflow int64 where
  the other does not, and an overflow is an error (``OverflowError``, status 6):
  ``Monoid.may_overflow`` says so, and a caller that must fail exactly where the sequential fold
  does keeps such a reduction sequential (``dps.parallel``), or computes the regrouped parts
  modulo 2**64 and only the results with checked arithmetic (the GPU scan, ``dpia.scan_opencl``).

The analysis is target-neutral: ``Reduction`` gives each component's operator and identity, the
init, and the element function (the body without the state), for a CPU team of threads
(``dps.parallel``) as for a two-phase GPU reduction.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fsmooth.core import Lit, Var
from fsmooth.types import Card, Double, Float, Index, Scalar, TupleT

from . import ir
from .terms import names_used

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1

# (operator, type) -> its identity; an operator on a float type whose state must be its first operand
IDENTITIES = {
    ("add", Double): -0.0, ("mul", Double): 1.0, ("min", Double): math.inf, ("max", Double): -math.inf,
    ("add", Float): -0.0, ("mul", Float): 1.0, ("min", Float): math.inf, ("max", Float): -math.inf,
    ("add", Index): 0, ("mul", Index): 1, ("min", Index): INT64_MAX, ("max", Index): INT64_MIN,
    ("add", Card): 0, ("mul", Card): 1, ("min", Card): INT64_MAX, ("max", Card): 0,
}
STATE_FIRST = {("min", Double), ("max", Double), ("min", Float), ("max", Float)}


@dataclass(frozen=True)
class Monoid:
    """The operator ⊕ of one component of a reduction (a primitive of ``fsmooth.prims``), on
    values of ``ty``, and its identity."""

    op: str
    ty: Scalar
    identity: float | int

    @property
    def may_overflow(self) -> bool:
        """⊕ may overflow int64, so that a regrouped fold may fail where the sequential one does
        not, or the other way round."""
        return self.ty in (Index, Card) and self.op in ("add", "mul")


@dataclass(frozen=True)
class Reduction:
    """An ifold seen as a reduction: ``init ⊕ element(0) ⊕ … ⊕ element(n-1)`` per component.

    ``monoids``: one per component of the state (one for a scalar state), in order.
    ``element``: the body without the state: the element of iteration ``index`` (a scalar term,
    or a ``TupleOf`` of the components' elements), in which the state does not occur."""

    monoids: tuple[Monoid, ...]
    init: ir.Term
    index: str
    element: ir.Term


def reduction(t: ir.Ifold) -> Reduction | None:
    """``t`` as a reduction, or None where it is not one (module docstring)."""
    if t.trace is not None:  # an iscan: every state is a result, not only the last
        return None
    return _reduction(t)


def scan_reduction(t: ir.Ifold) -> Reduction | None:
    """The fold of the iscan ``t`` as a reduction, or None: its states are then
    the prefixes ``init ⊕ element(0) ⊕ … ⊕ element(i)``, which the GPU's three-phase scan
    (``dpia.scan_opencl``) computes regrouped."""
    return _reduction(t) if t.trace is not None else None


def _reduction(t: ir.Ifold) -> Reduction | None:
    if isinstance(t.ty, TupleT):
        if not all(isinstance(item, Scalar) for item in t.ty.items):
            return None
        types = t.ty.items
    elif isinstance(t.ty, Scalar):
        types = (t.ty,)
    else:
        return None
    spine, tail = _spine(t.body)
    lets = {u.name: u.rhs for u in spine if isinstance(u, ir.Let)}
    # the result of each component: the term that combines the state with its element
    if isinstance(t.ty, TupleT):
        if not isinstance(tail, ir.TupleOf) or not all(isinstance(a, Var) for a in tail.items):
            return None
        results = [a.name for a in tail.items]
        if len(set(results)) != len(results):
            return None
        combinations = [lets.get(r) for r in results]
    else:
        results = [tail.atom.name] if isinstance(tail, ir.Atom_) and isinstance(tail.atom, Var) else []
        combinations = [lets.get(results[0])] if results else [tail]

    def is_state(v: Var, k: int) -> bool:
        """``v`` is the state (a scalar state), or a let of the spine projecting its component k."""
        if not isinstance(t.ty, TupleT):
            return v.name == t.state
        rhs = lets.get(v.name)
        return isinstance(rhs, ir.Proj) and isinstance(rhs.tup, Var) and rhs.tup.name == t.state and rhs.index == k

    monoids, elements, states = [], [], []
    for k, (combination, ty) in enumerate(zip(combinations, types)):
        found = _combination(combination, ty, lambda v: is_state(v, k))
        if found is None:
            return None
        monoid, state, element = found
        monoids.append(monoid)
        elements.append(element)
        states.append(state.name)
    # the element: the body without the projections of the state and the combinations
    designated = set(results) | (set(states) if isinstance(t.ty, TupleT) else set())
    if isinstance(t.ty, TupleT):
        element = _rebuild(spine, designated, ir.TupleOf(tuple(elements), t.ty))
    else:
        element = _rebuild(spine, designated, ir.Atom_(elements[0]))
    if names_used(element) & (designated | {t.state}):
        return None
    return Reduction(tuple(monoids), t.init, t.index, element)


def _spine(t: ir.Term) -> tuple[list[ir.Term], ir.Term]:
    """(the lets and allocs around the body's result, outermost first; that result)."""
    spine = []
    while isinstance(t, (ir.Let, ir.Alloc)):
        spine.append(t)
        t = t.body
    return spine, t


def _combination(t: ir.Term | None, ty: Scalar, is_state) -> tuple[Monoid, Var, Var | Lit] | None:
    """(⊕, the state operand, the element operand) of ``t`` where it is ``s ⊕ x``, or ``x ⊕ s``
    where ⊕ on ``ty`` takes its operands in either order, ``s`` a variable that ``is_state``."""
    if not (isinstance(t, ir.Prim) and t.ty == ty and (t.op, ty) in IDENTITIES and len(t.args) == 2):
        return None
    monoid = Monoid(t.op, ty, IDENTITIES[(t.op, ty)])
    first, second = t.args
    if isinstance(first, Var) and is_state(first):
        return monoid, first, second
    if isinstance(second, Var) and is_state(second) and (t.op, ty) not in STATE_FIRST:
        return monoid, second, first
    return None


def _rebuild(spine: list[ir.Term], dropped: set[str], tail: ir.Term) -> ir.Term:
    """The lets and allocs of ``spine`` around ``tail``, without the lets of ``dropped``."""
    for u in reversed(spine):
        if not (isinstance(u, ir.Let) and u.name in dropped):
            tail = replace(u, body=tail)
    return tail
