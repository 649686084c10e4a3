"""Unroll-and-jam of a parallel loop (``Strategy.jam``): each work-item runs J consecutive
iterations together, their loops fused into one, on the imperative DPIA of the OpenCL back end,
before ``dpia.hoist_opencl`` plans the kernels (so the launch has one work-item per J iterations).

Only the cost model asks for it (``fsmooth.cost_model.choose_rows``, on a CPU): a map of
reductions whose folds read, beside each element's own row, what every element shares (gemv's
``x``).  Folding J rows in one loop, a shared vector is loaded once for the J rows, and the J rows
stream together, which a CPU core's prefetcher follows.

    parfor m A (λ i o. P(i, o))        (jam J)
  = parfor ⌈m/J⌉ (A as ⌈m/J⌉.J.δ) (λ b o'.
        if b < ⌊m/J⌋ then jam(new i₀ (i₀ := J·b + 0; P(i₀, o'[0])), …,
                              new i_{J-1} (i_{J-1} := J·b + J - 1; P(i_{J-1}, o'[J - 1])))
        else for (m mod J) (λ r. new i (i := J·⌊m/J⌋ + r; P(i, o'[r]))))

The whole blocks run jammed; the last, partial one (m mod J elements) runs its elements one after
another, so every m is right (0 included: no block).  Each copy of P has its ``new``s renamed apart.
``jam`` merges the copies command by command, where they have the same form: a sequence
component by component; ``new``s nested, each copy's first assignment of its variable kept first
(an integer let stays one, ``dpia.index_paths.integer_let``); a loop, a sequential ``parfor`` of the
element's own (the lanes of its vectors: ``dpia.vectorize`` then makes the J rows' vector loads
and their accumulators vectors in one loop) or a branch whose count, size or condition is the same
in every copy (it does not depend on the element), once, around the copies' bodies jammed; anything
else runs copy after copy.  Iterations of a parallel loop are independent and each copy writes
only its element and its own variables, so any interleaving of the copies computes what they do
one after another.
"""
from __future__ import annotations

import dataclasses

import sympy

from fsmooth.names import NameSupply
from fsmooth.types import Bool, Card, Index

from . import phrases as p
from .from_dps import as_exp


def unroll_jam_program(program: p.ImperativeProgram) -> p.ImperativeProgram:
    """``program`` with every ``parfor`` whose strategy asks for a jam unrolled and jammed."""
    return p.ImperativeProgram({name: dataclasses.replace(k, body=_unroll_jam(k.body, _names(k)))
                                for name, k in program.kernels.items()}, program.entry)


def _names(k: p.ImperativeKernel) -> NameSupply:
    """Fresh names for ``k``: none of its parameters, sizes, destination or binders."""
    return NameSupply(p.identifiers(k.body) | set(k.param_phrases) | {s.name for s in k.sizes} | {k.dest})


def _unroll_jam(c: p.Phrase, names: NameSupply) -> p.Phrase:
    match c:
        case p.ParFor(strategy=strategy) if strategy is not None and strategy.jam > 1:
            return _blocks(c, strategy.jam, names)
    return p.map_children(lambda ph: _unroll_jam(ph, names), c)


