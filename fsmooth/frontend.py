"""The front end: Python functions under ``@fs.kernel`` → typed F̃ core IR (``fsmooth.core``).

``parse_program(k)`` reads the source of ``k`` and of every kernel it calls (found by name in
the function's globals and closure when it is compiled, so kernels may be defined in any
order), checks that each body is in the F̃ subset (README.md, "The language"), types it with
the rules of ``fsmooth.typecheck`` and returns the kernels, callees first, as one
``core.Program``.  Every node carries the ``Loc`` of the Python construct it came from; every
program outside the subset is a ``CompileError`` at the offending construct.

Statements become expressions: ``x = e`` followed by the rest is ``let x = e in rest``;
``if c: ...return a`` / ``else: ...return b`` (or the rest of the body as the else branch) is
``if c then a else b``; ``and``/``or`` and chained comparisons become ``if`` so that they
short-circuit.  A lambda bound with ``f = lambda ...`` is typed at its first use, where its
parameter types are known; lambda parameters are renamed where they would shadow another
name of the kernel, so that no binder of a kernel body shadows another.
"""
from __future__ import annotations

import ast
import builtins as python_builtins
import collections.abc
import copy
import inspect
import math
import textwrap
import typing
import dataclasses
from dataclasses import dataclass

from . import builtins as fs_builtins
from . import prims
from . import strategies
from . import typecheck as tc
from .core import (App, Build, Call, Expr, Filter, ForeignCall, Get, If, Ifold, Iscan, KernelDef, Lam, Length, Let,
                   Lit, PrimApp, Program, Proj, Tuple, Var, scan_type)
from .deep_stack import on_deep_stack
from .errors import CompileError, Loc
from .foreign import Foreign
from .kernel import Kernel
from .names import NameSupply
from .types import ArrayT, Bool, Card, FunT, Index, SCALARS, Scalar, TupleT, Type, leaves, rank


def parse_program(kernel: Kernel) -> Program:
    """The typed core program of ``kernel`` and every kernel it calls, transitively."""
    def parse() -> Program:
        builder = _ProgramBuilder()
        builder.visit(kernel, None)
        return Program(dict(builder.kernels), kernel.name)

    return on_deep_stack(parse, kernel.name, def_loc(kernel))


def def_loc(kernel: Kernel) -> Loc:
    """The ``def`` line of ``kernel`` (below its decorators), for errors about the whole kernel."""
    source = kernel.source
    for offset, line in enumerate(source.lines):
        stripped = line.lstrip()
        if stripped.startswith(("def ", "async def ")):
            return Loc(source.filename, source.first_line + offset, len(line) - len(stripped), line.rstrip("\r\n"))
    return Loc(source.filename, source.first_line, 0)


# ----------------------------------------------------------------------------- built-ins

def _builtin_table() -> tuple[tuple[object, str], ...]:
    """Built-in functions by identity: F̃'s own, ``math``'s and Python's of the same names."""
    table: list[tuple[object, str]] = [
        (fs_builtins.build, "build"), (fs_builtins.ifold, "ifold"), (fs_builtins.length, "length"),
        (fs_builtins.iscan, "iscan"), (fs_builtins.filter, "filter"),
        (python_builtins.float, "float"), (python_builtins.int, "int"),
    ]
    # The strategies (fsmooth.strategies): builds with an OpenCL mapping, address spaces, vectors.
    table += [(fn, f"build_{level}") for fn, level in strategies.MAPPINGS.items()]
    table += [(fn, f"to_{space}") for fn, space in strategies.ADDRESS_SPACES.items()]
    table.append((strategies.vectorize, "vectorize"))
    for spelling, prim in prims.PYTHON_NAMES.items():
        for home in (fs_builtins, math, python_builtins):
            obj = getattr(home, spelling, None)
            if obj is not None:
                table.append((obj, prim))
    return tuple(table)


_BUILTINS = _builtin_table()
_ARITY = {"build": 2, "ifold": 3, "iscan": 3, "filter": 2, "length": 1, "float": 1, "int": 1, "build_global": 2, "build_workgroup": 2,
          "build_local": 2, "build_seq": 2, "to_global": 1, "to_local": 1, "to_private": 1,
          "vectorize": 2}


def _builtin_kind(obj) -> str | None:
    for candidate, kind in _BUILTINS:
        if obj is candidate:
            return kind
    return None


_BINARY_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
               ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow"}
_COMPARE_OPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq",
                ast.NotEq: "ne"}
_UNSUPPORTED_OPERATORS = {ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
                          ast.LShift: "<<", ast.RShift: ">>", ast.Invert: "~", ast.Is: "is",
                          ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}

_UNSUPPORTED_STATEMENTS = {
    ast.For: "for-loops are not part of F̃: use build or ifold",
    ast.AsyncFor: "for-loops are not part of F̃: use build or ifold",
    ast.While: "while-loops are not part of F̃: use ifold",
    ast.Try: "try statements are not part of F̃",
    ast.TryStar: "try statements are not part of F̃",
    ast.With: "with statements are not part of F̃",
    ast.AsyncWith: "with statements are not part of F̃",
    ast.Raise: "raise is not part of F̃",
    ast.Assert: "assert is not part of F̃",
    ast.Import: "import inside a kernel is not part of F̃ (import at module level)",
    ast.ImportFrom: "import inside a kernel is not part of F̃ (import at module level)",
    ast.Global: "global declarations are not part of F̃",
    ast.Nonlocal: "nonlocal declarations are not part of F̃",
    ast.Delete: "del is not part of F̃",
    ast.Pass: "pass is not part of F̃",
    ast.Break: "break is not part of F̃",
    ast.Continue: "continue is not part of F̃",
    ast.FunctionDef: "nested def is not part of F̃: use a lambda or a module-level @fs.kernel",
    ast.AsyncFunctionDef: "nested def is not part of F̃: use a lambda or a module-level @fs.kernel",
    ast.ClassDef: "class definitions are not part of F̃",
    ast.Match: "match statements are not part of F̃: use if/else",
}

