"""D⟦e⟧r (DPS paper Fig. 7): F̃ in ANF to DPS-F̃, with the sizes from the shape stage.

- D-Let: ``let x = e1 in e2`` allocates ``bytes x_shp`` (a region on the arena) for ``e1``
  and translates ``e1`` into it; scalars get an empty allocation and views (``let row =
  m[i]``, ``let y = x``) a dead one -- both are removed by ``dps.simplify``.  When the
  body is ``x`` itself, ``e1`` writes straight into the destination instead (no copy).
- D-App: a call passes its destination (``•`` for a scalar result).
- D-VarVector: an array variable in destination position is copied.
- D-If: both branches write the same destination.
- ``build`` writes element ``i`` at ``r + i * (elements of one element)``; ``ifold`` with an
  array state double-buffers it (two regions, one final copy).
- ``iscan`` is the ifold of its scalar (or tuple of scalars) state with ``r`` as its trace: each
  state is written at ``r + i``.
- ``let w = filter p v`` writes the kept elements into a region of v's length (the capacity) and
  binds their count to a variable, ``w``'s length (``length w`` reads it, ``w[i]`` is checked
  against it); a kernel whose result is a filter returns the pair (kept elements, count).

Along the way every read ``a[i]`` is classified (``dps.bounds``): an affine read executed
unconditionally yields size constraints over the kernel's sizes; any other read is checked
where it happens.  Regions get their static offsets and each kernel its exact scratch
size in ``dps.layout``.
"""
from __future__ import annotations

import sympy

from fsmooth import core
from fsmooth.names import NameSupply, destination_name
from fsmooth.types import ArrayT, Card, Index, TupleT, element_scalar
from fsmooth.shape import sizes as shape_sizes
from fsmooth.shape.ir import CIRC, ShapeProgram, TupleShape, dims_of
from fsmooth.shape.filters import returns_filter
from fsmooth.shape.translate import kernel_functions, shape_of, shp

from . import ir
from .bounds import Bounds
from .layout import layout_program


def count(dims) -> sympy.Expr:
    return sympy.Mul(*dims) if dims else sympy.Integer(1)


def loop_symbol(name: str) -> sympy.Symbol:
    return shape_sizes.size_symbol(name)


def component_dims(ty, shape_value):
    """The dims of a value of type ``ty`` (a tuple: a tuple of its components' dims)."""
    if isinstance(ty, TupleT):
        return tuple(component_dims(t, v) for t, v in zip(ty.items, shape_value.items))
    return dims_of(shape_value)


