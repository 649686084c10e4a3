"""A second version of a kernel's loops for rows exactly as wide as the kernel reads them (issue
11), on the imperative DPIA of the C back end.

A kernel that reads a parameter's rows at constant columns only (ADBench's vertices
``base_positions[v][c]`` for c < 4, BA's cameras ``cams[i][k]`` for k ≤ 10) knows the row length
only as a run-time size: DPS checks ``4 ≤ base_positions_d1`` once, and every subscript is
``c + base_positions_d1 * v``.  The data almost always has rows of exactly that width, but gcc
cannot know it: a stride it does not know makes it load a vector's lanes one by one (the
skinning loop of ADBench's Hand with AVX-512), where ADBench's manual C++, whose stride is the
literal 4, loads whole vectors.

So each loop of such a kernel (a ``for``, ``parfor``, double-buffered ``ifold`` or parallel
reduction at the kernel's top level, or in its branches) whose strides or counts mention one of
these row lengths gets a second version in which each is its constant, taken where the call's
rows are exactly that wide and the C compiler's target is one where that pays:

    new tight (tight := FS_ROW_VERSIONS; if tight then tight := d₁ == K₁ else skip; ...;
               ... if tight then L[d₁ := K₁, d₂ := K₂] else L ...)

``FS_ROW_VERSIONS`` (clib/fsmooth_rt.h) is true where the target has AVX-512: with its
two-source permutes gcc's whole-vector loads of the constant-stride rows win (Hand's skinning,
gcc 12: 11 % less time), while with AVX2 or SSE2 they lose to its lane-by-lane loads of a
run-time stride (14 % and 12 % more time); there the version is dead code that gcc drops.

The guess ``d = K`` is the largest constant lower bound of ``d`` among the kernel's size
constraints, taken only where it is at least 2 (a row read at a constant column past its first: a
record such as a point or a camera; reading column 0 says nothing about the width) and ``d`` is
a dimension of an array parameter after its first (a row length: a stride; the first is a count).
Under the test, each version computes the same values in the same order, so the results are
bit for bit the same, and rows of another width take the loop as it was.  Nothing runs more often
than before but the tests, once per call; what the version removes is the multiplication of a
subscript by a run-time size, and what it gives gcc is constant strides and counts.  A call of
another kernel is not versioned here: the callee versions its own loops.
"""
from __future__ import annotations

import dataclasses

import sympy

from fsmooth.dps.ir import SizeConstraint
from fsmooth.names import NameSupply
from fsmooth.types import ArrayT, Bool, Index

from . import phrases as p

LOOPS = (p.For, p.ParFor, p.DoubleBuffer, p.ParallelReduce)
# clib/fsmooth_rt.h: whether the C compiler's target makes the versions pay (AVX-512)
TARGET = "FS_ROW_VERSIONS"


def row_versions_program(program: p.ImperativeProgram) -> p.ImperativeProgram:
    return p.ImperativeProgram({name: row_versions(k) for name, k in program.kernels.items()}, program.entry)


def row_versions(k: p.ImperativeKernel) -> p.ImperativeKernel:
    """``k`` with its loops that stride or count by a guessed row length versioned for it."""
    names = {ph.name for ph in p.walk(k.body) if isinstance(ph, p.Ident)}
    guesses = {s: width for s, width in row_widths(k).items() if s.name not in names}
    if not guesses:
        return k
    tight = NameSupply(names | {name for name, _, _ in k.params} | {s.name for s in k.sizes} | {k.dest},
                       suffix="'").fresh("tight")
    body, versioned = _version(k.body, guesses, tight)
    if not versioned:
        return k
    return dataclasses.replace(k, body=p.New(tight, p.Num(Bool), p.seq(*_tests(versioned, guesses, tight), body)))


def row_widths(k: p.ImperativeKernel) -> dict:
    """Each row length of ``k``'s array parameters (a dimension after the first) with its guessed
    width: the largest constant lower bound of the kernel's constraints, where it is at least 2."""
    rows = {d for _, ty, dims in k.params if isinstance(ty, ArrayT) for d in dims[1:] if isinstance(d, sympy.Symbol)}
    widths: dict = {}
    for c in k.constraints:
        for s, least in _lower_bounds(c):
            if s in rows and least >= 2:
                widths[s] = max(widths.get(s, least), least)
    return widths


