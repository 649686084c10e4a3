"""Fusion of a filter into its consumer (NOVA §5, "Fusion": filters fused into a reduction or
into another filter), so that the filtered array is never materialised.

On ANF, for ``let w = filter (λ x. P) v in E`` whose only consumer, at the same loop depth as
the let (no work moves into a loop), is

- a fold over it: ``let n = length w in ... ifold (λ s i. B) z n`` where ``w`` is read only as
  ``w[i]`` in ``B`` and ``n`` is that fold's count alone:
  ``ifold (λ s j. let x = v[j] in if P then B[w[i] := x] else s) z (length v)``; where ``B`` uses
  ``i`` otherwise, the kept count runs beside the state: ``ifold (λ t j. let s = t.0 in let i =
  t.1 in let x = v[j] in if P then (B[w[i] := x], i + 1) else t) (z, 0) (length v)).0``;
- another filter: ``filter (λ y. Q) w`` becomes ``filter (λ y. if P[x := y] then Q else false) v``.

Every element of ``v`` is tested once, as the materialised filter would, and nothing is stored.
"""
from __future__ import annotations

from .core import (Expr, Filter, Get, If, Ifold, Lam, Length, Let, Lit, PrimApp, Proj, Tuple, Var, binders_of,
                   map_children, substitute, walk)
from .names import NameSupply
from .types import Bool, FunT, Index, TupleT


def fuse_filters(e: Expr) -> Expr:
    """``e`` with every filter that has one fusible consumer fused into it."""
    names = NameSupply(n for node in walk(e) for n in binders_of(node))
    return _fuse(e, names)


def _fuse(e: Expr, names: NameSupply) -> Expr:
    e = map_children(lambda child: _fuse(child, names), e)
    match e:
        case Let(w, Filter(Lam(((x, _),), pred), Var() as v) as f, body):
            uses = _uses(body, w)
            fused = _into_filter(w, x, pred, v, body) if uses == 1 else None
            if fused is None:
                fused = _into_fold(w, x, pred, v, f, body, uses, names)
            return e if fused is None else fused
    return e


def _uses(e: Expr, name: str) -> int:
    return sum(1 for node in walk(e) if isinstance(node, Var) and node.name == name)


def _same_depth(e: Expr):
    """The sub-expressions of ``e`` evaluated once per evaluation of ``e``: down lets and the
    branches of ifs, not into lambdas (a loop's body)."""
    yield e
    match e:
        case Let(_, rhs, body):
            yield from _same_depth(rhs)
            yield from _same_depth(body)
        case If(_, then, orelse):
            yield from _same_depth(then)
            yield from _same_depth(orelse)


def _replace(e: Expr, old: Expr, new: Expr) -> Expr:
    """``e`` with the node ``old`` (by identity, at the same depth) replaced by ``new``."""
    if e is old:
        return new
    match e:
        case Let(name, rhs, body, ty):
            return Let(name, _replace(rhs, old, new), _replace(body, old, new), ty, e.loc)
        case If(c, then, orelse, ty):
            return If(c, _replace(then, old, new), _replace(orelse, old, new), ty, e.loc)
    return e


def _into_filter(w: str, x: str, pred: Expr, v: Var, body: Expr) -> Expr | None:
    """``filter (λ y. Q) w`` at the same depth, w's only use: one filter over v."""
    consumer = next((node for node in _same_depth(body) if isinstance(node, Filter)
                     and node.arr == Var(w, node.arr.ty)), None)
    if consumer is None:
        return None
    (y, y_ty), = consumer.pred.params
    both = If(substitute(pred, {x: Var(y, y_ty)}), consumer.pred.body, Lit(False, Bool), Bool, consumer.loc)
    fused = Filter(Lam(consumer.pred.params, both, consumer.pred.ty, consumer.pred.loc), v, consumer.ty, consumer.loc)
    return _replace(body, consumer, fused)


def _into_fold(w: str, x: str, pred: Expr, v: Var, f: Filter, body: Expr, uses: int,
               names: NameSupply) -> Expr | None:
    """``let n = length w in ... ifold (λ s i. B) z n``, at the same depth, w read only as w[i] in B
    (``uses``: how often ``body`` names w)."""
    lengths = [node for node in _same_depth(body) if isinstance(node, Let) and node.rhs == Length(Var(w, f.ty))]
    if len(lengths) != 1 or _uses(lengths[0].body, lengths[0].name) != 1:
        return None
    n = lengths[0].name
    fold = next((node for node in _same_depth(lengths[0].body) if isinstance(node, Ifold)
                 and node.count == Var(n, node.count.ty)), None)
    if fold is None:
        return None
    (s, s_ty), (i, i_ty) = fold.fn.params
    reads = [node for node in walk(fold.fn.body) if isinstance(node, Get) and node.arr == Var(w, f.ty)]
    if not all(r.idx == Var(i, r.idx.ty) for r in reads) or uses != 1 + len(reads):
        return None
    elem = f.ty.elem
    step = _substitute_reads(fold.fn.body, w, Var(x, elem))
    j, loc = names.fresh("j"), fold.loc
    read = Get(v, Var(j, Index), elem, f.loc)
    count = Length(v, loc=loc)
    if _uses(step, i) == 0:
        new_body = Let(x, read, If(pred, step, Var(s, s_ty), s_ty, loc), s_ty, loc)
        fused: Expr = Ifold(Lam(((s, s_ty), (j, Index)), new_body, fold.fn.ty, fold.fn.loc), fold.init, count,
                            fold.ty, loc)
    else:  # the kept count is the index B sees
        t_ty = TupleT((s_ty, i_ty))
        t = names.fresh("kept")
        advanced = Tuple((step, PrimApp("add", (Var(i, i_ty), Lit(1, i_ty)), i_ty, loc)), t_ty, loc)
        new_body = Let(s, Proj(Var(t, t_ty), 0, s_ty, loc), Let(i, Proj(Var(t, t_ty), 1, i_ty, loc), Let(
            x, read, If(pred, advanced, Var(t, t_ty), t_ty, loc), t_ty, loc), t_ty, loc), t_ty, loc)
        init = Tuple((fold.init, Lit(0, i_ty)), t_ty, loc)
        fn = Lam(((t, t_ty), (j, Index)), new_body, FunT((t_ty, Index), t_ty), fold.fn.loc)
        fused = Proj(Ifold(fn, init, count, t_ty, loc), 0, s_ty, loc)
    without_length = _replace(body, lengths[0], lengths[0].body)
    return _replace(without_length, fold, fused)


def _substitute_reads(e: Expr, w: str, x: Var) -> Expr:
    if isinstance(e, Get) and isinstance(e.arr, Var) and e.arr.name == w:
        return x
    return map_children(lambda child: _substitute_reads(child, w, x), e)
