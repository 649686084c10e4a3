"""Inlining of helpers and lambdas, then (almost-)ANF: the anf stage, before the F̃ optimisations and DPS.

Two passes per kernel, sharing one supply of fresh names (unique in the kernel,
readable: ``x``, ``x_1``, ...):

1. ``inline``: normalisation by evaluation over a closure environment.  A function
   value (a lambda, a let-bound lambda, a function argument of a helper) is kept as a
   ``_Closure`` of its unprocessed body and environment; applying it processes the
   body again with fresh binders, so every inlined copy is renamed apart.  Arguments
   that are not atoms are let-bound first (call-by-value: each evaluated once, in
   order).  Calls of helper kernels are applications of closures over the empty
   environment; calls of other kernels stay ``Call``s.
2. ``anf``: operands of ``PrimApp``, ``Call``, ``App``, ``Get``, ``Length``, the size of
   ``Build`` and the init/count of ``Ifold`` become atoms, with let-bound temporaries
   ``tmp``.  The branches of ``If`` and the bodies of build/ifold lambdas stay nested
   expressions, so no work moves out of a branch or a loop.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from . import core
from .core import (App, Build, Call, Expr, Filter, ForeignCall, Get, If, Ifold, Iscan, Lam, Length, Let, Lit, PrimApp,
                   Proj, Tuple, Var)
from .errors import CompileError
from .names import NameSupply, destination_name
from .types import FunT, TupleT, leaves, path_suffix


@dataclass(frozen=True)
class _Closure:
    params: tuple
    body: Expr
    env: dict
    loc: object


@dataclass(frozen=True)
class _KernelRef:
    """A non-helper kernel used as a function value: applying it stays a ``Call``."""

    name: str
    result: object


# ----------------------------------------------------------------------------- inlining

class _Inliner:
    def __init__(self, program: core.Program, names: NameSupply, inline: frozenset[str] = frozenset()):
        self.program = program
        self.names = names
        self.inline = inline  # non-helper kernels whose calls are inlined too (fsmooth.inline_kernels)

    def expr(self, e: Expr, env: dict) -> Expr:
        match e:
            case Var(name):
                value = env.get(name, e)
                if isinstance(value, Var):
                    return Var(value.name, value.ty, e.loc)
                if isinstance(value, Lit):
                    return value
                raise CompileError(f"function '{name}' can only be called here, not used as a value", e.loc)
            case Lit():
                return e
            case PrimApp(op, args, ty):
                return PrimApp(op, tuple(self.expr(a, env) for a in args), ty, e.loc)
            case If(c, a, b, ty):
                return If(self.expr(c, env), self.expr(a, env), self.expr(b, env), ty, e.loc)
            case Let(name, rhs, body, ty):
                if isinstance(rhs.ty, FunT):
                    with _bound(env, name, self.function(rhs, env)):
                        return self.expr(body, env)
                fresh = self.names.fresh(name)
                rhs2 = self.expr(rhs, env)
                with _bound(env, name, Var(fresh, rhs.ty, e.loc)):
                    return Let(fresh, rhs2, self.expr(body, env), ty, e.loc)
            case Lam():
                raise CompileError("a function can only be called or passed to a function here", e.loc)
            case Call(fn, args):
                return self.apply(self.kernel(fn), args, env, e.loc)
            case ForeignCall(fn, args, dims, ty):
                return ForeignCall(fn, tuple(self.expr(a, env) for a in args), tuple(self.expr(d, env) for d in dims),
                                   ty, e.loc)
            case App(fn, args):
                return self.apply(self.function(fn, env), args, env, e.loc)
            case Build(size, fn, ty):
                return Build(self.expr(size, env), self.lam(self.function(fn, env)), ty, e.loc, e.strategy)
            case Ifold(fn, init, count, ty) | Iscan(fn, init, count, ty):
                lam = self.lam(self.function(fn, env))
                return type(e)(lam, self.expr(init, env), self.expr(count, env), ty, e.loc)
            case Filter(pred, arr, ty):
                return Filter(self.lam(self.function(pred, env)), self.expr(arr, env), ty, e.loc)
            case Length(arr, ty):
                return Length(self.expr(arr, env), ty, e.loc)
            case Get(arr, idx, ty):
                return Get(self.expr(arr, env), self.expr(idx, env), ty, e.loc)
            case Tuple(items, ty):
                return Tuple(tuple(self.expr(a, env) for a in items), ty, e.loc)
            case Proj(tup, index, ty):
                return Proj(self.expr(tup, env), index, ty, e.loc)
        raise AssertionError(e)

    def function(self, e: Expr, env: dict) -> _Closure:
        """The closure a function-typed expression denotes (known at compile time)."""
        match e:
            case Lam(params, body):
                return _Closure(params, body, dict(env), e.loc)  # a copy: env changes as ``expr`` goes on
            case Var(name) if isinstance(env.get(name), (_Closure, _KernelRef)):
                return env[name]
            case Var(name) if name in self.program.kernels:
                return self.kernel(name)
        raise CompileError("this function is not known at compile time", e.loc)

    def kernel(self, name: str) -> _Closure | _KernelRef:
        k = self.program.kernels[name]
        if k.is_helper or name in self.inline:
            return _Closure(k.params, k.body, {}, k.loc)
        return _KernelRef(name, k.result)

    def apply(self, f: _Closure | _KernelRef, args, env: dict, loc) -> Expr:
        """β-reduction: bind each parameter to its argument, then process the body."""
        if isinstance(f, _KernelRef):
            return self.flat_arguments([self.expr(a, env) for a in args], lambda flat: Call(f.name, flat, f.result, loc))
        if not any(isinstance(t, TupleT) for _, t in f.params) and any(isinstance(a.ty, TupleT) for a in args):
            # an exported kernel takes its tuple parameters one component at a time
            return self.flat_arguments([self.expr(a, env) for a in args],
                                       lambda flat: self.apply(f, flat, {}, loc))
        if len(args) != len(f.params):
            raise CompileError(f"expected {len(f.params)} arguments, got {len(args)}", loc)
        inner = dict(f.env)
        lets = []
        for (pname, pty), arg in zip(f.params, args):
            if isinstance(pty, FunT):
                inner[pname] = self.function(arg, env)
                continue
            value = self.expr(arg, env)
            if core.is_atom(value):
                inner[pname] = value
            else:
                fresh = self.names.fresh(pname)
                lets.append((fresh, value))
                inner[pname] = Var(fresh, pty, arg.loc)
        body = self.expr(f.body, inner)
        for name, value in reversed(lets):
            body = Let(name, value, body, body.ty, loc)
        return body

    def flat_arguments(self, values: list, use) -> Expr:
        """``use(arguments)`` with each tuple argument replaced by its components (projections
        of the tuple, which is let-bound first unless it is an atom)."""
        lets, flat = [], []
        for value in values:
            if isinstance(value.ty, TupleT):
                if not core.is_atom(value):
                    fresh = self.names.fresh("tuple")
                    lets.append((fresh, value))
                    value = Var(fresh, value.ty, value.loc)
                flat.extend(project(value, path, t) for path, t in leaves(value.ty))
            else:
                flat.append(value)
        body = use(tuple(flat))
        for name, value in reversed(lets):
            body = Let(name, value, body, body.ty, value.loc)
        return body

    def lam(self, f: _Closure | _KernelRef) -> Lam:
        """A closure instantiated as a lambda with fresh parameter names (for build/ifold)."""
        if isinstance(f, _KernelRef):
            k = self.program.kernels[f.name]
            f = _Closure(k.params, Call(f.name, tuple(Var(n, t) for n, t in k.params), k.result), {}, k.loc)
        params = tuple((self.names.fresh(n), t) for n, t in f.params)
        env = {**f.env, **{n: Var(fresh, t, f.loc) for (n, t), (fresh, _) in zip(f.params, params)}}
        body = self.expr(f.body, env)
        return Lam(params, body, FunT(tuple(t for _, t in params), body.ty), f.loc)


@contextlib.contextmanager
def _bound(env: dict, name: str, value):
    """``env`` with ``name`` bound to ``value`` while the block runs, as it was after: a let's
    body is processed in its scope changed in place, not in a copy of it, which made a chain of n
    lets cost n² (issue 13); a closure copies the scope it captures (``_Inliner.function``)."""
    missing = object()
    previous = env.get(name, missing)
    env[name] = value
    try:
        yield
    finally:
        if previous is missing:
            del env[name]
        else:
            env[name] = previous


# ----------------------------------------------------------------------------- ANF

class _Anf:
    def __init__(self, names: NameSupply):
        self.names = names

    def expr(self, e: Expr) -> Expr:
        """``e`` in ANF, its bindings nested in front of it."""
        bindings: list = []
        result = self.split(e, bindings)
        for name, rhs in reversed(bindings):
            result = Let(name, rhs, result, result.ty, rhs.loc)
        return result

    def split(self, e: Expr, bindings: list) -> Expr:
        """The final expression of ``e``, whose operands are atoms, its let bindings appended to
        ``bindings`` in order (one list for a whole chain of lets: lists joined at each let cost
        n² for n lets)."""
        match e:
            case Var() | Lit():
                return e
            case PrimApp(op, args, ty):
                return PrimApp(op, self.atoms(args, bindings), ty, e.loc)
            case Call(fn, args, ty):
                return Call(fn, self.atoms(args, bindings), ty, e.loc)
            case ForeignCall(fn, args, dims, ty):
                return ForeignCall(fn, self.atoms(args, bindings), self.atoms(dims, bindings), ty, e.loc)
            case Get(arr, idx, ty):
                a, i = self.atoms((arr, idx), bindings)
                return Get(a, i, ty, e.loc)
            case Length(arr, ty):
                (a,) = self.atoms((arr,), bindings)
                return Length(a, ty, e.loc)
            case If(c, a, b, ty):
                (c2,) = self.atoms((c,), bindings)
                return If(c2, self.expr(a), self.expr(b), ty, e.loc)
            case Let(name, rhs, body):
                bindings.append((name, self.split(rhs, bindings)))
                return self.split(body, bindings)
            case Build(size, fn, ty):
                (n,) = self.atoms((size,), bindings)
                return Build(n, self.lam(fn), ty, e.loc, e.strategy)
            case Ifold(fn, init, count, ty) | Iscan(fn, init, count, ty):
                z, n = self.atoms((init, count), bindings)
                return type(e)(self.lam(fn), z, n, ty, e.loc)
            case Filter(pred, arr, ty):
                (a,) = self.atoms((arr,), bindings)
                return Filter(self.lam(pred), a, ty, e.loc)
            case Tuple(items, ty):
                return Tuple(self.atoms(items, bindings), ty, e.loc)
            case Proj(tup, index, ty):
                (t,) = self.atoms((tup,), bindings)
                return Proj(t, index, ty, e.loc)
        raise AssertionError(f"not expected after inlining: {e!r}")

    def lam(self, f: Expr) -> Lam:
        assert isinstance(f, Lam), f
        return Lam(f.params, self.expr(f.body), f.ty, f.loc)

    def atoms(self, es, bindings: list) -> tuple:
        atoms = []
        for e in es:
            value = self.split(e, bindings)
            if core.is_atom(value):
                atoms.append(value)
            else:
                name = self.names.fresh("tmp")
                bindings.append((name, value))
                atoms.append(Var(name, value.ty, value.loc))
        return tuple(atoms)


# ----------------------------------------------------------------------------- entry points

def anf_kernel(program: core.Program, k: core.KernelDef,
                    inline: frozenset[str] = frozenset()) -> core.KernelDef:
    """``k`` with helpers, lambdas and the calls of the kernels named in ``inline`` inlined,
    renamed apart and in ANF.  On a kernel already in ANF with unique binders (and nothing to
    inline) this is the identity, so the F̃ optimisations (``fsmooth.optimize``) use it to
    renormalise after each rewrite: ``App(λ x. e, a)`` is β-reduced, nested lets are flattened.

    A tuple parameter of an exported kernel becomes one parameter per component (``p_0``,
    ``p_1_0``, ...; the C ABI passes tuples so), and the body rebuilds the tuple ``p`` from them."""
    # The names of the kernel's destinations (dps.translate.result_dest) are never given to a
    # binder of the body, which would shadow them.
    dest = destination_name(n for n, _ in k.params)
    destinations = [dest] + [f"{dest}{path_suffix(path)}" for path, _ in leaves(k.result)]
    names = NameSupply([*(n for n, _ in k.params), *destinations])
    params, env, tuples = [], {}, []
    for n, t in k.params:
        if isinstance(t, TupleT) and not k.is_helper:
            parts = {path: Var(names.fresh(f"{n}{path_suffix(path)}"), leaf, k.loc) for path, leaf in leaves(t)}
            params.extend((v.name, v.ty) for v in parts.values())
            whole = names.fresh(n)
            tuples.append((whole, assemble(t, parts, k.loc)))
            env[n] = Var(whole, t, k.loc)
        else:
            params.append((n, t))
            env[n] = Var(n, t, k.loc)
    inlined = _Inliner(program, names, inline).expr(k.body, env)
    for name, value in reversed(tuples):
        inlined = Let(name, value, inlined, inlined.ty, k.loc)
    return core.KernelDef(k.name, tuple(params), k.result, _Anf(names).expr(inlined), k.loc)


def project(e: Expr, path: tuple, ty) -> Expr:
    """The component of tuple ``e`` at ``path`` (``e.0.1`` for (0, 1))."""
    for k in path:
        e = Proj(e, k, e.ty.items[k], e.loc)
    return e


def assemble(t, parts: dict, loc, path: tuple = ()) -> Expr:
    """The tuple of type ``t`` whose component at each path is ``parts[path]``."""
    if isinstance(t, TupleT):
        return Tuple(tuple(assemble(item, parts, loc, path + (k,)) for k, item in enumerate(t.items)), t, loc)
    return parts[path]


def anf_program(p: core.Program) -> core.Program:
    """Inline helpers and lambdas, rename apart, convert to ANF; helper kernels are dropped."""
    kernels = {name: anf_kernel(p, k) for name, k in p.kernels.items() if not k.is_helper}
    return core.Program(kernels, p.entry)
