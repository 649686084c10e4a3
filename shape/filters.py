"""Where a filtered array may go.  A filter's length is known only at run time (its capacity is
the length of what it filters), so every size that the shape translation must know before the
call (a build's elements, an ifold's array state, a component of a tuple, a callee's argument)
cannot be one; what is left of the filters after their fusion (``fsmooth.filter_fusion``) is
therefore bound by a ``let`` (or is the kernel's result) and used only as ``w[i]``, ``length w``,
``filter p w`` or as the kernel's result, which the DPS stage stores in a region of the capacity
beside a count of the kept elements.  Anything else is a CompileError at the filter."""
from __future__ import annotations

from fsmooth import core
from fsmooth.core import Build, Filter, Get, Lam, Length, Let, Var
from fsmooth.errors import CompileError, Loc

IN_A_BUILD = ("a filter's length is known only at run time, so it cannot be an element of a build, whose "
              "elements' sizes must be known before it runs: fold over the filter, or filter outside the build")
ELSEWHERE = ("a filter's length is known only at run time: a filtered array can be read (w[i]), measured "
             "(length(w)), folded over, filtered again or returned as the kernel's result, but not be where a "
             "size must be known before the call (a tuple's component, a call's argument, a fold's state, "
             "a conditional's value)")


def check_filters(program: core.Program, k: core.KernelDef) -> None:
    """Raise a CompileError, located at the filter, where ``k`` (optimised, in ANF) puts a
    filtered array where its size would have to be static.  A call of a kernel that returns a
    filter is inlined (``fsmooth.inline_kernels``); one left (``inline_kernels`` off) is an error."""
    for node in core.walk(k.body):
        if isinstance(node, core.Call) and returns_filter(program.kernels[node.fn].body):
            raise CompileError(f"kernel {node.fn} returns a filter, whose length is known only at run time: "
                               "it can be called from a kernel only where it is inlined (inline_kernels on)",
                               node.loc)
    _check(k.body, {}, True, False)


def returns_filter(body: core.Expr) -> bool:
    """Whether ``body`` (in ANF) ends in a filter: the result is a filtered array."""
    filtered = set()
    while isinstance(body, Let):
        if isinstance(body.rhs, Filter):
            filtered.add(body.name)
        body = body.body
    return isinstance(body, Filter) or (isinstance(body, Var) and body.name in filtered)


def _check(e: core.Expr, filtered: dict[str, Loc | None], tail: bool, in_build: bool) -> None:
    """``filtered``: the let-bound filtered arrays in scope, with their filters' locations;
    ``tail``: ``e`` is the kernel's result; ``in_build``: ``e`` is inside a build's element."""
    match e:
        case Let(name, Filter() as f, body):
            _check_children(f, filtered, in_build)
            _check(body, {**filtered, name: f.loc}, tail, in_build)
            return
        case Let(_, rhs, body):
            _check(rhs, filtered, False, in_build)
            _check(body, filtered, tail, in_build)
            return
        case Filter() if not tail:
            _fail(e.loc, in_build)
        case Var(name) if name in filtered and not tail:
            _fail(filtered[name], in_build)
        case Get(Var(), idx):
            _check(idx, filtered, False, in_build)
            return
        case Build(size, fn):
            _check(size, filtered, False, in_build)
            _check(fn, filtered, False, True)
            return
    _check_children(e, filtered, in_build)


def _check_children(e: core.Expr, filtered: dict, in_build: bool) -> None:
    for child in core.children(e):
        if isinstance(child, Var) and isinstance(e, (Length, Filter)):
            continue  # its array may be a filtered one
        _check(child.body if isinstance(child, Lam) else child, filtered, False, in_build)


def _fail(loc: Loc | None, in_build: bool):
    raise CompileError(IN_A_BUILD if in_build else ELSEWHERE, loc)
