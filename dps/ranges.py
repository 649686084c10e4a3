"""The range analysis: what the enclosing loops and ``if``s say about an integer expression.

One ``Ranges`` value says what is known at a point of a kernel: the inclusive range of each
enclosing loop variable, outermost first (a bound may be an expression of an enclosing loop
variable: ``for j < i``, an ``ifold`` counted by an index), and the upper bounds that enclosing
``if (e < b)`` give, and which symbols are sizes.  Both consumers ask it their range questions:

- DPS (``dps.bounds``) asks for the attained extremes of a read's index over the loops
  (``tighten``, ``bounds`` where exact): a read in range at both extremes is a size constraint
  checked once before the call, any other read is checked where it happens;
- code generation (``dpia.index_paths``, printed by ``dpia.emit``) asks, with the C-named loop
  variables in scope, whether such a
  check is proven (``in_range``, which gives the ``Proof``), how an index simplifies
  (``simplify_index``: ``floor((i·m + j)/m)`` is ``i`` for 0 ≤ j < m, and
  ``m·floor(k/m) + Mod(k, m)`` is ``k``), whether a divisor is nonzero (``positive``) and whether
  a ``/`` or ``%`` may be C's own (``truncating_divisions``).

One function bounds an expression over ``Ranges`` (``bounds``): exactly where the expression is
monotone in each loop variable over its range (the attained extremes, which DPS needs to state a
size constraint that holds iff the reads are in range), with affine (interval) reasoning
otherwise, also over quotients and remainders; the result says which (``Bounds.exact``).  One test
says that an expression is nonnegative (``nonnegative``): every symbol counts as an integer of
unknown sign unless its assumptions, the ranges' ``naturals`` (the sizes of the kernel, as code
generation names them) or its loop range say that it is ≥ 0, so a value read from an array (a
scalar variable, or code generation's placeholder for an expression it cannot see into) is never
taken to be nonnegative.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from functools import cached_property, lru_cache

import sympy

from fsmooth.shape.size_printer import NonnegativeMod, NonnegativeQuotient
from fsmooth.shape.sizes import fraction, natural_samples


@dataclass(frozen=True)
class Ranges:
    """What is known at a point: ``loops``, (variable, lo, hi) per enclosing loop, outermost
    first, inclusive bounds in sizes and enclosing loop variables; ``facts``, (e, hi) for each
    enclosing ``if`` that says e ≤ hi; ``naturals``, the symbols known to be ≥ 0 beyond their
    own assumptions (code generation's names of the sizes); ``fitting``, expressions of them
    known to fit int64 (what the size check computed before the call, the loops' counts:
    ``overflow_conditions``); ``nonzero``, the divisors that a run-time test before this point
    found nonzero (code generation's ``NonzeroDivisor``: the call fails where one is 0)."""

    loops: tuple = ()
    facts: tuple = ()
    naturals: frozenset = frozenset()
    fitting: tuple = ()
    nonzero: frozenset = frozenset()

    # the analyses below are memoised by their ranges, hashed at every question (thousands a
    # kernel, each hashing every size that fits): hashed once
    @cached_property
    def _hash(self) -> int:
        return hash((self.loops, self.facts, self.naturals, self.fitting, self.nonzero))

    def __hash__(self) -> int:
        return self._hash

    def inside(self, variable: sympy.Symbol, hi: sympy.Expr, lo: sympy.Expr = sympy.Integer(0)) -> Ranges:
        """The ranges inside a loop of ``variable`` over lo .. hi, whose count, a value of the
        code, fits int64."""
        return dataclasses.replace(self, loops=self.loops + ((variable, lo, hi),),
                                   fitting=self.fitting + (sympy.expand(hi - lo + 1),))

    def given(self, e: sympy.Expr, hi: sympy.Expr) -> Ranges:
        """The ranges inside ``if (e ≤ hi)``: a fact about e, unless e is a loop variable (whose
        own range is kept) or an enclosing ``if`` already bounds it."""
        e = sympy.expand(e)
        return self if e in self else dataclasses.replace(self, facts=self.facts + ((e, hi),))

    def tested_nonzero(self, divisor: sympy.Expr) -> Ranges:
        """The ranges past a run-time test that ``divisor`` is not 0."""
        return dataclasses.replace(self, nonzero=self.nonzero | {sympy.expand(divisor)})

    def bounds_of(self, e: sympy.Expr):
        """(lo, hi) of a loop variable, (None, hi) of an expression an ``if`` bounds, else None."""
        for variable, lo, hi in self.loops:
            if variable == e:
                return lo, hi
        for fact, hi in self.facts:
            if fact == e:
                return None, hi
        return None

    def __contains__(self, e) -> bool:
        return self.bounds_of(e) is not None

    def prefix(self, k: int) -> Ranges:
        """The ranges of the k outermost loops (nested ranges only)."""
        return dataclasses.replace(self, loops=self.loops[:k], facts=())

    def facts_about(self, e: sympy.Expr) -> tuple:
        """The loops and ``if`` facts that mention a symbol of ``e``, or of their own bounds, as
        text: what a proof about ``e`` stands on."""
        symbols, used = set(sympy.sympify(e).free_symbols), []
        for variable, lo, hi in reversed(self.loops):
            if variable in symbols:
                used.append(f"{_shown(lo)} <= {_shown(variable)} <= {_shown(hi)}")
                symbols |= sympy.sympify(lo).free_symbols | sympy.sympify(hi).free_symbols
        used.reverse()
        used += [f"{_shown(fact)} <= {_shown(hi)}" for fact, hi in self.facts if sympy.sympify(fact).free_symbols & symbols]
        used += [f"{_shown(d)} != 0 (tested)" for d in sorted(self.nonzero, key=_shown) if d.free_symbols & symbols]
        return tuple(used)


@lru_cache(maxsize=4096)
def _shown(e: sympy.Expr) -> str:
    """``str(e)``, memoised: sympy's printer takes long, and a proof names the same loops as the
    proofs before it (``Ranges.facts_about``)."""
    return str(e)


# ---------------------------------------------------------------------- nested ranges (DPS)


@lru_cache(maxsize=4096)
def tighten(ranges: Ranges):
    """The nonempty part of nested ranges, outermost first: (ranges, counts) or None.

    An inner loop whose count depends on an enclosing loop variable t (``ifold`` counted by
    ``i``, or by ``i - 5``) runs only for some values of t: t's range is narrowed to those
    (``i ≥ 1``, ``i ≥ 6``), innermost first, so that every iteration of the narrowed ranges
    reaches the point inside.  ``counts`` are the trip counts left over, in sizes only: the
    point is reached iff each is ≥ 1.  A count ⌊c/q⌋ (q a positive constant: a thread's
    blocks of a jammed chunk, ``dpia.unroll_jam``) is ≥ 1 iff c - q + 1 is.  None where a
    count is not ±t plus terms of outer variables, or where the narrowed bound cannot be
    compared with t's own."""
    loops = list(ranges.loops)
    syms = [r[0] for r in loops]
    counts = []
    for k in reversed(range(len(loops))):
        _, lo, hi = loops[k]
        count = sympy.expand(hi - lo + 1)
        outer = [j for j in range(k) if syms[j] in count.free_symbols]
        if not outer:
            counts.append(count)
            continue
        if isinstance(count, sympy.floor) and (q := fraction(count.args[0])[1]).is_Integer and q > 0:
            count = sympy.expand(q * count.args[0] - q + 1)
        j = max(outer)
        t, t_lo, t_hi = loops[j]
        a = count.coeff(t)
        rest = sympy.expand(count - a * t)
        if a not in (1, -1) or t in rest.free_symbols:
            return None
        if a == 1:  # t + rest ≥ 1
            bound = sympy.expand(1 - rest)
            if nonnegative(bound - t_lo, ranges):
                t_lo = bound
            elif not nonnegative(t_lo - bound, ranges):
                return None
        else:  # rest - t ≥ 1
            bound = sympy.expand(rest - 1)
            if nonnegative(t_hi - bound, ranges):
                t_hi = bound
            elif not nonnegative(bound - t_hi, ranges):
                return None
        loops[j] = (t, t_lo, t_hi)
    return dataclasses.replace(ranges, loops=tuple(loops), facts=()), tuple(reversed(counts))


@dataclass(frozen=True)
class Bounds:
    """Inclusive bounds of an expression over every point that ranges reach: attained there
    where ``exact`` (so 0 ≤ lo and hi < length hold iff every read is in range), except that a
    remainder by a constant c whose dividend may wrap around is bounded by 0 .. c - 1 even where
    the dividend spans fewer than c values."""

    lo: sympy.Expr
    hi: sympy.Expr
    exact: bool


@lru_cache(maxsize=4096)
def bounds(e: sympy.Expr, ranges: Ranges) -> Bounds | None:
    """The bounds of ``e`` over the ranges, or None where a variable of ``e`` is unbounded: the
    attained extremes where ``e`` is monotone in each loop variable over the nested loops
    (``tighten``: the iterations that reach the point), which are the tightest there are; else
    affine bounds (``_interval``).  The ``if`` facts are not used here (``in_range`` uses them)."""
    e = sympy.sympify(e)
    domain = tighten(dataclasses.replace(ranges, facts=()))
    if domain is not None:
        exact = _extremes(e, domain[0])
        if exact is not None:
            return Bounds(exact[0], exact[1], True)
    affine = _interval(e, ranges)
    return None if affine is None else Bounds(affine[0], affine[1], False)


@lru_cache(maxsize=4096)
def _extreme(f: sympy.Expr, maximise: bool, ranges: Ranges):
    """The maximum (or minimum) of ``f`` over nested ``tighten``ed ranges, attained, in sizes;
    None if not found.  Variables are eliminated innermost first: where ``f`` is monotone in
    one over its range (``direction``), its maximising end is substituted."""
    for k in reversed(range(len(ranges.loops))):
        s, lo, hi = ranges.loops[k]
        if s not in f.free_symbols:
            continue
        d = direction(f, s, ranges.prefix(k + 1))
        if d is None:
            return None
        f = f.xreplace({s: hi if (d > 0) == maximise else lo})
    return f


def _extremes(index: sympy.Expr, ranges: Ranges):
    """(min, max) of an index over nested ``tighten``ed ranges, attained, or None: a polynomial in
    the loop variables (with floor divisions by positive constants) that is monotone in each of
    them over its range (``_extreme``), and a nonnegative such index modulo a positive constant
    (``a[(i + 1) % 3]``)."""
    if isinstance(index, sympy.Mod) and index.args[1].is_Integer and index.args[1] > 0:
        inner = _extremes(index.args[0], ranges)
        if inner is None or not nonnegative(inner[0], ranges):
            return None
        lo, hi = inner
        if nonnegative(index.args[1] - 1 - hi, ranges):
            return lo, hi  # never wraps around
        return sympy.Integer(0), index.args[1] - 1
    lo, hi = _extreme(index, False, ranges), _extreme(index, True, ranges)
    if lo is None or hi is None:
        return None
    return sympy.expand(lo), sympy.expand(hi)


@lru_cache(maxsize=4096)
def direction(f: sympy.Expr, s: sympy.Symbol, ranges: Ranges):
    """1 if ``f`` is nondecreasing in ``s`` (the last of ``ranges``) over its range, -1 if
    nonincreasing, None if not proven: the sign of the finite difference f(s+1) - f(s) over
    the ranges with s < hi, proven from its own extremes."""
    proxy = _difference(f, s)
    if proxy is None:
        return None
    if not any(r[0] in proxy.free_symbols for r in ranges.loops):
        for sign in (1, -1):
            if nonnegative(sign * proxy, ranges):
                return sign
        return None
    _, lo, hi = ranges.loops[-1]
    domain = tighten(ranges.prefix(len(ranges.loops) - 1).inside(s, sympy.expand(hi - 1), lo))
    if domain is None:
        return None
    inner, counts = domain
    for sign in (1, -1):
        m = _extreme(sympy.expand(sign * proxy), False, inner)
        if m is not None and nonnegative(m, inner, counts):
            return sign
    return None


@lru_cache(maxsize=4096)
def _difference(f: sympy.Expr, s: sympy.Symbol):
    """An expression with the sign of f(s+1) - f(s) wherever that is nonzero: the difference
    itself for a polynomial; for ``R ± floor(A)`` (R integer) the difference of ``A ± R``, as
    floor is monotone."""
    # a remainder, min or max of s has no such difference (that of a min is a min again, whose
    # sign would be sought from its own extremes, and so on)
    if any(s in m.free_symbols for m in f.atoms(sympy.Mod, sympy.Min, sympy.Max)):
        return None
    floors = [a for a in f.atoms(sympy.floor) if s in a.free_symbols]
    if not floors:
        return sympy.expand(f.xreplace({s: s + 1}) - f)
    if len(floors) > 1:
        return None
    (F,) = floors
    x = sympy.Dummy("floor")
    g = sympy.expand(f.xreplace({F: x}))
    c = g.coeff(x)
    rest = sympy.expand(g - c * x)
    if c not in (1, -1) or x in rest.free_symbols or rest.is_integer is not True \
            or any(s in a.free_symbols for a in rest.atoms(sympy.floor)):
        return None
    inner = F.args[0] + c * rest  # f = c·floor(inner)
    return sympy.expand(c * (inner.xreplace({s: s + 1}) - inner))


@lru_cache(maxsize=4096)
def nonnegative(e: sympy.Expr, ranges: Ranges = Ranges(), counts: tuple = ()) -> bool:
    """``e`` ≥ 0 for all integer values of its symbols where each symbol known to be ≥ 0 is so
    (``naturals``) and every count is ≥ 1.  A symbol is known to be ≥ 0 by its assumptions (the
    sizes of DPS), as one of ``ranges.naturals``, or as a loop variable whose lower bound is; any
    other symbol (a value read from an array, a parameter of type Index) may be negative.  A
    count ``x + b`` in one size x raises x's lower bound to 1 - b; a constant count < 1 means
    that there is nothing to prove.  -c·Min(a, b) ≥ -c·a: the bound that a guard like
    ``k < min(length x, length y)`` gives."""
    e = sympy.expand(e)
    known = naturals(e.free_symbols, ranges)
    if _nonnegative_terms(e, known):
        return True
    least = {}
    for c in counts:
        if c.is_Integer:
            if c < 1:
                return True
            continue
        syms = c.free_symbols
        if len(syms) != 1:
            continue
        (x,) = syms
        if c.coeff(x) != 1 or not (c - x).is_Integer:
            continue
        least[x] = max(least.get(x, 0 if x in known else 1 - (c - x)), int(1 - (c - x)))
    # x = x' + least with x' ≥ 0
    shifted = sympy.expand(e.xreplace({x: x + b for x, b in least.items() if b != 0}))
    table = {s: _natural(s) for s in known | set(least)}
    if substitute(shifted, table).is_nonnegative:
        return True
    return any(e.coeff(m).is_negative and any(nonnegative(e.subs(m, a), ranges, counts) for a in m.args)
               for m in e.atoms(sympy.Min))


@lru_cache(maxsize=4096)
def _natural(s: sympy.Symbol) -> sympy.Dummy:
    """A nonnegative integer that stands for ``s`` in ``nonnegative``'s query: one per symbol, so
    that the terms rebuilt over it (a floor, a Min of sizes, which sympy evaluates by assumption
    queries as it builds them) are the ones built before, found in sympy's cache with the
    assumptions already derived, where fresh symbols would make every query new."""
    return sympy.Dummy(s.name, integer=True, nonnegative=True)


def _nonnegative_terms(e: sympy.Expr, known: set) -> bool:
    """A sum of monomials in ``known`` symbols with nonnegative coefficients: ≥ 0 at a glance,
    without sympy's assumption queries (which take milliseconds)."""
    return _nonnegative_coefficients(e.as_coefficients_dict(), known)


def _nonnegative_coefficients(terms: dict, known: set) -> bool:
    """``_nonnegative_terms`` of the sum of {monomial: coefficient}."""
    for monomial, coefficient in terms.items():
        if coefficient < 0 or not all(
                f in known or (isinstance(f, sympy.Pow) and f.base in known and f.exp.is_Integer and f.exp > 0)
                for f in sympy.Mul.make_args(monomial) if f != 1):
            return False
    return True


def naturals(symbols, ranges: Ranges) -> set:
    """Those of ``symbols`` known to be ≥ 0: by assumption, as ``ranges.naturals``, or as loop
    variables whose lower bound is ≥ 0 (their loops count up from it)."""
    known = set()
    for s in symbols:
        if s.is_nonnegative or s in ranges.naturals:
            known.add(s)
            continue
        for k, (variable, lo, _) in enumerate(ranges.loops):
            if variable == s and nonnegative(lo, ranges.prefix(k)):
                known.add(s)
    return known


@lru_cache(maxsize=4096)
def signs_taken(e: sympy.Expr) -> tuple[bool, bool]:
    """(``e`` ≥ 0 somewhere, ``e`` < 0 somewhere) at the points of ``sizes.natural_samples``;
    (False, False) where those are not taken.  A cheap refutation for sympy's assumption queries,
    which take milliseconds on a large sum: sympy proves nothing that a point contradicts, so an
    ``e`` seen negative is not proven nonnegative, and one seen with both signs is decided neither
    way."""
    values = natural_samples(e) or []
    return any(v >= 0 for v in values), any(v < 0 for v in values)


def relation(kind: type, lhs: sympy.Expr, rhs: sympy.Expr) -> sympy.Basic:
    """``kind(lhs, rhs)`` (``sympy.Lt``, ``sympy.Ge``, ...), left unevaluated at once where
    ``lhs - rhs`` takes both signs (``signs_taken``), as sympy would leave it after its queries."""
    if signs_taken(sympy.sympify(lhs) - sympy.sympify(rhs)) == (True, True):
        return kind(lhs, rhs, evaluate=False)
    return kind(lhs, rhs)


def min_max(kind: type, args) -> sympy.Expr:
    """``kind(*args)`` (``sympy.Min`` or ``sympy.Max``), built at once where sympy would keep every
    argument: none is a Min or Max (which sympy flattens or rewrites; one inside another function
    it leaves) and no pair is one whose larger sympy finds (``_comparable``), so that sympy, which
    compares every pair with assumption queries each time it builds one (``substitute`` rebuilds
    many, ``dps.layout`` adds a kernel's peaks one at a time), compares each pair once."""
    return _min_max(kind, tuple(dict.fromkeys(map(sympy.sympify, args))))


@lru_cache(maxsize=4096)
def _min_max(kind: type, args: tuple) -> sympy.Expr:
    if len(args) > 1 and not any(isinstance(a, (sympy.Min, sympy.Max)) for a in args) and not any(
            _comparable(kind, x, y) for k, x in enumerate(args) for y in args[k + 1:]):
        return kind(*args, evaluate=False)
    return kind(*args)


@lru_cache(maxsize=4096)
def _comparable(kind: type, x: sympy.Expr, y: sympy.Expr) -> bool:
    """Whether sympy, building ``kind`` of x, y and others, finds which of x and y is the larger
    (its ``_is_connected``, which it asks of each pair of arguments): never where x - y takes both
    signs (``signs_taken``), as sympy proves nothing that a point contradicts; else its own
    answer, memoised by pair, where sympy asks it again of every pair each time it builds a Max."""
    return signs_taken(x - y) != (True, True) and bool(kind._is_connected(x, y))


def substitute(e: sympy.Expr, mapping: dict) -> sympy.Expr:
    """``e.xreplace(mapping)``, each Min and Max rebuilt by ``min_max``."""
    if e in mapping:
        return mapping[e]
    if not e.args:
        return e
    args = tuple(substitute(a, mapping) for a in e.args)
    if all(new is old for new, old in zip(args, e.args)):  # identity: an unchanged sub-term is itself
        return e
    return min_max(e.func, args) if isinstance(e, (sympy.Min, sympy.Max)) else e.func(*args)


def replaced(e: sympy.Expr, kind: type, value) -> sympy.Expr:
    """``e.replace(kind, value)``, bottom up, but each distinct sub-expression rewritten once (sympy
    walks every occurrence: the group count ``Min(1024, floor((n + 16383)/16384))`` of a two-phase
    reduction occurs in each of its indices), and a node kept where ``value`` gives None."""
    done: dict = {}

    def walk(rv: sympy.Basic) -> sympy.Basic:
        if rv in done:
            return done[rv]
        new = rv
        if rv.args:
            args = tuple(walk(a) for a in rv.args)
            if args != rv.args:
                new = min_max(rv.func, args) if isinstance(rv, (sympy.Min, sympy.Max)) else rv.func(*args)
                # sympy's simultaneous replacement: a node that became one of its rewritten
                # operands is not rewritten again
                if any(new == old and old != a for old, a in zip(rv.args, args)):
                    done[rv] = new
                    return new
            if isinstance(new, kind):
                v = value(*new.args)
                if v is not None and v != new:
                    new = v
        done[rv] = new
        return new

    return walk(e)


# ---------------------------------------------------------------------- intervals (code generation)


@dataclass(frozen=True)
class Proof:
    """Why 0 ≤ index < length holds everywhere: the index's bounds ``low`` ≥ 0 and ``high`` ≤
    length - 1 (over the loops and ``if``s in ``facts``)."""

    low: sympy.Expr
    high: sympy.Expr
    facts: tuple  # text, as ``Ranges.facts_about``


@lru_cache(maxsize=4096)
def in_range(e: sympy.Expr, length: sympy.Expr, ranges: Ranges) -> Proof | None:
    """The proof that 0 ≤ e < length for every value of the loop variables in their ranges (and
    the guards of the enclosing ``if``s), or None."""
    extent = bounds(e, ranges)
    if extent is None:
        return None
    if not nonnegative(extent.lo, ranges):
        return None
    # an ``if`` bounds e, or e less an offset that is a constant or at most one: a guard t < n - 1
    # proves a read of t + 1, a guard on a vector's last element (v + 15 < n) its lanes' reads
    # (v + u + k, u the vectors' first lane, 0 where they are one vector); each bound asked only
    # where those before it fail (a vector's branch has a fact a lane, each a bounds query)
    e = sympy.expand(e)
    highs = itertools.chain([extent.hi], (hi + offset for fact, hi in ranges.facts
                                          if (offset := _constant_above(sympy.expand(e - fact), ranges)) is not None))
    high = next((hi for hi in highs if nonnegative(length - 1 - hi, ranges)), None)
    return None if high is None else Proof(extent.lo, high, ranges.facts_about(e))


def _constant_above(offset: sympy.Expr, ranges: Ranges) -> sympy.Expr | None:
    """``offset`` where it is a constant, else a constant it cannot exceed over the loops, or None."""
    if offset.is_number:
        return offset
    extent = bounds(offset, ranges)
    return extent.hi if extent is not None and extent.hi.is_number else None


def _interval(e: sympy.Expr, ranges: Ranges, depth: int = 0):
    """Inclusive bounds of ``e`` over the ranges: affine in the loop variables, or in quotients
    and remainders of them by a positive divisor; None where a variable is unbounded.  A loop
    bound may be an expression of an enclosing loop variable (``for j < i``, an ifold counted by
    an index): such a bound is bounded in turn over that variable's range."""
    e = sympy.expand(e)
    for s in sorted(e.free_symbols, key=str):
        # a variable whose range depends on another (j < i): its end first, i is bounded after
        r = ranges.bounds_of(s)
        if depth >= 8 or r is None or r[0] is None or not e.is_polynomial(s) or sympy.degree(e, s) != 1:
            continue
        if not any(t in ranges for t in sympy.sympify(r[0]).free_symbols | sympy.sympify(r[1]).free_symbols):
            continue
        c = e.coeff(s)
        if any(t in ranges for t in c.free_symbols) or not (nonnegative(c, ranges) or nonnegative(-c, ranges)):
            continue
        low, high = (r[0], r[1]) if nonnegative(c, ranges) else (r[1], r[0])
        lower, upper = _interval(e.subs(s, low), ranges, depth + 1), _interval(e.subs(s, high), ranges, depth + 1)
        if lower is None or upper is None:
            return None
        return lower[0], upper[1]
    lo, hi = _affine_interval(e, ranges)
    if lo is None:
        return None
    if depth < 8 and any(s in ranges for s in (lo.free_symbols | hi.free_symbols)):
        outer_lo, outer_hi = _interval(lo, ranges, depth + 1), _interval(hi, ranges, depth + 1)
        if outer_lo is None or outer_hi is None:
            return None
        lo, hi = outer_lo[0], outer_hi[1]
    return lo, hi


def _affine_interval(e: sympy.Expr, ranges: Ranges):
    lo, hi = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(e)):
        coeff, rest = term.as_coeff_Mul()
        if rest == 1:
            lo, hi = lo + coeff, hi + coeff
            continue
        extent = ranges.bounds_of(rest) or _division_interval(rest, ranges) or _scaled_interval(rest, ranges)
        if extent is None or extent[0] is None:
            return None, None
        r_lo, r_hi = extent
        if coeff >= 0:
            lo, hi = lo + coeff * r_lo, hi + coeff * r_hi
        else:
            lo, hi = lo + coeff * r_hi, hi + coeff * r_lo
    return lo, hi


def _scaled_interval(e: sympy.Expr, ranges: Ranges):
    """Bounds of i·s for a loop variable i and a nonnegative factor s free of loop variables
    (a stride such as ``j · 128 g`` with g a size)."""
    ranged = [f for f in e.as_ordered_factors() if f in ranges and ranges.bounds_of(f)[0] is not None]
    if len(ranged) != 1:
        return None
    scale = sympy.cancel(e / ranged[0])
    if any(s in ranges for s in scale.free_symbols) or not nonnegative(scale, ranges):
        return None
    lo, hi = ranges.bounds_of(ranged[0])
    return lo * scale, hi * scale


def _division_interval(e: sympy.Expr, ranges: Ranges):
    """Bounds of floor(a/d) or Mod(a, d) for a positive divisor d and a bounded a ≥ 0."""
    match e:
        case sympy.Mod():
            a, d = e.args
            return (sympy.Integer(0), d - 1) if positive(d, ranges) else None
        case sympy.floor():
            num, d = fraction(e.args[0])
            extent = bounds(num, ranges)
            if d == 1 or extent is None or not positive(d, ranges) or not nonnegative(extent.lo, ranges):
                return None
            hi = simplify_index(sympy.floor(extent.hi / d), ranges)
            return sympy.Integer(0), (extent.hi if hi.has(sympy.floor) else hi)
    return None


@lru_cache(maxsize=4096)
def positive(d: sympy.Expr, ranges: Ranges) -> bool:
    """d ≥ 1: a positive constant, a factor of the trip count of a loop in scope (inside
    ``for k < d·q`` the loop runs, so d·q ≥ 1, and with q ≥ 0 an integer, q ≥ 1 and d ≥ 1), or a
    nonnegative divisor tested nonzero before (``Ranges.nonzero``: ``x % length(v)`` past its
    zero test).  A value that code generation cannot see into is a fresh placeholder symbol, a
    factor of no trip count, and a value read into a variable is not known to be ≥ 0
    (``nonnegative``): so no divisor read from an array is called nonzero unless the loop it
    counts proves it, or a test did and it is an array's length."""
    d = sympy.sympify(d)
    if d.is_Integer:
        return d >= 1
    if sympy.expand(d) in ranges.nonzero and nonnegative(d, ranges):
        return True
    for _, lo, hi in ranges.loops:
        if lo != 0:
            continue
        q = _cofactor(hi + 1, d)
        if q is not None and nonnegative(q, ranges):
            return True
    return False


@lru_cache(maxsize=4096)
def _cofactor(count: sympy.Expr, d: sympy.Expr) -> sympy.Expr | None:
    """The polynomial q with count = d·q, or None: asked of each loop in scope wherever ``positive``
    is, and the loops are mostly the same."""
    q = sympy.cancel(sympy.expand(count) / d)
    return q if sympy.fraction(q)[1] == 1 and q.is_polynomial() else None


# ---------------------------------------------------------------------- what the ranges decide about an index


@lru_cache(maxsize=4096)
def simplify_index(e: sympy.Expr, ranges: Ranges) -> sympy.Expr:
    """Remove the floor divisions and modulos of ``e`` that the ranges make exact, and
    recombine the quotient and remainder of one division."""
    e = sympy.sympify(e)

    def floor_div(arg):
        split = _split(arg, ranges)
        return None if split is None else split[0]

    def modulo(a, m):
        split = _split(a / m, ranges)
        return None if split is None else split[1] * m

    e = replaced(e, sympy.floor, floor_div)
    e = replaced(e, sympy.Mod, modulo)
    return _recombine(sympy.expand(e))


def _recombine(e: sympy.Expr) -> sympy.Expr:
    """c·d·floor(a/d) + c·Mod(a, d) ⤳ c·a: the quotient and remainder of one division."""
    terms = list(sympy.Add.make_args(e))
    for term in terms:
        for mod in term.atoms(sympy.Mod):
            a, d = mod.args
            coeff = sympy.cancel(term / mod)
            if coeff.has(sympy.Mod) or coeff.has(sympy.floor):
                continue
            partner = sympy.expand(coeff * d * sympy.floor(a / d))
            if partner in terms:
                rest = list(terms)
                rest.remove(term)
                rest.remove(partner)
                return _recombine(sympy.expand(sympy.Add(*rest) + coeff * a))
    return e


@lru_cache(maxsize=4096)
def _split(arg: sympy.Expr, ranges: Ranges):
    """For arg = num/den with num = q·den + r and 0 ≤ r < den provable: (q, r/den); with
    r = -1 and den ≥ 1 provable: (q - 1, (den - 1)/den)."""
    parts = _divided(arg)
    if parts is None:
        return None
    den, quotient, remainder = parts
    extent = bounds(remainder, ranges)
    if extent is None:
        return None
    lo, hi = extent.lo, extent.hi
    if nonnegative(lo, ranges) and nonnegative(den - 1 - hi, ranges):
        return quotient, remainder / den
    if lo == hi == -1 and positive(den, ranges):
        return quotient - 1, (remainder + den) / den
    return None


@lru_cache(maxsize=4096)
def _divided(arg: sympy.Expr):
    """(den, q, r) for arg = num/den, den ≠ 1, with num = q·den + r: q the terms of num that den
    divides, over each term's quotient; None where den is 1.  Apart from ``_split``, which asks it
    again under every loop nest that the same division meets."""
    num, den = fraction(arg)
    if den == 1:
        return None
    quotient, remainder = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(num)):
        q = sympy.cancel(term / den)
        if sympy.fraction(q)[1] == 1:
            quotient += q
        else:
            remainder += term
    return den, quotient, remainder