def _blocks(loop: p.ParFor, J: int, names: NameSupply) -> p.Phrase:
    """``loop`` as a parfor over blocks of ``J`` elements (module docstring)."""
    m = sympy.sympify(loop.size)
    count, whole = sympy.ceiling(m / J), sympy.floor(m / J)
    block = p.Arr(sympy.Integer(J), loop.elem)
    b, out, r = names.fresh(loop.index), names.fresh(loop.out), names.fresh("r")
    element = p.Ident(out, p.AccT(block))

    def copy(start: p.Phrase, k: p.Phrase, renames: dict) -> p.Phrase:
        """``loop``'s body for element ``start`` + k, element k of the block, its ``new``s renamed
        as ``renames``."""
        i = renames.get(loop.index, loop.index)
        at = p.Idx(element, k, loop.elem, sympy.Integer(J))
        body = p.substitute_variable(_renamed(loop.body, renames), loop.out, at, as_exp(at))
        return p.New(i, p.Num(Index), p.seq(
            p.Assign(p.Ident(i, p.AccT(p.Num(Index))), p.ScalarOp("add", (start, k), p.Num(Index))), body))

    bound = [ph.name for ph in p.walk(loop.body) if isinstance(ph, p.New)]
    first = p.ScalarOp("mul", (p.Literal(J, p.Num(Index)), p.Ident(b, p.ExpT(p.IdxT(count)))), p.Num(Index))
    jammed = _jam([copy(first, p.Literal(k, p.Num(Index)), {name: names.fresh(name) for name in (loop.index, *bound)})
                   for k in range(J)])
    # only the last block is partial: its first element is J·⌊m/J⌋, which the ranges then bound
    rest = sympy.Mod(m, J)
    last = p.For(p.NatExp(rest, p.Num(Card)), r,
                 copy(p.NatExp(J * whole, p.Num(Index)), p.Ident(r, p.ExpT(p.IdxT(rest))), {}))
    full = p.ScalarOp("lt", (p.Ident(b, p.ExpT(p.IdxT(count))), p.NatExp(whole, p.Num(Index))), p.Num(Bool))
    # A seen as ⌈m/J⌉ blocks: the last one's elements past m are never written
    acc = p.Shift(loop.acc, sympy.Integer(0), p.Arr(count, block))
    return p.ParFor(count, acc, b, out, block, p.IfCmd(full, jammed, last),
                    dataclasses.replace(loop.strategy, jam=1), loop.parallel)


def _renamed(c: p.Phrase, renames: dict) -> p.Phrase:
    """``c`` with the variables ``renames`` names (old -> new) renamed: identifiers, ``new``s and
    the sizes that mention them (those ``free_identifiers`` reads)."""
    def size(e):
        e = sympy.sympify(e)
        return e.xreplace({s: sympy.Symbol(renames[s.name], **s.assumptions0) for s in e.free_symbols
                           if s.name in renames})

    match c:
        case p.Ident(name, ty) if name in renames:
            return p.Ident(renames[name], ty)
        case p.New(name=name) if name in renames:
            c = dataclasses.replace(c, name=renames[name])
        case p.NatExp(value=e):
            c = dataclasses.replace(c, value=size(e))
        case p.Shift(offset=e, stride=stride):
            c = dataclasses.replace(c, offset=size(e), stride=size(stride))
        case p.ParFor(size=e):
            c = dataclasses.replace(c, size=size(e))
    return p.map_children(lambda ph: _renamed(ph, renames), c)


def _jam(copies: list) -> p.Phrase:
    """The ``copies`` of one command (for consecutive elements, their names apart) as one command
    (module docstring)."""
    first = copies[0]
    match first:
        case p.Seq(cmds):
            return p.seq(*(_jam([c.cmds[j] for c in copies]) for j in range(len(cmds))))
        case p.New():
            leads = [_leading_assignment(c) for c in copies]
            inner = _jam([c.body if lead is None else p.seq(*c.body.cmds[1:]) for c, lead in zip(copies, leads)])
            for c, lead in reversed(list(zip(copies, leads))):
                inner = dataclasses.replace(c, body=p.seq(*([] if lead is None else [lead]), inner))
            return inner
        case p.For(count=count) if all(c.count == count for c in copies):
            return dataclasses.replace(first, body=_jam([c.body for c in copies]))
        case p.ParFor(size=size, strategy=strategy) if strategy is not None and strategy.level == "seq" and all(
                c.size == size and c.strategy == strategy for c in copies):
            # one loop over the elements, each copy writing its own array's
            index = p.Ident(first.index, p.ExpT(p.IdxT(size)))
            bodies = [first.body]
            for c in copies[1:]:
                at = p.Idx(c.acc, index, c.elem, size)
                bodies.append(p.substitute_variable(c.body, c.out, at, as_exp(at)))
            return dataclasses.replace(first, body=_jam(bodies))
        case p.IfCmd(cond=cond) if all(c.cond == cond for c in copies):
            return dataclasses.replace(first, then=_jam([c.then for c in copies]),
                                       orelse=_jam([c.orelse for c in copies]))
    return p.seq(*copies)


def _leading_assignment(c: p.New) -> p.Assign | None:
    """The assignment of ``c``'s variable that starts its body, if it does."""
    match c.body:
        case p.Seq((p.Assign(p.Ident(target)) as lead, *_)) if target == c.name:
            return lead
    return None
