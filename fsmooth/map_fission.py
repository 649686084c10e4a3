"""On OpenCL, a map inside a top-level fold moves out of it, to run in parallel beside the fold.

An ``ifold`` at the top of the entry kernel runs as a reduction over work-items
(``fsmooth.auto_reductions``) or on one work-item; either way each of its iterations is one
work-item's sequential work.  Where an iteration builds an array whose elements are heavy
(they have loops of their own) and whose size does not depend on the iteration, GMM's

    ifold (λ acc i. let xi = x[i] in let t = build K (λ k. … ifold … xi …) in acc + logsumexp(t)) 0 n

that array is the row of a matrix the whole device can compute at once, a work-item per element
(the default strategy's 2-D NDRange, ``dpia.strategy_check``):

    let T = build n (λ i'. let xi = x[i'] in build K (λ k. … ifold … xi …)) in
    ifold (λ acc i. let t = T[i] in acc + logsumexp(t)) 0 n

Every element is computed once, as before (fission only regroups the work: the n × K elements
are stored and read back once, in global memory, which the scratch formula counts); the fold's
iteration keeps the cheap part.  The lets of the iteration that the build reads (``xi``) move with
it where nothing else reads them, so binders stay unique; one that something else reads too
keeps the build where it is.  A build whose size is a constant below ``NESTED_GLOBAL_MIN``, or
a fold whose count is such a constant, adds too little parallelism to pay for the memory.

Only programs without strategy annotations, as for ``auto_reductions`` (a user's strategy wins).
"""
from __future__ import annotations

from dataclasses import replace

from . import core
from .core import Build, Get, Ifold, Lam, Let, Lit, Var
from .dpia.strategy_check import NESTED_GLOBAL_MIN
from .names import NameSupply
from .types import ArrayT, FunT, Index


def map_fission(program: core.Program) -> core.Program:
    """``program`` (in ANF, its entry's calls inlined) with each heavy, iteration-sized map of a
    top-level fold's iteration moved out of the fold (module docstring)."""
    if core.has_strategy(program.main.body):
        return program
    return core.rewrite_entry(program, _fission_chain)


def _fission_chain(e: core.Expr, names: NameSupply) -> core.Expr:
    """The top-level let chain ``e`` with each fold's heavy maps moved before the fold (its let,
    or the chain's result)."""
    if not isinstance(e, Let):
        return _fission(e, lambda fold: fold, names) or e
    rest = _fission_chain(e.body, names)
    return (_fission(e.rhs, lambda fold: replace(e, rhs=fold, body=rest), names)
            or (e if rest is e.body else replace(e, body=rest)))


def _fission(e: core.Expr, place, names: NameSupply) -> core.Expr | None:
    """``place(fold)`` under the lets of the matrices moved out of ``e``, a fold; None where
    ``e`` is no fold or nothing moves."""
    if not isinstance(e, Ifold) or _small(e.count):
        return None
    moved = _move_maps(e, names)
    if moved is None:
        return None
    matrices, fold = moved
    chain = place(fold)
    for name, matrix in reversed(matrices):
        chain = Let(name, matrix, chain, chain.ty, matrix.loc)
    return chain


def _move_maps(fold: Ifold, names: NameSupply):
    """The matrices built out of ``fold``'s iteration (name, ``build``) and the fold reading their
    rows; None where no map of its iteration qualifies."""
    (acc, _), (index, _) = fold.fn.params
    chain, result = core.let_chain(fold.fn.body)
    lets = [(let.name, let.rhs) for let in chain]
    matrices, moved, rows = [], set(), {}
    for position, (name, rhs) in enumerate(lets):
        if not _heavy_map(rhs) or acc in core.free_vars(rhs):
            continue
        inner = set(n for n, _ in lets)
        needed = _needed(rhs, lets[:position], inner)
        if needed is None or any(acc in core.free_vars(r) for n, r in lets if n in needed):
            continue
        # what moves must be read by nothing that stays
        staying = [r for n, r in lets if n not in needed and n != name] + [result]
        if any(needed & core.free_vars(r) for r in staying) or core.free_vars(rhs.size) & (inner | {index}):
            continue
        row_index = names.fresh(index)
        element = rhs
        for n, r in reversed([(n, r) for n, r in lets[:position] if n in needed]):
            element = Let(n, r, element, element.ty, r.loc)
        element = core.substitute(element, {index: Var(row_index, Index)})
        matrix_name = names.fresh(f"{name}_rows")
        matrices.append((matrix_name, Build(fold.count, Lam(((row_index, Index),), element, FunT((Index,), rhs.ty)),
                                            ArrayT(rhs.ty), loc=rhs.loc)))
        moved |= needed
        rows[name] = Get(Var(matrix_name, ArrayT(rhs.ty)), Var(index, Index), rhs.ty)
    if not matrices:
        return None
    body = _rebuild(fold.fn.body, moved, rows)
    return matrices, replace(fold, fn=replace(fold.fn, body=body))


def _needed(rhs: core.Expr, before: list, inner: set) -> set | None:
    """The lets of ``before`` that ``rhs`` reads, directly or through one another."""
    needed, frontier = set(), set(core.free_vars(rhs) & inner)
    values = dict(before)
    while frontier:
        name = frontier.pop()
        if name in needed:
            continue
        if name not in values:
            return None  # bound after the map: cannot happen in ANF, kept safe
        needed.add(name)
        frontier |= core.free_vars(values[name]) & inner
    return needed


def _rebuild(e: core.Expr, moved: set, rows: dict) -> core.Expr:
    if not isinstance(e, Let):
        return e
    body = _rebuild(e.body, moved, rows)
    if e.name in moved:
        return body
    return replace(e, rhs=rows.get(e.name, e.rhs), body=body)


def _heavy_map(e: core.Expr) -> bool:
    """A plain build whose elements have loops of their own, and not a small constant count."""
    return (isinstance(e, Build) and e.strategy is None and not _small(e.size)
            and any(isinstance(node, (Build, Ifold)) for node in core.walk(e.fn.body)))


def _small(count: core.Expr) -> bool:
    return isinstance(count, Lit) and count.value < NESTED_GLOBAL_MIN
