"""Unroll-and-jam of a parallel loop (``Strategy.jam``; for a nest of global loops on a GPU,
``jam_lanes``): each work-item runs J consecutive
iterations together, their loops fused into one, on the imperative DPIA of the OpenCL back end,
before ``dpia.hoist_opencl`` plans the kernels (so the launch has one work-item per J iterations).
For C, the elements of a sequential reduction are jammed the same way, J at a time, and combined
in their order (``jam_reduction``, the last section), and so are those of each thread's chunk of a
parallel reduction (``_jam_chunks``).

Only the cost model asks for it (``fsmooth.cost_model.choose_rows``, on a CPU): a map of
reductions whose folds read, beside each element's own row, what every element shares (gemv's
``x``).  Folding J rows in one loop, a shared vector is loaded once for the J rows, and the J rows
stream together, which a CPU core's prefetcher follows.  On a GPU, the loop along the lanes of a
nest of global loops is jammed inside the nest's next loop, so that the nest stays one
(``jam_lanes``, chosen by ``cost_model.choose_nest``).

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
from fsmooth.dps.layout import region_bytes
from fsmooth.dps.parallel import thread_slice
from fsmooth.types import Bool, Card, Index

from . import phrases as p
from .from_dps import as_exp
from .strategy_check import level_of, root


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
                   for k in range(J)], None)
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


def _jam(copies: list, names: NameSupply | None) -> p.Phrase:
    """The ``copies`` of one command (for consecutive elements, their names apart) as one command
    (module docstring); ``names``: fresh names for the reads the copies share, each then read once
    (``jam_lanes``), or None where they are read by each copy."""
    first = copies[0]
    if all(c == first for c in copies[1:]):
        return first  # it writes only what the copies share (``_element_names``), the same way
    match first:
        case p.Seq(cmds):
            return p.seq(*(_jam([c.cmds[j] for c in copies], names) for j in range(len(cmds))))
        case p.New(name=name) if all(c.name == name for c in copies[1:]):
            return dataclasses.replace(first, body=_jam([c.body for c in copies], names))  # the copies share it
        case p.New():
            leads = [_leading_assignment(c) for c in copies]
            inner = _jam([c.body if lead is None else p.seq(*c.body.cmds[1:]) for c, lead in zip(copies, leads)], names)
            if names is not None and None not in leads and not isinstance(first.data, p.IdxT) and first.data != p.Num(Index):
                # not an integer let (it stays one where it is its variable's first assignment):
                # the copies' first assignments jammed, what they compute alike computed once
                inner = p.seq(_jam(leads, names), inner)
                leads = [None] * len(copies)
            for c, lead in reversed(list(zip(copies, leads))):
                inner = dataclasses.replace(c, body=p.seq(*([] if lead is None else [lead]), inner))
            return inner
        case p.Assign() if names is not None:
            return _shared_reads(copies, names)
        case p.For(count=count) if all(c.count == count for c in copies):
            return dataclasses.replace(first, body=_jam([c.body for c in copies], names))
        case p.ParFor(size=size, strategy=strategy) if (
                strategy.level == "seq" if strategy is not None else not first.parallel) and all(
                c.size == size and c.strategy == strategy and c.parallel == first.parallel for c in copies):
            # one loop over the elements, each copy writing its own array's (C's parfor, with no
            # strategy and not on threads, is a loop too: ``jam_reduction``)
            index = p.Ident(first.index, p.ExpT(p.IdxT(size)))
            bodies = [first.body]
            for c in copies[1:]:
                at = p.Idx(c.acc, index, c.elem, size)
                bodies.append(p.substitute_variable(c.body, c.out, at, as_exp(at)))
            return dataclasses.replace(first, body=_jam(bodies, names))
        case p.IfCmd(cond=cond) if all(c.cond == cond for c in copies):
            return dataclasses.replace(first, then=_jam([c.then for c in copies], names),
                                       orelse=_jam([c.orelse for c in copies], names))
    return p.seq(*copies)


def _leading_assignment(c: p.New) -> p.Assign | None:
    """The assignment of ``c``'s variable that starts its body, if it does."""
    match c.body:
        case p.Seq((p.Assign(p.Ident(target)) as lead, *_)) if target == c.name:
            return lead
    return None


# ----------------------------------------------------------------------------- the lanes of a nest

LANES = 32  # a warp: the work-items along dimension 0 whose elements interleave (``jam_lanes``)


