"""``vectorize(w, ·)`` as vector phrases (RISE & Shine §5: vector data types, asVector/asScalar):
a pass over the OpenCL kernels that ``dpia.hoist_opencl`` planned (``plan_opencl``: the levels of
the parfors are decided and the buffers hoisted there, so the pass sees what will be printed),
before ``generate_opencl`` prints them.

A vectorised ``parfor`` of a global, local or sequential build of Float or Double becomes a
``VectorParFor``: iteration v does the elements w·v .. w·v + w - 1 together, its index standing
for the first lane's element, and a scalar ``parfor`` does the ``n mod w`` last elements.  A
sequential one is a work-item's own vectors (its iterations in order, in one work-item: a row's
fold w lanes at a time, ``fsmooth.auto_reductions`` on a CPU).  Its body is decided command by
command, by analysis, before anything is rewritten:

- a private Float or Double scalar becomes a ``num<w>`` (``new`` of a ``Vec``), one lane per element;
- an assignment runs in lock step when each operand is a vector variable, a lane-wise operation
  OpenCL has for vectors (``VECTOR_OPS``), a value every lane shares (``Broadcast``) that needs no
  run-time check, or a read of w contiguous elements that needs none (``AsVector``: ``vloadw``); its
  target a vector variable or w contiguous elements (``vstorew``);
- a loop or a guard that no lane changes stays around vector code; a guard on the element index
  that holds for every lane without a run-time check (``AllLanes``) runs the branch as vector code,
  with the guard's ranges for every lane, and otherwise the whole command lane by lane;
- any other command runs once per lane (``Lane``), each lane's vector variables its component k
  (``Idx(AsScalar(x), k)``), which is always correct.

Whether a read is contiguous and check-free is a question about index paths: the pass asks
``dpia.index_paths`` (and through it ``dps.ranges``), which code generation prints from, for every
lane, in the environment and loop ranges code generation will have there.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sympy

from fsmooth import prims
from fsmooth.dps.ranges import Ranges
from fsmooth.errors import CompileError
from fsmooth.types import Double, Float, Index

from . import index_paths as paths
from . import phrases as p
from .index_paths import Alias, BufferVariable, RecordVariable, ScalarVariable, SymbolicInteger, index_symbol
from .phrases import free_identifiers

if TYPE_CHECKING:
    from .codegen_opencl import OpenCLPlan

VECTOR_SCALARS = (Float, Double)

# The lane-wise operations of OpenCL's float and double vectors, as OpenCL C: the math library's
# built-ins of the same names are overloaded for vectors (isnan, isinf and isfinite give int
# vectors: their Bool results run lane by lane).  min and max are Python's, as the scalar code's
# (b only if b < a): the prelude's fs_min_floatN/fs_max_doubleN..., not fmin/fmax, which drop a
# NaN operand.  ``{vec}`` is the vector type.
VECTOR_OPS = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
              "neg": "(-{0})", "min": "fs_min_{vec}({0}, {1})", "max": "fs_max_{vec}({0}, {1})", "sqrt": "sqrt({0})",
              "exp": "exp({0})", "log": "log({0})", "sin": "sin({0})", "cos": "cos({0})",
              "abs": "fabs({0})"}
VECTOR_OPS.update({name: f"{name}({{0}})" for name in prims.MATH_UNARY})
VECTOR_OPS.update({name: f"{name}({{0}}, {{1}})" for name in prims.MATH_BINARY})


@dataclass(frozen=True)
class Lanes:
    """A vectorised build as code generation sees it: the C name of the first lane's element
    index (``first``), the width, and the element acceptor ``out``, bound to ``out_phrase``."""

    first: str
    width: int
    out: str
    out_phrase: p.Phrase

    def env(self, env: dict, k: int) -> dict:
        """``env`` as lane ``k`` sees it: the index and its integer lets shifted by k, ``out``
        lane k's element."""
        first = index_symbol(self.first)
        lane = {}
        for name, binding in env.items():
            match binding:
                case ScalarVariable(cname) if cname == self.first:
                    binding = SymbolicInteger(first + k)
                case SymbolicInteger(expr) if first in expr.free_symbols:
                    binding = SymbolicInteger(expr.subs(first, first + k))
            lane[name] = binding
        lane[self.out] = Alias(self.out_phrase, lane)
        return lane


