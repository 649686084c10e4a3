"""The one supply of fresh names, used by every pass that introduces variables.

``NameSupply.fresh(base)`` gives a name no earlier ``fresh`` gave and not in ``taken``: ``base``
itself while it is free, else ``base`` numbered: ``base + separator + k`` for k = 1, 2, ...  Each pass
keeps its own readable spelling:

- ``x``, ``x_1``, ``x_2`` (the default): the front end, ANF, C identifiers (``dpia.emit.Namer``);
- ``i'``, ``i'1`` (suffix ``'``, no separator): accT/conT, names no F̃ program can use;
- ``x_buf``, ``x_buf1`` (suffix ``_buf``, no separator): OpenCL's hoisted buffers;
- ``r1``, ``view_2``, ``r3`` (``numbered``, no separator): DPS regions and views, every name
  numbered from one count, so the number alone tells two apart.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable


class NameSupply:
    """Fresh names, unique among those this supply gave and ``taken``.

    ``suffix`` is added to every base (``"'"``, ``"_buf"``); ``forbidden(name)`` rules a name out
    even as asked for (C keywords); ``made_up_avoid`` is kept out of numbered names only, so a
    base that is in it is still given as is (the front end: a lambda parameter keeps the user's
    name, a renamed one must not capture another of the user's identifiers).
    """

    def __init__(self, taken: Iterable[str] = (), *, separator: str = "_",
                 suffix: str = "", numbered: bool = False, forbidden: Callable[[str], bool] = lambda name: False,
                 made_up_avoid: Iterable[str] = ()):
        self.taken = set(taken)
        self.separator = separator
        self.suffix = suffix
        self.numbered = numbered
        self.forbidden = forbidden
        self.made_up_avoid = frozenset(made_up_avoid)
        # the first number worth trying, per base (one count for all when numbered): a name
        # once taken stays taken, so the numbers below it never need trying again
        self._next: dict[str | None, int] = {}

    def fresh(self, base: str) -> str:
        base += self.suffix
        if not self.numbered and base not in self.taken and not self.forbidden(base):
            self.taken.add(base)
            return base
        key = None if self.numbered else base
        k = self._next.get(key, 1)
        while self._unavailable(f"{base}{self.separator}{k}"):
            k += 1
        name = f"{base}{self.separator}{k}"
        self._next[key] = k + 1
        self.taken.add(name)
        return name

    def _unavailable(self, name: str) -> bool:
        return name in self.taken or name in self.made_up_avoid or self.forbidden(name)


def destination_name(params: Iterable[str]) -> str:
    """The name of a kernel's destination (DPS), ``out`` unless a parameter is ``out`` or
    ``out_...``, then ``out1``, ``out2``, ...: its components are ``out_0``, ``out_1_0``, ..., and
    a tuple parameter ``p`` becomes ``p_0``, ..., so the choice is the same before and after.  A
    parameter rules out one candidate at most, so one of the first ``len(params) + 1`` is free."""
    params = tuple(params)
    return next(candidate for candidate in ("out", *(f"out{k}" for k in range(1, len(params) + 1)))
                if not any(p == candidate or p.startswith(f"{candidate}_") for p in params))