def lane_rows(b: sympy.Expr, J: int) -> sympy.Expr:
    """The first element of work-item ``b`` of a nest's loop jammed by ``J`` (``jam_lanes``): its
    element s is this + ``LANES`` · s."""
    return LANES * J * sympy.floor(b / LANES) + sympy.Mod(b, LANES)


def lanes_body(top: p.ParFor) -> tuple[list, p.ParFor] | None:
    """``top``'s body as lets that do not depend on its element (each a ``new`` whose first
    command assigns it, never assigned again), then one more loop of its nest, or None where it is
    not of that form (``jam_lanes``)."""
    c, lets = top.body, []
    while isinstance(c, p.New):
        lead = _leading_assignment(c)
        if lead is None or {top.index, top.out} & p.free_identifiers(lead.exp):
            return None
        lets.append((c, lead))
        c = p.seq(*c.body.cmds[1:])
        if any(isinstance(w, p.Assign) and w.acc == lead.acc for w in p.walk(c)):
            return None
    if not isinstance(c, p.ParFor) or level_of(c) != "global":
        return None
    return lets, c


def jam_lanes(body: p.Phrase, J: int, names: NameSupply) -> p.Phrase:
    """``body``, a nest of global loops whose outermost loop runs along the lanes, with each
    work-item running ``J`` of that loop's elements, jammed inside the next loop (the cost model's
    choice: ``fsmooth.cost_model.choose_nest``).

        parfor n A (λ i o. lets; parfor K B(o) (λ k o₁. P(i, o₁)))
      = parfor 32⌈n/32J⌉ A (λ b o'. lets; parfor K B(o') (λ k o₁'.
            if b < 32⌊n/32J⌋ then jam(new i₀ (i₀ := e(b) + 0; P(i₀, B(A[i₀])[k])), …,
                                      new i_{J-1} (i_{J-1} := e(b) + 32(J - 1); P(i_{J-1}, …)))
            else for J (λ s. new i (i := e(b) + 32 s; if i < n then P(i, B(A[i])[k])))))

    with e(b) = 32J⌊b/32⌋ + b mod 32 (``lane_rows``): a warp's 32 work-items run 32·J elements,
    the s-th elements of neighbouring lanes neighbours, as without the jam, so that a warp reads and
    writes neighbours (and ``dpia.stage_tiles`` stages the 32·J rows a work-group walks).  The
    blocks of 32·J elements all below n run jammed; the last, partial one runs each work-item's
    elements one after another, those below n.  Unlike ``_blocks``, the copies share what does not
    depend on the element (``_element_names``): a variable they would each compute alike is one,
    assigned once, and a read or an operation they each compute alike is computed once
    (``_shared_reads``): GMM's icf[k][…] and means[k][j], read in the triangle of each point's k,
    are read once for J points."""
    top = next(p.loops_at_top(body))
    lets, inner = lanes_body(top)
    n = sympy.sympify(top.size)
    count, whole = LANES * sympy.ceiling(n / (LANES * J)), LANES * sympy.floor(n / (LANES * J))
    b, out = top.index, names.fresh(top.out)  # the nest's loops keep their names (``Phase.nest``)
    first = lane_rows(sympy.Symbol(b, integer=True), J)
    element = _element_names(inner.body, {top.index, top.out, inner.out})
    own = [ph.name for ph in p.walk(inner.body) if isinstance(ph, p.New) and (element is None or ph.name in element)]
    k = p.Ident(inner.index, p.ExpT(p.IdxT(inner.size)))

    def copy(start: sympy.Expr, renames: dict, guard: bool) -> p.Phrase:
        """``inner``'s body for element ``start``, its own ``new``s renamed as ``renames``,
        where that element is below n if ``guard``."""
        i = renames[top.index]
        row = p.Idx(top.acc, p.Ident(i, p.ExpT(p.IdxT(n))), top.elem, n)
        at = p.Idx(p.substitute_variable(inner.acc, top.out, row, as_exp(row)), k, inner.elem, inner.size)
        run = p.substitute_variable(_renamed(inner.body, renames), inner.out, at, as_exp(at))
        if guard:
            below = p.ScalarOp("lt", (p.Ident(i, p.ExpT(p.Num(Index))), p.NatExp(n, p.Num(Index))), p.Num(Bool))
            run = p.IfCmd(below, run, p.Skip())
        return p.New(i, p.Num(Index), p.seq(p.Assign(p.Ident(i, p.AccT(p.Num(Index))), p.NatExp(start, p.Num(Index))), run))

    jammed = _jam([copy(first + LANES * s, {name: names.fresh(name) for name in (top.index, *own)}, False)
                   for s in range(J)], names)
    part = names.fresh("part")
    rest = p.For(p.NatExp(sympy.Integer(J), p.Num(Card)), part,
                 copy(first + LANES * sympy.Symbol(part, integer=True), {top.index: names.fresh(top.index)}, True))
    full = p.ScalarOp("lt", (p.Ident(b, p.ExpT(p.IdxT(count))), p.NatExp(whole, p.Num(Index))), p.Num(Bool))
    nested = dataclasses.replace(inner, acc=p.substitute_variable(inner.acc, top.out, p.Ident(out, p.AccT(top.elem)),
                                                                  p.Ident(out, p.ExpT(top.elem))),
                                 body=p.IfCmd(full, jammed, rest))
    for new, lead in reversed(lets):
        nested = dataclasses.replace(new, body=p.seq(lead, nested))
    # A seen as 32⌈n/32J⌉ elements, those past n never written: the copies write A itself
    jammed_top = dataclasses.replace(top, size=count, acc=p.Shift(top.acc, sympy.Integer(0), p.Arr(count, top.elem)),
                                     out=out, body=nested)
    return p.replaced(body, {id(top): jammed_top})


