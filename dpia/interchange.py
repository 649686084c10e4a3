"""Loop interchange of a fold nested in builds (issue 11), on the imperative DPIA of the C back end.

ADBench's skinning, ``build(V, λv. build(3, λr. ifold(λacc b. acc + weights[b][v] * t(b, r, v), 0, B)))``,
translates to

    parfor V A (λ v o. parfor 3 o (λ r o'. new acc (acc := 0; for B (λ b. P); o' := acc)))

whose innermost loop walks ``weights`` down a column: a stride of a whole row per trip, and a
chain of B dependent additions per element.  The manual C++ runs b outermost.  So does this
pass, where every element's fold keeps its own state in the element it writes:

    parfor V A (λ v o. parfor 3 o (λ r o'. o' := 0));
    for B (λ b. parfor V A (λ v o. parfor 3 o (λ r o'. P[acc := o'])))

Each element is folded by the same steps in the same order from the same init (bit for bit the
same result: no reassociation), the arithmetic is the same, and no storage is added; what
changes is the order in which the elements' steps interleave.  That is the program's meaning
when

- the parfors and the fold are nested with nothing between them, the fold's state is a scalar,
  and its count does not depend on the parfors' variables;
- a step ``P`` reads and writes only its own element's state (it does not mention the
  destination ``A`` or the parfors' element acceptors, only ``acc``), and everything else it
  writes is its own (declared in it) or scratch that each step writes before reading it;
- no step can fail (no checked read, no call, no integer arithmetic or conversion that is checked
  at run time), so the first error of the original order cannot become another one.

It is done where it makes memory be walked along rows, in a fold of a count known only at run
time (one of a constant count, which the C compiler unrolls, sees all its reads at once, and one
of a single trip gains nothing): some read of a step has the fold's variable in its index path
and a parfor's of the nest last (``weights[b][v]``: consecutive v's are adjacent once b is
outermost; not inside a parallel parfor of v, which stays outermost) and none has the variable of
a parfor of the nest or around it before the fold's (``a[i][k]`` of a matrix product ``a·b``,
whose row the fold walks already: the product keeps its order).  A parallel parfor (OpenMP,
``dps.parallel``) keeps its loop outermost.  OpenCL does not run this pass: there a work item
owns each element, and its fold is its own sequential loop.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy

from fsmooth import prims

from . import phrases as p
from .index_paths import integral


def interchange_program(program: p.ImperativeProgram) -> p.ImperativeProgram:
    return p.ImperativeProgram({name: dataclasses.replace(k, body=interchange(k.body))
                                for name, k in program.kernels.items()}, program.entry)


@dataclass(frozen=True)
class _Nest:
    """parfor ... parfor (λ v_k o_k. new acc (acc := init; for count (λ index. step); o_k := acc))."""

    loops: tuple  # the ParFors, outermost first
    state: str
    init: p.Phrase
    count: p.Phrase
    index: str
    step: p.Phrase


def interchange(c: p.Phrase, around: frozenset = frozenset()) -> p.Phrase:
    """``c`` with every fold nest that walks memory down columns run with its fold outermost (the
    outermost parfor of a nest first: all of them go inside the fold).  ``around``: the
    variables of the parfors around ``c``."""
    nest = _fold_nest(c)
    if nest is None or not _walks_columns(nest, around):
        inner = around | {c.index} if isinstance(c, p.ParFor) else around
        return p.map_children(lambda child: interchange(child, inner), c)
    element = p.Ident(nest.loops[-1].out, p.AccT(nest.loops[-1].elem))
    step = _substitute(interchange(nest.step, around | {loop.index for loop in nest.loops}), nest.state, element)
    return p.seq(_nested(nest.loops, p.Assign(element, nest.init)),
                 p.For(nest.count, nest.index, _nested(nest.loops, step)))


def _nested(loops: tuple, body: p.Phrase) -> p.Phrase:
    for loop in reversed(loops):
        body = dataclasses.replace(loop, body=body)
    return body


def _fold_nest(c: p.Phrase) -> _Nest | None:
    loops = []
    while isinstance(c, p.ParFor) and not c.parallel and (
            not loops or c.acc == p.Ident(loops[-1].out, p.AccT(loops[-1].elem))):
        loops.append(c)
        c = c.body
    match c:
        case p.New(state, p.Num() as data, p.Seq((p.Assign(p.Ident(first), init),
                                                  p.For(count, index, step),
                                                  p.Assign(p.Ident(out), p.Ident(result)))), None) \
                if loops and first == state == result and out == loops[-1].out and data == loops[-1].elem:
            nest = _Nest(tuple(loops), state, init, count, index, step)
            return nest if _legal(nest) else None
    return None


def _legal(nest: _Nest) -> bool:
    bound = {name for loop in nest.loops for name in (loop.index, loop.out)}
    destination = {sub.name for sub in p.walk(nest.loops[0].acc) if isinstance(sub, p.Ident)}
    return (nest.state not in _mentions(nest.init)
            and not (_mentions(nest.count) & (bound | {nest.state}))
            and not (_mentions(nest.step) & ({loop.out for loop in nest.loops} | destination))
            and not any(_may_fail(ph) for ph in p.walk(nest.step)))


def _may_fail(ph: p.Phrase) -> bool:
    """Whether ``ph`` is checked at run time where it runs (code generation's checks: ``emit``)."""
    match ph:
        case p.Idx(checked=True) | p.CallCmd() | p.CallExp():
            return True
        case p.ScalarOp(op, args, data):
            operands = p.data_of(args[0]) if args else data
            return (op in ("trunc_to_Index", "mod") or op in prims.MAY_OVERFLOW) and (
                integral(data) or integral(operands))
    return False


def _walks_columns(nest: _Nest, around: frozenset) -> bool:
    """The fold's count is not a constant, some read of a step has the fold's variable in its
    index path and a parfor's of the nest last (its row, which the interchange walks along), and
    none has a parfor's (of the nest or around it) before the fold's."""
    match nest.count:
        case p.Literal() | p.NatExp(sympy.Integer()):
            return False
    parfors = {loop.index for loop in nest.loops}
    orders = [_order(path, nest.index, parfors, around) for path in _index_paths(nest.step)]
    return "fold first" in orders and "parfor first" not in orders


def _order(path: list, fold: str, parfors: set, around: frozenset) -> str | None:
    names = [i.name if isinstance(i, p.Ident) else None for i in path]
    if fold not in names:
        return None
    at = names.index(fold)
    if any(n in parfors or n in around for n in names[:at]):
        return "parfor first"
    if at < len(names) - 1 and names[-1] in parfors:
        return "fold first"
    return None


def _index_paths(ph: p.Phrase) -> list:
    """The index phrases of every read chain ``x[i][j]...`` in ``ph``, outermost index first."""
    paths, inner = [], set()
    for sub in p.walk(ph):
        if isinstance(sub, p.Idx) and id(sub) not in inner:
            path, at = [], sub
            while isinstance(at, (p.Idx, p.Shift)):
                if isinstance(at, p.Idx):
                    path.insert(0, at.index)
                    inner.add(id(at))
                at = at.base if isinstance(at, p.Shift) else at.arr
            paths.append(path)
    return paths


def _substitute(c: p.Phrase, state: str, element: p.Phrase) -> p.Phrase:
    """``c`` with the scalar variable ``state`` (read and written) replaced by the place ``element``."""
    match c:
        case p.Ident(name, p.AccT()) if name == state:
            return element
        case p.Ident(name, p.ExpT(data)) if name == state:
            return p.Ident(element.name, p.ExpT(data))
    return p.map_children(lambda child: _substitute(child, state, element), c)


def _mentions(ph: p.Phrase) -> set:
    """The names ``ph`` uses: its identifiers and the symbols of its sizes (a loop variable in an
    offset ``Shift(r, 4*b)``)."""
    names: set = set()

    def collect(value) -> None:
        match value:
            case p.Ident(name):
                names.add(name)
            case sympy.Basic():
                names.update(s.name for s in value.free_symbols)
            case tuple():
                for item in value:
                    collect(item)
            case _ if dataclasses.is_dataclass(value) and not isinstance(value, type):
                for f in dataclasses.fields(value):
                    collect(getattr(value, f.name))
    collect(ph)
    return names
