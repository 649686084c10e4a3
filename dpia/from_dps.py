"""DPS-F̃ terms as functional DPIA phrases.

A DPS term in result position writes the destination its context gives it, so its own
destination refs are dropped here: the acceptor-passing translation hands the same location
down as an acceptor (the kernel's ``out``, ``idxAcc out i`` inside a build, the other buffer of
a double-buffered ifold).  Only where a value is stored and then read (an array ``let``) is the
DPS destination kept, as the acceptor of a ``Bind``.  Array variables, regions and ``Offset``
refs become identifiers and ``Shift``s over their buffers; ``a[i]`` becomes ``Idx``.

A scalar ``let`` that ``fsmooth.dpia.inline_scalar_lets`` marked β-reducible (``Let.inline``) is
not bound: its value's phrase stands for the variable where it is used.
"""
from __future__ import annotations

import dataclasses

import sympy

from fsmooth.dps import ir as d
from fsmooth.dps.reductions import scan_reduction
from fsmooth.core import Lit, Var
from fsmooth.types import ArrayT, Bool, Card, TupleT, element_scalar, path_suffix

from . import phrases as p
from .inline_scalar_lets import nonzero_literal


def functional_body(kernel: d.Kernel) -> tuple[p.Phrase, p.Data, dict]:
    """The kernel's body as a functional phrase, its result's data type, and the parameters'
    identifiers."""
    params = {}
    for name, ty, dims in kernel.params:
        data = p.array_data(element_scalar(ty), dims) if isinstance(ty, ArrayT) else p.Num(ty)
        params[name] = p.Ident(name, p.ExpT(data))
    result = _data(kernel.result, kernel.result_dims)
    outputs = {f"{kernel.dest}{path_suffix(path)}": p.Ident(f"{kernel.dest}{path_suffix(path)}", p.AccT(leaf))
               for path, leaf in p.record_leaves(result)}
    env = _Env(dict(params), outputs, {})
    return _phrase(kernel.body, result, env), result, params


def result_acceptor(dest: str, data: p.Data) -> p.Phrase:
    """The kernel's destination: ``dest`` itself, or for a record the record of one acceptor per
    component (``dest_0``, ``dest_1_0``, ...: the C ABI's out-parameters)."""
    if isinstance(data, p.Rec):
        return p.Record(tuple(result_acceptor(f"{dest}_{k}", d) for k, d in enumerate(data.items)), data)
    return p.Ident(dest, p.AccT(data))


def _data(ty, dims) -> p.Data:
    if isinstance(ty, TupleT):
        return p.Rec(tuple(_data(t, d) for t, d in zip(ty.items, dims)))
    return p.array_data(element_scalar(ty), dims) if isinstance(ty, ArrayT) else p.Num(ty)


def _scalars(ty) -> p.Data:
    """The data of a scalar or a tuple of scalars (an iscan's state)."""
    return p.Rec(tuple(_scalars(t) for t in ty.items)) if isinstance(ty, TupleT) else p.Num(ty)


class _Env:
    """Phrases of the variables in scope, acceptors of the regions, and for each array-state
    ifold the acceptor its iteration writes."""

    def __init__(self, values: dict, regions: dict, state_dests: dict):
        self.values, self.regions, self.state_dests = values, regions, state_dests

    def bind(self, name: str, phrase: p.Phrase) -> _Env:
        return _Env({**self.values, name: phrase}, self.regions, self.state_dests)

    def region(self, name: str, acc: p.Phrase) -> _Env:
        return _Env(self.values, {**self.regions, name: acc}, self.state_dests)

    def state_dest(self, state: str, acc: p.Phrase) -> _Env:
        return _Env(self.values, self.regions, {**self.state_dests, state: acc})


def _atom(a, env: _Env) -> p.Phrase:
    match a:
        case Var(name):
            return env.values[name]
        case Lit(value, ty):
            return p.Literal(value, p.Num(ty))
    raise AssertionError(a)


