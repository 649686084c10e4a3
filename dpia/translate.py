"""The acceptor-passing A(E)(A) and continuation-passing C(E)(k) translations (DPIA paper
Fig. 5), with the mapI/reduceI lowering of §4.2 folded in: ``build`` becomes a ``parfor`` writing
through its acceptor, a scalar ``ifold`` a ``new`` accumulator and a ``for``, an array-state
``ifold`` a double buffer (RISE & Shine, Listing 13).

Each functional primitive defines its accT and conT side by side in ``TRANSLATIONS``; a new
primitive is one more pair.  Arrays never need the paper's ``new`` in C(·): DPS has already given
every stored array a region, so a conT that would need fresh array storage is an error of the
DPS stage.
"""
from __future__ import annotations

from typing import Callable

import sympy

from fsmooth.dps import ir as dps
from fsmooth.types import Card
from fsmooth.names import NameSupply

from . import phrases as p
from .from_dps import as_exp, functional_body, result_acceptor, write_buffer

Cont = Callable[[p.Phrase], p.Phrase]


def dpia_program(program: dps.Program, translation=None) -> p.ImperativeProgram:
    """Every kernel of ``program`` through accT/conT: ``Translation``'s, or those of the
    subclass instance ``translation()`` makes (``dpia.translate_strategies``)."""
    return p.ImperativeProgram({name: imperative_kernel(k, translation) for name, k in program.kernels.items()},
                               program.entry)


def imperative_kernel(k: dps.Kernel, translation=None) -> p.ImperativeKernel:
    functional, result, params = functional_body(k)
    body = (translation or Translation)().acc(functional, result_acceptor(k.dest, result))
    return p.ImperativeKernel(k.name, k.dest, tuple(k.params), params, k.result, result,
                              tuple(k.result_dims), tuple(k.sizes), tuple(k.constraints),
                              sympy.sympify(k.scratch), functional, body, k.threads, k.kept_length)


class Translation:
    """One run of A/C: owns the supply of fresh names for the variables it introduces."""

    def __init__(self):
        # i', i'1, ...: names no F̃ program can use (a prime is not a Python identifier character)
        self.names = NameSupply(suffix="'", separator="")

    def acc(self, e: p.Phrase, a: p.Phrase) -> p.Phrase:
        """A(E)(A): a command with the effect of A := E."""
        return TRANSLATIONS[type(e)][0](self, e, a)

    def con(self, e: p.Phrase, k: Cont) -> p.Phrase:
        """C(E)(k): a command with the effect of k(E)."""
        return TRANSLATIONS[type(e)][1](self, e, k)

    def con_all(self, es, k: Callable[[tuple], p.Phrase], done: tuple = ()) -> p.Phrase:
        if not es:
            return k(done)
        return self.con(es[0], lambda x: self.con_all(es[1:], k, done + (x,)))

    def assign(self, a: p.Phrase, e: p.Phrase, data: p.Data) -> p.Phrase:
        """A :=δ E, by induction on δ (§4.1): at n.δ a parfor of element assignments."""
        match data:
            case p.Num() | p.IdxT():
                return p.Assign(a, e)
            case p.Arr(size, elem):
                i, o = self.names.fresh("i"), self.names.fresh("o")
                index = p.Ident(i, p.ExpT(p.IdxT(size)))
                body = self.assign(p.Ident(o, p.AccT(elem)), p.Idx(e, index, elem, size), elem)
                return p.ParFor(size, a, i, o, elem, body)
            case p.Rec(items):  # A :=δ1×δ2 E = fst A := fst E; snd A := snd E
                return p.seq(*(self.assign(p.proj(a, k), p.proj(e, k), d) for k, d in enumerate(items)))
        raise AssertionError(data)

    def storage_needed(self, e: p.Phrase) -> p.Phrase:
        raise AssertionError(f"array value without a region (the DPS stage should give it one): {e}")

    def scalar_via_new(self, e: p.Phrase, k: Cont) -> p.Phrase:
        """C(E)(k) for a scalar E computed by commands: store it in a new variable first."""
        data = p.data_of(e)
        leaves = p.record_leaves(data)
        if not all(isinstance(leaf, p.Num) for _, leaf in leaves):
            return self.storage_needed(e)
        names = {path: self.names.fresh("v") for path, _ in leaves}

        def record(phrase_type, d=data, path=()):
            if isinstance(d, p.Rec):
                return p.Record(tuple(record(phrase_type, x, path + (j,)) for j, x in enumerate(d.items)), d)
            return p.Ident(names[path], phrase_type(d))
        body = p.seq(self.acc(e, record(p.AccT)), k(record(p.ExpT)))
        for path, leaf in reversed(leaves):
            body = p.New(names[path], leaf, body)
        return body


# ----------------------------------------------------------------------------- per primitive


def _acc_value(t: Translation, e: p.Phrase, a: p.Phrase) -> p.Phrase:
    """Identifiers, views and literals: A(x)(A) = A :=δ x."""
    return t.assign(a, e, p.data_of(e))


