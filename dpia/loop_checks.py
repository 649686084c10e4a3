"""Loop-invariant checks leave their loop (issue 11): a run-time check of a loop body whose
operands the loop does not change (a read's bounds test on an index computed before the loop,
checked integer arithmetic on sizes or arguments, ``sequence[t + 1]`` inside a fold over i) is
done once, before the loop, instead of on every trip; so is the range test of a read at the
loop's variable itself (``rot[i]`` in a loop of 3 over a rot whose length is not known), as the
test of the variable's last value.

The code generator marks every line it writes for a check as a ``Check``: the declaration of an
overflow flag, of a checked integer or of an index, a test that fails the call.  Such a line
computes integers only, reads no memory but its operands and writes nothing but the names it
declares, its flag (``&flag``) and, where it fails, the status variable before jumping out.  So
a ``Check`` at the top level of a loop body (run on every trip, in no branch or inner loop)
gives the same result on every trip where no name it uses is assigned in the loop, and one
that reads no array (``[``) sees no store of the body.  Those lines move before the loop, in
their order; the C generator runs them only where the loop runs at least once, so that a loop
of no trips fails nowhere its reference does not.  Where the loop runs and an earlier
statement of its body fails, the hoisted check's failure may come first: an error either way,
as for ``fsmooth.licm``.

This works on the C text because the C names are unique in a kernel (``fsmooth.dpia.emit.Namer``
and the numbered ``fs_`` names), so a name the body assigns is a name the body owns.
"""
from __future__ import annotations

import dataclasses
import re


class Check(str):
    """A line of C written for a check (``KernelEmitter.checks`` lists): see the module."""


class RangeTest(Check):
    """A read's range test, ``if (!(0 <= index && index < bound)) fail``; ``record``: what the
    kernel's interface says of it (``fsmooth.artifact.RangeCheck``).  One comparison where the
    range analysis knows a sign: ``index < bound`` where the index is ≥ 0 (``index_nonnegative``),
    else ``(uint64_t)index < (uint64_t)bound`` where the bound is (``bound_nonnegative``: an
    array's length), since a negative index wraps to 2^64 + index ≥ 2^63, above every such bound.
    Either fails exactly where the two-sided test does, with one comparison and one branch instead
    of two each: the C compiler cannot merge them itself where the index is read from an array
    and the bound is a parameter whose sign it does not know (BA's ``cams[obs[i][0]]``)."""

    def __new__(cls, index: str, bound: str, fail: str, record=None, index_nonnegative: bool = False,
                bound_nonnegative: bool = False):
        condition = (f"{index} < {bound}" if index_nonnegative
                     else f"(uint64_t){_operand(index)} < (uint64_t){_operand(bound)}" if bound_nonnegative
                     else f"0 <= {index} && {index} < {bound}")
        line = super().__new__(cls, f"if (!({condition})) {fail}")
        line.index, line.bound, line.fail, line.record = index, bound, fail, record
        line.index_nonnegative, line.bound_nonnegative = index_nonnegative, bound_nonnegative
        return line


def _operand(c: str) -> str:
    """``c`` as the operand of a cast: a name or number as it is, anything else parenthesised."""
    return c if re.fullmatch(r"[A-Za-z_]\w*|-?\d+", c) else f"({c})"


_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")
# a name assigned, declared with a value, incremented, or passed by address (a checked
# operation's overflow flag)
_ASSIGNED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:[-+*/%&|^]?=(?!=)|\+\+|--)|(?<!&)&(?!&)\s*([A-Za-z_]\w*)")


def assigned_names(line: str) -> set[str]:
    return {a or b for a, b in _ASSIGNED.findall(line)}


def hoist_invariant_checks(body: list[str], loop_variable: str, status: str,
                           last: str | None) -> tuple[list[str], list[str], list[str]]:
    """(the checks of ``body`` that move before its loop, what they run as there, the body
    without them).  ``body`` is
    the loop body's lines, unindented (the lines of a nested block are indented, so the lines
    without a leading space run on every trip); ``status`` is the status variable, written
    only on the way out; ``last`` the C of the loop variable's last value.  The range test of
    the loop variable itself (``v[i]``) moves too, as the test of its last value: the loop's
    tests fail at some trip exactly where that one fails; except where ``last`` is None (a loop
    of a literal count, which the C compiler unrolls, folding those tests to constants: moved
    out, they leave gcc 13 free to vectorise a 3-trip loop whose stores the code after it reads
    back one by one, which stalls on store forwarding: BA's objective ran 2x slower)."""
    candidates = {k for k, line in enumerate(body)
                  if isinstance(line, Check) and not line.startswith(" ") and "[" not in line
                  and not (last is None and _on_the_variable(line, loop_variable))}
    while True:
        owned = {loop_variable}
        for k, line in enumerate(body):
            if k not in candidates:
                owned |= assigned_names(line)
        owned.discard(status)
        stays = {k for k in candidates if _uses(body[k], loop_variable) & owned}
        if not stays:
            break
        candidates -= stays
    moved = [line for k, line in enumerate(body) if k in candidates]
    return (moved, [_before_the_loop(line, loop_variable, last) for line in moved],
            [line for k, line in enumerate(body) if k not in candidates])


def _on_the_variable(line: str, loop_variable: str) -> bool:
    return isinstance(line, RangeTest) and line.index == loop_variable


def _uses(line: str, loop_variable: str) -> set[str]:
    """The names ``line`` uses, as it runs before the loop."""
    if _on_the_variable(line, loop_variable):
        return set(_IDENTIFIER.findall(line.bound)) | set(_IDENTIFIER.findall(line.fail))
    return set(_IDENTIFIER.findall(line))


def _before_the_loop(line: str, loop_variable: str, last: str) -> str:
    if _on_the_variable(line, loop_variable):
        record = line.record and dataclasses.replace(line.record, index=last)
        # the last value of a loop that runs (the C generator tests that first) is ≥ 0 as the
        # variable is
        return RangeTest(last, line.bound, line.fail, record, line.index_nonnegative, line.bound_nonnegative)
    return line


def records_moved(before: list[str], after: list[str]) -> dict:
    """The interface's record of each range test that moved, changed (a range test of the loop
    variable became the test of its last value): old record -> new record."""
    return {a.record: b.record for a, b in zip(before, after)
            if isinstance(a, RangeTest) and a.record is not None and a.record != b.record}
