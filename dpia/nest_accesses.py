"""The global memory accesses of a nest of global loops, as ``fsmooth.cost_model.choose_nest``
prices them: which loop of an OpenCL kernel's 2-D or 3-D NDRange runs along the lanes, and its
work-group tile, are the cost model's choice where the program says nothing of its strategy
(``dpia.hoist_opencl``).

Read on a kernel's body with its loop levels decided (``strategy_check.resolve_levels``), before
hoisting: an array the nest reads is global where it is bound outside the nest (a parameter, an
intermediate of the program shared between kernels, row-major); one the nest's body binds is its
work-item's own (private, or a global copy per work-item that ``dpia.hoist_opencl`` interleaves
along the lanes' loop, so that neighbouring lanes read neighbouring scalars whichever loop that
is) and is the same in every candidate, so it is left out.

How an access depends on a loop of the nest (``cost_model.PATTERNS``) is read from its indices,
outermost first: where none mentions the loop's index (or a scalar the body computes from it), it
is independent; where only the last does, as the index itself plus or minus what does not depend
on it (or clamped by ``min``/``max`` with such), it reads the neighbour of its neighbouring lane's
element (consecutive); otherwise it is scattered.  The nest's own write, its element at [i][k] of
its row-major result, is consecutive along the innermost loop where the element is one scalar.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from fsmooth.cost_model import Access, Nest
from fsmooth.types import BYTES

from . import phrases as p
from .strategy_check import level_of, root
from .unroll_jam import lanes_body


def global_nest(body: p.Phrase) -> Nest | None:
    """The nest of global loops that is ``body``'s one top-level loop, or None where there are
    fewer than two or the body is not one loop."""
    tops = list(p.loops_at_top(body))
    if len(tops) != 1 or level_of(tops[0]) != "global":
        return None
    chain = [tops[0]]
    while True:
        inner = [lp for lp in p.loops_at_top(chain[-1].body) if level_of(lp) == "global"]
        if len(inner) != 1:
            break
        chain.append(inner[0])
    if len(chain) < 2:
        return None
    top = chain[0]
    indices = tuple(lp.index for lp in chain)
    nest = _Nest(indices, frozenset({top.out} | {n for ph in p.walk(top.body) for n in _binds(ph)}),
                 {i: _dependents(top.body, i) for i in indices}, _definitions(top.body))
    accesses: list[Access] = []
    _reads(top.body, (), {lp.index: sympy.sympify(lp.size) for lp in chain}, nest, accesses)
    leaf = chain[-1]
    scalars = sympy.sympify(p.elements(leaf.elem))
    elem = _scalar_bytes(leaf.elem)
    if elem is not None:  # the element at [i][k]: beside its neighbour along the innermost loop alone
        one = scalars == 1
        patterns = tuple("consecutive" if one and lp is leaf else "scattered" for lp in chain)
        accesses.append(Access(root(top.acc) or "the result", patterns, () if one else (scalars,), elem, write=True))
    sizes = tuple(sympy.sympify(lp.size) for lp in chain)
    lanes = lanes_body(top)  # jam_lanes jams the copies of the second loop's body: no loop of the nest in it
    jammable = len(chain) == 2 and lanes is not None and lanes[1] is chain[1]
    return Nest(indices, sizes, tuple(accesses), 0 if jammable else None)


@dataclass(frozen=True)
class _Nest:
    """What the reads of a nest's body are read against."""

    indices: tuple  # the nest's loop indices, outermost first
    bound: frozenset  # the names the nest binds: its work-items' own
    dependents: dict  # loop index -> it and the scalars computed from it (``_dependents``)
    definitions: dict  # scalar -> its one value (``_definitions``)


def _binds(ph: p.Phrase):
    match ph:
        case p.New(name=name):
            yield name
        case p.ParFor(index=index, out=out):
            yield from (index, out)
        case p.For(index=index) | p.ParallelReduce(index=index):
            yield index


def _scalar_bytes(d: p.Data) -> int | None:
    match d:
        case p.Num(scalar) | p.Vec(scalar):
            return BYTES[scalar]
        case p.Arr(elem=elem):
            return _scalar_bytes(elem)
    return None  # a record: its components' places are apart


def _definitions(body: p.Phrase) -> dict:
    """Each scalar ``body`` assigns exactly once, to what (a let's value: an index computed before
    a read, a clamped coordinate)."""
    assigned: dict = {}
    for c in p.walk(body):
        if isinstance(c, p.Assign) and isinstance(c.acc, p.Ident):
            assigned.setdefault(c.acc.name, []).append(c.exp)
    return {name: exps[0] for name, exps in assigned.items() if len(exps) == 1}


