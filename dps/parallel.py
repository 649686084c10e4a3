"""Which loops run their iterations concurrently (``options.parallel``), and on how many threads.

Only the outermost loop runs in parallel: a build not nested in another loop of its kernel (a
build, or the body of an ifold) is parallel (the back end puts ``#pragma omp parallel for`` on
it), and so is such an ifold that is a reduction (below), unless its kernel is itself called
from inside a parallel loop or an ifold's body (or from such a kernel).  Such a loop runs once
per iteration of an outer loop, and an OpenMP region around it would be started as often: that
costs microseconds each time (for a nested region too, which runs on one thread), far more than
the few iterations of an inner loop (GMM's builds over the components inside its fold over the
points; BA's 3-vectors inside its build over the observations).  A loop of a known small trip
count (``MIN_PARALLEL_TRIPS``) is not worth a team either: it stays sequential, and the loops
inside it are the outermost.

A reduction (``dps.reductions``: GMM's sum over the points, ``acc + f(i)``) runs on the threads
as two phases: each thread folds a contiguous chunk of the iterations, as OpenMP's static
schedule deals them, from the identity of each component's operator into a partial of its own,
and writes it to its cache line of a region (``partial_stride``); then the init and the partials
are combined in thread order, so the result is the same for a given thread count.  That
regroups the operations: a Double ``+`` or ``*`` may round differently from the sequential fold
(the reassociation ``parallel=True`` allows, README); min and max give the same bits.  An Index
or Card ``+`` or ``*`` stays sequential: a regrouped sum may overflow int64 where the sequential
one does not, or the other way round, and an overflow must be an error exactly where the
reference's is.

The number of threads is an argument of every kernel of a parallel program, its thread-count
parameter (``Kernel.threads``, a Card, the last parameter): the memory of a call is known
before the call, so the scratch formula is over it.  Storage used inside a parallel loop is
private to a thread, never shared: each thread has a slice of the loop's scratch (the body's
peak, ``dps.layout``; a region hoisted out of the body, ``dps.hoist``), the one of number
``THREAD``; a thread runs its iterations one after another (a static schedule), reusing it.
A call inside a parallel build (or an ifold's body) runs on one thread: it is passed 1 as its
thread count.
"""
from __future__ import annotations

from dataclasses import replace

import sympy
from fsmooth.core import Lit, Var
from fsmooth.names import NameSupply
from fsmooth.shape.sizes import size_symbol
from fsmooth.types import BYTES, Card

from . import ir
from .reductions import reduction
from .terms import names_used

# The number of the thread running an iteration of a parallel build, 0 .. threads - 1: a name no
# F̃ program can use (∥ is not a Python identifier character).
THREAD = sympy.Symbol("thread∥", integer=True, nonnegative=True)

# A loop of fewer iterations than this, known at compile time, is not worth a team of threads
# (starting one costs microseconds): it stays sequential.  A trip count known only at run time
# is decided there (the C's ``if`` clause: a single iteration runs without a team).
MIN_PARALLEL_TRIPS = 64

# A reduction's partials are a cache line apart (a multiple of these bytes): partials that shared
# a line would have two cores writing it in turn (false sharing); each is written once per call.
CACHE_LINE = 64

# Each thread's slice of a region (its frame, its copy of a hoisted region) is whole pages of
# these bytes, so that the slices of two threads start this far apart and a thread's data (the
# first bytes of its slice) lies in pages no other thread writes.  Cache lines of their own are
# not enough: the L2 streamer prefetches the lines ahead of a thread's accesses within their
# 4 KiB page, the lines the other thread writes at every iteration included, and each such read
# takes the line from that core (GMM's fold over the points, whose per-point slices were 128
# bytes apart: each thread's half took 5.1 to 6.3 ms instead of 4.3, 1.5x on 2 threads instead
# of 2x; a page apart, 2.0x, benchmarks/RESULTS.md).
PAGE = 4096


def thread_slice(nbytes: sympy.Expr) -> sympy.Expr:
    """The bytes of one thread's slice holding ``nbytes``: rounded up to whole pages."""
    return PAGE * sympy.ceiling(nbytes / PAGE)


def partial_stride(ty) -> int:
    """The elements from one thread's partial of a parallel reduction to the next's: a cache line."""
    return CACHE_LINE // BYTES[ty]


def parallelise(p: ir.Program) -> ir.Program:
    """``p`` with the outermost builds of its outermost kernels marked parallel and a thread
    count parameter on every kernel, passed on by every call."""
    nested: set[str] = set()
    kernels: dict = {}
    taken = {name: _names_taken(k) for name, k in p.kernels.items()}
    # ``nthreads``, or a numbered form where the kernel already has a variable of that name
    threads = {name: NameSupply(taken[name]).fresh("nthreads") for name in p.kernels}
    for name in reversed(list(p.kernels)):  # callers first: a kernel's callers are decided before it
        k = p.kernels[name]
        body = k.body if name in nested else mark_parallel(k.body, _Partials(taken[name], threads[name]))
        nested |= _called_in_loops(body, inside=name in nested)
        body = _pass_threads(body, Var(threads[name], Card), inside=False)
        n_threads = size_symbol(threads[name])
        kernels[name] = replace(k, body=body, params=(*k.params, (threads[name], Card, ())),
                                sizes=(*k.sizes, n_threads), threads=threads[name],
                                constraints=(*k.constraints, ir.SizeConstraint(
                                    n_threads >= 1, threads[name], f"{threads[name]} must be at least 1")))
    return ir.Program({name: kernels[name] for name in p.kernels}, p.entry)