def _ref(r: d.Ref, data: p.Data, env: _Env, locals_: list | None = None, name: str = "") -> p.Phrase:
    """The acceptor of destination ``r``.  A record destination's scalar components (•) get C
    variables named after ``name``, appended to ``locals_`` for the caller to declare."""
    match r:
        case d.RTuple(items):
            return p.Record(tuple(_ref(ref, item, env, locals_, f"{name}.{k}")
                                  for k, (ref, item) in enumerate(zip(items, data.items))), data)
        case d.Bullet() if locals_ is not None:
            locals_.append((name, data))
            return p.Ident(name, p.AccT(data))
        case d.RVar(name):
            return _retype(env.regions[name], data)
        case d.Offset(base, elems):
            return p.Shift(_ref(base, data, env), sympy.sympify(elems), data)
        case d.StateDest(state):
            return _retype(env.state_dests[state], data)
    raise AssertionError(f"no storage behind {r!r}")


def _retype(phrase: p.Phrase, data: p.Data) -> p.Phrase:
    if p.data_of(phrase) == data:
        return phrase
    return p.Shift(phrase, sympy.Integer(0), data)


def as_exp(acc: p.Phrase) -> p.Phrase:
    """The expression that reads what was written through ``acc`` (the exp half of its var)."""
    match acc:
        case p.Ident(name, p.AccT(data)):
            return p.Ident(name, p.ExpT(data))
        case p.Shift(base):
            return dataclasses.replace(acc, base=as_exp(base))  # its offset, data and stride
        case p.Idx(arr, index, elem, length, checked, loc):
            return p.Idx(as_exp(arr), index, elem, length, checked, loc)
        case p.Record(items, data):
            return p.Record(tuple(as_exp(a) for a in items), data)
        case p.Proj(tup, index, data):
            return p.Proj(as_exp(tup), index, data)
    raise AssertionError(acc)


def declare(locals_: list, body: p.Phrase) -> p.Phrase:
    """``body`` in the scope of scalar C variables (an alloc with no arena offset)."""
    for name, data in reversed(locals_):
        body = p.Alloc(name, data, None, body)
    return body


def _storage(t: d.Term) -> d.Ref:
    """The ref an array-valued term writes its result to."""
    match t:
        case d.Ifold(trace=d.Ref() as trace):  # an iscan: its states
            return trace
        case (d.Build(dest=dest) | d.Ifold(dest=dest) | d.Copy(dest=dest) | d.Call(dest=dest) | d.TupleOf(dest=dest)
              | d.Filter(dest=dest)):
            return dest
        case d.If(_, then, orelse):
            return _storage(orelse if isinstance(then, d.Keep) else then)
        case d.Let(body=body) | d.Alloc(body=body):
            return _storage(body)
    raise AssertionError(f"array value without storage: {t!r}")


