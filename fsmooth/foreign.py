"""``@fsmooth.foreign``: a function whose code is C (and OpenCL C) the program already has, whose
Python body is its reference semantics (NOVA §3, foreign functions).

A foreign function takes and returns scalars (Double, Float, Index, Card, Bool).  In the F̃ IRs
a call of one is a scalar primitive: ``PrimApp``'s (DPS ``Prim``'s, DPIA ``ScalarOp``'s) ``op`` is
the ``Foreign`` itself, whose ``prim`` gives what a table entry of ``fsmooth.prims`` gives (how it
prints, its Python implementation for every IR's interpreter, its C).  So every pass treats it as
it treats ``sqrt``: pure and total, which the user promises (README, "Foreign functions"): the
optimiser may share two equal calls (cse), move a call out of a loop (licm, also out of a loop
that runs zero times), drop a call whose result is unused (dce), and fusion copies a call into a
consumer's loop only as it copies any primitive that is not cheap (never: ``fusion._CHEAP_PRIMITIVES``).

C: the C source (``c_source``) goes at the end of the translation unit, after the generated code,
which sees only a ``static`` prototype made from the annotations (so the source's macros and
helpers cannot change the generated code, and a definition whose types differ from the
annotations is a C compile error, never a call through the wrong type); or a header (``c_header``)
is included and ``libraries`` linked, the prototype following the header's own declaration.
OpenCL: ``opencl_source`` goes at the end of the program, after a prototype.  Generated C names
never collide with a foreign function's: its name is among the names every kernel's
``fsmooth.dpia.emit.Namer`` has taken (``foreign_names``), and a kernel exported under that name
is a ``CompileError`` (``fsmooth.dpia.codegen_c.exported_symbols``).
"""
from __future__ import annotations

import hashlib
import inspect
import os
import re
from dataclasses import dataclass
from functools import cached_property

from .errors import CompileError, Loc
from .kernel import SourceText
from .types import C_TYPE, Card, Scalar

TARGETS = {"c": "c_source or c_header", "opencl": "opencl_source"}


class Foreign:
    """A function decorated with ``@fsmooth.foreign``; calling it runs its Python body."""

    kind = "foreign function"  # in the front end's messages about its signature

    def __init__(self, fn, c_source: str | None = None, opencl_source: str | None = None,
                 c_header: str | None = None, libraries=(), c_name: str | None = None):
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
        self.source = SourceText.of(fn)

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self) -> str:
        return f"<fsmooth foreign function {self.name}>"

    # -- the signature, checked where a kernel calls it (fsmooth.frontend)
    @cached_property
    def signature(self):
        """``fsmooth.frontend``'s signature of the Python function, checked to be what a foreign
        function may have: scalars in, a scalar out, at least one parameter, a C identifier
        for a name."""
        from .frontend import _a, _Source, def_loc

        signature = _Source(self).signature
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
        for (name, t), arg in zip(signature.params, _Source(self).fdef.args.args):
            if not isinstance(t, Scalar):
                raise CompileError(f"parameter {name} of foreign function {self.name} is {t}: a foreign function "
                                   "takes scalars (Double, Float, Index, Card, Bool)", self.loc(arg))
        if not isinstance(signature.result, Scalar) or signature.result == Card:
            raise CompileError(f"foreign function {self.name} returns {_a(signature.result)}: a foreign function "
                               "returns a Double, Float, Index or Bool (a Card would be a size the compiler "
                               "cannot know before the call)", def_loc(self))
        return signature

    def loc(self, node) -> Loc:
        from .frontend import _Source

        return _Source(self).loc(node)

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
        where its source is part of the translation unit: it may define it either way)."""
        params = ", ".join(f"{C_TYPE[t]} {name}" for name, t in self.signature.params)
        storage = "static " if (self.c_source is not None and not opencl) else ""
        return f"{storage}{C_TYPE[self.signature.result]} {self.c_name}({params});"

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
    """The foreign functions that ``nodes`` (IR nodes with an ``op``) call, in order, once each."""
    return list(dict.fromkeys(node.op for node in nodes if isinstance(getattr(node, "op", None), Foreign)))


def check_sources(program, target: str):
    """``program`` (core), once every foreign function it calls has a source for ``target``
    (``"c"`` or ``"opencl"``) and no two of them have one C name: else a ``CompileError`` at the
    first call of one without, or of the second of one name."""
    from .core import PrimApp, walk

    by_name: dict[str, Foreign] = {}
    for k in program.kernels.values():
        for node in walk(k.body):
            if isinstance(node, PrimApp) and isinstance(node.op, Foreign):
                f = node.op
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

