"""Loop-invariant checks leave their loop (issue 11): a run-time check of a loop body whose
operands the loop does not change (a read's bounds test on an index computed before the loop,
checked integer arithmetic on sizes or arguments, ``sequence[t + 1]`` inside a fold over i) is
done once, before the loop, instead of on every trip.

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

import re


class Check(str):
    """A line of C written for a check (``KernelEmitter.checks`` lists): see the module."""


_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")
# a name assigned, declared with a value, incremented, or passed by address (a checked
# operation's overflow flag)
_ASSIGNED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:[-+*/%&|^]?=(?!=)|\+\+|--)|(?<!&)&(?!&)\s*([A-Za-z_]\w*)")


def assigned_names(line: str) -> set[str]:
    return {a or b for a, b in _ASSIGNED.findall(line)}


def hoist_invariant_checks(body: list[str], loop_variable: str, status: str) -> tuple[list[str], list[str]]:
    """(the checks of ``body`` that move before its loop, the body without them).  ``body`` is
    the loop body's lines, unindented (the lines of a nested block are indented, so the lines
    without a leading space run on every trip); ``status`` is the status variable, written
    only on the way out."""
    candidates = {k for k, line in enumerate(body)
                  if isinstance(line, Check) and not line.startswith(" ") and "[" not in line}
    while True:
        owned = {loop_variable}
        for k, line in enumerate(body):
            if k not in candidates:
                owned |= assigned_names(line)
        owned.discard(status)
        stays = {k for k in candidates if set(_IDENTIFIER.findall(body[k])) & owned}
        if not stays:
            break
        candidates -= stays
    return ([line for k, line in enumerate(body) if k in candidates],
            [line for k, line in enumerate(body) if k not in candidates])
