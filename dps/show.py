"""DPS-F̃ in the paper's notation (DPS paper §3.4-3.5).

Shapes are printed by value: a shape equal to a parameter's is that parameter's ``x_shp``
(as the paper's partially evaluated listing writes ``vectorNorm r0 tmp vec1_shp``), any
other as the tuple ``(n, (m, ∘))``.  A parallel build is printed ``build∥``, a parallel reduction ``ifold∥``.
"""
from __future__ import annotations

from fsmooth import prims
from fsmooth.core import Lit, Var
from fsmooth.types import ArrayT, Card

from . import ir


class _Printer:
    def __init__(self, k: ir.Kernel):
        self.param_dims = [(n, d) for n, t, d in k.params if isinstance(t, ArrayT)]
        self.dims = {n: d for n, _, d in k.params}

    def shape(self, dims) -> str:
        if dims is None:
            return "?"
        if any(isinstance(d, tuple) for d in dims):  # a tuple: its components' shapes
            return f"⟨{', '.join(self.shape(d) for d in dims)}⟩"
        for name, d in self.param_dims:
            if tuple(d) == tuple(dims):
                return f"{name}_shp"
        text = "∘"
        for d in reversed(dims):
            text = f"({d}, {text})"
        return text

    def atom_shape(self, a) -> str:
        if isinstance(a, Var) and isinstance(a.ty, ArrayT):
            return self.shape(self.dims.get(a.name))
        if a.ty == Card:
            return atom(a)
        return "∘"

    def term(self, t: ir.Term, indent: int) -> str:
        pad = "  " * indent
        match t:
            case ir.Atom_(a):
                return atom(a)
            case ir.Prim(op, args):
                p = prims.prim(op)
                if p.infix:
                    return f"({atom(args[0])} {p.symbol} {atom(args[1])})"
                return f"{p.symbol}({', '.join(atom(a) for a in args)})"
            case ir.Get(arr, idx, _, checked):
                return f"{atom(arr)}[{atom(idx)}]{'!' if checked else ''}"
            case ir.TupleOf(items, _, dest, written):
                shown = ", ".join(f"{atom(a)}✓" if k in written else atom(a) for k, a in enumerate(items))
                return f"({shown})" if dest == ir.Bullet() else f"write {ref(dest)} ({shown})"
            case ir.Proj(tup, index):
                return f"{atom(tup)}.{index}"
            case ir.CardOf(value):
                return str(value)
            case ir.Let(name, rhs, body, _, dims, inline):
                if dims:
                    self.dims[name] = dims
                bind = ":=" if inline else "="
                return f"let {name} {bind} {self.term(rhs, indent + 1)} in\n{pad}{self.term(body, indent)}"
            case ir.If(c, a, b):
                return (f"if {atom(c)} then\n{pad}  {self.term(a, indent + 1)}\n"
                        f"{pad}else\n{pad}  {self.term(b, indent + 1)}")
            case ir.Alloc(region, elem, n, body, _, dims):
                # a merged region holds no one value: its size is printed as a count
                size = f"{card(n)} × {elem.name}" if dims is None else f"bytes {self.shape(dims)}"
                return f"alloc ({size}) (λ {region}.\n{pad}  {self.term(body, indent + 1)})"
            case ir.Build(dest, n, i, body, _, parallel):
                word = "build∥" if parallel else "build"
                return f"{word} {ref(dest)} {card(n)} (λ {i}.\n{pad}  {self.term(body, indent + 1)})"
            case ir.Ifold(dest, s, i, body, init, n, _, buffers, dims, trace, monoids, partials):
                if dims:
                    self.dims[s] = dims
                bufs = f" [{' '.join(ir.buffer_names(buffers))}]" if buffers else ""
                count = atom(n) if isinstance(n, (Var, Lit)) else card(n)
                # an iscan writes its states to its trace: ``iscan r (λ s i. e) z n``
                word, dest = ("iscan", trace) if trace is not None else ("ifold", dest)
                if partials:  # a parallel reduction: its operators, and the regions of its partials
                    word = f"ifold∥ ({', '.join(m.op for m in monoids)} → {' '.join(partials)})"
                return (f"{word} {ref(dest)}{bufs} (λ {s} {i}.\n{pad}  {self.term(body, indent + 1)})\n"
                        f"{pad}  ({self.term(init, indent + 1)}) {count}")
            case ir.Filter(dest, length, x, body, arr):
                return (f"let {length} = filter {ref(dest)} (λ {x}.\n{pad}  {self.term(body, indent + 1)})\n"
                        f"{pad}  {atom(arr)}")
            case ir.Copy(dest, src):
                return f"copy {ref(dest)} {atom(src)}"
            case ir.Keep():
                return "keep"
            case ir.Call(fn, dest, args):
                shapes = " ".join(self.atom_shape(a) for a in args)
                return f"{fn} {ref(dest)} {' '.join(atom(a) for a in args)} {shapes}".rstrip()
        raise AssertionError(t)


def atom(a) -> str:
    match a:
        case Var(name):
            return name
        case Lit(value):
            if isinstance(value, bool):
                return "true" if value else "false"
            return repr(value)
    raise AssertionError(a)


def card(n) -> str:
    return str(n) if n.is_Atom else f"({n})"


def ref(r: ir.Ref) -> str:
    match r:
        case ir.RVar(name):
            return name
        case ir.Bullet():
            return "•"
        case ir.Offset(base, elems):
            return f"({ref(base)} + {elems})"
        case ir.RTuple(items):
            return f"⟨{', '.join(ref(r) for r in items)}⟩"
        case ir.StateDest(state):
            return f"next({state})"
    raise AssertionError(r)


def show_kernel(k: ir.Kernel) -> str:
    p = _Printer(k)
    names = " ".join(n for n, _, _ in k.params)
    shapes = " ".join(f"{n}_shp" for n, _, _ in k.params)
    return f"{k.name} = λ {k.dest} {names} {shapes}.\n  {p.term(k.body, 1)}"


def show_program(p: ir.Program) -> str:
    return "\n\n".join(show_kernel(k) for k in p.kernels.values())
