"""Fusion (DPS paper Fig. 4) and the inlining of single-use lets that lets it fire.

    (build n f)[i]     ⇝  f i
    length (build n f) ⇝  n

On ANF a ``build`` is always let-bound, so the rules meet it through its binding:
``length x`` of a let-bound ``x = build n f`` becomes ``n`` whatever else uses ``x``
(``fuse``), and a build read exactly once, as ``x[i]``, is substituted into that read
(``inline_lets``), where the first rule then consumes it, as is a build of cheap elements (below)
read several times, each read computing its element.  A build read twice (of costly elements),
or passed whole to a call, stays: it is an intermediate that must exist (the paper's irreducible
core, §2.2).

Fusion preserves work: the build computes each element once, and so must its fused read.  A
read outside any lambda of the let's body computes one element, once; a read inside one lambda
at that lambda's own loop variable (map-map, map-fold) computes each element at most once, as
the loop visits each index once.  A read nested deeper, or at another index, would compute an
element once per trip of the loops around it (a producer of n elements read in an m-trip loop
around an n-trip one computes m·n), so the build is materialised once instead, unless its
element is cheap: a read, or one arithmetic operation on reads and atoms (``+ - * /``, a
negation, a conversion), which costs about what the read of a materialised element would, or a
row of such elements.

Both work on one kernel body whose binders are unique (``fsmooth.anf.anf_kernel``);
their output may leave ANF (``f i`` is an application, a substituted build sits in a read)
and is renormalised by the caller, which β-reduces ``f i``.

Semantics: every F̃ expression is pure, but a read can fail.  Fusing evaluates ``f`` at the
one index read instead of at every index of the build, so a build whose other elements would
have failed a read no longer fails; an out-of-range ``x[i]`` itself becomes ``f i``.  Both
are accepted, as in the paper (and as for ``fsmooth.dce``).
"""
from __future__ import annotations

from .core import (App, Build, Expr, Get, Lam, Length, Let, Lit, PrimApp, Proj, Tuple, Var, children, map_children,
                   substitute, walk)
from .dps.local_arrays import SMALL_ARRAY_BYTES, small_constant_size
from .prims import CASTS
from .typecheck import conform
from .types import BYTES, ArrayT


def fuse(e: Expr, builds: dict[str, Build] | None = None) -> Expr:
    """Apply Fig. 4 everywhere in ``e``; ``builds`` are the let-bound builds in scope."""
    builds = builds or {}
    match e:
        case Let(name, rhs, body, ty):
            rhs = fuse(rhs, builds)
            inner = {**builds, name: rhs} if isinstance(rhs, Build) else builds
            return Let(name, rhs, fuse(body, inner), ty, e.loc)
        case Length(Build(size)):
            return size
        case Length(Var(name)) if name in builds:
            return builds[name].size
        case Get(Build(_, Lam(((_, param_ty),)) as f), idx):
            return App(fuse(f, builds), (conform(fuse(idx, builds), param_ty),), e.ty, e.loc)
    return map_children(lambda child: fuse(child, builds), e)


def inline_lets(e: Expr, into_reads: bool) -> Expr:
    """Substitute lets of atoms (copy and constant propagation) and, when ``into_reads`` (fusion
    is on, so the read is consumed at once), builds whose only use is one read ``x[i]``.

    Nothing else moves: a single-use let whose use is inside a lambda or a branch stays where
    it is, so no work enters a loop body and none leaves a branch."""
    return _inline_lets(e, into_reads, _uses(e))


def _inline_lets(e: Expr, into_reads: bool, uses: dict[str, tuple[int, int]]) -> Expr:
    """``inline_lets``, where ``uses`` are the occurrences and reads of each name in the kernel
    before any let was inlined (``_uses``).  Binders are unique, so those of a name are those in
    its let's body, and they stay so until the let is met: what is inlined above it replaces an
    outer name with an atom or a build of outer names, and a build substituted into several
    reads (``_only_read``) brings each its own copy of the binders inside it, each copy with the
    uses of the one it copies."""
    def recurse(child: Expr) -> Expr:
        return _inline_lets(child, into_reads, uses)

    match e:
        case Let(name, rhs, body) if isinstance(rhs, (Var, Lit)):
            return recurse(substitute(body, {name: rhs}))
        case Let(name, Tuple(items) as rhs, body, ty):
            # a projection of a known tuple is its component (the tuple stays while used whole)
            return map_children(recurse, Let(name, rhs, _project_known(body, name, items), ty, e.loc))
        case Let(name, Build() as rhs, body) if (into_reads and uses.get(name) == (1, 1) and not _stored(rhs)
                                                 and (_cheap_element(rhs) or _read_each_element_once(name, body))):
            return recurse(_substitute_read(body, name, rhs))
        case Let(name, Build() as rhs, body) if (into_reads and not _stored(rhs) and _cheap_element(rhs)
                                                 and not _register_sized(rhs) and _only_read(uses.get(name, (0, 0)))):
            # each read computes its element, at about the cost of reading it materialised: no
            # array at all (a GPU's work-item would have it in global memory)
            return recurse(_substitute_read(body, name, rhs))
    return map_children(recurse, e)