@lru_cache(maxsize=4096)
def truncating_divisions(e: sympy.Expr, ranges: Ranges) -> sympy.Expr:
    """``e`` with each division the ranges make sign-safe marked, for plain ``/`` and ``%`` in C."""
    def nonnegative_operand(a):
        extent = bounds(a, ranges)
        return extent is not None and nonnegative(extent.lo, ranges)

    def modulo(a, d):
        return NonnegativeMod(a, d) if nonnegative_operand(a) and positive(d, ranges) else None

    def quotient(arg):
        num, den = fraction(arg)
        if den != 1 and nonnegative_operand(num) and positive(den, ranges):
            return NonnegativeQuotient(num, den)
        return None

    return replaced(replaced(sympy.sympify(e), sympy.Mod, modulo), sympy.floor, quotient)


# ---------------------------------------------------------------------- int64 overflow


@lru_cache(maxsize=4096)
def overflow_conditions(e: sympy.Expr, ranges: Ranges) -> tuple | None:
    """What makes computing ``e`` in plain int64 C, as ``print_size`` writes it, overflow-free: ()
    where it is an atom, or an expression of natural numbers (sizes, loop variables) whose every
    partial sum and product lies between 0 and one of ``ranges.fitting`` (or a constant that
    fits); else the bounds, in sizes alone, of each value on the way that the ranges bound but that no
    size of ``ranges.fitting`` covers (``j·(2d - j - 1)`` for j < d: 0 and (d - 1)·d), each of
    which fitting int64 proves it, so that a kernel can test them once, before its body, instead
    of at every iteration; None where a value on the way is not bounded so (it depends on data)."""
    e = simplify_index(sympy.sympify(e), ranges)
    if e.is_Atom:
        return () if _fitting_atom(e) else None
    loop_variables = {v for v, _, _ in ranges.loops}
    if not e.free_symbols <= ranges.naturals | loop_variables:
        return None
    unproven = _overflow_free(e, ranges.fitting, ranges)
    if unproven is None:
        return None
    conditions = []
    for x in dict.fromkeys(unproven):
        extent = bounds(x, ranges)
        if extent is None or (sympy.sympify(extent.lo).free_symbols | sympy.sympify(extent.hi).free_symbols) & loop_variables:
            return None
        conditions += [extent.lo, extent.hi]
    # a value of the code, or a size that the size check computed, needs no test
    return tuple(dict.fromkeys(c for c in map(sympy.expand, conditions)
                               if not (c.is_Atom and _fitting_atom(c)) and c not in ranges.fitting))