def _element_names(c: p.Phrase, seeds: set) -> set | None:
    """The names of ``c`` whose values depend on ``seeds`` (an element's index and acceptors):
    written from them, or where a loop's count or a branch's condition does; None where ``c`` has a
    command this does not follow (each copy then has its own of every variable)."""
    writes = list(_writes(c, frozenset()))
    if any(w is None for w in writes):
        return None
    return set(p.dependents(writes, seeds))


def _writes(c: p.Phrase, control: frozenset):
    """(the name each command of ``c`` writes, the names its value and its control read); None for
    a command of another kind."""
    match c:
        case p.Assign(acc, exp):
            target = root(acc)
            yield None if target is None else (target, frozenset(p.free_identifiers(exp) | p.free_identifiers(acc)) | control)
        case p.Seq(cmds):
            for cmd in cmds:
                yield from _writes(cmd, control)
        case p.New(body=body):
            yield from _writes(body, control)
        case p.For(count, index, body):
            control = control | frozenset(p.free_identifiers(count))
            yield index, control
            yield from _writes(body, control)
        case p.ParFor(size=size, index=index, acc=acc, out=out, body=body) if root(acc) is not None:
            control = control | frozenset(s.name for s in sympy.sympify(size).free_symbols)
            yield index, control
            yield root(acc), frozenset({out}) | control  # the array is what its elements are
            yield from _writes(body, control)
        case p.IfCmd(cond, then, orelse):
            control = control | frozenset(p.free_identifiers(cond))
            yield from _writes(then, control)
            yield from _writes(orelse, control)
        case p.Skip():
            pass
        case _:
            yield None


def _shared_reads(copies: list, names: NameSupply) -> p.Phrase:
    """The assignments ``copies``, what each computes alike (a read of memory, an operation: no
    element's name in it) computed once before them, outside a conditional expression: each is
    computed where it was."""
    others = [set(p.walk(c.exp)) for c in copies[1:]]
    shared = list(dict.fromkeys(_alike(copies[0].exp, others)))
    lets = [(names.fresh(root(e) or "shared"), e) for e in shared]
    cmds = list(copies)
    for name, e in lets:
        cmds = [dataclasses.replace(c, exp=_substituted(c.exp, e, p.Ident(name, p.ExpT(p.data_of(e))))) for c in cmds]
    command = p.seq(*cmds)
    for name, e in reversed(lets):
        command = p.New(name, p.data_of(e), p.seq(p.Assign(p.Ident(name, p.AccT(p.data_of(e))), e), command))
    return command


def _alike(e: p.Phrase, others: list):
    """The largest reads and operations of ``e`` that each of ``others`` (the subphrases of the
    other copies) has too, outside conditional expressions."""
    match e:
        case p.Idx(elem=p.Num()) | p.ScalarOp() if all(e in other for other in others):
            yield e
            return
        case p.Cond():
            return
    for child in p.children(e):
        yield from _alike(child, others)


def _substituted(e: p.Phrase, old: p.Phrase, new: p.Phrase) -> p.Phrase:
    if e == old:
        return new
    return p.map_children(lambda child: _substituted(child, old, new), e)


# ----------------------------------------------------------------------------- the elements of a reduction (C)

