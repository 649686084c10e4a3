"""``@fsmooth.foreign``: a function whose code is C (and OpenCL C) the program already has, whose
Python body is its reference semantics (NOVA §3, foreign functions).

A foreign function takes scalars (Double, Float, Index, Card, Bool) and arrays of them.  With a
scalar result, a call of one is a scalar primitive in the F̃ IRs: ``PrimApp``'s (DPS ``Prim``'s,
DPIA ``ScalarOp``'s) ``op`` is the ``Foreign`` itself, whose ``prim`` gives what a table entry of
``fsmooth.prims`` gives (how it prints, its Python implementation for every IR's interpreter, its
C).  With an array result, a call is a ``core.ForeignCall`` whose ``dims`` are its shape function
(``shape=lambda ...``, F̃ over the arguments, translated by the front end) applied to the
arguments, so the shape stage knows its size; D⟦e⟧r makes it a DPS ``Call`` of the ``Foreign``
into the destination r (D-App: the function writes its result where the compiled code says, and
uses no scratch), and C calls it with that destination first.  Every pass treats a call as pure
and total, which the user promises (README, "Foreign functions"): the optimiser may share two
equal calls (cse), move a call out of a loop (licm, also out of a loop that runs zero times), drop
a call whose result is unused (dce), and fusion copies a call into a consumer's loop only as it
copies any primitive that is not cheap (never: ``fusion._CHEAP_PRIMITIVES``; a ``ForeignCall`` is
not a ``build``, so it is never fused).

C: the C source (``c_source``) goes at the end of the translation unit, after the generated code,
which sees only a ``static`` prototype made from the annotations (so the source's macros and
helpers cannot change the generated code, and a definition whose types differ from the
annotations is a C compile error, never a call through the wrong type); or a header (``c_header``)
is included and ``libraries`` linked, the prototype following the header's own declaration.
OpenCL: ``opencl_source`` goes at the end of the program, after a prototype (arrays as ``__global``
pointers: an array in local or private memory is a ``CompileError``).  Generated C names
never collide with a foreign function's: its name is among the names every kernel's
``fsmooth.dpia.emit.Namer`` has taken (``foreign_names``), and a kernel exported under that name
is a ``CompileError`` (``fsmooth.dpia.codegen_c.exported_symbols``).
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import os
import re
from dataclasses import dataclass
from functools import cached_property

from .errors import CompileError, Loc
from .kernel import SourceText
from .types import C_TYPE, ArrayT, Bool, Card, Scalar, element_scalar, rank

TARGETS = {"c": "c_source or c_header", "opencl": "opencl_source"}


class Foreign:
    """A function decorated with ``@fsmooth.foreign``; calling it runs its Python body."""

    kind = "foreign function"  # in the front end's messages about its signature

    def __init__(self, fn, c_source: str | None = None, opencl_source: str | None = None,
                 c_header: str | None = None, libraries=(), c_name: str | None = None, shape=None):
        if not inspect.isfunction(fn):
            raise TypeError(f"@fsmooth.foreign needs a function defined with def, not {fn!r}")
        if c_source is not None and c_header is not None:
            raise ValueError(f"foreign function {fn.__name__}: give its C as c_source or as c_header "
                             "(with libraries), not both")
        if isinstance(libraries, str):
            libraries = (libraries,)
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__
        self.c_name = c_name or fn.__name__
        self.c_source, self.opencl_source, self.c_header = c_source, opencl_source, c_header
        self.libraries = tuple(libraries)
        self.shape = shape  # an array result's dims: a lambda of the arguments, in F̃ (length, + - * //)
        self.source = SourceText.of(fn)

    def __call__(self, *args):
        """The Python body (a reference run's semantics); an array result is checked against the
        shape function, as the compiled code's destination is sized by it."""
        if self.shape is None:
            return self.fn(*args)
        dims = self.shape(*args)
        return self.result(list(args), list(dims) if isinstance(dims, tuple) else [dims])

    def __repr__(self) -> str:
        return f"<fsmooth foreign function {self.name}>"

    def __str__(self) -> str:  # as the IR printers show a call
        return self.name

    def result(self, args: list, dims: list | None):
        """What the Python body gives for ``args`` (numpy arrays and scalars), an array result as
        a numpy array of its element type, checked to have the ``dims`` of the shape function
        where they are given (the interpreters' semantics of a call)."""
        import numpy as np

        from .types import NUMPY_DTYPE

        value = self.fn(*args)
        result = self.signature.result
        if not isinstance(result, ArrayT):
            return value
        array = np.asarray(value, dtype=NUMPY_DTYPE[element_scalar(result)])
        if dims is not None and list(array.shape) != [int(d) for d in dims]:
            raise ValueError(f"foreign function {self.name} returned an array of shape {array.shape}, but its "
                             f"shape function gives {tuple(dims)}")
        return array

    # -- the signature, checked where a kernel calls it (fsmooth.frontend)
    @cached_property
    def _parsed(self):
        """The Python function's source, read and parsed once (``fsmooth.frontend._Source``)."""
        from .frontend import _Source

        return _Source(self)

    @cached_property
    def signature(self):
        """``fsmooth.frontend``'s signature of the Python function, checked to be what a foreign
        function may have: scalars or arrays of them in and out (a shape function for an array
        result), at least one parameter, a C identifier for a name."""
        from .frontend import _a, def_loc

        signature = self._parsed.signature
        if not re.fullmatch(r"[A-Za-z_]\w*", self.c_name, flags=re.ASCII):
            raise CompileError(f"foreign function {self.name}: its C name {self.c_name!r} is not a C identifier",
                               def_loc(self))
        from fsmooth.dpia.emit import is_reserved

        if is_reserved(self.c_name):
            raise CompileError(f"foreign function {self.name}: its C name {self.c_name} is reserved to C or to "
                               "fsmooth's runtime; give another with c_name=", def_loc(self))
        if not signature.params:
            raise CompileError(f"foreign function {self.name} takes no parameters: a constant needs no foreign "
                               "function", def_loc(self))
        for (name, t), arg in zip(signature.params, self._parsed.fdef.args.args):
            if not isinstance(element_scalar(t), Scalar):
                raise CompileError(f"parameter {name} of foreign function {self.name} is {_a(t)}: a foreign "
                                   "function takes scalars (Double, Float, Index, Card, Bool) and arrays of them",
                                   self.loc(arg))
        result = signature.result
        if not isinstance(element_scalar(result), Scalar) or result == Card:
            raise CompileError(f"foreign function {self.name} returns {_a(result)}: a foreign function returns "
                               "a Double, Float, Index or Bool, or an array of them (a Card would be a size the "
                               "compiler cannot know before the call)", def_loc(self))
        if isinstance(result, ArrayT) and self.shape is None:
            raise CompileError(f"foreign function {self.name} returns {_a(result)} but has no shape function: give "
                               f"@fs.foreign shape=lambda {', '.join(n for n, _ in signature.params)}: ... (the "
                               "result's dims, in F̃ over the arguments: length(a), + - * //)", def_loc(self))
        return signature

    def shape_lambda(self):
        """The ``shape=lambda ...`` of the decorator, as the front end reads it (its AST and where
        it is), or a CompileError where it is not written there."""
        from .frontend import def_loc

        source = self._parsed
        for decorator in source.fdef.decorator_list:
            if isinstance(decorator, ast.Call):
                for keyword in decorator.keywords:
                    if keyword.arg == "shape":
                        if isinstance(keyword.value, ast.Lambda):
                            return source, keyword.value
                        raise CompileError(f"the shape function of foreign function {self.name} must be a lambda "
                                           "written in its decorator", source.loc(keyword.value))
        raise CompileError(f"foreign function {self.name}: its shape function is not a `shape=lambda ...` of "
                           "its decorator", def_loc(self))

    def loc(self, node) -> Loc:
        return self._parsed.loc(node)

    @cached_property
    def prim(self):
        """This function as a scalar primitive (``fsmooth.prims.Prim``): printed by its name,
        evaluated by its Python body, written in C and OpenCL C as a call of its C name."""
        from .prims import Prim

        arity = len(self.signature.params)
        return Prim(self.name, arity, self.name, False, self.fn,
                    f"{self.c_name}({', '.join(f'{{{k}}}' for k in range(arity))})")

    # -- C
    def prototype(self, opencl: bool = False) -> str:
        """The C (or OpenCL C) declaration of the function its annotations give (``static`` in C
        where its source is part of the translation unit: it may define it either way): scalars
        by value; an array as a pointer to its first element and its dims (``a, a_d0, ...``); an
        array result as the destination ``out`` first, of the shape function's dims, and no value."""
        from fsmooth.dpia.emit import Namer

        names = Namer({"out"})  # C names for the parameters: the Python names where C allows them
        # OpenCL: arrays are in global memory, Bool elements bytes (fsmooth.opencl_artifact)
        space = "__global " if opencl else ""

        def element(t) -> str:
            return "uchar" if opencl and element_scalar(t) == Bool else C_TYPE[element_scalar(t)]

        params = []
        for name, t in self.signature.params:
            cname = names.fresh(name)
            if isinstance(t, ArrayT):
                params.append(f"{space}const {element(t)} *{cname}")
                params += [f"int64_t {names.fresh(f'{cname}_d{j}')}" for j in range(rank(t))]
            else:
                params.append(f"{C_TYPE[t]} {cname}")
        result = self.signature.result
        if isinstance(result, ArrayT):
            params.insert(0, f"{space}{element(result)} *out")
        storage = "static " if (self.c_source is not None and not opencl) else ""
        returns = "void" if isinstance(result, ArrayT) else C_TYPE[result]
        return f"{storage}{returns} {self.c_name}({', '.join(params)});"

    def header_path(self) -> str | None:
        return None if self.c_header is None else os.path.abspath(self.c_header) if os.sep in self.c_header \
            else self.c_header

    def build_needs(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What a C build of code that calls this function needs: compiler flags (the header's
        folder; a library file's folder, searched at link and at load) and libraries (``-l``
        names; a library file as ``:file``)."""
        flags, libraries = [], []
        header = self.header_path()
        if header is not None and os.sep in header:
            flags.append(f"-I{os.path.dirname(header)}")
        for library in self.libraries:
            if os.sep in library:
                folder = os.path.dirname(os.path.abspath(library))
                flags += [f"-L{folder}", f"-Wl,-rpath,{folder}"]
                libraries.append(f":{os.path.basename(library)}")
            else:
                libraries.append(library.removeprefix("-l"))
        return tuple(flags), tuple(libraries)

    def include(self) -> list[str]:
        """The ``#include`` of the header, and a comment with its digest: the build cache keys on
        the generated C, so a changed header is a new build."""
        header = self.header_path()
        if header is None:
            return []
        lines = [f'#include "{os.path.basename(header)}"']
        if os.path.isfile(header):
            with open(header, "rb") as f:
                lines.insert(0, f"/* {os.path.basename(header)}: sha256 {hashlib.sha256(f.read()).hexdigest()} */")
        return lines


def foreign(fn=None, **sources):
    """Mark ``fn`` as a foreign function (README.md, "Foreign functions"): ``c_source=`` (C that
    defines it), ``opencl_source=`` (OpenCL C that defines it), or ``c_header=`` and
    ``libraries=`` (a header that declares it and the libraries that define it: names for ``-l``
    or paths of library files); ``c_name=`` where its C name is not the Python function's."""
    if fn is None:
        return lambda f: Foreign(f, **sources)
    return Foreign(fn)


@dataclass(frozen=True)
class ForeignUse:
    """A foreign function as a C build and an embedding program see it (``CArtifact.foreign``)."""

    name: str
    prototype: str
    header: str | None  # None: its source is in the generated C
    libraries: tuple[str, ...]


def called_foreign(nodes) -> list[Foreign]:
    """The foreign functions that ``nodes`` (DPIA phrases: ``ScalarOp``s, ``CallCmd``s) call, in
    order, once each."""
    called = (getattr(node, "op", None) or getattr(node, "fn", None) for node in nodes)
    return list(dict.fromkeys(f for f in called if isinstance(f, Foreign)))


def check_sources(program, target: str):
    """``program`` (core), once every foreign function it calls has a source for ``target``
    (``"c"`` or ``"opencl"``) and no two of them have one C name: else a ``CompileError`` at the
    first call of one without, or of the second of one name."""
    from .core import ForeignCall, PrimApp, walk

    by_name: dict[str, Foreign] = {}
    for k in program.kernels.values():
        for node in walk(k.body):
            f = node.op if isinstance(node, PrimApp) else node.fn if isinstance(node, ForeignCall) else None
            if isinstance(f, Foreign):
                if by_name.setdefault(f.c_name, f) is not f:
                    raise CompileError(f"two foreign functions, {by_name[f.c_name].name} and {f.name}, have the C "
                                       f"name {f.c_name}; give one another with c_name=", node.loc)
                has = f.c_source is not None or f.c_header is not None if target == "c" else f.opencl_source is not None
                if not has:
                    raise CompileError(f"foreign function {f.name} has no source for the {target} target "
                                       f"(give @fs.foreign its {TARGETS[target]})", node.loc)
    return program


def foreign_names(functions) -> frozenset:
    return frozenset(f.c_name for f in functions)