def _fitting_atom(e: sympy.Expr) -> bool:
    """A symbol (a value of the code, which fits) or an integer that fits int64 (one that sympy
    folded from literals may not)."""
    return not e.is_Integer or -2**63 <= e < 2**63


def checked_parts(e: sympy.Expr) -> list:
    """``e`` and the values checked size arithmetic (``C_CHECKED``) computes on the way to it: the
    operands of each sum, product, minimum and maximum, and the numerator and denominator of each
    quotient.  Where a size check computed ``e`` before a call, each of them fits int64 in the
    kernel's body (an overflow would have refused the call): ``Ranges.fitting``."""
    if e.is_Atom:
        return []
    match e:
        case sympy.floor() | sympy.ceiling():
            operands = fraction(e.args[0])
        case _:
            num, den = fraction(e)
            operands = (num, den) if den != 1 else e.args
    return [e] + [x for operand in operands for x in checked_parts(operand)]


@lru_cache(maxsize=4096)
def _overflow_free(e: sympy.Expr, known: tuple, ranges: Ranges) -> tuple | None:
    """Whether every operation of ``e`` (over natural numbers), as ``print_size`` writes it,
    stays in int64: the positive terms of a sum (written first) and the magnitude of its negative
    ones are each between 0 and a size of ``known``, and so is every partial product of a term;
    a quotient, remainder, minimum or maximum of such operands cannot overflow.  None where one
    may; else the sums and products that no size of ``known`` bounds (``overflow_conditions``
    bounds them).  Memoised: code generation asks about each integer operation of an
    expression, whose operands it has asked about before."""
    if e.is_Atom:
        return () if _fitting_atom(e) else None
    if e in known:
        return ()
    match e:
        case sympy.Add() | sympy.Mul() | sympy.Pow():
            terms = sympy.Add.make_args(e)
            positive_part = sympy.Add(*(t for t in terms if not t.could_extract_minus_sign()))
            negative_part = sympy.Add(*(-t for t in terms if t.could_extract_minus_sign()))
            factors = [f for t in terms for f in _partial_products(-t if t.could_extract_minus_sign() else t)]
            unproven = tuple(x for x in (positive_part, negative_part, *factors) if not _bounded(x, known, ranges))
            operands = [f.base if isinstance(f, sympy.Pow) else f for t in terms for f in sympy.Mul.make_args(t)]
        case sympy.floor() | sympy.ceiling():
            unproven, operands = (), fraction(e.args[0])
        case sympy.Mod() | sympy.Min() | sympy.Max():
            unproven, operands = (), e.args
        case _:
            return None
    for x in operands:
        inner = _overflow_free(x, known, ranges)
        if inner is None:
            return None
        unproven += inner
    return unproven