def jam_reductions_program(program: p.ImperativeProgram, J: int) -> p.ImperativeProgram:
    """``program`` with each reduction at the top of a kernel (``jam_reduction``) run ``J``
    elements at a time, and each kernel's scratch grown by what its jams and its callees' add
    (a call's scratch sits at the top of its caller's arena, so a callee's growth is its caller's;
    the jammed loops call nothing, so their regions and a callee's never live at once)."""
    kernels, grown = {}, {}
    for name, k in program.kernels.items():  # callees first
        body, extra = _jam_top_reductions(k.body, J, _names(k), k.scratch)
        extra = sympy.Max(extra, *(grown[c.fn] for c in p.walk(k.body) if isinstance(c, (p.CallCmd, p.CallExp))
                                   and isinstance(c.fn, str) and c.fn in grown))
        grown[name] = extra
        kernels[name] = dataclasses.replace(k, body=body, scratch=k.scratch + extra)
    return p.ImperativeProgram(kernels, program.entry)


def _jam_top_reductions(c: p.Phrase, J: int, names: NameSupply, scratch: sympy.Expr,
                        regions: tuple = ()) -> tuple[p.Phrase, sympy.Expr]:
    """``c`` with each of its reductions that no loop encloses jammed (``jam_reduction``; on
    threads, each thread's chunk: ``_jam_chunks``), and the scratch its jams add beyond
    ``scratch``; ``regions``: the arena ``new``s around ``c``."""
    match c:
        case p.For():
            jammed = jam_reduction(c, J, names, scratch, _only_inside(regions, c))
            if jammed is None:
                return c, sympy.Integer(0)
            loop, own_regions, extra = jammed
            return _within(own_regions, loop), extra
        case p.ParallelReduce(chunk=None):
            return _jam_chunks(c, J, names, scratch, regions)
        case p.Seq(cmds):
            done = [_jam_top_reductions(cmd, J, names, scratch, regions) for cmd in cmds]
            return p.Seq(tuple(cmd for cmd, _ in done)), sympy.Max(0, *(extra for _, extra in done))
        case p.New(body=body):
            inner, extra = _jam_top_reductions(body, J, names, scratch,
                                               regions + ((c,) if c.arena_offset is not None else ()))
            return dataclasses.replace(c, body=inner), extra
        case p.IfCmd(then=then, orelse=orelse):
            (then, a), (orelse, b) = (_jam_top_reductions(branch, J, names, scratch, regions) for branch in (then, orelse))
            return dataclasses.replace(c, then=then, orelse=orelse), sympy.Max(a, b)
    return c, sympy.Integer(0)


def _jam_chunks(reduce: p.ParallelReduce, J: int, names: NameSupply, scratch: sympy.Expr,
                regions: tuple) -> tuple[p.Phrase, sympy.Expr]:
    """The parallel reduction ``reduce`` with each thread's chunk of ``m`` iterations from
    ``first`` on, ``for m (λ r. new i (i := first + r; P(i)))``, jammed (``jam_reduction``: its
    elements combined into the thread's accumulator in their order, so the partials, and the
    result, are the unjammed ones bit for bit), and the scratch that adds: each jammed element
    past the first has its own copy of each region it writes, one per thread as DPS gave that
    region (``dps.hoist``), the copies page-aligned as DPS's (``dps.parallel.PAGE``).  Where the
    chunk's loop does not jam, ``reduce`` as it is."""
    first, length, r = names.fresh("first"), names.fresh("chunk"), names.fresh(reduce.index)
    m = sympy.Symbol(length, integer=True, nonnegative=True)
    start = p.ScalarOp("add", (p.Ident(first, p.ExpT(p.Num(Index))), p.Ident(r, p.ExpT(p.IdxT(m)))), p.Num(Index))
    chunk = p.For(p.NatExp(m, p.Num(Card)), r, _element(reduce.index, start, reduce.body))
    jammed = jam_reduction(chunk, J, names, scratch, _only_inside(regions, reduce), per_thread=True)
    if jammed is None:
        return reduce, sympy.Integer(0)
    loop, own_regions, extra = jammed
    return _within(own_regions, dataclasses.replace(reduce, index=first, body=loop, chunk=length)), extra


def _within(regions: list, c: p.Phrase) -> p.Phrase:
    """``c`` inside the arena ``regions`` (``new``s with no body yet), the first outermost."""
    for region in reversed(regions):
        c = dataclasses.replace(region, body=c)
    return c


