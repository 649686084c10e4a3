"""A parfor whose body does something only at one index runs that one trip (issue 11), on the
imperative DPIA of the C back end.

A step that updates one element of an ifold's state in place (``dps.in_place``) translates to

    parfor n A (λ k o. if k == j then P else skip)

(the ``skip`` is the other elements, left where they are): n trips, n - 1 of them a comparison.
With ``j`` not depending on k, this is

    new k (k := j; if 0 <= k then if k < n then P[o ↦ A[k]] else skip else skip)

one trip, where ``j`` is an index of the parfor (none where it is not: the parfor would have found
no k equal to it).  The guards' order keeps P's reads, as the loop's range did, in [0, n).  Only
where the parfor is not parallel (OpenMP gains nothing on one trip, and keeps its own form).
"""
from __future__ import annotations

import dataclasses

from fsmooth.types import Bool, Index

from . import phrases as p
from .from_dps import as_exp


def single_trip_program(program: p.ImperativeProgram) -> p.ImperativeProgram:
    return p.ImperativeProgram({name: dataclasses.replace(k, body=single_trip(k.body))
                                for name, k in program.kernels.items()}, program.entry)


def single_trip(c: p.Phrase) -> p.Phrase:
    """``c`` with every parfor that acts only at ``k == j`` running that one trip, innermost first."""
    c = p.map_children(single_trip, c)
    match c:
        case p.ParFor(size, acc, index, out, elem, p.IfCmd(p.ScalarOp("eq", (a, b)), then, p.Skip()), parallel=False):
            at = _other(a, b, index)
            if at is None:
                return c
            k = p.Ident(index, p.ExpT(p.Num(Index)))
            element = p.Idx(acc, k, elem, size)
            test = lambda op, x, y: p.ScalarOp(op, (x, y), p.Num(Bool))  # noqa: E731
            return p.New(index, p.Num(Index), p.seq(
                p.Assign(p.Ident(index, p.AccT(p.Num(Index))), at),
                p.IfCmd(test("le", p.Literal(0, p.Num(Index)), k),
                        p.IfCmd(test("lt", k, p.NatExp(size, p.Num(Index))),
                                p.substitute_variable(then, out, element, as_exp(element)), p.Skip()),
                        p.Skip())))
    return c


def _other(a: p.Phrase, b: p.Phrase, index: str) -> p.Phrase | None:
    """Of ``a == b``, the side that is not the loop variable ``index``, if it does not read it."""
    for this, that in ((a, b), (b, a)):
        if isinstance(this, p.Ident) and this.name == index and index not in p.free_identifiers(that):
            return that
    return None