def _dependents(body: p.Phrase, index: str) -> frozenset:
    """``index`` and the scalars ``body`` assigns from it, directly or through one another."""
    assigns = [(c.acc.name, p.free_identifiers(c.exp)) for c in p.walk(body)
               if isinstance(c, p.Assign) and isinstance(c.acc, p.Ident)]
    return p.dependents(assigns, {index})


def _reads(c: p.Phrase, trips: tuple, counts: dict, nest: _Nest, out: list):
    """Append to ``out`` each global read of ``c``, inside sequential loops of ``trips`` (sympy,
    None where not a size); ``counts``: the trip count of each enclosing loop by its index, which
    bounds a count that is that index (a triangle's row)."""
    def within(ph, inner_trips=trips, inner_counts=counts):
        _reads(ph, inner_trips, inner_counts, nest, out)

    match c:
        case p.For(count, index, body):
            within(count)
            trip = _count(count, counts)
            within(body, trips + (trip,), {**counts, index: trip})
        case p.ParFor(size=size, acc=acc, body=body, index=index):
            _acceptor_reads(acc, within)
            size = _bound(sympy.sympify(size), counts)
            within(body, trips if index in nest.indices else trips + (size,), {**counts, index: size})
        case p.Assign(acc, exp):
            _acceptor_reads(acc, within)
            within(exp)
        case p.Idx():
            chain, base = [], c
            while isinstance(base, p.Idx):
                chain.insert(0, base.index)
                base = base.arr
            array = root(base)
            elem = _scalar_bytes(c.elem) if isinstance(c.elem, (p.Num, p.Vec)) else None
            if array is not None and array not in nest.bound and elem is not None:
                offsets = p.free_identifiers(base) - {array}  # a view's offset and stride
                patterns = tuple(_pattern(chain, offsets, i, nest.dependents[i], nest.definitions)
                                 for i in nest.indices)
                out.append(Access(array, patterns, trips, elem))
            for index in chain:
                within(index)
        case _:
            for ph in p.children(c):
                within(ph)


def _acceptor_reads(acc: p.Phrase, within):
    """The reads of an acceptor's indices (the acceptor's own place is a write)."""
    while isinstance(acc, p.Idx):
        within(acc.index)
        acc = acc.arr


def _count(count: p.Phrase, counts: dict) -> sympy.Expr | None:
    """A loop's trip count, bounded by the enclosing loops' (``_bound``); None: data or a scalar."""
    match count:
        case p.Literal(value) if isinstance(value, int):
            return sympy.Integer(value)
        case p.NatExp(value):
            return _bound(sympy.sympify(value), counts)
    return None


def _bound(n: sympy.Expr, counts: dict) -> sympy.Expr | None:
    """``n`` with each enclosing loop's index replaced by that loop's count, which bounds it."""
    for symbol in n.free_symbols:
        if symbol.name in counts:
            if counts[symbol.name] is None:
                return None
            n = n.subs(symbol, counts[symbol.name])
    return n


def _pattern(chain: list, offsets: set, index: str, dependents: frozenset, definitions: dict) -> str:
    uses = [bool(p.free_identifiers(e) & dependents) for e in chain]
    if not any(uses) and not offsets & dependents:
        return "independent"
    if not any(uses[:-1]) and not offsets & dependents and _unit_stride(chain[-1], index, dependents, definitions):
        return "consecutive"
    return "scattered"


def _unit_stride(e: p.Phrase, index: str, dependents: frozenset, definitions: dict) -> bool:
    """``e`` is ``index`` plus or minus, or clamped by, what does not depend on it (through the
    scalars assigned once: ``definitions``)."""
    def free(ph):
        return not p.free_identifiers(ph) & dependents

    def unit(ph):
        return _unit_stride(ph, index, dependents, definitions)

    match e:
        case p.Ident(name):
            return name == index or (name in definitions and unit(definitions[name]))
        case p.ScalarOp("add" | "min" | "max", (a, b)):
            return (unit(a) and free(b)) or (free(a) and unit(b))
        case p.ScalarOp("sub", (a, b)):
            return unit(a) and free(b)
        case p.ScalarOp("to_Index", (a,)):
            return unit(a)
        case p.NatExp(value):
            value = sympy.sympify(value)
            symbol = next((s for s in value.free_symbols if s.name == index), None)
            others = {s.name for s in value.free_symbols} - {index}
            return symbol is not None and not others & dependents and sympy.diff(value, symbol) == 1
    return False