def jam_reduction(loop: p.For, J: int, names: NameSupply, scratch: sympy.Expr, regions: tuple,
                  per_thread: bool = False) -> tuple[p.Phrase, list, sympy.Expr] | None:
    """A sequential fold ``for n (λ i. E(i); acc := acc ⊕ e(i))`` run ``J`` elements at a time,
    the arena regions of its jammed elements (``new``s, their bodies to be the loop's
    surroundings: ``_within``) and the scratch they add; None where ``loop`` is not of that
    form, or its element has no loop that every element runs alike (nothing to jam:
    ``_alike_loop``) or calls a kernel (a call cannot be jammed):

        for ⌊n/J⌋ (λ b. jam(E(Jb); v₀ := e(Jb), …, E(Jb + J-1); v_{J-1} := e(Jb + J-1));
                        acc := acc ⊕ v₀; …; acc := acc ⊕ v_{J-1});
        for (n mod J) (λ r. E(J⌊n/J⌋ + r); acc := acc ⊕ e(J⌊n/J⌋ + r))

    The elements are combined into ``acc`` in their order, each exactly as it was computed, so the
    result is the unjammed loop's, bit for bit: what changes is that the J elements' computations,
    independent of each other, run in one set of loops (``_jam``): J chains of dependent additions
    where there was one, and what they read alike (GMM's icf[k][…] and means[k][j] in the triangle
    of each point's component k) read once for the J.  The element writes, beside its own
    variables, only ``acc`` and arena regions around the loop that it writes whole, with one
    ``parfor``, before it reads them and that nothing reads after the loop (DPS's regions hoisted
    out of the element: GMM's K terms of a point; ``regions``: the arena ``new``s around the
    loop that nothing outside it uses), each through one view that is the same for every
    element (all of it, or a thread's slice): element s > 0 of a block gets its own copy of
    each, past the kernel's ``scratch``, page-aligned where the regions hold a slice per
    thread (``per_thread``)."""
    n, body = loop.count, loop.body
    if not isinstance(n, p.NatExp) or not _jammable(body):
        return None
    own = {name for ph in p.walk(body) for name in p.binders(ph)}
    step = _accumulation(body, own)
    element = _element_names(body, {loop.index})
    if step is None or element is None or not _alike_loop(body, element):
        return None
    acc = step.acc.name
    outer = {root(w.acc) for w in p.walk(body) if isinstance(w, (p.Assign, p.ParFor))} - own - {acc}
    scratch_regions = [r for r in regions if r.name in outer]
    if len(scratch_regions) != len(outer) or not all(_written_first(body, r.name, element) for r in scratch_regions):
        return None
    m = n.value
    count, whole = sympy.floor(m / J), J * sympy.floor(m / J)
    b = names.fresh(loop.index)
    values = [names.fresh("element") for _ in range(J)]
    data = p.data_of(step.exp)
    # a variable whose value does not depend on the element, the copies share (``_jam``)
    bound = [ph.name for ph in p.walk(body) if isinstance(ph, p.New) and ph.name in element]
    copies, own_regions, offset = [], [], scratch
    for s in range(J):
        renames = {name: names.fresh(name) for name in (loop.index, *bound)}
        if s > 0:
            for r in scratch_regions:
                renames[r.name] = names.fresh(r.name)
                start = thread_slice(offset) if per_thread else offset
                own_regions.append(dataclasses.replace(r, name=renames[r.name], arena_offset=start, body=p.Skip()))
                offset = start + region_bytes(p.scalar_of(r.data), p.elements(r.data))
        computed = p.replaced(body, {id(step): p.Assign(p.Ident(values[s], p.AccT(data)), step.exp.args[1])})
        first = p.ScalarOp("add", (p.ScalarOp("mul", (p.Literal(J, p.Num(Index)), p.Ident(b, p.ExpT(p.IdxT(count)))),
                                                  p.Num(Index)), p.Literal(s, p.Num(Index))), p.Num(Index))
        copies.append(_element(renames[loop.index], first, _renamed(computed, renames)))
    combined = [dataclasses.replace(step, exp=dataclasses.replace(step.exp, args=(step.exp.args[0], p.Ident(v, p.ExpT(data)))))
                for v in values]
    block = p.seq(_jam(copies, names), *combined)
    for v in reversed(values):
        block = p.New(v, data, block)
    jammed = p.For(p.NatExp(count, n.data), b, block)
    r, i = names.fresh("r"), names.fresh(loop.index)
    last = p.ScalarOp("add", (p.NatExp(whole, p.Num(Index)), p.Ident(r, p.ExpT(p.IdxT(sympy.Mod(m, J))))), p.Num(Index))
    rest = p.For(p.NatExp(sympy.Mod(m, J), n.data), r, _element(i, last, _renamed(body, {loop.index: i})))
    return p.seq(jammed, rest), own_regions, offset - scratch


