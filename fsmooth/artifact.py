"""What the back end hands to the run-time loader: C source, cffi declarations and, per
exported kernel, the interface the Python side needs to check arguments and call it.

The C ABI of an exported kernel ``K`` (all integers are ``int64_t``):

    int     K(void *restrict scratch, T *restrict out, <params>);
    void    K_shape(int64_t *dims_out, <sizes>);       /* result dims, rank(result) of them */
    int64_t K_scratch_bytes(<sizes>);                  /* exact peak arena bytes of one call */
    int     K_check_sizes(<sizes>);                    /* 0, or 1 + index of the first failed constraint,
                                                          #constraints + 1: a size overflows int64,
                                                          #constraints + 2: a size divides by zero */

A kernel whose result is a tuple has one out-parameter per component instead of ``out``, in
order (``T0 *restrict out_0, T1 *restrict out_1``; nested tuples flattened: ``out_1_0``), and one
shape function per component (``K_shape_0``, ...).  A kernel whose result is a ``filter`` is one
of the pair (kept elements, kept length) (``KernelInterface.kept_length``): ``out_0`` has the
capacity (``K_shape_0``: the length of what is filtered) and the kept elements are written from
its start, ``int64_t *out_1`` receives their count.  A tuple parameter is passed as its
components, each a parameter of its own (``p_0``, ``p_1``).

Sizes (constraints, scratch, result dims) are sympy expressions over the size symbols, named as
in ``KernelInterface.sizes``; ``fsmooth.shape.size_printer`` writes them for each target.

``<params>``: per parameter in order, an array ``const T *restrict a, int64_t a_d0, ..., a_d{r-1}``
or a scalar ``T x``; T is double/float/int64_t/bool.  ``out`` points at the result buffer (an
array) or at one scalar.  ``<sizes>``: the kernel's size symbols in ``KernelInterface.sizes``
order, each an ``int64_t``.  ``K`` returns one of ``STATUS`` (0 = ok); it never writes outside
``out`` and ``scratch[0 : K_scratch_bytes(...)]``.  The variants that take their regions from the
heap (``Options.allocation`` other than ``arena``) need no scratch: ``K_scratch_bytes`` is 0.
A kernel compiled with ``Options.parallel`` has one more parameter, the last, ``int64_t nthreads``
(``KernelInterface.threads``, a size like a Card's): the most threads it runs on, at least 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .errors import Loc
from .types import TupleT, Type

STATUS = {
    0: "ok",
    1: "index out of range",
    2: "integer division by zero",
    3: "size constraint violated",
    4: "out of memory",  # a region of the malloc, leaky or gc variant could not be allocated
    5: "integer conversion out of range",  # int(x) of a NaN, an infinity or a float outside int64
    6: "integer overflows int64",  # a size (result, scratch, loop count, region bytes) or Index/Card arithmetic
}


@dataclass(frozen=True)
class SizeSource:
    """Where a size symbol's value comes from at a call: dim ``dim`` of array parameter
    ``param``, or (``dim`` is None) the value of the Card parameter ``param``."""

    symbol: str
    param: str
    dim: int | None


@dataclass(frozen=True)
class Constraint:
    cond: sympy.Basic  # the condition that must hold, over the size symbols (shape.size_printer prints it)
    param: str  # the parameter named in the error
    message: str  # human-readable, e.g. "b has length b_d0 but is read at indices up to a_d0 - 1"


@dataclass(frozen=True)
class RangeCheck:
    """A read that DPS could not prove in range (``checked``), as code generation decided it: the
    C tests 0 <= ``index`` < ``length`` (``emitted``), or the range analysis (``fsmooth.dps.ranges``)
    proves it from ``facts``, the index's bounds and the loops and ``if``s they stand on."""

    loc: Loc | None  # the read in the user's source
    index: str  # C
    length: str  # C
    emitted: bool
    facts: tuple = ()  # of text, empty where emitted


@dataclass(frozen=True)
class KernelInterface:
    name: str
    symbol: str  # the exported C name, <module>_<kernel> (fsmooth.dpia.emit.exported_name)
    params: tuple  # (name, Type)
    result: Type
    sizes: tuple  # SizeSource, in the order of the <sizes> arguments
    constraints: tuple  # Constraint, in K_check_sizes numbering
    scratch_formula: sympy.Expr  # the scratch bytes of one call, over the size symbols
    result_dims: tuple  # sympy.Expr per result dim, over the size symbols (a tuple: per component)
    range_checks: tuple = ()  # RangeCheck per checked read of the generated code, in the order written
    # A parallel kernel's last parameter, a Card: the most threads a call runs on (its scratch is
    # one slice per thread, fsmooth.dps.parallel); the Python runtime passes OpenMP's thread count.
    threads: str | None = None
    # The kernel's F̃ result is a filter (an array whose length is known only at run time): the C
    # result is the pair (out_0, out_1), the kept elements from the start of a destination of the
    # capacity (K_shape_0's dims), then their count; a call from Python returns out_0[:out_1].
    kept_length: bool = False

    @property
    def outputs(self) -> list:
        """(C name suffix, type, dims) per out-parameter (``result_components``)."""
        return result_components(self.result, self.result_dims)


def result_components(result: Type, dims: tuple, suffix: str = "") -> list:
    """(C name suffix, type, dims) of each out-parameter of a kernel with this result: one for a
    non-tuple (suffix ""), one per component of a tuple (``_0``, ``_1_0``, ...)."""
    if isinstance(result, TupleT):
        return [c for k, (t, d) in enumerate(zip(result.items, dims))
                for c in result_components(t, d, f"{suffix}_{k}")]
    return [(suffix, result, tuple(dims))]


@dataclass(frozen=True)
class CArtifact:
    source: str  # one self-contained C99 translation unit (#include "fsmooth_rt.h")
    cdef: str  # the declarations of the exported functions, for cffi
    interfaces: dict  # name -> KernelInterface
    # What the variant needs from the build beyond fsmooth.cache's defaults (-fopenmp; libgc).
    compile_args: tuple = ()
    libraries: tuple = ()
    # fsmooth.foreign.ForeignUse per foreign function the C calls: what an embedding program links
    foreign: tuple = ()
