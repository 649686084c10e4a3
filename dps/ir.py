"""DPS-F̃ (DPS paper Fig. 5-6): F̃ in ANF with explicit storage and destinations.

Every array-producing construct names the *destination* (a ``Ref``) its result is
written to; storage comes only from ``Alloc`` regions on the arena (stack
discipline: a region lives for the scope of its body) or from the caller.
Sizes are symbolic (sympy) expressions over the kernel's size symbols, already
partially evaluated from the shape translation, so no shape computation is left
at run time.

Representation at run time: an array is one flat, row-major buffer of its scalar
element type; its dims are known symbolically (``dims``).  A ``Ref`` therefore
denotes the address of a scalar element: a region (or the kernel's destination
parameter) plus an offset counted in scalar elements.

Atoms are ``fsmooth.core.Var`` / ``fsmooth.core.Lit`` (typed).  Array-typed
variables denote the buffer the array lives in, with ``dims`` recorded where
they are bound (``Let.dims``, kernel parameters) so later stages can index them.

Terms:
  Atom(a)                          a scalar or array variable, or a literal
  Prim(op, args, ty)               scalar primitive over atoms (fsmooth.prims)
  Get(arr, idx, ty)                a[i]: a scalar read; for array-typed results a view, no copy
  CardOf(value)                    a Card known symbolically (length a, n*m, ...)
  Let(name, rhs, body, ty, dims, inline)   let x = rhs in body; dims = x's dims (() for scalars);
                                  inline: β-reduced in DPIA (shown ``let x := rhs``)
  If(cond, then, orelse, ty)       both branches write the same destination when array-typed
  Alloc(region, elem, count, body, offset)
                                   alloc (bytes shp) (λ r. body): count scalars of type elem
  Build(dest, size, index, body, ty)
      build r n (λ r_i i. body): iteration i writes element i at dest + i * (elements of one
      element); for a scalar element type, body is a scalar term stored at dest[i]; for an
      array element type, body writes its result into Offset(dest, i * elem_count) itself
      (its destination refs say so).  Iterations are independent (parfor).  ``parallel``: the
      back end runs the iterations concurrently (``#pragma omp parallel for``), so no arena
      byte may be written by two threads: the layout gives each thread a frame of its own, at
      an offset over the thread's number ``thread∥`` (see ``dps.parallel``).
  Ifold(dest, state, index, body, init, count, ty, buffers)
      ifold (λ s i. body) init count, result into dest.  Scalar state: buffers is None, body and
      init are scalar terms.  Array state: buffers = (b0, b1), two regions each holding one
      state; init writes into b0; iteration k reads state from buffers[k % 2] (bound to the
      name ``state``) and its body writes into buffers[(k + 1) % 2] -- the body's destination
      refs are ``StateDest(...)`` which the code generator resolves to the buffer being written;
      after the loop the current buffer is copied to dest (a single copy, none per iteration).
      buffers = (b0, b0): one buffer, the state updated in place (``dps.in_place``: the body
      reads the state only where it writes it, or before it writes anything).
      ``trace`` (an ``iscan``): each iteration's new state is also written at element ``index``
      of trace (an array ref; for a tuple state an RTuple of one per component); the state is
      a scalar or a tuple of scalars and dest is • (the term's value is what trace holds).
      ``partials``: a reduction (``dps.reductions``) whose iterations run concurrently: each thread
      folds a contiguous chunk of them from the identity of each component's operator
      (``monoids``) into a state of its own, writes it to its cache line of the regions
      ``partials`` (``parallel.partial_stride``), and the partials are combined with init in
      thread order (``dps.parallel``).
  Copy(dest, src, count, elem)     copy count scalars of the array src into dest (D-VarVector)
  Keep()                           writes nothing: the value is what its destination holds already
                                   (a branch of a step that updates an ifold's state in place,
                                   ``dps.in_place``, where it would copy the state to its own place)
  Filter(dest, length, elem, body, arr, ty)
      filter r (λ x. body) arr: the elements x of arr (scalars) for which the Bool term body holds,
      written in order from dest on (which has arr's length: the capacity); the scalar variable
      ``length``, the count of kept elements, is in scope in the body of the Let that binds it
      (whose dims are that variable's symbol).
  TupleOf(items, ty, dest, written) a tuple of atoms; in result position each component is written
                                   to its own destination (an array component is copied), but
                                   those in ``written`` (written there by their let already)
  Proj(tup, index, ty)             component ``index`` of a tuple atom: a scalar, or a view
  Call(fn, dest, args, ty, scratch_offset)
                                   call of a DPS kernel: result into dest (Bullet for scalars);
                                   array arguments pass their dims along (from where they are bound);
                                   or of a foreign function with an array result (fn a Foreign)

Refs:
  RVar(name)                        a region bound by Alloc, or the kernel's destination "out"
  Bullet()                          • : no storage (scalar-valued term)
  Offset(base, elems)               base + elems (sympy expr over size symbols and index vars)
  StateDest(ifold_state)            the buffer the current iteration of that ifold writes
  RTuple(items)                     one destination per component of a tuple (• for a scalar one)

A tuple-state ifold's ``buffers`` mirror its state's type: per component a pair of regions
(an array), None (a scalar, kept in two C variables by the back end), or the entry of a tuple.

A DPS kernel: Kernel(name, dest, params, result, result_dims, body, sizes, constraints, scratch, threads)
  - params: (name, type, dims) with dims a tuple of sympy Symbols for array params, () else
  - sizes: the size symbols of the kernel (array dims and Card parameters), in C order
  - constraints: SizeConstraint(cond, param, message): sympy relations over the sizes that
    must hold before the kernel runs (every build size >= 0, affine reads in range, ...)
  - scratch: the exact peak arena use in bytes, a sympy expr over the sizes (callees included)
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import sympy

from fsmooth.core import Lit, Var
from fsmooth.errors import IRError, Loc
from fsmooth.traversal import Traversal
from fsmooth.types import Scalar, TupleT, Type

Atom = Var | Lit
ALIGN = 16  # bytes; every region starts on this boundary
Dims = tuple  # tuple[sympy.Expr, ...]


class Ref:
    pass


@dataclass(frozen=True)
class RVar(Ref):
    name: str


@dataclass(frozen=True)
class Bullet(Ref):
    pass


@dataclass(frozen=True)
class Offset(Ref):
    base: Ref
    elems: sympy.Expr


@dataclass(frozen=True)
class StateDest(Ref):
    state: str


@dataclass(frozen=True)
class RTuple(Ref):
    items: tuple  # Ref per component


class Term:
    pass


def _loc():
    return field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Atom_(Term):
    atom: Atom


@dataclass(frozen=True)
class Prim(Term):
    op: object  # a key of fsmooth.prims.PRIMS, or a foreign function (prims.prim)
    args: tuple
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Get(Term):
    arr: Atom
    idx: Atom
    ty: Type
    checked: bool = False  # True: index not proven in range, the generated code checks it
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class TupleOf(Term):
    items: tuple  # atoms
    ty: Type
    dest: Ref = Bullet()  # where it is written (• where it is only a view, the rhs of a let)
    written: frozenset = frozenset()  # components a let already wrote into their destination


@dataclass(frozen=True)
class Proj(Term):
    tup: Atom
    index: int
    ty: Type


@dataclass(frozen=True)
class CardOf(Term):
    value: sympy.Expr


@dataclass(frozen=True)
class Let(Term):
    name: str
    rhs: Term
    body: Term
    ty: Type
    dims: Dims = ()
    inline: bool = False  # a scalar let to β-reduce in DPIA (``fsmooth.dpia.inline_scalar_lets``)


@dataclass(frozen=True)
class If(Term):
    cond: Atom
    then: Term
    orelse: Term
    ty: Type


@dataclass(frozen=True)
class Alloc(Term):
    region: str
    elem: Scalar
    count: sympy.Expr
    body: Term
    # Byte offset of the region from the kernel's scratch base: stack discipline makes every
    # region's place static (the sum of the sizes of the regions live around it, each rounded
    # up to ALIGN), so the generated code never bumps a pointer at run time.  None: not in the
    # arena, a local array of the kernel's C function (a small constant size, dps.local_arrays).
    offset: sympy.Expr | None = sympy.Integer(0)
    # The dims of the value the region holds (() for a scalar: the empty allocation of Fig. 9);
    # None where unknown.  Printed as ``bytes x_shp``.
    dims: Dims | None = None
    # One copy per thread of a parallel build (dps.hoist): the layout starts it on a cache line.
    per_thread: bool = False


@dataclass(frozen=True)
class Build(Term):
    dest: Ref
    size: sympy.Expr
    index: str
    body: Term
    ty: Type
    parallel: bool = False
    strategy: object = None  # fsmooth.strategies.Strategy of the F̃ build (OpenCL only)


@dataclass(frozen=True)
class Ifold(Term):
    dest: Ref
    state: str
    index: str
    body: Term
    init: Term
    count: sympy.Expr | Atom
    ty: Type
    buffers: tuple | None = None  # (b0, b1) for an array state; per component for a tuple state
    dims: Dims = ()  # the dims of the state (() for a scalar state), for indexing it in the body
    trace: Ref | None = None  # an iscan's states are written here, one element per iteration
    # A parallel reduction (dps.parallel): the operator of each component of the state
    # (dps.reductions.Monoid), and per component the region of the threads' partials, one
    # cache line per thread; both () for a sequential ifold.
    monoids: tuple = ()
    partials: tuple = ()

    @property
    def parallel(self) -> bool:
        return bool(self.partials)


@dataclass(frozen=True)
class Copy(Term):
    dest: Ref
    src: Atom
    count: sympy.Expr
    elem: Scalar


@dataclass(frozen=True)
class Keep(Term):
    pass


@dataclass(frozen=True)
class Filter(Term):
    dest: Ref
    length: str  # the variable the count of kept elements is bound to
    elem: str  # the predicate's parameter
    body: Term  # Bool: the predicate
    arr: Atom
    ty: Type  # the array type


@dataclass(frozen=True)
class Call(Term):
    fn: object  # a kernel's name, or a foreign function (fsmooth.foreign.Foreign), which uses no scratch
    dest: Ref
    args: tuple  # atoms
    ty: Type
    scratch_offset: sympy.Expr = sympy.Integer(0)  # the callee's scratch base, in bytes
    # True: the callee's size constraints are not implied by the caller's (the call is under a
    # branch, or its sizes depend on data): the generated code checks them before the call.
    check_sizes: bool = False


# The children of a term are its sub-terms (atoms and refs are not terms).
_traversal = Traversal(Term)
children = _traversal.children
map_children = _traversal.map_children
walk = _traversal.walk


@dataclass(frozen=True)
class SizeConstraint:
    cond: sympy.Basic  # a relation over size symbols
    param: str  # the parameter to blame in the error message
    message: str


@dataclass(frozen=True)
class Kernel:
    name: str
    dest: str
    params: tuple  # (name, Type, dims)
    result: Type
    result_dims: Dims
    body: Term
    sizes: tuple  # sympy Symbols
    constraints: tuple = ()  # SizeConstraint
    scratch: sympy.Expr = sympy.Integer(0)
    # The thread-count parameter (the last, a Card) of a kernel of a parallel program (dps.parallel)
    threads: str | None = None
    # The F̃ result is a filter: ``result`` is (the array, its kept length), the array written from
    # the start of a destination of the capacity (fsmooth.artifact.KernelInterface.kept_length)
    kept_length: bool = False


@dataclass(frozen=True)
class Program:
    kernels: dict  # name -> Kernel, callees before callers
    entry: str


def named_regions(t: Ifold) -> tuple:
    """The regions ifold ``t`` names rather than refs: its double buffers and its partials."""
    return buffer_names(t.buffers) + t.partials


def buffer_names(buffers) -> tuple:
    """The region names in an ifold's ``buffers`` (array or tuple state), in order."""
    if buffers is None:
        return ()
    if isinstance(buffers, str):
        return (buffers,)
    return tuple(name for entry in buffers for name in buffer_names(entry))