def _phrase(t: d.Term, data: p.Data, env: _Env) -> p.Phrase:
    match t:
        case d.Atom_(a):
            return _atom(a, env)
        case d.Prim(op, args, ty):
            divisor_known = op in ("floordiv", "mod") and nonzero_literal(args[1])
            return p.ScalarOp(op, tuple(_atom(a, env) for a in args), p.Num(ty), divisor_known)
        case d.Get(arr, idx, ty, checked, loc):
            array = _atom(arr, env)
            arr_data = p.data_of(array)
            assert isinstance(arr_data, p.Arr), arr_data
            return p.Idx(array, _atom(idx, env), arr_data.elem, arr_data.size, checked, loc)
        case d.CardOf(value):
            return p.NatExp(sympy.sympify(value), p.Num(Card))
        case d.Let(name, rhs, body, ty, dims, inline):
            return _let(name, rhs, body, inline, _data(ty, dims), data, env)
        case d.If(cond, then, orelse):
            return p.Cond(_atom(cond, env), _phrase(then, data, env), _phrase(orelse, data, env), data)
        case d.Alloc(region, elem, count, body, offset):
            flat = p.Arr(sympy.sympify(count), p.Num(elem))
            inner = env.region(region, p.Ident(region, p.AccT(flat)))
            return p.Alloc(region, flat, sympy.sympify(offset), _phrase(body, data, inner))
        case d.Build(_, size, index, body):
            assert isinstance(data, p.Arr), data
            size = sympy.sympify(size)
            inner = env.bind(index, p.Ident(index, p.ExpT(p.IdxT(size))))
            return p.Build(size, index, _phrase(body, data.elem, inner), data.elem, t.strategy, t.parallel)
        case d.Ifold(_, state, index, body, init, count, ty, buffers, _, d.Ref()):
            return _ifold(state, index, body, init, count, buffers, _scalars(ty), env, scan=data,
                          regroupable=scan_reduction(t))
        case d.Ifold(_, state, index, body, init, count, _, buffers, _, _, monoids, partials):
            return _ifold(state, index, body, init, count, buffers, data, env, monoids=monoids, partials=partials)
        case d.Filter(_, length, x, body, arr):
            array = _atom(arr, env)
            arr_data = p.data_of(array)
            index = f"{length}_at"  # the length's name is unique in the kernel, so is this
            element = p.Idx(array, p.Ident(index, p.ExpT(p.IdxT(arr_data.size))), arr_data.elem, arr_data.size)
            return p.Filter(array, index, _phrase(body, p.Num(Bool), env.bind(x, element)), length, data)
        case d.Keep():
            return p.Kept(data)
        case d.Copy(_, src, count, elem):
            return _retype(_atom(src, env), p.Arr(sympy.sympify(count), p.Num(elem)))
        case d.Call(fn, _, args, _, scratch_offset, check_sizes):
            return p.CallExp(fn, tuple(_atom(a, env) for a in args), data, sympy.sympify(scratch_offset),
                             check_sizes)
        case d.TupleOf(items, _, _, written):  # None: a component already written in place
            return p.Record(tuple(None if k in written else _atom(a, env) for k, a in enumerate(items)), data)
        case d.Proj(tup, index):
            return p.proj(_atom(tup, env), index)
    raise AssertionError(f"unexpected DPS term {t!r}")


def _let(name: str, rhs: d.Term, body: d.Term, inline: bool, rhs_data: p.Data, data: p.Data,
         env: _Env) -> p.Phrase:
    if isinstance(rhs_data, p.Rec) and not isinstance(rhs, (d.Atom_, d.TupleOf, d.Proj)):
        locals_: list = []
        into = _ref(_storage(rhs), rhs_data, env, locals_, name)
        value = _phrase(rhs, rhs_data, env)
        return declare(locals_, p.Bind(name, value, into, _phrase(body, data, env.bind(name, as_exp(into))),
                                       rhs_data))
    if isinstance(rhs_data, p.Num):
        value = _phrase(rhs, rhs_data, env)
        if inline:
            return _phrase(body, data, env.bind(name, value))
        inner = env.bind(name, p.Ident(name, p.ExpT(rhs_data)))
        return p.Let(name, value, _phrase(body, data, inner), rhs_data)
    if isinstance(rhs, (d.Atom_, d.Get, d.TupleOf, d.Proj)):  # a view: no storage of its own
        return _phrase(body, data, env.bind(name, _phrase(rhs, rhs_data, env)))
    into = _ref(_storage(rhs), rhs_data, env)
    value = _phrase(rhs, rhs_data, env)
    if isinstance(rhs, d.Filter):  # its count: a C variable that the body reads
        count = p.Num(Card)
        inner = env.bind(name, as_exp(into)).bind(rhs.length, p.Ident(rhs.length, p.ExpT(count)))
        return declare([(rhs.length, count)], p.Bind(name, value, into, _phrase(body, data, inner), rhs_data))
    return p.Bind(name, value, into, _phrase(body, data, env.bind(name, as_exp(into))), rhs_data)


