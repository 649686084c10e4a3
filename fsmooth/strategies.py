"""Parallel strategies in F̃ (DPIA paper §6.2): how a ``build`` is mapped onto OpenCL's
hierarchy and in which address space its result lives.  As Python they only name what they
mean; as F̃ the front end records them on the ``build`` (``core.Build.strategy``), every stage
carries them unchanged, the C back end ignores them and the OpenCL back end obeys them.

Mappings (a variant of ``build``, same meaning as ``build``):

    build_global(n, f)     parforGlobal: iterations spread over all work-items
    build_workgroup(n, f)  parforWorkgroup: one iteration per work-group
    build_local(n, f)      parforLocal: iterations spread over the work-items of one group
    build_seq(n, f)        for: one work-item runs the iterations in order

Address spaces of a build's result that is stored (a let-bound intermediate):

    to_global(e)   to_local(e)   to_private(e)

Vectorisation (DPIA's asVector/asScalar): ``vectorize(4, build_global(n, f))``,
``vectorize(4, build_local(n, f))`` or ``vectorize(4, build_seq(n, f))`` (one work-item's own
vectors, the iterations in order) of Float or Double elements runs each work-item over 4
contiguous elements at once: every private scalar of the body (an ifold's accumulator too) is an
OpenCL ``float4``, reads and writes of contiguous elements are ``vload4``/``vstore4``, and a
guard on the element's index runs the branch together where it holds for all 4.  What the
lanes cannot do together (a data-dependent read, a read that is not contiguous) runs lane by
lane, with its checks, so the result is always the build's.

A program with no annotations gets the default strategy (``dpia.strategy_check``): its
outermost builds global, and with them a build nested alone in one (an image's columns) where
the launch knows its size (which of them runs along the lanes, and the work-group's tile, are
``fsmooth.cost_model.choose_nest``'s choice), the other ones inside sequential, scalars private, array intermediates private where they are one
work-item's own and small (``dpia.strategy_check.private_by_default``), else in global memory.  Index
arithmetic takes the place of split/join: ``build_workgroup(g, lambda w: build_local(l,
lambda t: ... x[w * l + t] ...))`` is ``mapWorkgroup(mapLocal(...)) ∘ split l``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .builtins import build as _build
from .errors import Loc

LEVELS = ("global", "workgroup", "local", "seq")
SPACES = ("global", "local", "private")
VECTOR_WIDTHS = (2, 4, 8, 16)


@dataclass(frozen=True)
class Strategy:
    """What the program says about one ``build``: its ``level`` (one of ``LEVELS``, None:
    the default strategy decides), the address ``space`` of its stored result (None: not
    said) and a vector ``width`` (1: scalar code).  ``loc`` points at the annotation.
    ``jam``: the iterations one work-item runs together, their loops fused (unroll-and-jam,
    ``dpia.unroll_jam``); no annotation says it, only the cost model asks for it
    (``fsmooth.auto_reductions``)."""

    level: str | None = None
    space: str | None = None
    width: int = 1
    jam: int = 1
    loc: Loc | None = field(default=None, compare=False, repr=False)


# ----------------------------------------------------------------------------- reference semantics
# Distinct function objects: the front end recognises each by identity.

def build_global(n, f):
    """``build`` whose iterations run over all work-items (parforGlobal)."""
    return _build(n, f)


def build_workgroup(n, f):
    """``build`` with one iteration per work-group (parforWorkgroup)."""
    return _build(n, f)


def build_local(n, f):
    """``build`` whose iterations run over the work-items of a group (parforLocal)."""
    return _build(n, f)


def build_seq(n, f):
    """``build`` run by one work-item in order (for)."""
    return _build(n, f)


def to_global(e):
    """``e``, stored in global memory."""
    return e


def to_local(e):
    """``e``, stored in the local memory of the work-group."""
    return e


def to_private(e):
    """``e``, stored in the private memory of the work-item."""
    return e


def vectorize(width, e):
    """``e`` (a build), computed ``width`` elements at a time with OpenCL vector types."""
    return e


MAPPINGS = {build_global: "global", build_workgroup: "workgroup", build_local: "local", build_seq: "seq"}
ADDRESS_SPACES = {to_global: "global", to_local: "local", to_private: "private"}
