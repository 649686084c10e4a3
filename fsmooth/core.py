"""The F̃ core IR (DPS paper Fig. 1-2): typed expressions with source locations.

Every node carries its type ``ty`` and the ``loc`` of the user's source it came from
(``loc`` does not take part in equality).  ``show`` prints in the paper's notation;
``interpret`` runs an expression with Python semantics, so that every pass can be
checked against the reference.

Forms:
  x | literal | prim(op, args) | if c then a else b | let x = e1 in e2
  | λ x̄. e | f(ē) (call of a named kernel) | e0 ē (application of a function value)
  | build n f | ifold f z n | iscan f z n | filter p a | length a | a[i] | (e, ..., e) | e.k (projection of a tuple)
``and``/``or`` are desugared to ``if`` by the front end (they short-circuit).
"""
from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from . import prims
from .errors import IRError, Loc
from .traversal import Traversal
from .types import ArrayT, Card, FunT, Index, NUMPY_DTYPE, Scalar, TupleT, Type, element_scalar, rank


class Expr:
    ty: Type
    loc: Loc | None

    def __str__(self) -> str:
        return show(self)


def _loc():
    return field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Var(Expr):
    name: str
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Lit(Expr):
    value: object  # int | float | bool
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class PrimApp(Expr):
    op: object  # a key of prims.PRIMS, or a foreign function (prims.prim)
    args: tuple[Expr, ...]
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class If(Expr):
    cond: Expr
    then: Expr
    orelse: Expr
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Let(Expr):
    name: str
    rhs: Expr
    body: Expr
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Lam(Expr):
    params: tuple[tuple[str, Type], ...]
    body: Expr
    ty: Type  # FunT
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Call(Expr):
    """Call of a named kernel of the program."""

    fn: str
    args: tuple[Expr, ...]
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class App(Expr):
    """Application of a function value (a lambda or a function-typed parameter)."""

    fn: Expr
    args: tuple[Expr, ...]
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Build(Expr):
    size: Expr  # Card
    fn: Expr  # Index ⇒ M
    ty: Type
    loc: Loc | None = _loc()
    # fsmooth.strategies.Strategy: the OpenCL mapping and address space the program asked for
    # (None: plain ``build``, the default strategy); the C back end ignores it.
    strategy: object = None


@dataclass(frozen=True)
class Ifold(Expr):
    fn: Expr  # M, Index ⇒ M
    init: Expr
    count: Expr  # Card
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Iscan(Expr):
    """The array of the ``count`` successive states of ``ifold fn init count`` (``fn init 0``
    first).  The state is a scalar or a tuple of scalars: ``ty`` is ``Array[state]``, or for a
    tuple state the tuple of one array per component (``scan_type``), as arrays of tuples do
    not exist."""

    fn: Expr  # M, Index ⇒ M
    init: Expr
    count: Expr  # Card: the size of the result
    ty: Type
    loc: Loc | None = _loc()


def scan_type(state: Type) -> Type:
    """The type of the states of an ``iscan`` over ``state``: an array, a tuple of arrays."""
    if isinstance(state, TupleT):
        return TupleT(tuple(scan_type(t) for t in state.items))
    return ArrayT(state)


def scan_states(states: list, state_ty: Type):
    """The states of an ``iscan`` as its value: an array of scalars, or per tuple component one."""
    if isinstance(state_ty, TupleT):
        return tuple(scan_states([s[k] for s in states], t) for k, t in enumerate(state_ty.items))
    return np.array(states, dtype=NUMPY_DTYPE[state_ty]).reshape(len(states))


@dataclass(frozen=True)
class Filter(Expr):
    """The elements ``x`` of ``arr`` (an array of scalars) for which ``pred x`` holds, in order:
    its length is known only at run time, its capacity is ``length arr``."""

    pred: Expr  # elem ⇒ Bool
    arr: Expr
    ty: Type  # arr's type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Length(Expr):
    arr: Expr
    ty: Type = Card
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Get(Expr):
    arr: Expr
    idx: Expr  # Index or Card
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Tuple(Expr):
    items: tuple[Expr, ...]
    ty: Type  # TupleT
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class Proj(Expr):
    """Component ``index`` (a constant) of a tuple."""

    tup: Expr
    index: int
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class ForeignCall(Expr):
    """Call of a foreign function with an array result (``fsmooth.foreign``): ``dims`` are the
    result's dims (Card expressions over the arguments: its shape function applied to them), and
    the compiled code gives it a destination of that size to write."""

    fn: object  # fsmooth.foreign.Foreign
    args: tuple[Expr, ...]
    dims: tuple[Expr, ...]
    ty: Type
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class KernelDef:
    """A top-level function: ``name = λ params. body`` with annotated types."""

    name: str
    params: tuple[tuple[str, Type], ...]
    result: Type
    body: Expr
    loc: Loc | None = field(default=None, compare=False)

    @property
    def ty(self) -> FunT:
        return FunT(tuple(t for _, t in self.params), self.result)

    @property
    def is_helper(self) -> bool:
        """Takes a function: inlined at each call, never exported."""
        return any(isinstance(t, FunT) for _, t in self.params)


