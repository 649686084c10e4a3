"""DPIA phrases (DPIA paper Fig. 1, 4): data types with symbolic sizes, phrase types, the
functional primitives fsmooth needs and the imperative commands they translate to.

Data types δ:   num (one per F̃ scalar: double, float, index, card, bool) | n.δ (arrays; n a sympy
                expression over size symbols and integer variables) | idx(n) (loop indices)
                | δ1 × δ2 × ... (records: F̃'s tuples) | num<w> (RISE & Shine's vector data type: w
                lanes of a float or double, OpenCL's floatw/doublew).
Phrase types θ: exp[δ] | acc[δ] | comm.  A variable var[δ] = acc[δ] × exp[δ] is one identifier used
                in both roles (the paper's v.1/v.2 resolve to the same C variable, Fig. 6a).

Every array lives in one flat row-major buffer, so the index paths of Fig. 6 are kept flattened:
the path [i, j] under n.m.num is the element offset i·m + j (``elements``).

Functional phrases (exp[δ]):
  Ident x | Literal | NatExp n (a size used as a value) | ScalarOp(op, args)
  | Idx(E, i) (E[i]; ``checked``: i is tested against the length at run time)
  | Shift(V, k, s) (the data starting k scalars into V: DPS ``Offset``; an exp or an acc; its
        scalars s apart, 1 unless said)
  | Build(n, λ i. E) (mapI: element i is E) | Ifold(n, λ s i. E, init) | Cond(c, E1, E2)
  | Scan(Ifold(...)) (scanSeq: the array of the fold's successive states, an ``iscan``)
  | Filter(E, λ i. P, ℓ) (filterSeq: the elements E[i], in order, for which P holds; ℓ, a
    variable declared around it, counts them)
  | Let(x, E1, E2) (scalar let) | Bind(x, E1, A, E2) (E1 written through A, then read as x)
  | Record(E1, ..., Ek) (a record of expressions, or of acceptors: pairAcc) | Proj(E, k) (the
    component k of a record expression, or the acceptor of component k of a record acceptor:
    DPIA's fst/snd and their acceptors; codegen resolves it, as it resolves Idx)
  | Alloc(r, n.num @ offset, E) (a region of the arena, DPS ``alloc``) | CallExp(f, args)
  | Kept (what its acceptor holds already, DPS ``keep``: A(Kept)(A) = skip)
Imperative commands (comm):
  Skip | Seq(P1, ..., Pk) | Assign(A, E) (A := E at num) | New(x, δ, P) (at an arena offset or on
  the C stack) | For(n, λ i. P) | ParFor(n, A, λ i o. P) | IfCmd(c, P1, P2)
  | ParallelReduce(n, A, ⊕, partials, λ i. P) (a reduction's loop on threads, A its accumulator;
    or λ i m. P, P folding a thread's whole chunk of m iterations from i: ``jam_reduction``)
  | CallCmd(f, A, args) | DoubleBuffer(n, b0, b1, λ i s o. P, λ s. Q) (RISE & Shine Listing 13:
  iteration i reads s, writes o, then the two buffers swap; Q reads the final state; b0 = b1: one
  buffer, s and o the same, updated in place, ``dps.in_place``)

Vectors (RISE & Shine §5: asVector/asScalar; made by ``dpia.vectorize``, printed by the OpenCL
back end only):
  VectorParFor(n, A, w, λ i o. P, R) (``vectorize(w, ·)`` of a parallel parfor: iteration v does the
    elements w·v .. w·v + w - 1 in lock step, i the first of them; R, a scalar parfor, the last n mod w)
  | AsVector(w, E) (the w scalars from element E on as one num<w>: asVector of the array that starts
    at E, at index 0, since our index paths are flat; an exp or an acc)
  | AsScalar(V) (a num<w> seen as w.num: asScalar; ``Idx(AsScalar(V), k)`` is lane k)
  | Broadcast(E) (num to num<w>, every lane E) | ScalarOp at num<w> (lane-wise)
  | AllLanes(c) (the condition c holds for the element of every lane) | Lane(k, P) (P as the
    element of lane k runs it: scalar code whose index is the first lane's plus k)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from fsmooth import prims
from fsmooth.errors import IRError, Loc
from fsmooth.traversal import Traversal
from fsmooth.types import Scalar

# ----------------------------------------------------------------------------- data types


class Data:
    pass


@dataclass(frozen=True)
class Num(Data):
    scalar: Scalar


@dataclass(frozen=True)
class Vec(Data):
    scalar: Scalar  # Float or Double
    width: int


@dataclass(frozen=True)
class Arr(Data):
    size: sympy.Expr
    elem: Data


@dataclass(frozen=True)
class IdxT(Data):
    size: sympy.Expr


@dataclass(frozen=True)
class Rec(Data):
    items: tuple  # Data per component


def record_leaves(d: Data, path: tuple = ()) -> list:
    """The non-record components of ``d`` with their paths (``[((), d)]`` for a non-record)."""
    if isinstance(d, Rec):
        return [leaf for k, item in enumerate(d.items) for leaf in record_leaves(item, path + (k,))]
    return [(path, d)]


def elements(d: Data) -> sympy.Expr:
    """Number of scalars in one value of ``d``."""
    match d:
        case Arr(size, elem):
            return size * elements(elem)
        case _:
            return sympy.Integer(1)


def scalar_of(d: Data) -> Scalar:
    match d:
        case Num(s) | Vec(s):
            return s
        case Arr(_, elem):
            return scalar_of(elem)
    raise AssertionError(d)


def dims_of(d: Data) -> tuple:
    match d:
        case Arr(size, elem):
            return (size,) + dims_of(elem)
        case _:
            return ()


def array_data(scalar: Scalar, dims) -> Data:
    d: Data = Num(scalar)
    for n in reversed(tuple(dims)):
        d = Arr(sympy.sympify(n), d)
    return d


def show_data(d: Data) -> str:
    match d:
        case Num(s):
            return s.name.lower()
        case Vec(s, width):
            return f"{s.name.lower()}<{width}>"
        case Arr(size, elem):
            return f"{_show_size(size)}.{show_data(elem)}"
        case IdxT(size):
            return f"idx({size})"
        case Rec(items):
            return f"({' × '.join(show_data(x) for x in items)})"
    raise AssertionError(d)


def _show_size(n) -> str:
    s = str(n)
    return s if isinstance(n, (sympy.Symbol, sympy.Integer)) else f"({s})"


# ----------------------------------------------------------------------------- phrase types


class PhraseType:
    pass


@dataclass(frozen=True)
class ExpT(PhraseType):
    data: Data


@dataclass(frozen=True)
class AccT(PhraseType):
    data: Data


@dataclass(frozen=True)
class CommT(PhraseType):
    pass


def show_type(t: PhraseType) -> str:
    match t:
        case ExpT(d):
            return f"exp[{show_data(d)}]"
        case AccT(d):
            return f"acc[{show_data(d)}]"
        case CommT():
            return "comm"
    raise AssertionError(t)


# ----------------------------------------------------------------------------- functional phrases


class Phrase:
    def __str__(self) -> str:
        return show(self)


@dataclass(frozen=True)
class Ident(Phrase):
    name: str
    type: PhraseType


@dataclass(frozen=True)
class Literal(Phrase):
    value: object
    data: Num


@dataclass(frozen=True)
class NatExp(Phrase):
    value: sympy.Expr
    data: Num


@dataclass(frozen=True)
class TargetFlag(Phrase):
    """A truth value that the C compiler's target decides: a macro of clib/fsmooth_rt.h
    (``dpia.row_versions``'s ``FS_ROW_VERSIONS``)."""

    macro: str
    data: Num


@dataclass(frozen=True)
class ScalarOp(Phrase):
    op: object  # a key of fsmooth.prims.PRIMS, or a foreign function (prims.prim)
    args: tuple
    data: Num
    nonzero_divisor: bool = False  # // or %: the divisor is known not to be zero


@dataclass(frozen=True)
class Idx(Phrase):
    arr: Phrase  # exp[n.δ] or acc[n.δ]
    index: Phrase  # exp[idx(n)] or an integer expression
    elem: Data
    length: sympy.Expr
    checked: bool = False
    loc: Loc | None = field(default=None, compare=False, repr=False)  # where DPS asked for the check


@dataclass(frozen=True)
class Shift(Phrase):
    base: Phrase  # an exp or acc over a flat buffer
    offset: sympy.Expr  # in scalars
    data: Data
    # scalar k of the data is scalar offset + k·stride of the base: 1, contiguous; an OpenCL
    # work-item's copy of an intermediate is interleaved with the others' (dpia.hoist_opencl)
    stride: sympy.Expr = sympy.Integer(1)


@dataclass(frozen=True)
class Build(Phrase):
    size: sympy.Expr
    index: str
    body: Phrase
    elem: Data
    strategy: object = None  # fsmooth.strategies.Strategy (OpenCL), None: the default
    parallel: bool = False  # the DPS build's: the C runs its iterations on threads (dps.parallel)


@dataclass(frozen=True)
class Ifold(Phrase):
    count: Phrase  # exp[num] (a NatExp or an integer variable)
    state: str
    index: str
    body: Phrase
    init: Phrase
    data: Data
    buffers: tuple | None = None  # (b0, b1): Ident phrases of two regions, for array states
    # A parallel reduction (dps.parallel): per leaf of the state its operator
    # (dps.reductions.Monoid) and the acc[n.num] of the region of its threads' partials; and the
    # acc[δ] of the state's C variables, which the body updates in place.  () and None otherwise.
    monoids: tuple = ()
    partials: tuple = ()
    accumulator: Phrase | None = None


@dataclass(frozen=True)
class Scan(Phrase):
    """The successive states of ``fold`` (an ``Ifold`` of a scalar or record-of-scalars state,
    under the ``new``s of its record's C variables): ``data`` is n.δ, or a record of them.
    Where the fold is a reduction (``dps.reductions.scan_reduction``), its operators per leaf (``monoids``) and ``element``, the body without the state (an exp over
    the fold's index): what the OpenCL back end's parallel scan computes (``dpia.scan_opencl``)."""

    fold: Phrase
    data: Data
    monoids: tuple = ()
    element: Phrase | None = None


@dataclass(frozen=True)
class Filter(Phrase):
    """The elements ``arr[index]`` for which ``pred`` (which reads them) holds, written in order;
    the scalar variable ``length`` (num, declared around the filter) counts them."""

    arr: Phrase  # exp[n.δ]
    index: str
    pred: Phrase  # exp[bool]
    length: str
    data: Data  # of the array written: the capacity's


@dataclass(frozen=True)
class Kept(Phrase):
    """The value its acceptor holds already: writing it is ``skip`` (DPS ``Keep``, a branch of a
    step that updates an ifold's state in place, ``dps.in_place``)."""

    data: Data


@dataclass(frozen=True)
class Cond(Phrase):
    cond: Phrase
    then: Phrase
    orelse: Phrase
    data: Data


@dataclass(frozen=True)
class Let(Phrase):
    name: str
    rhs: Phrase
    body: Phrase
    data: Data  # of rhs


@dataclass(frozen=True)
class Bind(Phrase):
    name: str
    rhs: Phrase
    into: Phrase  # acc[δ] where rhs is stored
    body: Phrase
    data: Data  # of rhs


@dataclass(frozen=True)
class Alloc(Phrase):
    region: str
    data: Data  # count.num
    offset: sympy.Expr | None  # bytes from the kernel's scratch base; None: a C local (dps.local_arrays)
    body: Phrase


@dataclass(frozen=True)
class CallExp(Phrase):
    fn: str
    args: tuple
    data: Data
    scratch_offset: sympy.Expr
    check_sizes: bool = False  # the callee's size constraints are not implied by the caller's


@dataclass(frozen=True)
class Record(Phrase):
    items: tuple  # exp phrases, or acc phrases (a record acceptor)
    data: Data  # Rec


@dataclass(frozen=True)
class Proj(Phrase):
    tup: Phrase  # exp[δ1 × ...] or acc[δ1 × ...]
    index: int
    data: Data  # of the component


def proj(tup: Phrase, index: int) -> Phrase:
    """Component ``index`` of a record phrase, reduced where the record is written out."""
    if isinstance(tup, Record):
        return tup.items[index]
    return Proj(tup, index, data_of(tup).items[index])


def proj_path(tup: Phrase, path: tuple) -> Phrase:
    for k in path:
        tup = proj(tup, k)
    return tup


# ----------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class Skip(Phrase):
    pass


@dataclass(frozen=True)
class Seq(Phrase):
    cmds: tuple


@dataclass(frozen=True)
class Assign(Phrase):
    acc: Phrase
    exp: Phrase


@dataclass(frozen=True)
class New(Phrase):
    name: str
    data: Data
    body: Phrase
    arena_offset: sympy.Expr | None = None  # None: a C local; else bytes from the scratch base
    space: str | None = None  # OpenCL: 'private' for an array kept in a work-item (newPrivate)


@dataclass(frozen=True)
class For(Phrase):
    count: Phrase
    index: str
    body: Phrase


@dataclass(frozen=True)
class ParallelReduce(Phrase):
    """The loop of a parallel reduction (``dps.parallel``): on threads, each folds a contiguous
    chunk of the iterations into an accumulator of its own that starts at the identity of each
    leaf's operator, and writes it to its place in ``partials``; then ``accumulator``, which
    holds the init, is combined with the partials in thread order.  ``body`` updates
    ``accumulator`` in place (a reduction's element does not read the state): once per
    iteration ``index``, or, where ``chunk`` names a size, once per thread, folding the
    ``chunk`` iterations from ``index`` on in their order (``dpia.unroll_jam.jam_reduction``:
    a thread's chunk run J elements at a time)."""

    count: Phrase
    index: str
    accumulator: Phrase  # acc[δ]: the state's C variables (a record of them for a tuple state)
    monoids: tuple  # dps.reductions.Monoid per leaf of δ
    partials: tuple  # acc[n.num] per leaf: a region of one cache line per thread (dps.parallel.partial_stride)
    body: Phrase
    chunk: str | None = None


@dataclass(frozen=True)
class ParFor(Phrase):
    size: sympy.Expr
    acc: Phrase  # acc[n.δ]
    index: str
    out: str  # bound to idxAcc acc index : acc[δ]
    elem: Data
    body: Phrase
    # fsmooth.strategies.Strategy of the build (OpenCL: parforGlobal/Workgroup/Local or for);
    # None: the default strategy.  The C back end ignores it.
    strategy: object = None
    parallel: bool = False  # the build's: an OpenMP loop in C (dps.parallel)


@dataclass(frozen=True)
class IfCmd(Phrase):
    cond: Phrase
    then: Phrase
    orelse: Phrase


@dataclass(frozen=True)
class CallCmd(Phrase):
    fn: str
    out: Phrase  # acc[δ]
    args: tuple  # exp phrases
    data: Data
    scratch_offset: sympy.Expr
    check_sizes: bool = False


@dataclass(frozen=True)
class DoubleBuffer(Phrase):
    count: Phrase
    first: Phrase  # acc/exp of region b0 (holds the initial state)
    second: Phrase  # region b1
    index: str
    state: str  # exp[δ]: the buffer read in this iteration
    out: str  # acc[δ]: the other buffer
    data: Data
    body: Phrase
    after: Phrase  # a command in which ``state`` is the final state


# ----------------------------------------------------------------------------- parallel scans (OpenCL)


@dataclass(frozen=True)
class TopLevel(Phrase):
    """A command with two forms (``dpia.scan_opencl``): ``parallel``, commands that are OpenCL
    kernels of their own, where it is a top-level command of its kernel (``dpia.hoist_opencl``
    decides), else ``sequential`` (inside a parallel loop, a branch or a loop)."""

    parallel: Phrase
    sequential: Phrase


@dataclass(frozen=True)
class GroupScan(Phrase):
    """One launch of a parallel scan (``dpia.scan_opencl``): of the three-phase scan (NOVA §5),
    or, where ``words`` is given, the whole single-pass scan (decoupled look-back): ``groups`` work-groups
    of ``local`` work-items; group ``group`` scans its chunk of the ``count`` elements, tile by
    tile (``local × width`` elements, in the local buffers ``tiles``, the work-items' runs
    scanned in ``sums``), from the state ``start`` writes; ``element`` writes element ``index``
    through ``item``; ``write`` runs per element with ``state`` its state (before the element if
    ``exclusive``) and ``item`` the element (each state computed with checked integer arithmetic
    where ``checked``); ``total``, run by one work-item, reads the group's last state (in the
    single pass, the last group's only).  ``state`` and ``item`` are private variables of data
    ``data``, one per leaf, combined by the leaves' ``monoids``.  The single pass's look-back:
    ``words``, the tiles' published states in global memory (a 'lookback' buffer), and
    ``window``, local arrays (a control array of Index, then one per leaf)."""

    count: sympy.Expr
    groups: sympy.Expr
    group: str
    index: str
    data: Data  # of a state: num, or a record of nums
    monoids: tuple  # dps.reductions.Monoid per leaf of data
    state: str
    item: str
    start: Phrase  # comm
    element: Phrase  # comm
    write: Phrase  # comm
    exclusive: bool
    checked: bool
    total: Phrase  # comm
    tiles: tuple  # acc[(local · width).num] per leaf
    sums: tuple  # acc[local.num] per leaf
    local: int
    width: int
    words: Phrase | None = None  # acc[Index array]: None in a launch of the three-phase scan
    window: tuple = ()  # acc[k.num] local arrays of the look-back


@dataclass(frozen=True)
class StagedRows(Phrase):
    """OpenCL: a launch of a nest of global loops whose loop along NDRange dimension 0 runs one
    trip per work-item (``dpia.stage_tiles``).  Each work-item's row ``source[r]``, r its global
    id along dimension 0 (where below the rows of ``source``), is copied into the local array
    ``tile`` by the work-items of its group along dimension 1, transposed: element c at
    c · ``lanes`` + its local id, so that a warp reading one column of its rows reads neighbours.
    Then a barrier, then ``body``, which reads the rows there through ``lane``, the work-item's
    local id along dimension 0."""

    source: Phrase  # exp[n.d.num]: an input
    tile: Phrase  # acc[(lanes · d).num]: a local buffer
    lanes: int  # the work-group's size along dimension 0
    lane: str
    body: Phrase  # comm
    # a work-item's rows (``dpia.unroll_jam.jam_lanes``): row part of lane l of group g is
    # lanes·jam·g + l + lanes·part, at column c of the tile at l + lanes·part + lanes·jam·c (``tile``
    # is the view of part ``part``)
    jam: int = 1
    part: str | None = None


# ----------------------------------------------------------------------------- vectors


@dataclass(frozen=True)
class VectorParFor(Phrase):
    size: sympy.Expr
    acc: Phrase  # acc[n.num]
    index: str  # the element index of the first lane
    out: str  # idxAcc acc index, as ParFor's
    elem: Num
    width: int
    body: Phrase  # vector phrases: every lane's element together
    strategy: object  # fsmooth.strategies.Strategy, its level global or local
    remainder: Phrase | None  # ParFor of the elements after the last whole vector; None: none are


@dataclass(frozen=True)
class AsVector(Phrase):
    width: int
    at: Phrase  # exp[num] or acc[num]: the first lane's element
    data: Vec


@dataclass(frozen=True)
class AsScalar(Phrase):
    vector: Phrase  # exp[num<w>] or acc[num<w>]
    data: Arr  # w.num


@dataclass(frozen=True)
class Broadcast(Phrase):
    exp: Phrase  # exp[num]
    data: Vec


@dataclass(frozen=True)
class AllLanes(Phrase):
    cond: Phrase  # exp[bool] over the first lane's element index
    data: Num


@dataclass(frozen=True)
class Lane(Phrase):
    lane: int
    body: Phrase  # comm

# ----------------------------------------------------------------------------- traversal

_traversal = Traversal(Phrase)
children = _traversal.children
map_children = _traversal.map_children
walk = _traversal.walk


def loops_at_top(c: Phrase):
    """The ``parfor``s of ``c`` that no other ``parfor`` of ``c`` encloses."""
    if isinstance(c, ParFor):
        yield c
        return
    for ph in children(c):
        yield from loops_at_top(ph)


def free_identifiers(c: Phrase) -> set:
    """The names ``c`` mentions: its identifiers and the symbols of its sizes."""
    if isinstance(c, Ident):
        return {c.name}
    names = set()
    match c:  # sizes mention scalars (an integer let used as a size)
        case Shift(offset=e, stride=stride):
            names |= {s.name for s in (sympy.sympify(e).free_symbols | sympy.sympify(stride).free_symbols)}
        case NatExp(value=e):
            names |= {s.name for s in sympy.sympify(e).free_symbols}
        case ParFor(size=e):
            names |= {s.name for s in sympy.sympify(e).free_symbols}
    for ph in children(c):
        names |= free_identifiers(ph)
    return names


def identifiers(c: Phrase) -> set:
    """Every name ``c`` mentions or binds: what a fresh name inside it must not be."""
    return free_identifiers(c) | {name for ph in walk(c) for name in binders(ph)}


def dependents(writes, seeds) -> frozenset:
    """``seeds`` and each name of ``writes`` (pairs: a name, the names its value reads) whose value
    reads one of them, directly or through one another."""
    found, grew = set(seeds), True
    while grew:
        grew = False
        for name, reads in writes:
            if name not in found and reads & found:
                found.add(name)
                grew = True
    return frozenset(found)


def replaced(c: Phrase, table: dict) -> Phrase:
    """``c`` with each phrase whose id is a key of ``table`` replaced by its value."""
    if not table:
        return c
    if id(c) in table:
        return table[id(c)]
    return map_children(lambda child: replaced(child, table), c)


def substitute_variable(c: Phrase, name: str, acc: Phrase, exp: Phrase) -> Phrase:
    """``c`` with the variable ``name`` written as ``acc`` and read as ``exp``."""
    return substitute_variables(c, {name: (acc, exp)})


def substitute_variables(c: Phrase, views: dict) -> Phrase:
    """``c`` with each variable ``name`` of ``views`` written as ``views[name][0]`` and read as
    ``views[name][1]``, in one walk: the names are bound once each, and no view names one of them."""
    match c:
        case Ident(n, AccT()) if n in views:
            return views[n][0]
        case Ident(n, ExpT()) if n in views:
            return views[n][1]
    return map_children(lambda ph: substitute_variables(ph, views), c)


def leaves(c: Phrase):
    """The commands of ``c`` that run once each time it does, in order: through its sequences and
    ``new``s, not into its loops or branches."""
    match c:
        case Seq(cmds):
            for cmd in cmds:
                yield from leaves(cmd)
        case New(body=body):
            yield from leaves(body)
        case _:
            yield c


def seq(*cmds: Phrase) -> Phrase:
    flat: list = []
    for c in cmds:
        match c:
            case Skip():
                pass
            case Seq(inner):
                flat.extend(inner)
            case _:
                flat.append(c)
    if not flat:
        return Skip()
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


# ----------------------------------------------------------------------------- printer


def show(p: Phrase, indent: int = 0) -> str:
    """The paper's notation: ``parfor n out (λ i o. o := a[i] + b[i])``."""
    pad = "  " * indent
    nl = "\n" + pad + "  "
    match p:
        case Ident(name):
            return name
        case Literal(value):
            if isinstance(value, bool):
                return "true" if value else "false"
            return repr(value)
        case NatExp(value):
            return str(value)
        case TargetFlag(macro):
            return macro
        case ScalarOp(op, args):
            prim = prims.prim(op)
            if prim.infix:
                return f"{_atomic(args[0], indent)} {prim.symbol} {_atomic(args[1], indent)}"
            if op == "neg":
                return f"-{_atomic(args[0], indent)}"
            return f"{prim.symbol}({', '.join(show(a, indent) for a in args)})"
        case Idx(arr, index, _, _, checked):
            return f"{_atomic(arr, indent)}[{show(index, indent)}]{'!' if checked else ''}"
        case Shift(base, offset, _, stride) if stride != 1:
            return f"{_atomic(base, indent)}+{_show_size(offset)}:{_show_size(stride)}"
        case Shift(base, offset):
            return f"{_atomic(base, indent)}+{_show_size(offset)}"
        case Build(size, index, body):
            return f"build {_show_size(size)} (λ {index}.{nl}{show(body, indent + 1)})"
        case Ifold(count, state, index, body, init):
            return (f"ifold (λ {state} {index}.{nl}{show(body, indent + 1)}) "
                    f"{_atomic(init, indent)} {_atomic(count, indent)}")
        case Scan(fold):
            return f"scan ({show(fold, indent)})"
        case Filter(arr, index, pred, length):
            return f"{length} ▷ filter (λ {index}.{nl}{show(pred, indent + 1)}) {_atomic(arr, indent)}"
        case Cond(c, a, b):
            return (f"if {show(c, indent)} then{nl}{show(a, indent + 1)}\n{pad}"
                    f"else{nl}{show(b, indent + 1)}")
        case Let(name, rhs, body):
            return f"let {name} = {show(rhs, indent + 1)} in\n{pad}{show(body, indent)}"
        case Bind(name, rhs, into, body):
            return (f"let {name} = ({show(rhs, indent + 1)}) ▷ {show(into, indent)} in\n{pad}"
                    f"{show(body, indent)}")
        case Alloc(region, data, offset, body):
            return (f"alloc {show_data(data)} @{_show_size(offset)} (λ {region}.{nl}"
                    f"{show(body, indent + 1)})")
        case CallExp(fn, args, _, _, check_sizes):
            return f"{fn}{'!' if check_sizes else ''}({', '.join(show(a, indent) for a in args)})"
        case Record(items):
            return f"⟨{', '.join(show(a, indent) for a in items)}⟩"
        case Proj(tup, index):
            return f"{_atomic(tup, indent)}.{index}"
        case Skip():
            return "skip"
        case Kept():
            return "kept"
        case Seq(cmds):
            return (";\n" + pad).join(show(c, indent) for c in cmds)
        case Assign(acc, exp):
            return f"{show(acc, indent)} := {show(exp, indent)}"
        case New(name, data, body, arena_offset):
            where = "" if arena_offset is None else f" @{_show_size(arena_offset)}"
            return f"new {show_data(data)}{where} (λ {name}.{nl}{show(body, indent + 1)})"
        case For(count, index, body):
            return f"for {_atomic(count, indent)} (λ {index}.{nl}{show(body, indent + 1)})"
        case ParallelReduce(count, index, accumulator, monoids, partials, body, chunk):
            return (f"reduce∥ ({', '.join(m.op for m in monoids)}) {_atomic(count, indent)} "
                    f"{show(accumulator, indent)} [{' '.join(show(a, indent) for a in partials)}] "
                    f"{'' if chunk is None else 'by chunks '}(λ {' '.join(filter(None, (index, chunk)))}.{nl}"
                    f"{show(body, indent + 1)})")
        case ParFor(size, acc, index, out, _, body):
            inner = show(body, indent + 1)
            sep = " " if "\n" not in inner else nl
            return f"parfor {_show_size(size)} {_atomic(acc, indent)} (λ {index} {out}.{sep}{inner})"
        case IfCmd(c, a, b):
            return (f"if {show(c, indent)} then{nl}{show(a, indent + 1)}\n{pad}"
                    f"else{nl}{show(b, indent + 1)}")
        case VectorParFor(size, acc, index, out, _, width, body, _, remainder):
            rest = "" if remainder is None else f";\n{pad}{show(remainder, indent)}"
            return (f"parfor {_show_size(size)}/{width} (asVector {width} {_atomic(acc, indent)}) "
                    f"(λ {index} {out}.{nl}{show(body, indent + 1)}){rest}")
        case TopLevel(parallel, sequential):
            return f"at the top:{nl}{show(parallel, indent + 1)}\n{pad}elsewhere:{nl}{show(sequential, indent + 1)}"
        case GroupScan() as g:
            kind = "single-pass (decoupled look-back) " if g.words is not None else ""
            return (f"scan∥ {kind}({', '.join(m.op for m in g.monoids)}) {_show_size(g.count)} in {_show_size(g.groups)} groups "
                    f"(λ {g.group} {g.state}.{nl}{show(g.start, indent + 1)})"
                    f"{nl}element (λ {g.index} {g.item}.{nl}  {show(g.element, indent + 2)})"
                    f"{nl}{'exclusive ' if g.exclusive else ''}{'checked ' if g.checked else ''}write (λ {g.index} {g.state} {g.item}.{nl}  "
                    f"{show(g.write, indent + 2)})"
                    f"{nl}total (λ {g.group} {g.state}.{nl}  {show(g.total, indent + 2)})")
        case StagedRows(source, tile, lanes, lane, body, jam, part):
            rows = f", {jam} rows a lane (λ {part}.)" if jam > 1 else ""
            return (f"stage the rows of {_atomic(source, indent)} in {_atomic(tile, indent)}, transposed by {lanes}{rows} "
                    f"(λ {lane}.{nl}{show(body, indent + 1)})")
        case AsVector(width, at):
            return f"asVector {width} {_atomic(at, indent)}"
        case AsScalar(vector):
            return f"asScalar {_atomic(vector, indent)}"
        case Broadcast(e, data):
            return f"broadcast {data.width} {_atomic(e, indent)}"
        case AllLanes(c):
            return f"all lanes ({show(c, indent)})"
        case Lane(lane, body):
            return f"lane {lane} (λ.{nl}{show(body, indent + 1)})"
        case CallCmd(fn, out, args, _, _, check_sizes):
            return f"{fn}{'!' if check_sizes else ''}({', '.join(show(a, indent) for a in (out,) + tuple(args))})"
        case DoubleBuffer(count, first, second, index, state, out, _, body, after):
            return (f"newDoubleBuffer {show(first, indent)} {show(second, indent)} (λ {state} {out}."
                    f"{nl}for {_atomic(count, indent)} (λ {index}.{nl}  {show(body, indent + 2)};"
                    f"{nl}  swap);{nl}{show(after, indent + 1)})")
    raise AssertionError(p)


def _atomic(p: Phrase, indent: int) -> str:
    s = show(p, indent)
    if isinstance(p, (Ident, Literal, Idx, Record, Proj)) or (isinstance(p, NatExp) and p.value.is_Atom):
        return s
    if isinstance(p, ScalarOp) and not prims.prim(p.op).infix and p.op != "neg":
        return s
    return f"({s})"


def data_of(p: Phrase) -> Data:
    """The data type δ of an exp[δ] or acc[δ] phrase."""
    match p:
        case Ident(_, ExpT(data) | AccT(data)):
            return data
        case Literal(data=data) | NatExp(data=data) | TargetFlag(data=data) | ScalarOp(data=data) | Shift(data=data):
            return data
        case AsVector(data=data) | AsScalar(data=data) | Broadcast(data=data) | AllLanes(data=data):
            return data
        case Ifold(data=data) | Cond(data=data) | CallExp(data=data) | Record(data=data) | Proj(data=data) \
                | Scan(data=data) | Filter(data=data) | Kept(data=data):
            return data
        case Idx(elem=elem):
            return elem
        case Build(size, _, _, elem):
            return Arr(size, elem)
        case Let(body=body) | Bind(body=body) | Alloc(body=body):
            return data_of(body)
    raise AssertionError(p)


# ----------------------------------------------------------------------------- programs


@dataclass(frozen=True)
class ImperativeKernel:
    """One DPS kernel after accT/conT, with what code generation needs from the DPS kernel."""

    name: str
    dest: str
    params: tuple  # (name, fsmooth Type, dims)
    param_phrases: dict  # name -> Ident exp[δ]
    result: object  # fsmooth Type
    result_data: Data
    result_dims: tuple
    sizes: tuple  # sympy Symbols, in C order
    constraints: tuple  # dps.ir.SizeConstraint
    scratch: sympy.Expr
    functional: Phrase  # exp[δ]: the body before the translation
    body: Phrase  # comm: A(functional)(dest)
    threads: str | None = None  # the DPS kernel's thread-count parameter (dps.parallel)
    kept_length: bool = False  # the DPS kernel's: its F̃ result is a filter


@dataclass(frozen=True)
class ImperativeProgram:
    kernels: dict  # name -> ImperativeKernel, callees before callers
    entry: str

    def __str__(self) -> str:
        return show_program(self)


def show_kernel(k: ImperativeKernel) -> str:
    params = " ".join(f"({n} : {show_type(ph.type)})" for n, ph in k.param_phrases.items())
    return (f"{k.name} = λ ({k.dest} : {show_type(AccT(k.result_data))}) {params}.\n"
            f"  {show(k.body, 1)}")


def show_program(p: ImperativeProgram) -> str:
    return "\n\n".join(show_kernel(k) for k in p.kernels.values())


# ----------------------------------------------------------------------------- verification

def verify(program: ImperativeProgram) -> None:
    """Raise ``IRError`` unless, in every kernel, every identifier is bound (a parameter, the
    destination or one of its components, a size, or a binder around it), every call names a
    kernel of ``program``, and the kernel's body is a command (comm)."""
    for k in program.kernels.values():
        scope = (frozenset(k.param_phrases) | {k.dest} | {s.name for s in k.sizes}
                 | {f"{k.dest}{''.join(f'_{i}' for i in path)}" for path, _ in record_leaves(k.result_data)})
        if isinstance(k.body, (Ident, Literal, NatExp, ScalarOp, Idx, Shift, Build, Ifold, Scan, Filter, Cond, Let, Bind,
                               CallExp, Record, Proj)):
            raise IRError(f"kernel {k.name}: the body is an expression, not a command: {show(k.body)}")
        for phrase in (k.functional, k.body):
            _check_scope(phrase, scope, program, k.name)


def binders(ph: Phrase) -> set:
    """The identifiers ``ph`` binds in the phrases inside it."""
    match ph:
        case Let(name) | Bind(name) | New(name) | Alloc(name):
            return {name}
        case ParallelReduce(index=index, chunk=str() as chunk):
            return {index, chunk}
        case Build(index=index) | For(index=index) | Filter(index=index) | ParallelReduce(index=index):
            return {index}
        case Ifold(state=state, index=index):
            return {state, index, f"{state}_next"}  # the buffer an iteration writes (from_dps.write_buffer)
        case Scan(fold=Ifold(index=index)):  # its element is over the fold's index
            return {index}
        case ParFor(index=index, out=out):
            return {index, out}
        case GroupScan(group=group, index=index, state=state, item=item, tiles=tiles, sums=sums, words=words,
                       window=window):
            # and its arrays, until dpia.hoist_opencl makes them buffers
            return {group, index, state, item} | {x.name for x in (*tiles, *sums, words, *window) if isinstance(x, Ident)}
        case DoubleBuffer(index=index, state=state, out=out):
            return {index, state, out}
        case StagedRows(lane=lane, part=part):
            return {lane} | ({part} if part is not None else set())
    return set()


def _check_scope(ph: Phrase, scope: frozenset, program: ImperativeProgram, kernel: str) -> None:
    match ph:
        case Ident(name) if name not in scope:
            raise IRError(f"kernel {kernel}: identifier '{name}' is not in scope")
        case CallExp(fn) | CallCmd(fn) if isinstance(fn, str) and fn not in program.kernels:
            raise IRError(f"kernel {kernel}: call of '{fn}', which is not a kernel of the program")
    inner = scope | binders(ph)
    for child in children(ph):
        _check_scope(child, inner, program, kernel)