def _con_value(t: Translation, e: p.Phrase, k: Cont) -> p.Phrase:
    return k(e)


def _acc_scalar_op(t: Translation, e: p.ScalarOp, a: p.Phrase) -> p.Phrase:
    return t.con_all(e.args, lambda xs: p.Assign(a, p.ScalarOp(e.op, xs, e.data, e.nonzero_divisor)))


def _con_scalar_op(t: Translation, e: p.ScalarOp, k: Cont) -> p.Phrase:
    return t.con_all(e.args, lambda xs: k(p.ScalarOp(e.op, xs, e.data, e.nonzero_divisor)))


def _acc_idx(t: Translation, e: p.Idx, a: p.Phrase) -> p.Phrase:
    return t.con(e, lambda x: t.assign(a, x, e.elem))


def _con_idx(t: Translation, e: p.Idx, k: Cont) -> p.Phrase:
    return t.con_all((e.arr, e.index), lambda xs: k(p.Idx(xs[0], xs[1], e.elem, e.length, e.checked, e.loc)))


def _acc_build(t: Translation, e: p.Build, a: p.Phrase) -> p.Phrase:
    """A(build n f)(A) = parfor n A (λ i o. A(f i)(o))."""
    o = t.names.fresh("o")
    return p.ParFor(e.size, a, e.index, o, e.elem, t.acc(e.body, p.Ident(o, p.AccT(e.elem))), parallel=e.parallel)


def _con_build(t: Translation, e: p.Build, k: Cont) -> p.Phrase:
    return t.storage_needed(e)


def _acc_ifold(t: Translation, e: p.Ifold, a: p.Phrase) -> p.Phrase:
    return _ifold(t, e, lambda state: t.assign(a, state, e.data))


def _con_ifold(t: Translation, e: p.Ifold, k: Cont) -> p.Phrase:
    return _ifold(t, e, k)


def _ifold(t: Translation, e: p.Ifold, k: Cont, each=None) -> p.Phrase:
    """reduceI (§4.2): the state is a ``new`` accumulator that each iteration reads and rewrites;
    an array state is double-buffered instead, so no iteration reads the buffer it writes; a
    parallel reduction's iterations update its accumulator on threads (``ParallelReduce``).
    ``each(state, i)``: a command after each iteration's step, which reads the new state."""
    state_exp = p.Ident(e.state, p.ExpT(e.data))

    def step(acc: p.Phrase) -> p.Phrase:
        body = t.acc(e.body, acc)
        return body if each is None else p.seq(body, each(as_exp(acc), e.index))

    def loop(count: p.Phrase) -> p.Phrase:
        if e.partials:  # a parallel reduction: its accumulator, declared around it, holds the init
            acc = e.accumulator
            return p.seq(t.acc(e.init, acc),
                         p.ParallelReduce(count, e.index, acc, e.monoids, e.partials, t.acc(e.body, acc)),
                         k(as_exp(acc)))
        if e.buffers is None:
            acc = p.Ident(e.state, p.AccT(e.data))
            return p.New(e.state, e.data, p.seq(
                t.acc(e.init, acc),
                p.For(count, e.index, step(acc)),
                k(state_exp)))
        first, second = e.buffers
        out = write_buffer(e.state)
        return p.seq(
            t.acc(e.init, first),
            p.DoubleBuffer(count, first, second, e.index, e.state, out, e.data,
                           step(p.Ident(out, p.AccT(e.data))), k(state_exp)))

    return t.con(e.count, loop)


def _acc_scan(t: Translation, e: p.Scan, a: p.Phrase) -> p.Phrase:
    """scanSeq: the fold's loop (``_ifold``), each iteration then writing the new state to
    element i of A (per component of a record state)."""
    fold = e.fold

    def trace(state: p.Phrase, index: str) -> p.Phrase:
        writes = []
        for path, leaf in p.record_leaves(fold.data):
            arr = p.proj_path(a, path)
            size = p.data_of(arr).size
            element = p.Idx(arr, p.Ident(index, p.ExpT(p.IdxT(size))), leaf, size)
            writes.append(p.Assign(element, p.proj_path(state, path)))
        return p.seq(*writes)
    return _ifold(t, fold, lambda state: p.Skip(), trace)