@dataclass(frozen=True)
class Program:
    """A kernel and everything it calls, by name."""

    kernels: Mapping[str, KernelDef]
    entry: str

    @property
    def main(self) -> KernelDef:
        return self.kernels[self.entry]


# ----------------------------------------------------------------------------- printing

def show(e: Expr, indent: int = 0) -> str:
    """The paper's notation: let x = e in e, λ x. e, build n (λ i. e), a[i], ..."""
    pad = "  " * indent
    match e:
        case Var(name):
            return name
        case Lit(value):
            if isinstance(value, bool):
                return "true" if value else "false"
            return repr(value)
        case PrimApp(op, args):
            p = prims.prim(op)
            if p.infix:
                return f"({show(args[0], indent)} {p.symbol} {show(args[1], indent)})"
            if op == "neg":
                return f"-{show(args[0], indent)}"
            return f"{p.symbol}({', '.join(show(a, indent) for a in args)})"
        case If(c, a, b):
            return (f"if {show(c, indent)} then\n{pad}  {show(a, indent + 1)}\n"
                    f"{pad}else\n{pad}  {show(b, indent + 1)}")
        case Let(name, rhs, body):
            return f"let {name} = {show(rhs, indent + 1)} in\n{pad}{show(body, indent)}"
        case Lam(params, body):
            names = " ".join(n for n, _ in params)
            return f"(λ {names}.\n{pad}  {show(body, indent + 1)})"
        case ForeignCall(fn, args, dims):
            return f"{fn.name} {' '.join(_atomic(a, indent) for a in args)} ▷ [{', '.join(show(d, indent) for d in dims)}]"
        case Call(fn, args) | App(Var(fn), args):
            return f"{fn} {' '.join(_atomic(a, indent) for a in args)}"
        case App(fn, args):
            return f"{_atomic(fn, indent)} {' '.join(_atomic(a, indent) for a in args)}"
        case Build(size, fn):
            return f"build {_atomic(size, indent)} {_atomic(fn, indent)}"
        case Ifold(fn, init, count):
            return f"ifold {_atomic(fn, indent)} {_atomic(init, indent)} {_atomic(count, indent)}"
        case Iscan(fn, init, count):
            return f"iscan {_atomic(fn, indent)} {_atomic(init, indent)} {_atomic(count, indent)}"
        case Filter(pred, arr):
            return f"filter {_atomic(pred, indent)} {_atomic(arr, indent)}"
        case Length(arr):
            return f"length {_atomic(arr, indent)}"
        case Get(arr, idx):
            return f"{_atomic(arr, indent)}[{show(idx, indent)}]"
        case Tuple(items):
            return f"({', '.join(show(a, indent) for a in items)}{',' * (len(items) == 1)})"
        case Proj(tup, index):
            return f"{_atomic(tup, indent)}.{index}"
    raise AssertionError(e)


def _atomic(e: Expr, indent: int) -> str:
    s = show(e, indent)
    if isinstance(e, (Var, Lit, Lam, Get, Tuple, Proj)) or (isinstance(e, PrimApp) and prims.prim(e.op).infix):
        return s
    return f"({s})"


def show_kernel(k: KernelDef) -> str:
    params = " ".join(n for n, _ in k.params)
    return f"{k.name} = λ {params}.\n  {show(k.body, 1)}"


def show_program(p: Program) -> str:
    return "\n\n".join(show_kernel(k) for k in p.kernels.values())


# ----------------------------------------------------------------------------- interpreter