def vectorize_plan(planned: OpenCLPlan) -> OpenCLPlan:
    """``planned`` with every ``vectorize(w, ·)`` parfor of its kernels as a ``VectorParFor``."""
    k, plan = planned.kernel, planned.kernels
    sizes, env, start = paths.kernel_bindings(k, plan.buffers)
    walk = _Walk(sizes)
    phases = tuple(dataclasses.replace(
        phase, body=walk.comm(phase.body, env, start),
        tail=None if phase.tail is None else walk.comm(phase.tail, env, start),
        last=None if phase.last is None else dataclasses.replace(phase.last, body=walk.comm(phase.last.body, env, start)))
        for phase in plan.phases)
    return dataclasses.replace(planned, kernels=dataclasses.replace(plan, phases=phases))


@dataclass(frozen=True)
class _Walk:
    """The commands of a kernel with their environment and loop ranges as code generation will
    have them (phrase names standing for C names), down to the vectorised parfors."""

    sizes: dict  # size symbol -> its name (paths.rename)

    def comm(self, c: p.Phrase, env: dict, ranges) -> p.Phrase:
        sizes = self.sizes
        match c:
            case p.Seq(cmds):
                return p.Seq(tuple(self.comm(x, env, ranges) for x in cmds))
            case p.ParFor(strategy=strategy) if strategy is not None and strategy.width > 1:
                return self._vector_parfor(c, env, ranges)
            case p.ParFor(size, acc, index, out, elem, body):
                inner = {**env, index: ScalarVariable(index)}
                inner[out] = Alias(p.Idx(acc, p.Ident(index, p.ExpT(p.IdxT(size))), elem, size), inner)
                n = paths.rename(size, env, sizes)
                return dataclasses.replace(c, body=self.comm(body, inner, _with_range(ranges, index, n)))
            case p.For(count, index, body):
                n = paths.index(count, env, ranges, sizes).expr
                inner = {**env, index: ScalarVariable(index)}
                return dataclasses.replace(c, body=self.comm(body, inner, _with_range(ranges, index, n)))
            case p.New(name, _, p.Seq((p.Assign(_, value) as first, *rest)), None) if paths.integer_let(c, env):
                symbolic = paths.index(value, env, ranges, sizes)
                inner = {**env, name: SymbolicInteger(symbolic.expr)}
                return dataclasses.replace(c, body=p.Seq((first, self.comm(
                    p.seq(*rest), inner, paths.past_tests(symbolic.needs, ranges)))))
            case p.New(name, data, body):
                binding = ScalarVariable(name) if isinstance(data, p.Num) else BufferVariable(name)
                return dataclasses.replace(c, body=self.comm(body, {**env, name: binding}, ranges))
            case p.IfCmd(cond, then, orelse):
                return dataclasses.replace(c, then=self.comm(then, env, paths.guarded(cond, env, ranges, sizes)),
                                           orelse=self.comm(orelse, env, ranges))
            case p.DoubleBuffer(count, _, _, index, state, out, data, body, after):
                n = paths.index(count, env, ranges, sizes).expr
                inner = {**env, index: ScalarVariable(index), state: _buffers(state, data),
                         out: _buffers(out, data)}
                return dataclasses.replace(c, body=self.comm(body, inner, _with_range(ranges, index, n)),
                                           after=self.comm(after, {**env, state: _buffers(state, data)}, ranges))
        return c

    def _vector_parfor(self, c: p.ParFor, env: dict, ranges) -> p.Phrase:
        strategy = c.strategy
        w = strategy.width
        if strategy.level not in ("global", "local", "seq"):
            raise CompileError("vectorize needs build_global, build_local or build_seq (or the default "
                               "strategy's outermost build)", strategy.loc)
        if not (isinstance(c.elem, p.Num) and c.elem.scalar in VECTOR_SCALARS):
            raise CompileError("vectorize needs a build of Float or Double elements", strategy.loc)
        inner = {**env, c.index: ScalarVariable(c.index)}
        out_phrase = p.Idx(c.acc, p.Ident(c.index, p.ExpT(p.IdxT(c.size))), c.elem, c.size)
        inner[c.out] = Alias(out_phrase, inner)
        n = paths.rename(c.size, env, self.sizes)
        # the first lane's index: the last lane's is at most n - 1
        vector_ranges = ranges.inside(index_symbol(c.index), n - w)
        body = _VectorBody(self.sizes, Lanes(c.index, w, c.out, out_phrase), frozenset())
        scalar = dataclasses.replace(c, strategy=dataclasses.replace(strategy, width=1))
        try:
            vector_body = body.comm(c.body, inner, vector_ranges)
        except _CheckedIntegerLet:
            return self.comm(scalar, env, ranges)
        remainder = scalar if sympy.Mod(n, w) != 0 else None
        return p.VectorParFor(c.size, c.acc, c.index, c.out, c.elem, w, vector_body, strategy, remainder)