_UNSUPPORTED_EXPRESSIONS = {
    ast.ListComp: "list comprehensions are not part of F̃: use build",
    ast.SetComp: "set comprehensions are not part of F̃: use build",
    ast.DictComp: "dict comprehensions are not part of F̃: use build",
    ast.GeneratorExp: "generator expressions are not part of F̃: use build or ifold",
    ast.List: "list displays are not part of F̃: use build",
    ast.Dict: "dicts are not part of F̃",
    ast.Set: "sets are not part of F̃",
    ast.JoinedStr: "f-strings are not part of F̃",
    ast.Await: "await is not part of F̃",
    ast.Yield: "yield is not part of F̃",
    ast.YieldFrom: "yield is not part of F̃",
    ast.NamedExpr: "assignment expressions (:=) are not part of F̃: use a separate `x = e`",
    ast.Starred: "starred expressions are not part of F̃",
    ast.Slice: "slices are not part of F̃: use build",
}

_MISSING = object()


# ----------------------------------------------------------------------------- source

@dataclass(frozen=True)
class _Signature:
    params: tuple[tuple[str, Type], ...]
    result: Type


class _Source:
    """The parsed ``def`` of one kernel, with the map from its AST positions to the user's file."""

    def __init__(self, kernel: Kernel):
        fn = kernel.fn
        self.kernel = kernel
        source = kernel.source
        self.filename, raw_lines, self.first_line = source.filename, source.lines, source.first_line
        if source.error is not None:
            raise CompileError(f"cannot read the source of {_kind(kernel)} {kernel.name}: {source.error}",
                               Loc(self.filename, self.first_line, 0))
        self.raw_lines = [line.rstrip("\r\n") for line in raw_lines]
        dedented = textwrap.dedent("".join(raw_lines))
        self.lines = dedented.splitlines()
        self.indent = len(self.raw_lines[0]) - len(self.lines[0]) if self.lines else 0
        try:
            module = ast.parse(dedented)
        except SyntaxError as err:
            line = (err.lineno or 1)
            raise CompileError(f"cannot parse {_kind(kernel)} {kernel.name}: {err.msg}",
                               self._loc(line, max((err.offset or 1) - 1, 0), None)) from None
        if not module.body or not isinstance(module.body[0], ast.FunctionDef):
            node = module.body[0] if module.body else None
            raise CompileError(f"kernel {kernel.name} must be defined with `def`",
                               self.loc(node) if node else self._loc(1, 0, None))
        self.fdef: ast.FunctionDef = module.body[0]
        self.namespace = _closure_namespace(fn)
        self.signature = self._signature()

    # -- locations
    def loc(self, node: ast.AST) -> Loc:
        end = node.end_col_offset if getattr(node, "end_lineno", None) == node.lineno else None
        return self._loc(node.lineno, node.col_offset, end)

    def _loc(self, line: int, byte_col: int, byte_end: int | None) -> Loc:
        """``ast`` columns count UTF-8 bytes of the dedented line; Loc counts characters of the file's."""
        dedented = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        raw = self.raw_lines[line - 1] if 0 < line <= len(self.raw_lines) else ""

        def column(byte_offset: int) -> int:
            return len(dedented.encode()[:byte_offset].decode(errors="ignore")) + self.indent

        return Loc(self.filename, line + self.first_line - 1, column(byte_col), raw,
                   column(byte_end) if byte_end is not None else None)

    # -- names at compile time
    def lookup(self, name: str):
        """A global name of the kernel's function: its closure, then its module, then Python's built-ins."""
        fn = self.kernel.fn
        if name in self.namespace:
            return self.namespace[name]
        if name in fn.__globals__:
            return fn.__globals__[name]
        host = fn.__globals__.get("__builtins__", python_builtins)
        if isinstance(host, dict):
            return host.get(name, _MISSING)
        return getattr(host, name, _MISSING)

    # -- annotations
    def _signature(self) -> _Signature:
        args = self.fdef.args
        for extra, what in ((args.posonlyargs, "positional-only parameters"),
                            (args.kwonlyargs, "keyword-only parameters")):
            if extra:
                raise CompileError(f"{what} are not part of F̃", self.loc(extra[0]))
        for extra, what in ((args.vararg, "*args"), (args.kwarg, "**kwargs")):
            if extra is not None:
                raise CompileError(f"{what} parameters are not part of F̃", self.loc(extra))
        if args.defaults:
            raise CompileError("default parameter values are not part of F̃", self.loc(args.defaults[0]))
        params = []
        for arg in args.args:
            if arg.annotation is None:
                raise CompileError(f"parameter {arg.arg} of {_kind(self.kernel)} {self.kernel.name} has no type "
                                   "annotation (Double, Float, Index, Card, Bool, Array[T], tuple[A, B, ...] or "
                                   "Callable[[...], T])", self.loc(arg))
            params.append((arg.arg, self.annotation(arg.annotation, arg.arg, function_ok=True)))
        if self.fdef.returns is None:
            raise CompileError(f"{_kind(self.kernel)} {self.kernel.name} has no result annotation (-> T)",
                               self.loc(self.fdef))
        result = self.annotation(self.fdef.returns, "return", function_ok=False)
        return _Signature(tuple(params), result)

    def annotation(self, node: ast.expr, key: str | None, function_ok: bool) -> Type:
        """The F̃ type of an annotation, as Python evaluated it (or from its text where it is a string)."""
        annotations = getattr(self.kernel.fn, "__annotations__", {})
        value = annotations.get(key, _MISSING) if key is not None else _MISSING
        if value is _MISSING:
            value = ast.unparse(node)
        if isinstance(value, str):
            try:
                value = eval(value, dict(self.kernel.fn.__globals__), dict(self.namespace))  # noqa: S307
            except Exception as err:  # the user's annotation text: any failure is theirs
                raise CompileError(f"cannot evaluate the annotation {value!r}: {err}", self.loc(node)) from None
        t = _annotation_type(value)
        if t is None:
            raise CompileError(f"unsupported annotation {_describe(value)}: use Double, Float, Index, "
                               "Card, Bool, Array[T] (of scalars or arrays), tuple[A, B, ...] or "
                               "Callable[[...], T]", self.loc(node))
        if isinstance(t, FunT) and not function_ok:
            if key is None:
                raise CompileError(f"a name cannot be declared a function ({t}): bind it with "
                                   "`f = lambda ...`", self.loc(node))
            raise CompileError(f"kernel {self.kernel.name} returns a function ({t}); F̃ functions "
                               "may take functions but never return them", self.loc(node))
        return t