def mark_parallel(t: ir.Term, partials: _Partials) -> ir.Term:
    """``t`` with its outermost builds and reductions marked parallel, none in an ifold's body
    (its init runs once), and none of a known trip count below ``MIN_PARALLEL_TRIPS`` (a
    3-vector), which stays a sequential loop around its inner loops.  A parallel reduction is
    given its partials: for each component of its state a region of one cache line per thread."""
    match t:
        case ir.Build(size=n) if _many_trips(n):
            return replace(t, parallel=True)
        case ir.Ifold(count=n) if isinstance(n, sympy.Expr) and _many_trips(n) and (monoids := _regroupable(t)):
            regions = tuple(partials.fresh() for _ in monoids)
            loop: ir.Term = replace(t, init=mark_parallel(t.init, partials), monoids=monoids, partials=regions)
            for region, monoid in reversed(list(zip(regions, monoids))):
                # each thread's partial on a cache line of its own (the last one unpadded)
                count = partial_stride(monoid.ty) * (partials.threads - 1) + 1
                loop = ir.Alloc(region, monoid.ty, count, loop, per_thread=True)
            return loop
        case ir.Ifold(init=init):
            return replace(t, init=mark_parallel(init, partials))
        case ir.Filter():  # its predicate runs in a sequential loop, as an ifold's body
            return t
    return ir.map_children(lambda u: mark_parallel(u, partials), t)


def _many_trips(n: sympy.Expr) -> bool:
    """A loop of ``n`` trips is worth a team: ``n`` is not known to be below MIN_PARALLEL_TRIPS."""
    return not (n.is_number and n < MIN_PARALLEL_TRIPS)


def _regroupable(t: ir.Ifold) -> tuple:
    """The operators of ``t`` where it is a reduction that may run regrouped (none of them may
    overflow int64), else ()."""
    found = reduction(t)
    return found.monoids if found is not None and not any(m.may_overflow for m in found.monoids) else ()


class _Partials:
    """Names for the regions of a kernel's parallel reductions' partials, and their length: the
    kernel's thread count."""

    def __init__(self, taken: set[str], threads: str):
        self.names = NameSupply(taken | {threads})
        self.threads = size_symbol(threads)

    def fresh(self) -> str:
        return self.names.fresh("partials")


def _names_taken(k: ir.Kernel) -> set[str]:
    """The names of the variables and regions of ``k``."""
    taken = {n for n, _, _ in k.params} | {s.name for s in k.sizes} | names_used(k.body)
    for u in ir.walk(k.body):
        match u:
            case ir.Let(name=name) | ir.Build(index=name) | ir.Alloc(region=name):
                taken.add(name)
            case ir.Ifold(state=state, index=index):
                taken |= {state, index}
            case ir.Filter(length=length, elem=elem):
                taken |= {length, elem}
    return taken


def _called_in_loops(t: ir.Term, inside: bool) -> set[str]:
    """The kernels ``t`` calls inside a parallel build or an ifold's body (every one, where ``t``
    is ``inside`` one)."""
    match t:
        case ir.Call(fn) if inside and isinstance(fn, str):
            return {fn}
        case ir.Build(parallel=True):
            inside = True
        case ir.Ifold(body=body, init=init):
            return _called_in_loops(body, True) | _called_in_loops(init, inside)
        case ir.Filter(body=body):
            return _called_in_loops(body, True)
    return set().union(*(_called_in_loops(c, inside) for c in ir.children(t)))


def _pass_threads(t: ir.Term, threads: Var, inside: bool) -> ir.Term:
    """``t`` with every call given its thread count: the caller's, or 1 inside a parallel build or
    an ifold's body (where the callee's loops are not parallel, ``_called_in_loops``)."""
    match t:
        case ir.Call(fn, args=args) if isinstance(fn, str):  # a foreign function takes no thread count
            return replace(t, args=(*args, Lit(1, Card) if inside else threads))
        case ir.Build(parallel=True):
            inside = True
        case ir.Ifold(body=body, init=init):
            return replace(t, body=_pass_threads(body, threads, True), init=_pass_threads(init, threads, inside))
        case ir.Filter(body=body):
            return replace(t, body=_pass_threads(body, threads, True))
    return ir.map_children(lambda u: _pass_threads(u, threads, inside), t)


def static_thread(iteration: int, trips: int, threads: int) -> int:
    """The thread that runs ``iteration`` of a loop of ``trips`` under OpenMP's static schedule
    as libgomp deals it: one block of consecutive iterations per thread, the first
    ``trips % threads`` blocks one longer (the interpreter's model of the C)."""
    q, r = divmod(trips, threads)
    return iteration // (q + 1) if iteration < r * (q + 1) else r + (iteration - r * (q + 1)) // q