def _ifold(state, index, body, init, count, buffers, data: p.Data, env: _Env, scan: p.Data | None = None,
           monoids: tuple = (), partials: tuple = (), regroupable=None) -> p.Phrase:
    """The fold of state ``data``; ``scan``: the data of its states' arrays, for an iscan;
    ``monoids`` and ``partials``: a parallel reduction's (``dps.parallel``); ``regroupable``: an
    iscan's fold as a reduction (``dps.reductions.scan_reduction``), which the scan keeps (its
    operators and element) for a parallel scan (``dpia.scan_opencl``)."""
    if isinstance(count, (Var, Lit)):
        count_phrase = _atom(count, env)
        # an Index count may be an inlined expression of data (``k - 1``): the index type names it
        bound = _symbolic(count_phrase) if isinstance(count_phrase, (p.Literal, p.Ident, p.NatExp)) \
            else sympy.Symbol(count.name, integer=True)
    else:
        bound = sympy.sympify(count)
        count_phrase = p.NatExp(bound, p.Num(Card))
    inner = env.bind(index, p.Ident(index, p.ExpT(p.IdxT(bound))))
    if partials:
        # a parallel reduction: one C variable per leaf of the state, updated in place
        locals_ = [(state + "".join(f".{k}" for k in path), leaf) for path, leaf in p.record_leaves(data)]

        def variables(phrase_type, d: p.Data = data, path: tuple = ()) -> p.Phrase:
            if isinstance(d, p.Rec):
                return p.Record(tuple(variables(phrase_type, x, (*path, k)) for k, x in enumerate(d.items)), d)
            return p.Ident(state + "".join(f".{k}" for k in path), phrase_type(d))
        inner = inner.bind(state, variables(p.ExpT))
        return declare(locals_, p.Ifold(count_phrase, state, index, _phrase(body, data, inner),
                                        _phrase(init, data, env), data, None, monoids,
                                        tuple(env.regions[r] for r in partials), variables(p.AccT)))
    parallel = {} if regroupable is None else {
        "monoids": regroupable.monoids, "element": _phrase(regroupable.element, data, inner)}
    inner = inner.bind(state, p.Ident(state, p.ExpT(data)))
    if buffers is None:
        fold = p.Ifold(count_phrase, state, index, _phrase(body, data, inner), _phrase(init, data, env), data)
        return fold if scan is None else p.Scan(fold, scan, **parallel)
    if isinstance(data, p.Rec):
        # per component: an array's two regions, or a scalar's two C variables
        locals_: list = []

        def buffer(entry, item: p.Data, which: int, path: str) -> p.Phrase:
            if isinstance(item, p.Rec):
                return p.Record(tuple(buffer(e, x, which, f"{path}.{k}") for k, (e, x) in
                                      enumerate(zip(entry, item.items))), item)
            if entry is None:
                locals_.append((f"{state}{path}.{'ab'[which]}", item))
                return p.Ident(locals_[-1][0], p.AccT(item))
            return _retype(env.regions[entry[which]], item)

        b0, b1 = buffer(buffers, data, 0, ""), buffer(buffers, data, 1, "")
    else:
        locals_ = []
        b0, b1 = (_retype(env.regions[b], data) for b in buffers)
    inner = inner.state_dest(state, p.Ident(write_buffer(state), p.AccT(data)))
    fold = p.Ifold(count_phrase, state, index, _phrase(body, data, inner), _phrase(init, data, env), data, (b0, b1))
    return declare(locals_, fold if scan is None else p.Scan(fold, scan, **parallel))


def write_buffer(state: str) -> str:
    """The name of the acceptor an array-state ifold's iteration writes (the buffer not read)."""
    return f"{state}_next"


def _symbolic(phrase: p.Phrase) -> sympy.Expr:
    match phrase:
        case p.Literal(value):
            return sympy.Integer(value)
        case p.Ident(name):
            return sympy.Symbol(name, integer=True)
        case p.NatExp(value):
            return value
    raise AssertionError(phrase)