class _CheckedIntegerLet(Exception):
    """An integer let of a vectorised body is computed with run-time checks (``fs_checked_*``):
    its value is a C variable, which the lanes cannot shift as they shift an index expression of
    the first lane (``Lanes.env``), so each lane would read the first lane's.  The build then
    runs as scalar code: what it means, one element a work-item."""


def _with_range(ranges: Ranges, index: str, n) -> Ranges:
    return ranges.inside(index_symbol(index), n - 1)


def _buffers(name: str, data: p.Data, path: tuple = ()):
    """The binding of a double buffer's state or output ``name`` (a record: one per component)."""
    if isinstance(data, p.Rec):
        return RecordVariable(tuple(_buffers(name, item, path + (j,)) for j, item in enumerate(data.items)))
    label = "_".join([name, *map(str, path)])
    return BufferVariable(label) if isinstance(data, p.Arr) else ScalarVariable(label)


@dataclass(frozen=True)
class _VectorBody:
    """The body of one vectorised parfor; ``vectors``: its private scalars that became vectors."""

    sizes: dict  # size symbol -> its name (paths.rename)
    lanes: Lanes
    vectors: frozenset

    def comm(self, c: p.Phrase, env: dict, ranges) -> p.Phrase:
        sizes, w = self.sizes, self.lanes.width
        match c:
            case p.Skip():
                return c
            case p.Seq(cmds):
                return p.Seq(tuple(self.comm(x, env, ranges) for x in cmds))
            case p.New(name, _, p.Seq((p.Assign(_, value) as first, *rest)), None) if paths.integer_let(c, env):
                # symbolic: an index of the first lane, which each lane shifts (Lanes.env)
                symbolic = paths.index(value, env, ranges, sizes)
                if any(isinstance(need, paths.Opaque) for need in symbolic.needs):
                    raise _CheckedIntegerLet(name)
                inner = {**env, name: SymbolicInteger(symbolic.expr)}
                return dataclasses.replace(c, body=p.Seq((first, self.comm(
                    p.seq(*rest), inner, paths.past_tests(symbolic.needs, ranges)))))
            case p.New(name, p.Num(scalar), body, None) if scalar in VECTOR_SCALARS:
                inner = dataclasses.replace(self, vectors=self.vectors | {name})
                return dataclasses.replace(c, data=p.Vec(scalar, w),
                                           body=inner.comm(body, {**env, name: ScalarVariable(name)}, ranges))
            case p.For(count, index, body) if not self._varying(count, env):
                n = paths.index(count, env, ranges, sizes).expr
                inner = {**env, index: ScalarVariable(index)}
                return dataclasses.replace(c, body=self.comm(body, inner, _with_range(ranges, index, n)))
            case p.IfCmd(cond, then, orelse) if not self._varying(cond, env):
                return dataclasses.replace(c, then=self.comm(then, env, paths.guarded(cond, env, ranges, sizes)),
                                           orelse=self.comm(orelse, env, ranges))
            case p.IfCmd(cond, then) if not self._varying(cond, env, through_index=False):
                # the condition varies with the element's index only: where it holds for every
                # lane (the bulk of a guarded loop) the lanes run the branch together
                lane_envs = [self.lanes.env(env, k) for k in range(w)]
                if not any(paths.expression_needs_a_test(cond, lane, ranges, sizes) for lane in lane_envs):
                    inside = ranges
                    for lane in lane_envs:
                        inside = paths.guarded(cond, lane, inside, sizes)
                    return p.IfCmd(p.AllLanes(cond, p.data_of(cond)), self.comm(then, env, inside), self._by_lane(c))
            case p.Assign(acc, e):
                value, target = self._vector_exp(e, env, ranges), self._vector_target(acc, env, ranges)
                if value is not None and target is not None:
                    return p.Assign(target, value)
        return self._by_lane(c)

    def _by_lane(self, c: p.Phrase) -> p.Phrase:
        """``c`` once per lane, each lane's vector variables its component."""
        return p.seq(*(p.Lane(k, _lane_of_vectors(c, self.vectors, k, self.lanes.width))
                       for k in range(self.lanes.width)))

    def _varying(self, ph: p.Phrase, env: dict, through_index: bool = True) -> bool:
        """Whether ``ph`` may differ between the lanes: it mentions a vector variable or an element
        acceptor (or, with ``through_index``, the element's index or an integer let of it)."""
        first = index_symbol(self.lanes.first)
        for name in free_identifiers(ph):
            if name in self.vectors:
                return True
            match env.get(name):
                case Alias():
                    return True
                case ScalarVariable(cname) if through_index and cname == self.lanes.first:
                    return True
                case SymbolicInteger(expr) if through_index and first in expr.free_symbols:
                    return True
        return False

    def _vector_exp(self, e: p.Phrase, env: dict, ranges) -> p.Phrase | None:
        """``e`` as a vector of its lanes' values, or None where the lanes cannot compute it together."""
        w = self.lanes.width
        if not self._varying(e, env):
            if paths.expression_needs_a_test(e, env, ranges, self.sizes):
                return None
            return p.Broadcast(e, p.Vec(p.data_of(e).scalar, w))
        match e:
            case p.Ident(name, p.ExpT(p.Num(scalar))) if name in self.vectors:
                return p.Ident(name, p.ExpT(p.Vec(scalar, w)))
            case p.ScalarOp(op, args, p.Num(scalar)) if op in VECTOR_OPS and scalar in VECTOR_SCALARS and all(
                    p.data_of(x) == p.Num(scalar) for x in args):
                parts = [self._vector_exp(x, env, ranges) for x in args]
                if any(part is None for part in parts):
                    return None
                return p.ScalarOp(op, tuple(parts), p.Vec(scalar, w))
            case p.Idx(elem=p.Num(scalar)) | p.Shift(data=p.Num(scalar)) if scalar in VECTOR_SCALARS:
                if self._contiguous(e, env, ranges):
                    return p.AsVector(w, e, p.Vec(scalar, w))
        return None

    def _vector_target(self, acc: p.Phrase, env: dict, ranges) -> p.Phrase | None:
        """``acc`` as an acceptor of the lanes' vector: a vector variable, or the lanes'
        contiguous elements in memory; None where it is neither."""
        w = self.lanes.width
        match acc:
            case p.Ident(name, p.AccT(p.Num(scalar))) if name in self.vectors:
                return p.Ident(name, p.AccT(p.Vec(scalar, w)))
        if self._contiguous(acc, env, ranges):
            return p.AsVector(w, acc, p.Vec(p.data_of(acc).scalar, w))
        return None

    def _contiguous(self, ph: p.Phrase, env: dict, ranges) -> bool:
        """Whether the lanes' elements of ``ph`` are consecutive elements of one buffer, lane k's
        k after the first's, and none needs a run-time check."""
        places = [paths.resolve(ph, self.lanes.env(env, k), ranges, self.sizes) for k in range(self.lanes.width)]
        if any(paths.needs_a_test(place.needs, ranges, self.sizes) for place in places):
            return False
        first = places[0]
        return isinstance(first.binding, BufferVariable) and all(
            place.binding == first.binding and sympy.expand(place.offset - first.offset) == k
            for k, place in enumerate(places))


def _lane_of_vectors(c: p.Phrase, vectors: frozenset, k: int, width: int) -> p.Phrase:
    """``c`` with each vector variable's lane ``k`` in its place."""
    match c:
        case p.Ident(name, p.ExpT(p.Num(scalar)) | p.AccT(p.Num(scalar)) as ty) if name in vectors:
            vector = p.Ident(name, type(ty)(p.Vec(scalar, width)))
            return p.Idx(p.AsScalar(vector, p.Arr(sympy.Integer(width), p.Num(scalar))),
                         p.Literal(k, p.Num(Index)), p.Num(scalar), sympy.Integer(width))
    return p.map_children(lambda ph: _lane_of_vectors(ph, vectors, k, width), c)