class _KernelTranslator:
    def __init__(self, k: core.KernelDef, functions: dict, kernels: dict, shapes: ShapeProgram):
        self.k = k
        self.kernels = kernels  # DPS kernels translated so far (the callees of k)
        sk = shapes.kernels[k.name]
        self.shapes = {**functions, **dict(zip(sk.params, sk.param_shapes))}
        self.dims = {n: dims_of(v) for (n, t), v in zip(k.params, sk.param_shapes) if isinstance(t, ArrayT)}
        self.values = {n: v for (n, t), v in zip(k.params, sk.param_shapes) if t == Card}
        self.params = tuple((n, t, dims_of(v) if isinstance(t, ArrayT) else ())
                            for (n, t), v in zip(k.params, sk.param_shapes))
        self.sizes = sk.sizes
        self.result_dims = component_dims(k.result, sk.result)
        self.bounds = Bounds(self.params)
        self.names = NameSupply(numbered=True, separator="")  # r1, view_2, r3, ...
        self.in_place: set = set()  # arrays written straight into their component of a tuple result
        self.kept: dict = {}  # filtered array -> the variable of its kept length
        self.capacities: dict = {}  # filtered array -> the dims of its region (what it filters')

    def region(self) -> str:
        return self.names.fresh("r")

    # -- the symbolic value of an Index or Card atom (None if it depends on data)
    def value(self, a: core.Expr):
        match a:
            case core.Lit(v, ty) if ty in (Index, Card):
                return sympy.Integer(v)
            case core.Var(name):
                return self.values.get(name)
        return None

    def index_value(self, e: core.Expr):
        """Affine-friendly value of an Index/Card right-hand side, for bounds analysis."""
        match e:
            case core.PrimApp("add" | "sub" | "mul" as op, (a, b)):
                va, vb = self.value(a), self.value(b)
                if va is None or vb is None:
                    return None
                return {"add": va + vb, "sub": va - vb, "mul": va * vb}[op]
            case core.PrimApp("neg", (a,)):
                va = self.value(a)
                return None if va is None else -va
            case core.PrimApp("mod", (a, core.Lit(int() as m))) if m > 0:
                # Python's % by a positive constant is sympy's Mod: ranges.bounds knows its range.
                va = self.value(a)
                return None if va is None else sympy.Mod(va, m)
            case core.PrimApp("floordiv", (a, core.Lit(int() as m))) if m > 0:
                # Python's // by a positive constant: ranges.bounds bounds such polynomials exactly.
                va = self.value(a)
                return None if va is None else sympy.floor(va / m)
            case core.PrimApp("to_Index", (a,)):
                return self.value(a)
            case core.Var() | core.Lit():
                return self.value(e)
        return None

    def shape(self, e: core.Expr):
        return shape_sizes.evaluate(shape_of(e), self.shapes)

    def bind(self, name: str, ty, shape_value, rhs: core.Expr | None):
        self.shapes[shp(name)] = shape_value
        if isinstance(ty, ArrayT):
            self.dims[name] = dims_of(shape_value)
            self.bounds.alias(name, rhs)
        elif ty == Card and shape_value is not CIRC:
            self.values[name] = shape_value
        elif ty in (Index, Card) and rhs is not None:
            v = self.index_value(rhs)
            if v is not None:
                self.values[name] = v

    # -- D⟦e⟧r
    def term(self, e: core.Expr, r: ir.Ref) -> ir.Term:
        match e:
            case core.Var(name, ty) if name in self.kept and isinstance(r, ir.RTuple):
                # the kernel's result (shape.filters): the kept elements, then their count
                written = frozenset({0}) if name in self.in_place else frozenset()  # filtered into out_0
                return ir.TupleOf((e, core.Var(self.kept[name], Card)), TupleT((ty, Card)), r, written)
            case core.Filter() if isinstance(r, ir.RTuple):  # the kernel's result
                name = self.names.fresh("kept")
                return self.filter_let(name, e, core.Var(name, e.ty), r)
            case core.Var(name, ty) if isinstance(ty, ArrayT):
                dims = self.dims[name]
                return ir.Copy(r, e, count(dims), element_scalar(ty))  # D-VarVector
            case core.Var(_, TupleT() as ty) if r != ir.Bullet():
                # D-VarVector of a tuple: each component (a view) written to its destination
                parts = [(self.fresh_view(), core.Proj(e, k, t)) for k, t in enumerate(ty.items)]
                term: ir.Term = ir.TupleOf(tuple(core.Var(v, part.ty) for v, part in parts), ty, r)
                for view, part in reversed(parts):
                    dims = component_dims(part.ty, self.shape(part)) if isinstance(part.ty, (ArrayT, TupleT)) else ()
                    term = ir.Let(view, ir.Proj(e, part.index, part.ty), term, part.ty, dims)
                return term
            case core.Var() | core.Lit():
                return ir.Atom_(e)  # D-VarScalar
            case core.Tuple(items, ty):
                # a component some let already wrote in place is not written again
                return ir.TupleOf(items, ty, r, frozenset(k for k, a in enumerate(items)
                                                          if isinstance(a, core.Var) and a.name in self.in_place))
            case core.Proj(tup, index, ty) if isinstance(ty, ArrayT):
                view = self.fresh_view()
                dims = dims_of(self.shape(e))
                return ir.Let(view, ir.Proj(tup, index, ty), ir.Copy(r, core.Var(view, ty), count(dims),
                                                                      element_scalar(ty)), ty, dims)
            case core.Proj(tup, index, ty):
                return ir.Proj(tup, index, ty)
            case core.PrimApp(op, args, ty):
                if ty == Card:
                    v = self.shape(e)
                    if v is not CIRC:
                        return ir.CardOf(v)
                return ir.Prim(op, args, ty, e.loc)
            case core.Length(arr) if arr.name in self.kept:
                return ir.Atom_(core.Var(self.kept[arr.name], Card))
            case core.Length(arr):
                return ir.CardOf(self.dims[arr.name][0])
            case core.Get(arr, idx, ty):
                # a filtered array's length is a variable: its reads are checked where they happen
                checked = arr.name in self.kept or \
                    self.bounds.read(arr.name, self.dims[arr.name][0], self.index_value(idx))
                get = ir.Get(arr, idx, ty, checked, e.loc)
                if isinstance(ty, ArrayT):
                    view = self.fresh_view()
                    dims = self.dims[arr.name][1:]
                    return ir.Let(view, get, ir.Copy(r, core.Var(view, ty), count(dims), element_scalar(ty)),
                                  ty, dims)
                return get
            case core.ForeignCall(fn, args, _, ty):
                for d in dims_of(self.shape(e)):  # a size of the destination, as a build's
                    self.bounds.nonnegative(d, f"the result of foreign function {fn.name}")
                return ir.Call(fn, r, tuple(args), ty)  # D-App: the foreign function writes r
            case core.Call(fn, args, ty):
                if ty == Card:
                    v = self.shape(e)
                    if v is not CIRC:
                        return ir.CardOf(v)
                return self.call(fn, args, ty, r)
            case core.If(c, a, b, ty):
                with self.bounds.branch():
                    then, orelse = self.term(a, r), self.term(b, r)
                return ir.If(c, then, orelse, ty)
            case core.Let(name, rhs, body):
                return self.let(name, rhs, body, r)
            case core.Build(size, core.Lam(((i, _),), body), ArrayT(elem) as ty):
                n = self.shape(size)
                assert n is not CIRC, "the shape stage rejects builds of data-dependent size"
                self.bounds.nonnegative(n)
                self.shapes[shp(i)] = CIRC
                self.values[i] = loop_symbol(i)
                elem_dims = dims_of(self.shape(e))[1:]
                dest = ir.Bullet() if not isinstance(elem, ArrayT) else \
                    ir.Offset(r, loop_symbol(i) * count(elem_dims))
                with self.bounds.loop(loop_symbol(i), n):
                    body_term = self.term(body, dest)
                return ir.Build(r, n, i, body_term, ty, strategy=e.strategy)
            case core.Iscan(core.Lam(((s, _), (i, _))), init, n, ty):
                return self.iscan(e, s, i, init, n, ty, r)
            case core.Ifold(core.Lam(((s, _), (i, _))), init, n, TupleT() as ty):
                return self.tuple_ifold(e, s, i, init, n, ty, r)
            case core.Ifold(core.Lam(((s, _), (i, _))), init, n, ty):
                return self.ifold(e, s, i, init, n, ty, r)
        raise AssertionError(f"not in ANF: {e!r}")

    def fresh_view(self) -> str:
        return self.names.fresh("view_")

    def call(self, fn: str, args, ty, r: ir.Ref) -> ir.Term:
        callee = self.kernels[fn]
        mapping = {}
        for (pname, pty, pdims), a in zip(callee.params, args):
            if isinstance(pty, ArrayT):
                mapping.update(zip(pdims, self.dims[a.name]))
            elif pty == Card:
                mapping[shape_sizes.size_symbol(pname)] = self.value(a)
        check = self.bounds.call(callee, mapping, args)
        return ir.Call(fn, r, tuple(args), ty, check_sizes=check)  # D-App

    def let(self, name, rhs, body, r: ir.Ref) -> ir.Term:
        if isinstance(rhs, core.Filter) and not (isinstance(body, core.Var) and body.name == name):
            return self.filter_let(name, rhs, body, r)
        ty = rhs.ty
        shape_value = self.shape(rhs)
        if isinstance(ty, (ArrayT, TupleT)) and isinstance(body, core.Var) and body.name == name \
                and not isinstance(rhs, (core.Var, core.Get, core.Proj, core.Tuple)):
            return self.term(rhs, r)  # the result is x: write e1 into the destination directly
        if isinstance(ty, TupleT):
            return self.tuple_let(name, rhs, body, shape_value, r)
        component = _in_place_component(name, body) if isinstance(r, ir.RTuple) else None
        if isinstance(ty, ArrayT) and component is not None and isinstance(r.items[component], (ir.RVar, ir.Offset)) \
                and not isinstance(rhs, (core.Var, core.Get, core.Proj)):
            # the result is a tuple with x as a component: write e1 into that destination directly
            self.in_place.add(name)
            rhs_term = self.term(rhs, r.items[component])
            self.bind(name, ty, shape_value, rhs)
            return ir.Let(name, rhs_term, self.term(body, r), ty, dims_of(shape_value))
        region = self.region()
        dims = dims_of(shape_value)
        match rhs:
            case core.Var() if isinstance(ty, ArrayT):
                rhs_term = ir.Atom_(rhs)  # another name for the same array
            case core.Get(arr, idx) if isinstance(ty, ArrayT):
                checked = self.bounds.read(arr.name, self.dims[arr.name][0], self.index_value(idx))
                rhs_term = ir.Get(arr, idx, ty, checked, rhs.loc)  # a view: no storage, no copy
            case core.Proj(tup, index) if isinstance(ty, ArrayT):
                rhs_term = ir.Proj(tup, index, ty)  # a view of the tuple's component
            case _:
                rhs_term = self.term(rhs, ir.RVar(region))
        self.bind(name, ty, shape_value, rhs)
        let = ir.Let(name, rhs_term, self.term(body, r), ty, dims)  # ty: the type of x
        n = count(dims) if isinstance(ty, ArrayT) else sympy.Integer(0)
        return ir.Alloc(region, element_scalar(ty), n, let, dims=dims)  # D-Let

    def tuple_let(self, name, rhs, body, shape_value, r: ir.Ref) -> ir.Term:
        """``let t = e1 in e2`` of a tuple: a tuple of atoms, a variable or a component is a view
        (no storage); anything else writes into one region per array component (scalar
        components are values, D-Let's empty allocation)."""
        ty = rhs.ty
        self.shapes[shp(name)] = shape_value
        dims = component_dims(ty, shape_value)
        if isinstance(rhs, (core.Var, core.Tuple, core.Proj)):
            return ir.Let(name, self.term(rhs, ir.Bullet()), self.term(body, r), ty, dims)
        allocs: list = []
        dest = self.tuple_dest(ty, shape_value, allocs)
        let = ir.Let(name, self.term(rhs, dest), self.term(body, r), ty, dims)
        return self.allocated(allocs, let)

    def tuple_dest(self, ty, shape_value, allocs: list) -> ir.Ref:
        """The destination of a tuple value: a new region per array component (appended to
        ``allocs`` as (region, elem, dims)), • per scalar one."""
        if isinstance(ty, TupleT):
            return ir.RTuple(tuple(self.tuple_dest(t, v, allocs) for t, v in zip(ty.items, shape_value.items)))
        if isinstance(ty, ArrayT):
            region = self.region()
            allocs.append((region, element_scalar(ty), dims_of(shape_value)))
            return ir.RVar(region)
        return ir.Bullet()

    @staticmethod
    def allocated(allocs: list, t: ir.Term) -> ir.Term:
        for region, elem, dims in reversed(allocs):
            t = ir.Alloc(region, elem, count(dims), t, dims=dims)
        return t

    def tuple_ifold(self, e, s, i, init, n, ty, r: ir.Ref) -> ir.Term:
        """An ifold whose state is a tuple: every array component double-buffered (two regions,
        as for an array state), every scalar component kept by the back end; the body writes
        the next state one component at a time."""
        state_shape = self.shape(e)
        count_value = self.value(n)
        counter = count_value if count_value is not None else n
        self.shapes[shp(i)] = CIRC
        self.shapes[shp(s)] = state_shape
        self.values[i] = loop_symbol(i)
        allocs: list = []

        def buffers(t, v):
            if isinstance(t, TupleT):
                return tuple(buffers(x, y) for x, y in zip(t.items, v.items))
            if isinstance(t, ArrayT):
                pair = (self.region(), self.region())
                allocs.extend((b, element_scalar(t), dims_of(v)) for b in pair)
                return pair
            return None

        entries = buffers(ty, state_shape)

        def first(entry, t):
            if isinstance(t, TupleT):
                return ir.RTuple(tuple(first(x, y) for x, y in zip(entry, t.items)))
            return ir.RVar(entry[0]) if isinstance(t, ArrayT) else ir.Bullet()

        init_term = self.term(init, first(entries, ty))
        with self.bounds.loop(loop_symbol(i), count_value):
            body = self.term(e.fn.body, ir.StateDest(s))
        return self.allocated(allocs, ir.Ifold(r, s, i, body, init_term, counter, ty, entries))

    def ifold(self, e, s, i, init, n, ty, r: ir.Ref) -> ir.Term:
        state_shape = self.shape(e)
        dims = dims_of(state_shape)
        count_value = self.value(n)
        counter = count_value if count_value is not None else n
        self.shapes[shp(i)] = CIRC
        self.shapes[shp(s)] = state_shape
        self.values[i] = loop_symbol(i)
        if not isinstance(ty, ArrayT):
            if ty == Card and state_shape is not CIRC:
                self.values[s] = state_shape
            init_term = self.term(init, ir.Bullet())
            with self.bounds.loop(loop_symbol(i), count_value):
                body = self.term(e.fn.body, ir.Bullet())
            return ir.Ifold(ir.Bullet(), s, i, body, init_term, counter, ty)
        self.dims[s] = dims
        b0, b1 = self.region(), self.region()
        init_term = self.term(init, ir.RVar(b0))
        with self.bounds.loop(loop_symbol(i), count_value):
            body = self.term(e.fn.body, ir.StateDest(s))
        loop = ir.Ifold(r, s, i, body, init_term, counter, ty, (b0, b1), dims)
        elem = element_scalar(ty)
        return ir.Alloc(b0, elem, count(dims), ir.Alloc(b1, elem, count(dims), loop, dims=dims), dims=dims)

    def filter_let(self, name: str, f: core.Filter, body: core.Expr, r: ir.Ref) -> ir.Term:
        """``let name = filter p v in body``: the kept elements written into a region of v's
        length (the capacity; for the kernel's result, its destination), their count bound to a
        variable that ``length name`` reads."""
        (x, _), = f.pred.params
        capacity = self.capacities.get(f.arr.name, self.dims[f.arr.name])
        length = self.names.fresh(f"{name}_length")
        self.shapes[shp(x)] = CIRC
        with self.bounds.branch():  # the predicate runs per element, maybe never: its reads are checked
            test = self.term(f.pred.body, ir.Bullet())
        result = isinstance(r, ir.RTuple) and isinstance(body, core.Var) and body.name == name
        region = r.items[0] if result else ir.RVar(self.region())
        if result:
            self.in_place.add(name)
        self.kept[name], self.capacities[name] = length, capacity
        self.dims[name] = (loop_symbol(length),)
        self.shapes[shp(name)] = self.shape(f)
        let = ir.Let(name, ir.Filter(region, length, x, test, f.arr, f.ty), self.term(body, r), f.ty,
                     self.dims[name])
        if result:
            return let
        return ir.Alloc(region.name, element_scalar(f.ty), count(capacity), let, dims=capacity)

    def iscan(self, e, s, i, init, n, ty, r: ir.Ref) -> ir.Term:
        """An iscan: the ifold of its scalar (or tuple of scalars) state, which writes each new
        state to element i of its destination (``trace``); its size is static, as a build's."""
        size = self.shape(n)
        assert size is not CIRC, "the shape stage rejects iscans of data-dependent size"
        self.bounds.nonnegative(size)
        state_ty = init.ty
        self.shapes[shp(i)] = CIRC
        self.values[i] = loop_symbol(i)

        def unknown(t):  # a state that the steps change is known only at run time, a Card's too
            return TupleShape(tuple(unknown(x) for x in t.items)) if isinstance(t, TupleT) else CIRC

        self.shapes[shp(s)] = unknown(state_ty)

        def scalars(t):  # a tuple state's components are all scalars: kept by the back end
            return tuple(scalars(x) for x in t.items) if isinstance(t, TupleT) else None

        def bullets(t):
            return ir.RTuple(tuple(bullets(x) for x in t.items)) if isinstance(t, TupleT) else ir.Bullet()

        values = bullets(state_ty)
        init_term = self.term(init, values)
        with self.bounds.loop(loop_symbol(i), size):
            body = self.term(e.fn.body, values)
        return ir.Ifold(values, s, i, body, init_term, size, state_ty, scalars(state_ty), trace=r)

    def kernel(self) -> ir.Kernel:
        k = self.k
        dest = destination_name(n for n, _ in k.params)
        result, result_dims = k.result, self.result_dims
        if returns_filter(k.body):
            # the kept elements in a destination of the capacity, then their count (C: out_0, out_1)
            result, result_dims = TupleT((k.result, Card)), (result_dims, ())
        body = self.term(k.body, result_dest(result, dest))
        return ir.Kernel(k.name, dest, self.params, result, result_dims, body, self.sizes,
                         self.bounds.constraints(), kept_length=result is not k.result)


