"""The one traversal of every IR: ``children``, ``map_children`` and ``walk`` over the fields of
frozen dataclasses.

An IR module makes its own with ``Traversal(Node)``, where ``Node`` is the base class of its
nodes: a node's children are the values of its fields that are ``Node``s, in field order, found
also inside tuples (nested to any depth).  A new node type therefore needs no traversal code.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _copied_by_dict(cls: type) -> bool:
    """Whether a node of ``cls`` is its fields alone, held in its ``__dict__``: its ``__init__`` sets
    each field as given and nothing else (no ``__post_init__``, no field outside ``__init__``, no
    cached property), so that a copy of its ``__dict__`` is the node ``dataclasses.replace`` makes."""
    return (not hasattr(cls, "__post_init__") and all(f.init for f in dataclasses.fields(cls))
            and "__slots__" not in cls.__dict__
            and not any(isinstance(v, functools.cached_property) for k in cls.__mro__ for v in vars(k).values()))


def _replace(node, changes: dict):
    """``dataclasses.replace(node, **changes)``, without its generic checks of every field where the
    node is its fields alone (a pass replaces nodes by the million)."""
    cls = type(node)
    if not _copied_by_dict(cls):
        return dataclasses.replace(node, **changes)
    copy = object.__new__(cls)
    fields = copy.__dict__
    fields.update(node.__dict__)
    fields.update(changes)
    return copy


@dataclass(frozen=True)
class Traversal:
    node: type  # the base class of the IR's nodes

    # children and map_children run for every node of every pass: the common fields (a node, a
    # string, a type) are told apart here, a tuple alone taking a call of its own
    def children(self, node) -> tuple:
        """The nodes directly inside ``node``, in field order."""
        found: list = []
        base = self.node
        for name in _field_names(type(node)):
            value = getattr(node, name)
            if isinstance(value, base):
                found.append(value)
            elif isinstance(value, tuple):
                self._collect(value, found)
        return tuple(found)

    def _collect(self, value, found: list) -> None:
        if isinstance(value, self.node):
            found.append(value)
        elif isinstance(value, tuple):
            for item in value:
                self._collect(item, found)

    def map_children(self, f, node):
        """``node`` with ``f`` applied to each node directly inside it."""
        changes = {}
        base = self.node
        for name in _field_names(type(node)):
            value = getattr(node, name)
            if isinstance(value, base):
                changes[name] = f(value)
            elif isinstance(value, tuple) and self._holds_node(value):
                changes[name] = self._map(f, value)
        return _replace(node, changes) if changes else node

    def _holds_node(self, value: tuple) -> bool:
        return any(isinstance(item, self.node) or (isinstance(item, tuple) and self._holds_node(item))
                   for item in value)

    def _map(self, f, value):
        if isinstance(value, self.node):
            return f(value)
        if isinstance(value, tuple):
            return tuple(self._map(f, item) for item in value)
        return value

    def walk(self, node):
        """``node`` and every node inside it, in pre-order.  With a stack of its own: a nested
        ``yield from`` passes each node up through every generator above it, which costs the
        depth per node (quadratic in a chain of lets)."""
        pending = [node]
        while pending:
            node = pending.pop()
            yield node
            pending.extend(reversed(self.children(node)))