def stack(values: list, elem_ty: Type):
    """Assemble the elements of a ``build`` into one n-D numpy array."""
    if isinstance(elem_ty, Scalar):
        return np.array(values, dtype=NUMPY_DTYPE[elem_ty]).reshape(len(values))
    if not values:
        return np.zeros((0,) * (rank(elem_ty) + 1), dtype=NUMPY_DTYPE[element_scalar(elem_ty)])
    return np.stack(values)


def interpret(e: Expr, env: dict, program: Program | None = None):
    """Evaluate ``e`` with Python semantics.  Arrays are n-D numpy arrays, scalars Python numbers."""
    return _Compiler(program).expr(e)(env)


def run_kernel(program: Program, name: str, args: list):
    k = program.kernels[name]
    if not any(isinstance(t, TupleT) for _, t in k.params):  # tuples passed as their components
        args = flatten_tuples(args)
    params, body = _Compiler(program).kernel(name)
    return body(dict(zip(params, args)))


Evaluator = Callable[[dict], object]  # an expression compiled: its value in an environment


class _Compiler:
    """Compiles each node of an expression once into a Python function of the environment (a dict
    from names to values), so that a loop does not match its body's nodes again on every
    iteration; a kernel's body is compiled at its first call.  An environment is never changed
    once a function value may have seen it: a lambda keeps a copy of the variables it reads."""

    def __init__(self, program: Program | None):
        self.program = program
        self.kernels: dict[str, tuple[tuple[str, ...], Evaluator]] = {}

    def kernel(self, name: str) -> tuple[tuple[str, ...], Evaluator]:
        """A kernel's parameter names and its body compiled."""
        if name not in self.kernels:
            k = self.program.kernels[name]
            self.kernels[name] = tuple(n for n, _ in k.params), self.expr(k.body)
        return self.kernels[name]

    def expr(self, e: Expr) -> Evaluator:
        match e:
            case Var(name):
                return operator.itemgetter(name)
            case Lit(value):
                return lambda env: value
            case PrimApp(op, args, ty):
                return self.prim_app(prims.prim(op).impl, prims.coercer(ty), [self.expr(a) for a in args])
            case If(c, a, b):
                cond, then, orelse = self.expr(c), self.expr(a), self.expr(b)
                return lambda env: then(env) if cond(env) else orelse(env)
            case Let():
                return self.lets(*let_chain(e))
            case Lam(params, body):
                return self.lam(tuple(n for n, _ in params), tuple(free_vars(e)), self.expr(body))
            case Call(fn, args):
                return self.call(fn, [self.expr(a) for a in args])
            case App(fn, args):
                function, operands = self.expr(fn), [self.expr(a) for a in args]
                return lambda env: function(env)(*[a(env) for a in operands])
            case ForeignCall(fn, args, dims):
                operands, sizes = [self.expr(a) for a in args], [self.expr(d) for d in dims]
                return lambda env: fn.result([a(env) for a in operands], [d(env) for d in sizes])
            case Build(size, fn, ArrayT(elem)):
                return self.build(self.expr(size), self.expr(fn), elem)
            case Ifold(fn, init, count):
                return self.ifold(self.expr(fn), self.expr(init), self.expr(count))
            case Iscan(fn, init, count):
                return self.iscan(self.expr(fn), self.expr(init), self.expr(count), fn.ty.result)
            case Filter(pred, arr, ArrayT(elem)):
                p, a = self.expr(pred), self.expr(arr)
                return lambda env: _filter(p(env), a(env), elem)
            case Length(arr):
                a = self.expr(arr)
                return lambda env: int(a(env).shape[0])
            case Get(arr, idx):
                a, i = self.expr(arr), self.expr(idx)
                return lambda env: _get(a(env), i(env))
            case Tuple(items):
                parts = [self.expr(a) for a in items]
                return lambda env: tuple([p(env) for p in parts])
            case Proj(tup, index):
                t = self.expr(tup)
                return lambda env: t(env)[index]

        def cannot(env):
            raise AssertionError(f"cannot interpret {e!r}")
        return cannot

    @staticmethod
    def prim_app(impl: Callable, rounded: Callable, operands: list[Evaluator]) -> Evaluator:
        match operands:
            case [a]:
                return lambda env: rounded(impl(a(env)))
            case [a, b]:
                return lambda env: rounded(impl(a(env), b(env)))
        return lambda env: rounded(impl(*[a(env) for a in operands]))

    def lets(self, lets: list[Let], body: Expr) -> Evaluator:
        """A chain of lets as one function: it binds into one copy of the environment, in order
        (a lambda among the right-hand sides has copied what it reads when the next is bound)."""
        bindings = [(let.name, self.expr(let.rhs)) for let in lets]
        result = self.expr(body)

        def let(env):
            env = dict(env)
            for name, rhs in bindings:
                env[name] = rhs(env)
            return result(env)
        return let

    def call(self, fn: str, operands: list[Evaluator]) -> Evaluator:
        def call(env):
            params, body = self.kernel(fn)
            return body(dict(zip(params, [a(env) for a in operands])))
        return call

    @staticmethod
    def lam(params: tuple[str, ...], free: tuple[str, ...], body: Evaluator) -> Evaluator:
        def closure(env):
            captured = {name: env[name] for name in free if name in env}

            def function(*args):
                local = captured.copy()
                local.update(zip(params, args))
                return body(local)
            return function
        return closure

    @staticmethod
    def build(size: Evaluator, fn: Evaluator, elem: Type) -> Evaluator:
        def build(env):
            n = size(env)
            if n < 0:
                raise ValueError(f"build of negative size {n}")
            f = fn(env)
            return stack([f(i) for i in range(n)], elem)
        return build

    @staticmethod
    def ifold(fn: Evaluator, init: Evaluator, count: Evaluator) -> Evaluator:
        def ifold(env):
            f = fn(env)
            state = init(env)
            for i in range(count(env)):
                state = f(state, i)
            return state
        return ifold

    @staticmethod
    def iscan(fn: Evaluator, init: Evaluator, count: Evaluator, state_ty: Type) -> Evaluator:
        def iscan(env):
            n = count(env)
            if n < 0:
                raise ValueError(f"iscan of negative size {n}")
            f = fn(env)
            state, states = init(env), []
            for i in range(n):
                state = f(state, i)
                states.append(state)
            return scan_states(states, state_ty)
        return iscan