def _in_place_component(name: str, body: core.Expr) -> int | None:
    """The component of the tuple that ``body`` ends in (after its lets) which is ``name``, where
    ``name`` is used nowhere else; else None."""
    while isinstance(body, core.Let):
        if name in core.free_vars(body.rhs):
            return None
        body = body.body
    if isinstance(body, core.Tuple):
        uses = [k for k, a in enumerate(body.items) if isinstance(a, core.Var) and a.name == name]
        return uses[0] if len(uses) == 1 else None
    return None


def result_dest(ty, dest: str) -> ir.Ref:
    """The kernel's destination: ``out`` for an array, • for a scalar, and for a tuple one
    destination per component (``out_0``, ``out_1_0``, ...: the C ABI's out-parameters)."""
    if isinstance(ty, TupleT):
        return ir.RTuple(tuple(result_dest(t, f"{dest}_{k}") for k, t in enumerate(ty.items)))
    return ir.RVar(dest) if isinstance(ty, ArrayT) else ir.Bullet()


def dps_program(p: core.Program, shapes: ShapeProgram) -> ir.Program:
    """D⟦·⟧ of every kernel (callees before callers), with regions laid out on the arena."""
    return layout_program(ir.Program(dps_kernels(p, shapes), p.entry))


def dps_kernels(p: core.Program, shapes: ShapeProgram) -> dict[str, ir.Kernel]:
    """D⟦·⟧ of every kernel, by name, callees first, not yet laid out (no offsets, no scratch):
    what a question about the terms alone needs (``fsmooth.auto_reductions``)."""
    functions = kernel_functions(p)
    kernels: dict = {}
    for name in core.callees_first(p):
        kernels[name] = _KernelTranslator(p.kernels[name], functions, kernels, shapes).kernel()
    return kernels