def _partial_products(term: sympy.Expr) -> list:
    """The products a term's C computes on the way: the left folds of its factors."""
    factors = [f for a in sympy.Mul.make_args(term)
               for f in ([a.base] * int(a.exp) if isinstance(a, sympy.Pow) and a.exp.is_Integer and a.exp > 0 else [a])]
    return [sympy.Mul(*factors[:k]) for k in range(2, len(factors) + 1)]


@lru_cache(maxsize=4096)
def _bounded(x: sympy.Expr, known: tuple, ranges: Ranges) -> bool:
    """0 <= x <= some size of ``known`` (which fits int64), or a constant that fits, over the
    ranges of the loops: a term free of loop variables bounds itself."""
    x = sympy.expand(x)
    if x.is_Integer:
        return 0 <= x < 2**63
    lo = hi = sympy.Integer(0)
    for term in sympy.Add.make_args(x):
        if any(s in ranges for s in term.free_symbols):
            bounded = bounds(term, ranges)
            if bounded is None:
                return False
            lo, hi = lo + bounded.lo, hi + bounded.hi
        else:
            lo, hi = lo + term, hi + term
    # only a size in every symbol of hi can bound it for all their values; sympy's assumption
    # queries would take seconds over a kernel's many sizes, so a bound is seen at a glance or not
    return nonnegative(lo, ranges) and ((hi.is_Integer and hi < 2**63) or _below_a_size(hi, known, ranges))


def _below_a_size(hi: sympy.Expr, known: tuple, ranges: Ranges) -> bool:
    """Some size of ``known`` less ``hi`` is a sum of monomials in natural symbols with nonnegative
    coefficients (``_nonnegative_terms``), each difference found term by term from the sizes' own
    expanded terms (``_terms``): as ``sympy.expand(size - hi)`` would, without building it anew
    for every size and every bounded value."""
    symbols, below = hi.free_symbols, _terms(hi)
    for size in known:
        if not symbols <= _free_symbols(size):
            continue
        difference = dict(_terms(size))
        for monomial, coefficient in below.items():
            difference[monomial] = difference.get(monomial, 0) - coefficient
        difference = {m: c for m, c in difference.items() if c != 0}
        free = set().union(*(m.free_symbols for m in difference))
        if _nonnegative_coefficients(difference, naturals(free, ranges)):
            return True
    return False


@lru_cache(maxsize=4096)
def _terms(e: sympy.Expr) -> dict:
    """The expanded ``e`` as {monomial: coefficient} (read only)."""
    return sympy.expand(e).as_coefficients_dict()


@lru_cache(maxsize=4096)
def _free_symbols(e: sympy.Expr) -> frozenset:
    return frozenset(e.free_symbols)
