"""F̃ types: the scalar kinds, nested arrays, and (non-escaping) function types.

The objects here double as the annotations users write: ``Array[Double]`` is an
``ArrayT(Double)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class Type:
    """Base of all F̃ types."""

    def __str__(self) -> str:  # paper notation: Array<Double>, (Double, Index ⇒ Double)
        return type_str(self)


@dataclass(frozen=True)
class Scalar(Type):
    name: str  # 'Double' | 'Float' | 'Index' | 'Card' | 'Bool'

    __str__ = Type.__str__

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ArrayT(Type):
    elem: Type

    __str__ = Type.__str__

    def __repr__(self) -> str:
        return f"Array[{self.elem!r}]"


@dataclass(frozen=True)
class TupleT(Type):
    """A tuple of F̃ values: ``tuple[A, B]`` (DPIA's record type A × B)."""

    items: tuple[Type, ...]

    __str__ = Type.__str__

    def __repr__(self) -> str:
        return f"tuple[{', '.join(map(repr, self.items))}]"


@dataclass(frozen=True)
class FunT(Type):
    params: tuple[Type, ...]
    result: Type

    __str__ = Type.__str__


Double = Scalar("Double")
Float = Scalar("Float")
Index = Scalar("Index")
Card = Scalar("Card")
Bool = Scalar("Bool")

SCALARS = {t.name: t for t in (Double, Float, Index, Card, Bool)}
INTEGRAL = (Index, Card)
FLOATING = (Double, Float)
NUMERIC = (Double, Float, Index, Card)


class _ArrayConstructor:
    """``Array[T]`` in annotations."""

    def __getitem__(self, elem: Type) -> ArrayT:
        if not isinstance(elem, (Scalar, ArrayT)):
            raise TypeError(f"Array[...] needs an F̃ scalar or array type, not {elem!r}")
        return ArrayT(elem)

    def __repr__(self) -> str:
        return "Array"


Array = _ArrayConstructor()


def type_str(t: Type) -> str:
    match t:
        case Scalar(name):
            return name
        case ArrayT(elem):
            return f"Array<{type_str(elem)}>"
        case TupleT(items):
            return f"({' × '.join(type_str(t) for t in items)})"
        case FunT(params, result):
            return f"({', '.join(type_str(p) for p in params)} ⇒ {type_str(result)})"
    raise AssertionError(t)


def leaves(t: Type, path: tuple = ()) -> list[tuple[tuple, Type]]:
    """The non-tuple components of ``t`` with their paths, in order (``[((), t)]`` if ``t`` is
    not a tuple): a tuple is passed to and from C one component at a time."""
    if isinstance(t, TupleT):
        return [leaf for k, item in enumerate(t.items) for leaf in leaves(item, path + (k,))]
    return [(path, t)]


def path_suffix(path: tuple) -> str:
    """``_0_1`` for the component at path (0, 1): the suffix of its C names (``out_0_1``)."""
    return "".join(f"_{k}" for k in path)


def rank(t: Type) -> int:
    """Number of array dimensions of ``t`` (0 for scalars)."""
    n = 0
    while isinstance(t, ArrayT):
        t, n = t.elem, n + 1
    return n


def element_scalar(t: Type) -> Scalar:
    """The scalar at the bottom of a (nested) array type, or the scalar itself."""
    while isinstance(t, ArrayT):
        t = t.elem
    assert isinstance(t, Scalar), t
    return t


def array_of(elem: Type, depth: int) -> Type:
    for _ in range(depth):
        elem = ArrayT(elem)
    return elem


# Run-time representation: the element type of the flat buffer of an array, or of a scalar.
NUMPY_DTYPE = {
    Double: np.dtype(np.float64),
    Float: np.dtype(np.float32),
    Index: np.dtype(np.int64),
    Card: np.dtype(np.int64),
    Bool: np.dtype(np.bool_),
}

C_TYPE = {
    Double: "double",
    Float: "float",
    Index: "int64_t",
    Card: "int64_t",
    Bool: "bool",
}

BYTES = {Double: 8, Float: 4, Index: 8, Card: 8, Bool: 1}
