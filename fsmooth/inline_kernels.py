"""Inlining of calls of small kernels (DPS paper §2.2: fusion across library functions).

Helper kernels (those taking functions) are always inlined by ``fsmooth.anf``; this pass
also inlines a call of a non-helper kernel whose body, already optimised, is small.  That is
what lets fusion see through ``vectorNorm (vectorAdd vec1 vec2)``; a kernel too big to inline
keeps its call, and its argument and result arrays stay intermediates that DPS allocates (the
paper's "library function that is too big to inline").

The callee kept in the program is unchanged: it is still compiled and exported on its own.
"""
from __future__ import annotations

import functools

from . import core
from .anf import anf_kernel
from .core import Expr, called_kernels, children, free_vars
from .types import BYTES, ArrayT, Scalar, element_scalar
from fsmooth.dps.local_arrays import small_constant_size
from fsmooth.shape.filters import returns_filter
from fsmooth.shape.ir import VecShape
from fsmooth.shape.sizes import is_card
from fsmooth.shape.translate import kernel_functions, shape_kernel

SMALL_KERNEL = 100
"""Largest body, in expression nodes after its own optimisation (its callees inlined), of a kernel
whose calls are inlined: a body this size is a few dozen lines of C, so the copies stay cheap."""

SMALL_RESULT_KERNEL = 600
"""Largest body of a kernel whose calls are inlined when its result is a small array of a size known
when compiling (``dps.local_arrays.small_constant_size``: a 3-vector, a 4×4 matrix).  Inlined, the
caller's reads of that result fuse with the callee's last build, so its elements are scalars of the
caller's loop (in registers) rather than a local array the call stores and the caller loads, and
the callee's small intermediates (BA's ``rot``, ``x_centred``, ``p``) become the caller's locals
too.  By callgrind's count (issue 11, ba1, -march=x86-64-v3 builds), this takes BA's Rodrigues'
rotation (298 nodes) and ``project`` (429 with it) into the loop over the observations: 10.1 M ->
8.6 M instructions per call.  A size limit alone cannot: at 600 for every kernel, GMM at d=20,
K=25 runs 53 % more instructions (49.3 M -> 75.2 M), ``main_terms`` (141 nodes), whose result has
K elements, being inlined into the fold over the points; not because its vector x - means[k] and
its K results then share one region (with ``merge_allocs`` off: still 73.1 M); the likely cause,
not confirmed, is that inlined both are regions of the caller's one scratch pointer, which gcc
must assume alias each other, where the call's result was its own ``restrict`` parameter.  A result whose size is known only at run time gains no
scalars from inlining, so such a kernel keeps ``SMALL_KERNEL``."""


def size(e: Expr) -> int:
    return 1 + sum(size(child) for child in children(e))


def inline_small_kernels(program: core.Program, k: core.KernelDef, in_place: bool = True,
                         into_reductions: bool = False) -> core.KernelDef:
    """``k`` with every call of a small kernel of ``program`` replaced by the callee's body
    (renamed apart, arguments bound by let), in ANF; ``in_place`` (``Options.update_in_place``):
    and the call of its result over a dead argument (``result_over_dead_argument``);
    ``into_reductions`` (``Options.jam_reductions``): and the calls in a reduction's element
    (``reduction_callees``)."""
    over = result_over_dead_argument(program, k) if in_place else None
    jammed = reduction_callees(program, k) if into_reductions else frozenset()
    small = frozenset(name for name in called_kernels(k.body) if inlined(program, program.kernels[name])
                      or (name in (over, *jammed) and size(program.kernels[name].body) <= SMALL_RESULT_KERNEL))
    return anf_kernel(program, k, inline=small) if small else k


def result_over_dead_argument(program: core.Program, k: core.KernelDef) -> str | None:
    """The kernel whose call is ``k``'s result (after ``k``'s lets) where an argument is an array of
    the result's type that one of those lets binds and nothing else uses, and that the callee reads
    only row by row (``reads_row_wise``), else None.  Such a call is inlined up to
    ``SMALL_RESULT_KERNEL``: a call's result cannot be written over its argument (they are distinct
    ``restrict`` parameters), but inlined, the argument, dead after it, is built in ``k``'s result
    and the callee's build written over it there (``dps.in_place.result_over_dead_array``: one
    array of scratch less, as Hand's global transform of its vertices).  It is ``k``'s result,
    computed once a call of ``k``, so inlining it multiplies no work."""
    lets, t = [], k.body
    while isinstance(t, core.Let):
        lets.append(t)
        t = t.body
    if not isinstance(t, core.Call) or not isinstance(t.ty, ArrayT):
        return None
    bound = {u.name for u in lets if u.ty == t.ty}
    used_before = frozenset().union(*(free_vars(u.rhs) for u in lets))
    arguments = [a.name if isinstance(a, core.Var) else None for a in t.args]
    callee = program.kernels[t.fn]
    dead = [param for name, (param, _) in zip(arguments, callee.params)
            if name in bound and name not in used_before and arguments.count(name) == 1]
    return t.fn if any(reads_row_wise(callee, param) for param in dead) else None