def _kind(definition) -> str:
    """What a definition whose signature is read is, for messages: a kernel or a foreign function."""
    return getattr(definition, "kind", "kernel")


def _a(t: Type) -> str:
    """A type with its indefinite article, for messages: 'an Index', 'a Double'."""
    text = str(t)
    return f"{'an' if text[:1] in 'AEIOU' else 'a'} {text}"


def _describe(value) -> str:
    try:
        return repr(value)
    except Exception:  # a user object whose repr fails
        return type(value).__name__


def _annotation_type(value) -> Type | None:
    if isinstance(value, Scalar) and value in SCALARS.values():
        return value
    if isinstance(value, ArrayT) and tc.is_data(value):
        return value
    try:
        origin, args = typing.get_origin(value), typing.get_args(value)
    except Exception:  # an arbitrary user object in an annotation
        return None
    if origin is tuple and args and Ellipsis not in args:
        items = tuple(_annotation_type(a) for a in args)
        if all(t is not None and tc.is_data(t) for t in items):
            return TupleT(items)
        return None
    if origin is collections.abc.Callable and len(args) == 2 and isinstance(args[0], (list, tuple)):
        params = tuple(_annotation_type(a) for a in args[0])
        result = _annotation_type(args[1])
        if all(p is not None and tc.is_data(p) for p in params) and result is not None and tc.is_data(result):
            return FunT(params, result)
    return None


def _shape_function(builder: "_ProgramBuilder", f: Foreign) -> Lam:
    """The ``shape=lambda ...`` of a foreign function with an array result, typed over its
    parameters: a Card (rank 1) or a tuple of Cards, in F̃ that calls no kernel."""
    source, node = f.shape_lambda()
    translator = _KernelTranslator(builder, source)
    result = f.signature.result
    dims = Card if rank(result) == 1 else TupleT((Card,) * rank(result))
    lam = translator.lambda_(node, {}, tuple(t for _, t in f.signature.params), dims)
    if translator.callees:
        raise CompileError(f"the shape function of foreign function {f.name} calls a kernel; it may use only "
                           "length, Card arguments and + - * //", source.loc(node))
    return lam


def _closure_namespace(fn) -> dict:
    namespace = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            namespace[name] = cell.cell_contents
        except ValueError:  # a cell not yet filled: the name is unbound
            continue
    return namespace


# ----------------------------------------------------------------------------- program

class _ProgramBuilder:
    """Visits the call graph depth first; a kernel met again while it is being visited is recursion."""

    def __init__(self):
        self.sources: dict[Kernel, _Source] = {}
        self.kernels: dict[str, KernelDef] = {}
        self.by_name: dict[str, Kernel] = {}
        self.active: list[Kernel] = []

    def source(self, kernel: Kernel) -> _Source:
        if kernel not in self.sources:
            self.sources[kernel] = _Source(kernel)
        return self.sources[kernel]

    def visit(self, kernel: Kernel, call: Loc | None) -> None:
        known = self.by_name.setdefault(kernel.name, kernel)
        if known is not kernel:
            raise CompileError(f"two different kernels are named {kernel.name}; kernel names of "
                               "one program must be distinct", call)
        if kernel in self.active:
            chain = " → ".join(k.name for k in self.active[self.active.index(kernel):])
            raise CompileError(f"recursion: {chain} → {kernel.name}; F̃ has no recursion "
                               "(use ifold)", call)
        if kernel.name in self.kernels:
            return
        self.active.append(kernel)
        definition, callees = _KernelTranslator(self, self.source(kernel)).translate()
        for callee, loc in callees:
            self.visit(callee, loc)
        self.active.pop()
        self.kernels[kernel.name] = definition


# ----------------------------------------------------------------------------- one kernel

@dataclass(frozen=True)
class _Local:
    """A name in scope: a parameter, a let, or a lambda parameter (``ir_name`` after renaming)."""

    ir_name: str
    ty: Type


@dataclass(eq=False)
class _LetLambda:
    """``name = lambda ...``: typed at its first use, in the scope of its definition."""

    name: str
    node: ast.Lambda
    env: dict