def verify(program: Program) -> None:
    """Raise ``IRError`` unless, in every kernel, every variable (as an atom or as a symbol of a
    size or offset) is in scope, every region a destination names is allocated around it (or
    is the kernel's destination), every ``StateDest`` is inside its ifold, and every call names
    a kernel of ``program``."""
    for k in program.kernels.values():
        variables = frozenset(n for n, _, _ in k.params) | {s.name for s in k.sizes}
        _check(k.body, variables, frozenset(_destinations(k.dest, k.result)), frozenset(), program, k.name)


def _destinations(dest: str, ty) -> list[str]:
    """The kernel's destination and, for a tuple result, its components' (``out_0``, ...)."""
    if isinstance(ty, TupleT):
        return [dest] + [n for i, t in enumerate(ty.items) for n in _destinations(f"{dest}_{i}", t)]
    return [dest]


def _check(t: Term, variables: frozenset, regions: frozenset, states: frozenset, program: Program,
           kernel: str) -> None:
    def fail(what: str):
        raise IRError(f"kernel {kernel}: {what} in {type(t).__name__}")

    for f in fields(t):
        # a filter's kept length is the first dim of the array its Let binds
        seen = variables | {t.rhs.length} if f.name == "dims" and isinstance(t, Let) and isinstance(t.rhs, Filter) \
            else variables
        _check_uses(getattr(t, f.name), seen, regions, states, fail)
    if isinstance(t, Call) and isinstance(t.fn, str) and t.fn not in program.kernels:
        fail(f"call of '{t.fn}', which is not a kernel of the program")
    if isinstance(t, Ifold):
        for b in named_regions(t):
            if b not in regions:
                fail(f"ifold buffer '{b}' is not an allocated region")
    for child in children(t):
        inner_vars, inner_regions, inner_states = variables, regions, states
        match t:
            case Let(name, rhs, body) if child is body:
                inner_vars = variables | {name} | ({rhs.length} if isinstance(rhs, Filter) else set())
            case Filter(elem=elem):
                inner_vars = variables | {elem}
            case Alloc(region):
                inner_regions = regions | {region}
            case Build(index=index, parallel=parallel):
                # the number of the running thread (dps.parallel.THREAD) in a parallel build
                inner_vars = variables | {index} | ({"thread∥"} if parallel else set())
            case Ifold(state=state, index=index, body=body, partials=partials) if child is body:
                inner_vars = variables | {state, index} | ({"thread∥"} if partials else set())
                inner_states = states | {state}
        _check(child, inner_vars, inner_regions, inner_states, program, kernel)


def _check_uses(value, variables: frozenset, regions: frozenset, states: frozenset, fail) -> None:
    """The variables, regions and ifold states ``value`` (a field of a term) uses."""
    match value:
        case Var(name) if name not in variables:
            fail(f"variable '{name}' is not in scope")
        case sympy.Basic():
            for s in value.free_symbols:
                if s.name not in variables:
                    fail(f"size variable '{s.name}' is not in scope")
        case RVar(name) if name not in regions:
            fail(f"region '{name}' is not allocated here")
        case StateDest(state) if state not in states:
            fail(f"destination of ifold state '{state}' outside that ifold")
        case Offset(base, elems):
            _check_uses(base, variables, regions, states, fail)
            _check_uses(elems, variables, regions, states, fail)
        case RTuple(items) | tuple(items):
            for item in items:
                _check_uses(item, variables, regions, states, fail)
