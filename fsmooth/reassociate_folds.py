"""On OpenCL, a top-level fold that adds and subtracts terms to its state is a sum.

``fsmooth.auto_reductions`` recognises ``acc + f(i)``; ADBench's Wishart prior writes
``acc + a(i) - b(i)``, which in ANF is ``let t = acc + a in t - b``.  Regrouped to
``acc + (a - b)`` it is a reduction, and runs over work-groups instead of on one work-item (77 µs
of the GMM objective's 270 on an H200).  The regrouping is the licence the parallel reduction
already takes (README, "Reductions on OpenCL": floating-point sums are reassociated), so it is
made only on Float and Double states, of the top-level folds that reduction parallelises, and
only where each let of the chain has no other use.
"""
from __future__ import annotations

from dataclasses import replace

from . import core
from .core import Ifold, Let, Lit, PrimApp, Var
from .names import NameSupply
from .types import Double, Float


def reassociate_folds(program: core.Program) -> core.Program:
    """``program`` with each top-level fold ``acc ± terms`` of a float state written ``acc + (±
    terms)``."""
    return core.rewrite_entry(program, _chain)


def _chain(e: core.Expr, names: NameSupply) -> core.Expr:
    """The top-level let chain ``e`` with its folds (a let's, or the result) regrouped."""
    if not isinstance(e, Let):
        return _regrouped(e, names)
    rest, rhs = _chain(e.body, names), _regrouped(e.rhs, names)
    return e if rhs is e.rhs and rest is e.body else replace(e, rhs=rhs, body=rest)


def _regrouped(e: core.Expr, names: NameSupply) -> core.Expr:
    if isinstance(e, Ifold) and e.ty in (Float, Double) and not isinstance(e.count, Lit):
        body = _sum_of_state(e.fn.body, e.fn.params[0][0], names)
        if body is not None:
            return replace(e, fn=replace(e.fn, body=body))
    return e


def _sum_of_state(body: core.Expr, acc: str, names: NameSupply) -> core.Expr | None:
    """The fold's body with its result ``acc ± t1 ± t2 …`` (single-use lets) as ``acc + (± t1 ± t2
    …)``; None where it is not such a chain, or is already ``acc + t``."""
    lets, result = core.let_chain(body)
    bound = {let.name: let.rhs for let in lets}
    uses = _uses(body)
    if isinstance(result, PrimApp):  # the body's value itself, named for the walk below
        top = names.fresh("result")
        bound[top], uses[top] = result, 1
    elif isinstance(result, Var):
        top = result.name
    else:
        return None
    terms, consumed = _terms(top, +1, bound, uses)
    if terms is None or sum(1 for _, t in terms if isinstance(t, Var) and t.name == acc) != 1:
        return None
    sign, _ = next((s, t) for s, t in terms if isinstance(t, Var) and t.name == acc)
    others = [(s, t) for s, t in terms if not (isinstance(t, Var) and t.name == acc)]
    if sign != 1 or not others or (len(others) == 1 and others[0][0] == 1):
        return None  # acc - …, nothing else, or already acc + t
    ty = result.ty
    new_lets, total = [], None
    for s, t in others:
        if total is None:
            if s == 1:
                total = t
            else:
                name = names.fresh("neg")
                new_lets.append((name, PrimApp("neg", (t,), ty)))
                total = Var(name, ty)
            continue
        name = names.fresh("terms")
        new_lets.append((name, PrimApp("add" if s == 1 else "sub", (total, t), ty)))
        total = Var(name, ty)
    final = names.fresh("state")
    new_lets.append((final, PrimApp("add", (Var(acc, ty), total), ty)))
    out: core.Expr = Var(final, ty)
    for name, rhs in reversed(new_lets):
        out = Let(name, rhs, out, ty)
    for let in reversed(lets):
        if let.name not in consumed:
            out = Let(let.name, let.rhs, out, out.ty, let.loc)
    return out


def _terms(name: str, sign: int, bound: dict, uses: dict) -> tuple[list | None, set]:
    """The signed atoms whose sum the let ``name`` is, through single-use lets of + and -, and
    those lets; (None, ∅) where ``name`` is no such let."""
    match bound.get(name):
        case PrimApp("add" | "sub" as op, (left, right)) if uses.get(name, 0) <= 1:
            parts, through = [], {name}
            for operand, s in ((left, sign), (right, sign if op == "add" else -sign)):
                inner, lets = _terms(operand.name, s, bound, uses) if isinstance(operand, Var) else (None, set())
                parts.extend(inner if inner is not None else [(s, operand)])
                through |= lets
            return parts, through
    return None, set()


def _uses(e: core.Expr) -> dict:
    counts: dict = {}
    for node in core.walk(e):
        if isinstance(node, Var):
            counts[node.name] = counts.get(node.name, 0) + 1
    return counts