def _filter(p, a, elem: Type):
    return stack([x.item() for x in a if p(x.item())], elem)


def _get(a, i):
    if not 0 <= i < a.shape[0]:
        raise IndexError(f"index {i} out of range for an array of length {a.shape[0]}")
    v = a[i]
    return v if isinstance(v, np.ndarray) else v.item()


def flatten_tuples(args) -> list:
    """The arguments of a kernel whose tuple parameters are passed as their components."""
    return [leaf for a in args for leaf in (flatten_tuples(a) if isinstance(a, tuple) else [a])]


# ----------------------------------------------------------------------------- traversal

_traversal = Traversal(Expr)
children = _traversal.children  # a lambda's body is the lambda's child
map_children = _traversal.map_children
walk = _traversal.walk


def free_vars(e: Expr) -> frozenset[str]:
    match e:
        case Var(name):
            return frozenset([name])
        case Let(name, rhs, body):
            return free_vars(rhs) | (free_vars(body) - {name})
        case Lam(params, body):
            return free_vars(body) - {n for n, _ in params}
    return frozenset().union(*(free_vars(child) for child in children(e)))


def substitute(e: Expr, replacements: dict[str, Expr]) -> Expr:
    """``e`` with each free ``Var`` named in ``replacements`` replaced.  Capture-free because
    binders are unique within a kernel after ``fsmooth.anf.anf_kernel``."""
    if isinstance(e, Var):
        return replacements.get(e.name, e)
    return map_children(lambda child: substitute(child, replacements), e)


def called_kernels(e: Expr) -> frozenset[str]:
    """The kernels ``e`` calls."""
    return frozenset(node.fn for node in walk(e) if isinstance(node, Call))


def callees_first(p: Program) -> list[str]:
    """The kernels of ``p``, each after every kernel it calls (F̃ has no recursion)."""
    order: list[str] = []

    def visit(name: str):
        if name not in order:
            for callee in sorted(called_kernels(p.kernels[name].body)):
                visit(callee)
            order.append(name)

    for name in p.kernels:
        visit(name)
    return order


def is_atom(e: Expr) -> bool:
    return isinstance(e, (Var, Lit))


INDEX_TYPES = (Index, Card)


# ----------------------------------------------------------------------------- verification

def verify(program: Program) -> None:
    """Raise ``IRError`` unless every variable is in scope and every call names a kernel of
    ``program`` (kernels may be used as function values before the anf stage)."""
    for k in program.kernels.values():
        _check_scope(k.body, frozenset(n for n, _ in k.params) | set(program.kernels), program, k.name)