class _KernelTranslator:
    def __init__(self, builder: _ProgramBuilder, source: _Source):
        self.builder = builder
        self.src = source
        self.sig = source.signature
        self.name = source.kernel.name
        self.callees: list[tuple[Kernel, Loc]] = []
        self.lambda_types: dict[_LetLambda, Lam] = {}
        fdef = source.fdef
        self.identifiers = {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name)}
        self.identifiers |= {a.arg for a in ast.walk(fdef) if isinstance(a, ast.arg)}
        # Names bound by the body itself; a lambda parameter that repeats one is renamed, and
        # never to another of the user's names.
        bound = {a.arg for a in fdef.args.args}
        bound |= {t.id for n in ast.walk(fdef) if isinstance(n, (ast.Assign, ast.AnnAssign))
                  for target in (n.targets if isinstance(n, ast.Assign) else [n.target])
                  for t in ast.walk(target) if isinstance(t, ast.Name)}
        self.binders = NameSupply(bound, made_up_avoid=self.identifiers)

    def loc(self, node: ast.AST) -> Loc:
        return self.src.loc(node)

    def error(self, message: str, node: ast.AST) -> CompileError:
        return CompileError(message, self.loc(node))

    def translate(self) -> tuple[KernelDef, list[tuple[Kernel, Loc]]]:
        fdef = self.src.fdef
        body = fdef.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        env = {name: _Local(name, t) for name, t in self.sig.params}
        expr = self.block(body, env, fdef, f"kernel {self.name} does not end in `return`")
        definition = KernelDef(self.name, self.sig.params, self.sig.result, expr, self.loc(fdef))
        return definition, self.callees

    # -- statements
    def block(self, stmts: list[ast.stmt], env: dict, end: ast.AST, missing: str) -> Expr:
        """The value of a statement sequence that must end in ``return``."""
        if not stmts:
            raise self.error(missing, end)
        stmt, rest = stmts[0], stmts[1:]
        match stmt:
            case ast.Return(value=value):
                if rest:
                    raise self.error("unreachable code after `return`", rest[0])
                if value is None:
                    raise self.error("`return` needs a value", stmt)
                return self.result(value, env)
            case ast.Assign(targets=targets, value=value):
                if len(targets) != 1:
                    raise self.error("chained assignment `a = b = e` is not part of F̃", stmt)
                if isinstance(targets[0], ast.Tuple):
                    return self.unpack(stmt, targets[0], value, rest, env, end, missing)
                name = self.binding_target(targets[0], env)
                return self.let(stmt, name, value, None, rest, env, end, missing)
            case ast.AnnAssign(target=target, annotation=annotation, value=value):
                name = self.binding_target(target, env)
                if value is None:
                    raise self.error(f"declaration of {name} without a value", stmt)
                declared = self.src.annotation(annotation, None, function_ok=False)
                return self.let(stmt, name, value, declared, rest, env, end, missing)
            case ast.AugAssign(target=target):
                if isinstance(target, ast.Name):
                    raise self.error(f"augmented assignment rebinds {target.id}: F̃ names are bound "
                                     "once (use a new name)", stmt)
                raise self.error("augmented assignment mutates its target: F̃ values are immutable", stmt)
            case ast.If(test=test, body=then_stmts, orelse=else_stmts):
                cond = self.condition(test, env, "the condition of `if`")
                branch_end = "each branch of an `if` statement must end in `return` " \
                             "(for a conditional value use `a if c else b`)"
                then = self.block(then_stmts, env, stmt, branch_end)
                if else_stmts:
                    if rest:
                        raise self.error("unreachable code after an `if`/`else` whose branches both "
                                         "return", rest[0])
                    orelse = self.block(else_stmts, env, stmt, branch_end)
                else:
                    orelse = self.block(rest, env, end, missing)
                return If(cond, then, orelse, self.sig.result, self.loc(stmt))
            case ast.Expr(value=ast.Call(func=func)):
                callee = ast.unparse(func)
                raise self.error(f"a call of {callee} as a statement: F̃ has no side effects "
                                 f"({callee} is not part of F̃)", stmt)
            case ast.Expr():
                raise self.error("an expression statement (its value is discarded) is not part of F̃", stmt)
        raise self.error(_UNSUPPORTED_STATEMENTS.get(type(stmt), f"{type(stmt).__name__} statements "
                                                                 "are not part of F̃"), stmt)

    def binding_target(self, target: ast.expr, env: dict) -> str:
        match target:
            case ast.Name(id=name):
                if name in env:
                    what = "parameter" if name in dict(self.sig.params) else "name"
                    raise self.error(f"rebinding the {what} {name}: F̃ names are bound once "
                                     "(use a new name)", target)
                return name
            case ast.Subscript():
                raise self.error("assignment to an array element: F̃ arrays are immutable (use build)", target)
            case ast.Attribute():
                raise self.error("assignment to an attribute is not part of F̃", target)
            case ast.Tuple():
                raise self.error("an annotated assignment binds one name: unpack without the annotation", target)
            case ast.List():
                raise self.error("unpacking into a list is not part of F̃: write `a, b = e`", target)
        raise self.error(f"assignment to {type(target).__name__} is not part of F̃", target)

    def let(self, stmt: ast.stmt, name: str, value: ast.expr, declared: Type | None,
            rest: list[ast.stmt], env: dict, end: ast.AST, missing: str) -> Expr:
        if isinstance(value, ast.Lambda):
            if declared is not None:
                raise self.error("a lambda cannot be declared with a data type", stmt)
            binding = _LetLambda(name, value, env)
            body = self.block(rest, {**env, name: binding}, end, missing)
            lam = self.lambda_types.get(binding)
            if lam is None:  # never used: nothing to bind, and its parameter types are unknown
                return body
            return Let(name, lam, body, body.ty, self.loc(stmt))
        if self.is_function_name(value, env):
            raise self.error(f"{ast.unparse(value)} is a function: a name is bound to a function only "
                             "by `f = lambda ...`", value)
        rhs = self.expr(value, env)
        if declared is not None:
            conformed = tc.conform(rhs, declared)
            if conformed is None:
                raise self.error(f"{name} is declared {declared} but its value is {_a(rhs.ty)}", value)
            rhs = conformed
        body = self.block(rest, {**env, name: _Local(name, rhs.ty)}, end, missing)
        return Let(name, rhs, body, body.ty, self.loc(stmt))

    def unpack(self, stmt: ast.stmt, target: ast.Tuple, value: ast.expr, rest: list[ast.stmt], env: dict,
               end: ast.AST, missing: str) -> Expr:
        """``a, (b, c) = e``: ``let t = e in let a = t.0 in let b = t.1.0 in ...`` (``_`` binds nothing)."""
        if self.is_function_name(value, env) or isinstance(value, ast.Lambda):
            raise self.error("a function cannot be unpacked", value)
        rhs = self.expr(value, env)
        loc = self.loc(stmt)
        whole = self.binders.fresh("tuple")
        bindings: list[tuple[str, Expr]] = []

        def collect(node: ast.expr, part: Expr):
            if isinstance(node, ast.Tuple):
                if not isinstance(part.ty, TupleT):
                    raise self.error(f"cannot unpack {_a(part.ty)}: only a tuple can be unpacked", node)
                if any(isinstance(n, ast.Starred) for n in node.elts):
                    raise self.error("starred unpacking `a, *b = e` is not part of F̃", node)
                if len(node.elts) != len(part.ty.items):
                    raise self.error(f"cannot unpack a tuple of {len(part.ty.items)} into "
                                     f"{len(node.elts)} names", node)
                for k, (sub, ty) in enumerate(zip(node.elts, part.ty.items)):
                    collect(sub, Proj(part, k, ty, self.loc(sub)))
                return
            if isinstance(node, ast.Name) and node.id == "_":
                return
            name = self.binding_target(node, env)
            if any(name == bound for bound, _ in bindings):
                raise self.error(f"{name} is bound twice in this unpacking: F̃ names are bound once", node)
            bindings.append((name, part))

        collect(target, Var(whole, rhs.ty, loc))
        inner = {**env, **{name: _Local(name, part.ty) for name, part in bindings}}
        body = self.block(rest, inner, end, missing)
        for name, part in reversed(bindings):
            body = Let(name, part, body, body.ty, part.loc)
        return Let(whole, rhs, body, body.ty, loc)

    def result(self, value: ast.expr, env: dict) -> Expr:
        if isinstance(value, ast.Lambda) or self.is_function_name(value, env):
            raise self.error(f"kernel {self.name} returns a function; F̃ functions may take "
                             "functions but never return them", value)
        e = self.expr(value, env)
        conformed = tc.conform(e, self.sig.result)
        if conformed is None:
            raise self.error(f"kernel {self.name} returns {_a(e.ty)} here, but its result is annotated "
                             f"{self.sig.result}", value)
        return conformed

    def is_function_name(self, node: ast.expr, env: dict) -> bool:
        if not isinstance(node, ast.Name):
            return False
        binding = env.get(node.id)
        if binding is None:
            obj = self.src.lookup(node.id)
            return isinstance(obj, Kernel) or _builtin_kind(obj) is not None
        return isinstance(binding, _LetLambda) or tc.is_function(binding.ty)

    # -- expressions
    def condition(self, node: ast.expr, env: dict, what: str) -> Expr:
        e = self.expr(node, env)
        if e.ty != Bool:
            raise self.error(f"{what} must be a Bool, not {e.ty}", node)
        return e

    def expr(self, node: ast.expr, env: dict) -> Expr:
        """A data-valued expression (never a function)."""
        loc = self.loc(node)
        match node:
            case ast.Constant(value=value):
                return tc.literal(value, loc)
            case ast.Name(id=name):
                return self.name_value(node, name, env)
            case ast.BinOp(left=left, op=op, right=right):
                if type(op) not in _BINARY_OPS:
                    raise self.error(f"operator {_UNSUPPORTED_OPERATORS[type(op)]} is not part of F̃", node)
                return tc.arithmetic(_BINARY_OPS[type(op)], self.expr(left, env), self.expr(right, env), loc)
            case ast.UnaryOp(op=ast.USub(), operand=operand):
                return tc.negate(self.expr(operand, env), loc)
            case ast.UnaryOp(op=ast.UAdd(), operand=operand):
                e = self.expr(operand, env)
                tc.require_numeric(e, "unary '+'", loc)
                return e
            case ast.UnaryOp(op=ast.Not(), operand=operand):
                return PrimApp("not", (self.condition(operand, env, "the operand of `not`"),), Bool, loc)
            case ast.UnaryOp(op=op):
                raise self.error(f"operator {_UNSUPPORTED_OPERATORS[type(op)]} is not part of F̃", node)
            case ast.BoolOp(op=op, values=values):
                word = "and" if isinstance(op, ast.And) else "or"
                operands = [self.condition(v, env, f"an operand of `{word}`") for v in values]
                acc = operands[-1]
                for operand in reversed(operands[:-1]):
                    if word == "and":
                        acc = If(operand, acc, Lit(False, Bool, loc), Bool, loc)
                    else:
                        acc = If(operand, Lit(True, Bool, loc), acc, Bool, loc)
                return acc
            case ast.Compare(left=left, ops=ops, comparators=comparators):
                return self.compare(node, [left, *comparators], ops, env)
            case ast.IfExp(test=test, body=body, orelse=orelse):
                cond = self.condition(test, env, "the condition of a conditional expression")
                a, b, t = tc.unify_branches(self.expr(body, env), self.expr(orelse, env), loc)
                return If(cond, a, b, t, loc)
            case ast.Tuple(elts=elts):
                for elt in elts:
                    if isinstance(elt, ast.Starred):
                        raise self.error("starred expressions are not part of F̃", elt)
                    if isinstance(elt, ast.Lambda) or self.is_function_name(elt, env):
                        raise self.error("a tuple holds values, not functions", elt)
                if not elts:
                    raise self.error("the empty tuple is not part of F̃", node)
                items = tuple(self.expr(elt, env) for elt in elts)
                return Tuple(items, TupleT(tuple(a.ty for a in items)), loc)
            case ast.Call():
                return self.call(node, env)
            case ast.Subscript(value=value, slice=index):
                return self.subscript(node, value, index, env)
            case ast.Lambda():
                raise self.error("a lambda is a function, but here a value is needed (a lambda may be "
                                 "called, bound with `f = lambda ...`, or passed to build, ifold or "
                                 "a helper kernel)", node)
            case ast.Attribute():
                obj, dotted = self.resolve_global(node, env)
                raise self.global_value_error(obj, dotted, node)
        raise self.error(_UNSUPPORTED_EXPRESSIONS.get(type(node), f"{type(node).__name__} expressions "
                                                                  "are not part of F̃"), node)

    def name_value(self, node: ast.Name, name: str, env: dict) -> Expr:
        binding = env.get(name)
        if isinstance(binding, _Local) and not tc.is_function(binding.ty):
            return Var(binding.ir_name, binding.ty, self.loc(node))
        if binding is not None:
            raise self.error(f"{name} is a function, but here a value is needed", node)
        obj, dotted = self.resolve_global(node, env)
        raise self.global_value_error(obj, dotted, node)

    def global_value_error(self, obj, dotted: str, node: ast.AST) -> CompileError:
        if isinstance(obj, Kernel) or _builtin_kind(obj) is not None:
            return self.error(f"{dotted} is a function, but here a value is needed", node)
        return self.error(f"global {dotted} is neither a kernel nor a built-in: a kernel reads only "
                          "its parameters (pass it as a parameter)", node)

    def resolve_global(self, node: ast.expr, env: dict) -> tuple[object, str]:
        """The object a global name or a module attribute (``fs.sqrt``, ``math.pi``) refers to."""
        match node:
            case ast.Name(id=name):
                if name in env:
                    raise self.error(f"{name} is a local value; attribute access is not part of F̃", node)
                obj = self.src.lookup(name)
                if obj is _MISSING:
                    raise self.error(f"name {name} is not defined", node)
                return obj, name
            case ast.Attribute(value=value, attr=attr):
                if isinstance(value, ast.Name) and value.id in env:
                    raise self.error(f"attribute access {ast.unparse(node)} is not part of F̃ "
                                     "(for the length of an array use length(a))", node)
                base, dotted = self.resolve_global(value, env)
                if not inspect.ismodule(base):
                    raise self.error(f"attribute access {ast.unparse(node)} is not part of F̃", node)
                obj = getattr(base, attr, _MISSING)
                if obj is _MISSING:
                    raise self.error(f"module {dotted} has no attribute {attr}", node)
                return obj, f"{dotted}.{attr}"
        raise self.error("only kernels and built-ins can be called here", node)

    def compare(self, node: ast.Compare, operands: list[ast.expr], ops: list[ast.cmpop], env: dict) -> Expr:
        loc = self.loc(node)
        for op in ops:
            if type(op) not in _COMPARE_OPS:
                raise self.error(f"operator `{_UNSUPPORTED_OPERATORS[type(op)]}` is not part of F̃", node)
        values = [self.expr(o, env) for o in operands]
        for operand, value in zip(operands, values):
            if isinstance(value.ty, TupleT):
                raise self.error(f"a tuple cannot be compared ({value.ty}): compare its components", operand)
        tests = [tc.comparison(_COMPARE_OPS[type(op)], values[k], values[k + 1], loc)
                 for k, op in enumerate(ops)]
        acc: Expr = tests[-1]
        for test in reversed(tests[:-1]):  # a < b < c is a < b and b < c
            acc = If(test, acc, Lit(False, Bool, loc), Bool, loc)
        return acc

    def subscript(self, node: ast.Subscript, value: ast.expr, index: ast.expr, env: dict) -> Expr:
        if isinstance(index, ast.Slice):
            raise self.error("slices are not part of F̃: use build", index)
        if isinstance(index, ast.Tuple):
            raise self.error("indexing with a tuple a[i, j] is not part of F̃: write a[i][j]", index)
        arr = self.expr(value, env)
        if isinstance(arr.ty, TupleT):
            return self.project(node, arr, index)
        if not isinstance(arr.ty, ArrayT):
            raise self.error(f"only arrays and tuples can be indexed, not {_a(arr.ty)}", value)
        i = self.expr(index, env)
        if i.ty not in (Index, Card):
            raise self.error(f"an array index must be an Index or a Card, not {_a(i.ty)}", index)
        return Get(arr, i, arr.ty.elem, self.loc(node))

    def project(self, node: ast.Subscript, tup: Expr, index: ast.expr) -> Expr:
        """``t[k]`` of a tuple: ``k`` must be an integer written in the source (negative counts
        from the end, as in Python)."""
        k = index.value if isinstance(index, ast.Constant) else None
        if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub) and isinstance(index.operand, ast.Constant):
            k = -index.operand.value if type(index.operand.value) is int else None
        if type(k) is not int:
            raise self.error("a tuple index must be an integer constant such as t[0] (tuple components "
                             "may have different types, so the index must be known when compiling)", index)
        n = len(tup.ty.items)
        if not -n <= k < n:
            raise self.error(f"tuple index {k} out of range for a tuple of {n}", index)
        k %= n
        return Proj(tup, k, tup.ty.items[k], self.loc(node))

    # -- calls
    def call(self, node: ast.Call, env: dict) -> Expr:
        if node.keywords:
            raise self.error("keyword arguments are not part of F̃", node.keywords[0])
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.error("starred arguments are not part of F̃", arg)
        func, loc = node.func, self.loc(node)
        if isinstance(func, ast.Name) and func.id in env:
            return self.apply_local(node, env[func.id], env)
        if isinstance(func, ast.Lambda):
            args = [self.expr(a, env) for a in node.args]
            lam = self.lambda_(func, env, tuple(a.ty for a in args), None)
            return App(lam, tuple(args), lam.ty.result, loc)
        obj, dotted = self.resolve_global(func, env)
        if isinstance(obj, Kernel):
            return self.kernel_call(node, obj, env)
        if isinstance(obj, Foreign):
            return self.foreign_call(node, obj, env)
        kind = _builtin_kind(obj)
        if kind is None:
            raise self.error(f"call of {dotted}, which is neither an @fs.kernel nor an F̃ built-in", func)
        arity = _ARITY.get(kind) or prims.PRIMS[kind].arity
        if len(node.args) != arity:
            raise self.error(f"{dotted} takes {arity} argument{'s' * (arity != 1)}, but "
                             f"{len(node.args)} {'were' if len(node.args) != 1 else 'was'} given", node)
        match kind:
            case "build":
                return self.build(node, env)
            case "build_global" | "build_workgroup" | "build_local" | "build_seq":
                level = kind.removeprefix("build_")
                return self.build(node, env, strategies.Strategy(level, loc=loc))
            case "to_global" | "to_local" | "to_private":
                return self.address_space(node, env, kind.removeprefix("to_"), dotted)
            case "vectorize":
                return self.vectorize(node, env, dotted)
            case "ifold":
                return self.ifold(node, env)
            case "iscan":
                return self.iscan(node, env)
            case "filter":
                return self.filter(node, env)
            case "length":
                arr = self.expr(node.args[0], env)
                if not isinstance(arr.ty, ArrayT):
                    raise self.error(f"length needs an array, not {_a(arr.ty)}", node.args[0])
                return Length(arr, Card, loc)
            case "float":
                return tc.to_double(self.expr(node.args[0], env), loc)
            case "int":
                return tc.to_index(self.expr(node.args[0], env), loc)
        return tc.scalar_function(kind, [self.expr(a, env) for a in node.args], loc)

    def apply_local(self, node: ast.Call, binding: _Local | _LetLambda, env: dict) -> Expr:
        """``f(args)`` of a function-typed parameter or a let-bound lambda."""
        loc = self.loc(node)
        if isinstance(binding, _LetLambda):
            known = self.lambda_types.get(binding)
            if known is None:
                args = [self.expr(a, env) for a in node.args]
                fn = self.instantiate(binding, tuple(a.ty for a in args), None, node.func)
                return App(fn, tuple(args), fn.ty.result, loc)
            ty = known.ty
            fn = Var(binding.name, ty, self.loc(node.func))
        elif tc.is_function(binding.ty):
            ty = binding.ty
            fn = Var(binding.ir_name, ty, self.loc(node.func))
        else:
            raise self.error(f"{node.func.id} is {_a(binding.ty)}, not a function", node.func)
        args = self.arguments(node, ty.params, [f"argument {k + 1}" for k in range(len(ty.params))],
                              node.func.id, env)
        return App(fn, tuple(args), ty.result, loc)

    def arguments(self, node: ast.Call, types: tuple[Type, ...], names: list[str], callee: str,
                  env: dict) -> list[Expr]:
        if len(node.args) != len(types):
            raise self.error(f"{callee} takes {len(types)} argument{'s' * (len(types) != 1)}, but "
                             f"{len(node.args)} {'were' if len(node.args) != 1 else 'was'} given", node)
        args = []
        for arg, t, pname in zip(node.args, types, names):
            if isinstance(t, FunT):
                args.append(self.function(arg, env, t.params, t.result))
                continue
            e = self.expr(arg, env)
            conformed = tc.conform(e, t)
            if conformed is None:
                raise self.error(f"{pname} of {callee} must be {_a(t)}, not {_a(e.ty)}", arg)
            args.append(conformed)
        return args

    def kernel_call(self, node: ast.Call, kernel: Kernel, env: dict) -> Expr:
        sig = self.builder.source(kernel).signature
        args = self.arguments(node, tuple(t for _, t in sig.params),
                              [f"parameter {p}" for p, _ in sig.params], kernel.name, env)
        self.callees.append((kernel, self.loc(node.func)))
        return Call(kernel.name, tuple(args), sig.result, self.loc(node))

    def foreign_call(self, node: ast.Call, f: Foreign, env: dict) -> Expr:
        """A call of a foreign function: a scalar primitive whose ``op`` is the function itself;
        one with an array result a ``ForeignCall``, its arguments bound to names and its dims its
        shape function applied to them."""
        sig = f.signature
        args = self.arguments(node, tuple(t for _, t in sig.params), [f"parameter {p}" for p, _ in sig.params],
                              f.name, env)
        loc = self.loc(node)
        if not isinstance(sig.result, ArrayT):
            return PrimApp(f, tuple(args), sig.result, loc)
        shape = _shape_function(self.builder, f)
        names = [Var(self.binders.fresh(f"{p}_arg"), a.ty, a.loc) for (p, _), a in zip(sig.params, args)]
        applied = App(shape, tuple(names), shape.ty.result, loc)
        dims = (applied,) if rank(sig.result) == 1 else tuple(Proj(applied, k, Card, loc) for k in range(rank(sig.result)))
        call: Expr = ForeignCall(f, tuple(names), dims, sig.result, loc)
        for name, a in reversed(list(zip(names, args))):
            call = Let(name.name, a, call, call.ty, loc)
        return call

    def card_size(self, node: ast.expr, env: dict, what: str) -> Expr:
        n = self.expr(node, env)
        if n.ty == Index:
            raise self.error(f"{what} must be a Card, not an Index: arrays are rectangular, so a size "
                             "cannot be computed from an index", node)
        if n.ty != Card:
            raise self.error(f"{what} must be a Card, not {_a(n.ty)}", node)
        return n

    def build(self, node: ast.Call, env: dict, strategy: strategies.Strategy | None = None) -> Expr:
        size_node, fn_node = node.args
        size = self.card_size(size_node, env, "build size")
        fn = self.function(fn_node, env, (Index,), None)
        if isinstance(fn.ty.result, TupleT):
            raise self.error(f"build cannot make an array of tuples ({fn.ty.result}): build each component "
                             "as an array of its own, e.g. xs = build(n, lambda i: x), "
                             "ys = build(n, lambda i: y)", fn_node)
        return Build(size, fn, ArrayT(fn.ty.result), self.loc(node), strategy)

    def address_space(self, node: ast.Call, env: dict, space: str, dotted: str) -> Expr:
        """``to_local(e)`` ...: recorded on the build ``e``; a scalar is private anyway."""
        e = self.expr(node.args[0], env)
        if isinstance(e, Build):
            old = e.strategy or strategies.Strategy()
            return dataclasses.replace(e, strategy=dataclasses.replace(old, space=space, loc=old.loc or self.loc(node)))
        if isinstance(e.ty, Scalar):
            if space != "private":
                raise self.error(f"{dotted} of a scalar: scalars live in private memory, use to_private", node)
            return e
        raise self.error(f"{dotted} needs a build (or build_global, ...) as its argument, so that its "
                         f"result can be stored there", node.args[0])

    def vectorize(self, node: ast.Call, env: dict, dotted: str) -> Expr:
        width_node, e_node = node.args
        if not (isinstance(width_node, ast.Constant) and type(width_node.value) is int
                and width_node.value in strategies.VECTOR_WIDTHS):
            raise self.error(f"the width of {dotted} must be one of {strategies.VECTOR_WIDTHS}", width_node)
        e = self.expr(e_node, env)
        if not isinstance(e, Build) or not isinstance(e.ty.elem, Scalar):
            raise self.error(f"{dotted} needs a build of scalars as its second argument", e_node)
        old = e.strategy or strategies.Strategy()
        return dataclasses.replace(e, strategy=dataclasses.replace(old, width=width_node.value,
                                                                   loc=old.loc or self.loc(node)))

    def ifold(self, node: ast.Call, env: dict) -> Expr:
        """``ifold(f, init, n)``; the state widens from a literal or Card ``init`` to what ``f`` returns."""
        count = self.expr(node.args[2], env)  # a Card or an Index (triangular loops): a count < 0 runs no iteration
        if count.ty not in (Index, Card):
            raise self.error(f"ifold count must be a Card or an Index, not {_a(count.ty)}", node.args[2])
        fn, init = self.step_function(node, env, "ifold")
        return Ifold(fn, init, count, init.ty, self.loc(node))

    def iscan(self, node: ast.Call, env: dict) -> Expr:
        """``iscan(f, init, n)``: the ``n`` states of ``ifold(f, init, n)``, an array of size ``n``
        (a Card, as a build's); the state is a scalar or a tuple of scalars."""
        count = self.card_size(node.args[2], env, "iscan size")
        fn, init = self.step_function(node, env, "iscan")
        if not all(isinstance(t, Scalar) and t != Bool for _, t in leaves(init.ty)):
            raise self.error(f"the state of iscan must be a number or a tuple of numbers, not {_a(init.ty)}: "
                             "an array of arrays of states would not be rectangular in general; "
                             "use ifold, or build over an iscan per component", node.args[1])
        return Iscan(fn, init, count, scan_type(init.ty), self.loc(node))

    def filter(self, node: ast.Call, env: dict) -> Expr:
        """``fs.filter(pred, v)``: the elements of ``v`` (scalars) for which ``pred`` holds."""
        pred_node, arr_node = node.args
        arr = self.expr(arr_node, env)
        if not (isinstance(arr.ty, ArrayT) and isinstance(arr.ty.elem, Scalar)):
            raise self.error(f"filter needs an array of numbers, not {_a(arr.ty)}: filter the indices "
                             "of the rows instead", arr_node)
        pred = self.function(pred_node, env, (arr.ty.elem,), Bool)
        return Filter(pred, arr, arr.ty, self.loc(node))

    def step_function(self, node: ast.Call, env: dict, what: str) -> tuple[Expr, Expr]:
        """The function and initial state of ``ifold``/``iscan``; the state widens from a literal
        or Card ``init`` to what ``f`` returns."""
        fn_node, init_node = node.args[:2]
        init = self.expr(init_node, env)
        before = dict(self.lambda_types), copy.deepcopy(self.binders)
        fn = self.function(fn_node, env, (init.ty, Index), None)
        returned = fn.ty.result
        if returned != init.ty:
            widened = tc.widen(init, returned)
            if widened is None:
                raise self.error(f"the function of {what} returns {_a(returned)}, but the state is "
                                 f"{_a(init.ty)}", fn_node)
            self.lambda_types, self.binders = before  # type f again, with the wider state
            init = widened
            fn = self.function(fn_node, env, (returned, Index), returned)
        return fn, init

    # -- function values
    def function(self, node: ast.expr, env: dict, params: tuple[Type, ...], result: Type | None) -> Expr:
        """A function argument: a lambda, a function-typed name, or a kernel (η-expanded)."""
        want = f"({', '.join(map(str, params))} ⇒ {result if result is not None else '?'})"
        if isinstance(node, ast.Lambda):
            return self.lambda_(node, env, params, result)
        if isinstance(node, ast.Name) and node.id in env:
            binding = env[node.id]
            if isinstance(binding, _LetLambda):
                return self.instantiate(binding, params, result, node)
            if tc.is_function(binding.ty):
                if binding.ty.params != params or (result is not None and binding.ty.result != result):
                    raise self.error(f"{node.id} has type {binding.ty}, but here {_a(want)} is needed", node)
                return Var(binding.ir_name, binding.ty, self.loc(node))
            raise self.error(f"{node.id} is {_a(binding.ty)}, but here a function {want} is needed", node)
        if isinstance(node, (ast.Name, ast.Attribute)):
            obj, dotted = self.resolve_global(node, env)
            if isinstance(obj, Kernel):
                return self.eta_kernel(node, obj, params, result)
        raise self.error(f"here a function {want} is needed: a lambda, a function parameter, a name "
                         "bound to a lambda or a kernel", node)

    def lambda_(self, node: ast.Lambda, env: dict, params: tuple[Type, ...], result: Type | None) -> Lam:
        args = node.args
        if args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg or args.defaults:
            raise self.error("a lambda may have only plain parameters", node)
        if len(args.args) != len(params):
            raise self.error(f"this lambda takes {len(args.args)} parameter"
                             f"{'s' * (len(args.args) != 1)}, but here it is given {len(params)} "
                             f"({', '.join(map(str, params))})", node)
        inner = dict(env)
        typed = []
        for arg, t in zip(args.args, params):
            ir_name = self.binders.fresh(arg.arg)
            inner[arg.arg] = _Local(ir_name, t)
            typed.append((ir_name, t))
        body = self.expr(node.body, inner)
        if result is not None:
            conformed = tc.conform(body, result)
            if conformed is None:
                raise self.error(f"this lambda returns {_a(body.ty)}, but {_a(result)} is needed", node.body)
            body = conformed
        return Lam(tuple(typed), body, FunT(tuple(params), body.ty), self.loc(node))

    def instantiate(self, binding: _LetLambda, params: tuple[Type, ...], result: Type | None,
                    use: ast.AST) -> Var:
        lam = self.lambda_types.get(binding)
        if lam is None:
            lam = self.lambda_(binding.node, binding.env, params, result)
            self.lambda_types[binding] = lam
        elif lam.ty.params != tuple(params) or (result is not None and lam.ty.result != result):
            raise self.error(f"{binding.name} has type {lam.ty} from its first use, but here it is "
                             f"used as ({', '.join(map(str, params))} ⇒ "
                             f"{result if result is not None else lam.ty.result})", use)
        return Var(binding.name, lam.ty, self.loc(use))

    def eta_kernel(self, node: ast.expr, kernel: Kernel, params: tuple[Type, ...],
                   result: Type | None) -> Lam:
        """A kernel passed as a function: ``λ x̄. k(x̄)``."""
        sig = self.builder.source(kernel).signature
        loc = self.loc(node)
        if len(sig.params) != len(params) or any(tc.is_function(t) for _, t in sig.params):
            raise self.error(f"kernel {kernel.name} has type {FunT(tuple(t for _, t in sig.params), sig.result)}, "
                             f"but here a function of {len(params)} data parameter"
                             f"{'s' * (len(params) != 1)} is needed", node)
        typed, args = [], []
        for (pname, pty), t in zip(sig.params, params):
            ir_name = self.binders.fresh(pname)
            typed.append((ir_name, t))
            arg = tc.conform(Var(ir_name, t, loc), pty)
            if arg is None:
                raise self.error(f"kernel {kernel.name} takes {_a(pty)} as {pname}, but here it is given "
                                 f"{_a(t)}", node)
            args.append(arg)
        body: Expr = Call(kernel.name, tuple(args), sig.result, loc)
        if result is not None and sig.result != result:
            raise self.error(f"kernel {kernel.name} returns {_a(sig.result)}, but {_a(result)} is needed", node)
        self.callees.append((kernel, loc))
        return Lam(tuple(typed), body, FunT(tuple(params), sig.result), loc)