def _stored(build: Build) -> bool:
    """The program put this build's result in an address space (``to_local`` ...): a
    materialisation it asked for (Shine's toMem), which fusing it into its read would undo."""
    return build.strategy is not None and build.strategy.space is not None


_CHEAP_PRIMITIVES = ("add", "sub", "mul", "div", "neg", *CASTS.values())


def _cheap_element(build: Build) -> bool:
    """The element is an atom, a read, or one arithmetic operation on reads and atoms (in ANF:
    a chain of lets of reads and lengths ending in at most one arithmetic primitive), or a row
    whose own elements are cheap: fused, a row is made only as it is read, element by element
    (a transposed matrix read row by row is its reads)."""
    e, primitives = build.fn.body, 0
    while isinstance(e, Let):
        if isinstance(e.rhs, PrimApp) and e.rhs.op in _CHEAP_PRIMITIVES:
            primitives += 1
        elif not isinstance(e.rhs, (Get, Length)):
            return False
        e = e.body
    if isinstance(e, Build) and isinstance(e.fn, Lam):
        return primitives == 0 and _cheap_element(e)
    if isinstance(e, PrimApp) and e.op in _CHEAP_PRIMITIVES:
        primitives += 1
    elif not isinstance(e, (Var, Lit, Get)):
        return False
    return primitives <= 1


def _read_each_element_once(name: str, body: Expr) -> bool:
    """The one read ``name[i]`` of ``body`` is outside every lambda, or inside exactly one at
    that lambda's own loop variable (the last parameter of a build's or an ifold's function)."""
    lambdas, idx = _read_site(body, name, ())
    return not lambdas or (len(lambdas) == 1 and idx == Var(lambdas[0].params[-1][0], idx.ty))


def _read_site(e: Expr, name: str, lambdas: tuple) -> tuple[tuple, Expr] | None:
    """The lambdas around the read ``name[i]`` in ``e``, outermost first, and its index ``i``."""
    match e:
        case Get(Var(arr), idx) if arr == name:
            return lambdas, idx
        case Lam():
            lambdas = (*lambdas, e)
    for child in children(e):
        site = _read_site(child, name, lambdas)
        if site is not None:
            return site
    return None


def _uses(e: Expr) -> dict[str, tuple[int, int]]:
    """The occurrences of each name in ``e`` and how many are the array of a read ``x[i]``:
    counted in one walk of the kernel, not one per let-bound build."""
    occurrences: dict[str, int] = {}
    reads: dict[str, int] = {}
    for node in walk(e):
        match node:
            case Var(name):
                occurrences[name] = occurrences.get(name, 0) + 1
            case Get(Var(arr)):
                reads[arr] = reads.get(arr, 0) + 1
    return {name: (n, reads.get(name, 0)) for name, n in occurrences.items()}


# what dps.local_arrays keeps in registers, as fsmooth ships it (its tests vary that module's)
_REGISTER_BYTES = SMALL_ARRAY_BYTES


def _register_sized(build: Build) -> bool:
    """A small array of a size known when compiling (``dps.local_arrays``): a local of the C
    function, a work-item's private memory on OpenCL, read from registers, which is cheaper than
    computing its element again."""
    return (isinstance(build.size, Lit) and isinstance(build.ty, ArrayT) and build.ty.elem in BYTES
            and small_constant_size(build.size.value, BYTES[build.ty.elem], _REGISTER_BYTES))


def _only_read(uses: tuple[int, int]) -> bool:
    """Every occurrence of a name (``uses``: its occurrences and reads) is the array of a read ``x[i]``."""
    occurrences, reads = uses
    return occurrences == reads


def _substitute_read(e: Expr, name: str, build: Build) -> Expr:
    """``e`` with its reads ``name[i]`` made ``(build n f)[i]``."""
    match e:
        case Get(Var(arr), idx, ty) if arr == name:
            return Get(build, idx, ty, e.loc)
    return map_children(lambda child: _substitute_read(child, name, build), e)


def _project_known(e: Expr, name: str, items: tuple) -> Expr:
    """``e`` with each ``name.k`` replaced by ``items[k]``."""
    match e:
        case Proj(Var(tup), index) if tup == name:
            return items[index]
    return map_children(lambda child: _project_known(child, name, items), e)