def reduction_callees(program: core.Program, k: core.KernelDef) -> frozenset[str]:
    """The kernels with loops that ``k`` calls in the element of a reduction at its top (a let of
    its body or its result: ``ifold(λ acc i. … acc ⊕ e, init, n)``, ``acc`` a scalar read there only), which
    ``dpia.unroll_jam.jam_reduction`` runs J elements at a time: inlined, the elements' loops can
    be jammed, a call cannot.  (Inlined without the jam, ``main_terms`` made GMM slower:
    ``SMALL_RESULT_KERNEL``.)"""
    found: set[str] = set()
    lets, result = core.let_chain(k.body)
    for e in (*(u.rhs for u in lets), result):
        match e:
            case core.Ifold(fn=core.Lam(params=((acc, Scalar()), (index, _)), body=step)) if _reduces(step, acc):
                found |= {call.fn for call in _element_calls(step, index) if _loops(program.kernels[call.fn].body)}
    return frozenset(found)


def _element_calls(step: Expr, index: str):
    """The calls of ``step`` (in ANF) whose arguments depend on ``index``: the element's (a call
    that does not, the same for every element, licm takes out of the loop, and stays a call)."""
    varying = {index}
    lets, _ = core.let_chain(step)
    for u in lets:
        if free_vars(u.rhs) & varying:
            varying.add(u.name)
    return (e for e in core.walk(step) if isinstance(e, core.Call) and any(free_vars(a) & varying for a in e.args))


def _reduces(step: Expr, acc: str) -> bool:
    """Whether ``step`` (a fold's body, in ANF) ends in ``acc ⊕ e`` and reads ``acc`` there only."""
    t = step
    while isinstance(t, core.Let):
        t = t.body
    return (isinstance(t, core.PrimApp) and len(t.args) == 2 and isinstance(t.args[0], core.Var) and t.args[0].name == acc
            and sum(isinstance(e, core.Var) and e.name == acc for e in core.walk(step)) == 1)


def _loops(e: Expr) -> bool:
    return any(isinstance(x, (core.Build, core.Ifold)) for x in core.walk(e))


def reads_row_wise(k: core.KernelDef, param: str) -> bool:
    """Whether ``k``'s result is a build whose element i reads the array ``param`` only as
    ``param[i]`` (its length anywhere): what ``dps.in_place`` needs to write it over ``param``."""
    t = k.body
    while isinstance(t, core.Let):
        t = t.body
    if not isinstance(t, core.Build) or not isinstance(t.fn, core.Lam) or len(t.fn.params) != 1:
        return False
    (index, _), = t.fn.params
    array = lambda e: isinstance(e, core.Var) and e.name == param  # noqa: E731
    uses = sum(1 for e in core.walk(k.body) if array(e))
    lengths = sum(1 for e in core.walk(k.body) if isinstance(e, core.Length) and array(e.arr))
    rows = sum(1 for e in core.walk(t.fn.body) if isinstance(e, core.Get) and array(e.arr)
               and isinstance(e.idx, core.Var) and e.idx.name == index)
    return rows > 0 and uses == lengths + rows


def inlined(program: core.Program, callee: core.KernelDef) -> bool:
    """Whether the calls of ``callee`` are inlined: its body is small, or not too big and its result
    a small array of a size known when compiling, or it returns a filter (a filter's length is known
    only at run time: one returned is always inlined, shape.filters)."""
    nodes = size(callee.body)
    return (nodes <= SMALL_KERNEL or returns_filter(callee.body)
            or (nodes <= SMALL_RESULT_KERNEL and returns_small_array(program, callee)))


def returns_small_array(program: core.Program, k: core.KernelDef) -> bool:
    """Whether ``k``'s result is an array whose every dimension is known when compiling, small
    enough to be a C local (``small_constant_size``), whatever its arguments' sizes."""
    if not isinstance(k.result, ArrayT):
        return False
    count = constant_result_count(k, tuple(program.kernels[name] for name in sorted(called_transitively(program, k))))
    return count is not None and small_constant_size(count, BYTES[element_scalar(k.result)])


def called_transitively(program: core.Program, k: core.KernelDef) -> frozenset[str]:
    """The kernels ``k`` calls, and those they call, and so on."""
    found: set[str] = set()
    pending = set(called_kernels(k.body))
    while pending:
        name = pending.pop()
        found.add(name)
        pending |= called_kernels(program.kernels[name].body) - found
    return frozenset(found)


@functools.lru_cache(maxsize=1024)
def constant_result_count(k: core.KernelDef, callees: tuple[core.KernelDef, ...]) -> int | None:
    """The number of elements of ``k``'s array result (``k`` calling ``callees``) where every
    dimension is known when compiling, else None.  A function of those kernels alone, memoised:
    the optimiser asks ``returns_small_array`` of each callee at every round of every caller, and
    the shape translation of a callee of a few hundred nodes (and of every kernel it calls, for
    its environment) costs milliseconds."""
    program = core.Program({callee.name: callee for callee in (*callees, k)}, k.name)
    shape, count = shape_kernel(k, kernel_functions(program), program).result, 1
    while isinstance(shape, VecShape):
        if not is_card(shape.card) or shape.capacity is not None:
            return None
        count, shape = count * shape.card, shape.elem
    return count