def _element(i: str, start: p.Phrase, body: p.Phrase) -> p.Phrase:
    """``body`` for the element ``start``, its index variable renamed ``i`` in it."""
    return p.New(i, p.Num(Index), p.seq(p.Assign(p.Ident(i, p.AccT(p.Num(Index))), start), body))


def _jammable(body: p.Phrase) -> bool:
    """Whether ``body``'s copies can be jammed: only commands ``_jam`` merges or runs in order,
    none of which calls a kernel, runs on threads or takes an arena region."""
    commands = (p.Seq, p.Assign, p.For, p.ParFor, p.IfCmd, p.Skip, p.New)
    phrases = list(p.walk(body))
    return (not any(isinstance(ph, (p.CallCmd, p.CallExp, p.ParallelReduce)) for ph in phrases)
            and all(isinstance(ph, commands) for ph in _commands(body))
            and not any(isinstance(ph, p.ParFor) and ph.parallel or isinstance(ph, p.New) and ph.arena_offset is not None
                        for ph in phrases))


def _alike_loop(body: p.Phrase, element: set) -> bool:
    """Whether ``body`` has a loop that runs alike in every element, its count not of the
    ``element``'s names, and computes the element's own values, its body reading them: one the
    copies share.  (Where every loop's count is the element's, as a triangle's rows, the copies
    would run one after another; a loop that reads nothing of the element computes the same in
    every copy, as the micro-benchmarks' add3_loop does on purpose: J copies of it are J times its
    scratch for nothing shared.)"""
    loops = [(c.count if isinstance(c, p.For) else p.NatExp(c.size, p.Num(Card)), c.body)
             for c in p.walk(body) if isinstance(c, (p.For, p.ParFor))]
    return any(not p.free_identifiers(count) & element and p.free_identifiers(inner) & element
               for count, inner in loops)


def _commands(c: p.Phrase):
    """The commands of ``c``, inside loops and branches too."""
    yield c
    match c:
        case p.Seq(cmds):
            for cmd in cmds:
                yield from _commands(cmd)
        case p.New(body=body) | p.For(body=body) | p.ParFor(body=body):
            yield from _commands(body)
        case p.IfCmd(then=then, orelse=orelse):
            yield from _commands(then)
            yield from _commands(orelse)


def _accumulation(body: p.Phrase, own: set) -> p.Assign | None:
    """The one assignment ``acc := acc ⊕ e`` of ``body``'s only variable from outside it (not of
    ``own``, the names ``body`` binds), where ``acc`` appears nowhere else and the assignment runs
    once per element, else None."""
    outside = [c for c in p.walk(body) if isinstance(c, p.Assign) and isinstance(c.acc, p.Ident) and c.acc.name not in own]
    if len(outside) != 1:
        return None
    step = outside[0]
    acc = step.acc.name
    match step.exp:
        case p.ScalarOp(args=(p.Ident(name), e)) if (name == acc and acc not in p.free_identifiers(e)
                                                     and any(c is step for c in p.leaves(body))
                                                     and sum(isinstance(ph, p.Ident) and ph.name == acc
                                                             for ph in p.walk(body)) == 2):
            return step
    return None


def _written_first(body: p.Phrase, region: str, element: set) -> bool:
    """Whether the first of ``body``'s commands that mentions ``region`` is a ``parfor`` that
    writes all of a view of it (the region, or a thread's slice of it) that is the same in every
    element (none of the ``element``'s names in its offset) without reading it, and no other
    command writes it."""
    first = next(c for c in p.leaves(body) if region in p.free_identifiers(c))
    writes = [c for c in p.walk(body) if isinstance(c, (p.Assign, p.ParFor)) and root(c.acc) == region]
    return (isinstance(first, p.ParFor) and root(first.acc) == region and not p.free_identifiers(first.acc) - {region} & element
            and region not in p.free_identifiers(first.body) and writes == [first])


def _only_inside(regions: tuple, loop: p.Phrase) -> tuple:
    """The ``regions`` that are used in ``loop`` only."""
    return tuple(r for r in regions if r.name not in p.free_identifiers(p.replaced(r.body, {id(loop): p.Skip()})))