def verify_anf(program: Program) -> None:
    """``verify``, and what the anf stage guarantees: no helpers, binders unique within each
    kernel, operands atoms, lambdas only as the functions of ``build``/``ifold``, no ``App``."""
    verify(program)
    for k in program.kernels.values():
        if k.is_helper:
            raise IRError(f"kernel {k.name}: a helper kernel is left after the anf stage")
        _check_scope(k.body, frozenset(n for n, _ in k.params), program, k.name)
        binders = [n for n, _ in k.params] + [name for e in walk(k.body) for name in binders_of(e)]
        duplicated = sorted({n for n in binders if binders.count(n) > 1})
        if duplicated:
            raise IRError(f"kernel {k.name}: binders not unique: {', '.join(duplicated)}")
        _check_anf(k.body, k.name)


def let_chain(e: Expr) -> tuple[list[Let], Expr]:
    """The lets at the top of ``e``, outermost first, and the expression they bind into."""
    lets = []
    while isinstance(e, Let):
        lets.append(e)
        e = e.body
    return lets, e


def has_strategy(e: Expr) -> bool:
    """Whether ``e`` has a ``build`` with a strategy annotation (the user's OpenCL mapping)."""
    return any(isinstance(node, Build) and node.strategy is not None for node in walk(e))


def name_supply(k: KernelDef):
    """A ``NameSupply`` of fresh names for ``k``: none of its parameters' or binders'."""
    from .names import NameSupply

    return NameSupply([n for n, _ in k.params] + [b for node in walk(k.body) for b in binders_of(node)])


def rewrite_entry(program: Program, rewrite) -> Program:
    """``program`` with its entry kernel's body ``rewrite(body, names)``, ``names`` its
    ``name_supply``; ``program`` itself where the rewrite returns the body it was given."""
    entry = program.main
    body = rewrite(entry.body, name_supply(entry))
    if body is entry.body:
        return program
    return dataclasses.replace(program, kernels={**program.kernels, entry.name: dataclasses.replace(entry, body=body)})


def binders_of(e: Expr) -> list[str]:
    """The names ``e`` itself binds: a let's, or a lambda's parameters."""
    match e:
        case Let(name):
            return [name]
        case Lam(params):
            return [n for n, _ in params]
    return []


def _check_scope(e: Expr, scope: frozenset, program: Program, kernel: str) -> None:
    match e:
        case Var(name) if name not in scope:
            raise IRError(f"kernel {kernel}: variable '{name}' is not in scope")
        case Call(fn) if fn not in program.kernels:
            raise IRError(f"kernel {kernel}: call of '{fn}', which is not a kernel of the program")
        case Let(name, rhs, body):
            _check_scope(rhs, scope, program, kernel)
            _check_scope(body, scope | {name}, program, kernel)
            return
        case Lam(params, body):
            _check_scope(body, scope | {n for n, _ in params}, program, kernel)
            return
    for child in children(e):
        _check_scope(child, scope, program, kernel)


def _check_anf(e: Expr, kernel: str) -> None:
    match e:
        case Let(_, Let() as rhs):
            raise IRError(f"kernel {kernel}: nested let in the right-hand side of a let: {show(rhs)}")
        case App():
            raise IRError(f"kernel {kernel}: application left after the anf stage: {show(e)}")
        case Build(_, fn) | Ifold(fn, _, _) | Iscan(fn, _, _) | Filter(fn, _) if not isinstance(fn, Lam):
            raise IRError(f"kernel {kernel}: the function of {show(e)} is not a lambda")
    operands = {PrimApp: "args", Call: "args", ForeignCall: ("args", "dims"), Tuple: "items", Proj: "tup",
                Get: ("arr", "idx"), Length: "arr", If: "cond", Build: "size", Ifold: ("init", "count"),
                Iscan: ("init", "count"), Filter: "arr"}.get(type(e), ())
    for name in (operands,) if isinstance(operands, str) else operands:
        value = getattr(e, name)
        for operand in value if isinstance(value, tuple) else (value,):
            if not is_atom(operand):
                raise IRError(f"kernel {kernel}: operand '{name}' of {type(e).__name__} is not an atom: {show(operand)}")
    for child in children(e):
        if isinstance(child, Lam) and not isinstance(e, (Build, Ifold, Iscan, Filter)):
            raise IRError(f"kernel {kernel}: lambda outside build/ifold: {show(child)}")
        _check_anf(child, kernel)