def _acc_filter(t: Translation, e: p.Filter, a: p.Phrase) -> p.Phrase:
    """filterSeq: ℓ := 0; for n (λ i. A[ℓ] := E[i]; ℓ := ℓ + int(P)).  Every element is written at
    the next place, which the next kept one overwrites unless it is kept itself: no branch for the
    processor to mispredict, and the place is in the capacity (ℓ ≤ i < n)."""
    arr = p.data_of(e.arr)
    count = p.Num(Card)
    kept = p.Ident(e.length, p.ExpT(count))
    element = p.Idx(e.arr, p.Ident(e.index, p.ExpT(p.IdxT(arr.size))), arr.elem, arr.size)

    def step(c: p.Phrase) -> p.Phrase:
        more = p.ScalarOp("add", (kept, p.ScalarOp("to_Index", (c,), count)), count)
        return p.seq(p.Assign(p.Idx(a, kept, arr.elem, p.data_of(a).size), element),
                     p.Assign(p.Ident(e.length, p.AccT(count)), more))
    return p.seq(p.Assign(p.Ident(e.length, p.AccT(count)), p.Literal(0, count)),
                 p.For(p.NatExp(arr.size, count), e.index, t.con(e.pred, step)))


def _acc_record(t: Translation, e: p.Record, a: p.Phrase) -> p.Phrase:
    """A(⟨E1, E2⟩)(A) = A(E1)(fst A); A(E2)(snd A)."""
    return p.seq(*(t.acc(item, p.proj(a, k)) for k, item in enumerate(e.items) if item is not None))


def _con_record(t: Translation, e: p.Record, k: Cont) -> p.Phrase:
    return t.con_all(e.items, lambda xs: k(p.Record(tuple(xs), e.data)))


def _acc_proj(t: Translation, e: p.Proj, a: p.Phrase) -> p.Phrase:
    return t.con(e.tup, lambda x: t.assign(a, p.proj(x, e.index), e.data))


def _con_proj(t: Translation, e: p.Proj, k: Cont) -> p.Phrase:
    return t.con(e.tup, lambda x: k(p.proj(x, e.index)))


def _acc_cond(t: Translation, e: p.Cond, a: p.Phrase) -> p.Phrase:
    return t.con(e.cond, lambda c: p.IfCmd(c, t.acc(e.then, a), t.acc(e.orelse, a)))


def _acc_kept(t: Translation, e: p.Kept, a: p.Phrase) -> p.Phrase:
    """A(kept)(A) = skip: A holds the value already."""
    return p.Skip()


def _con_cond(t: Translation, e: p.Cond, k: Cont) -> p.Phrase:
    return t.scalar_via_new(e, k)


def _acc_let(t: Translation, e: p.Let, a: p.Phrase) -> p.Phrase:
    """A scalar let is a ``new`` variable, written once and then read by the body."""
    return p.New(e.name, e.data, p.seq(t.acc(e.rhs, p.Ident(e.name, p.AccT(e.data))), t.acc(e.body, a)))


def _con_let(t: Translation, e: p.Let, k: Cont) -> p.Phrase:
    return p.New(e.name, e.data, p.seq(t.acc(e.rhs, p.Ident(e.name, p.AccT(e.data))), t.con(e.body, k)))


def _acc_bind(t: Translation, e: p.Bind, a: p.Phrase) -> p.Phrase:
    return p.seq(t.acc(e.rhs, e.into), t.acc(e.body, a))


def _con_bind(t: Translation, e: p.Bind, k: Cont) -> p.Phrase:
    return p.seq(t.acc(e.rhs, e.into), t.con(e.body, k))


def _acc_alloc(t: Translation, e: p.Alloc, a: p.Phrase) -> p.Phrase:
    return p.New(e.region, e.data, t.acc(e.body, a), e.offset)


def _con_alloc(t: Translation, e: p.Alloc, k: Cont) -> p.Phrase:
    return p.New(e.region, e.data, t.con(e.body, k), e.offset)


def _acc_call(t: Translation, e: p.CallExp, a: p.Phrase) -> p.Phrase:
    return t.con_all(e.args, lambda xs: p.CallCmd(e.fn, a, xs, e.data, e.scratch_offset, e.check_sizes))


def _con_call(t: Translation, e: p.CallExp, k: Cont) -> p.Phrase:
    return t.scalar_via_new(e, k)


TRANSLATIONS: dict[type, tuple[Callable, Callable]] = {
    p.Ident: (_acc_value, _con_value),
    p.Literal: (_acc_value, _con_value),
    p.NatExp: (_acc_value, _con_value),
    p.Shift: (_acc_value, _con_value),
    p.ScalarOp: (_acc_scalar_op, _con_scalar_op),
    p.Idx: (_acc_idx, _con_idx),
    p.Build: (_acc_build, _con_build),
    p.Ifold: (_acc_ifold, _con_ifold),
    p.Cond: (_acc_cond, _con_cond),
    p.Kept: (_acc_kept, lambda t, e, k: t.storage_needed(e)),
    p.Let: (_acc_let, _con_let),
    p.Bind: (_acc_bind, _con_bind),
    p.Alloc: (_acc_alloc, _con_alloc),
    p.CallExp: (_acc_call, _con_call),
    p.Scan: (_acc_scan, lambda t, e, k: t.storage_needed(e)),
    p.Filter: (_acc_filter, lambda t, e, k: t.storage_needed(e)),
    p.Record: (_acc_record, _con_record),
    p.Proj: (_acc_proj, _con_proj),
}