def _lower_bounds(c: SizeConstraint):
    """(s, K) for each disjunct of ``c`` that says ``s ≥ K`` of a symbol s and an integer K."""
    for relation in sympy.Or.make_args(c.cond):
        if not isinstance(relation, (sympy.StrictLessThan, sympy.LessThan, sympy.StrictGreaterThan,
                                     sympy.GreaterThan)):
            continue
        difference = sympy.expand(relation.gts - relation.lts)  # > 0 (strict) or ≥ 0
        symbols = difference.free_symbols
        if len(symbols) != 1:
            continue
        (s,) = symbols
        constant = difference - s
        if constant.is_Integer:
            strict = isinstance(relation, (sympy.StrictLessThan, sympy.StrictGreaterThan))
            yield s, int(-constant) + (1 if strict else 0)


def _version(c: p.Phrase, guesses: dict, tight: str) -> tuple[p.Phrase, frozenset]:
    """``c`` with each loop at its top (through sequences, ``new`` and branches) that strides or
    counts by a guessed width versioned under ``tight``, and the widths they use."""
    match c:
        case p.Seq(cmds):
            parts = [_version(cmd, guesses, tight) for cmd in cmds]
            return p.Seq(tuple(cmd for cmd, _ in parts)), frozenset().union(*(used for _, used in parts))
        case p.New(body=body):
            inner, used = _version(body, guesses, tight)
            return dataclasses.replace(c, body=inner), used
        case p.IfCmd(cond, then, orelse):
            (then, used_then), (orelse, used_else) = _version(then, guesses, tight), _version(orelse, guesses, tight)
            return p.IfCmd(cond, then, orelse), used_then | used_else
        case _ if isinstance(c, LOOPS):
            used = _strides_and_counts(c) & guesses.keys()
            if used:
                constants = {s: sympy.Integer(guesses[s]) for s in used}
                return p.IfCmd(p.Ident(tight, p.ExpT(p.Num(Bool))), substitute(c, constants), c), frozenset(used)
    return c, frozenset()


def _strides_and_counts(c: p.Phrase) -> set:
    """The symbols of the element sizes of ``c``'s indexing (the strides of its subscripts) and of
    its loops' counts, outside calls (a callee versions its own loops)."""
    found: set = set()
    pending = [c]
    while pending:
        ph = pending.pop()
        match ph:
            case p.CallCmd() | p.CallExp():
                continue
            case p.Idx(elem=elem):
                found |= sympy.sympify(p.elements(elem)).free_symbols
            case p.ParFor(size=size):
                found |= sympy.sympify(size).free_symbols
            case p.For(count=p.NatExp(value)) | p.DoubleBuffer(count=p.NatExp(value)) | \
                    p.ParallelReduce(count=p.NatExp(value)):
                found |= sympy.sympify(value).free_symbols
        pending.extend(p.children(ph))
    return found


def _tests(used: frozenset, guesses: dict, tight: str) -> list[p.Phrase]:
    """tight := FS_ROW_VERSIONS; if tight then tight := d₁ == K₁ else skip; ... (by name, for a
    stable order)."""
    flag = p.Ident(tight, p.AccT(p.Num(Bool)))
    tests = [p.Assign(flag, p.ScalarOp("eq", (p.NatExp(s, p.Num(Index)), p.Literal(guesses[s], p.Num(Index))),
                                       p.Num(Bool)))
             for s in sorted(used, key=lambda s: s.name)]
    return [p.Assign(flag, p.TargetFlag(TARGET, p.Num(Bool)))] + [
        p.IfCmd(p.Ident(tight, p.ExpT(p.Num(Bool))), test, p.Skip()) for test in tests]


def substitute(value, constants: dict):
    """``value`` (a phrase, its data and types, sizes, tuples of them) with each symbol of
    ``constants`` replaced by its constant."""
    match value:
        case sympy.Basic():
            return value.xreplace(constants)
        case tuple():
            return tuple(substitute(item, constants) for item in value)
        case p.Phrase() | p.Data() | p.PhraseType() if dataclasses.is_dataclass(value):
            changes = {f.name: substitute(getattr(value, f.name), constants) for f in dataclasses.fields(value)}
            return dataclasses.replace(value, **changes)
    return value
