"""Deep programs: the front end and every pass recurse over a kernel's nesting (a let per
statement, a node per operand of a long sum, a frame per nested lambda), so each compile runs
on one thread with a large stack and a raised recursion limit (README.md, "Errors").

The recursion limit is the interpreter's, not the thread's, so compiles are serialised: while
one runs, the limit is ``RECURSION_LIMIT``, and a stack of ``STACK_BYTES`` holds that many
frames.  A program deeper than that is a ``CompileError`` at the kernel's ``def``.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from .errors import CompileError, Loc

RECURSION_LIMIT = 60_000
STACK_BYTES = 1 << 30

T = TypeVar("T")

_lock = threading.Lock()
_on_deep_stack = threading.local()


def on_deep_stack(compile_step: Callable[[], T], kernel_name: str, def_loc: Loc | None) -> T:
    """``compile_step()`` run on a thread with a deep stack; a RecursionError becomes a
    ``CompileError`` located at ``def_loc``.  A call made on that thread runs directly."""
    if getattr(_on_deep_stack, "active", False):
        return compile_step()
    outcome: list = []

    def run() -> None:
        _on_deep_stack.active = True
        try:
            outcome.append((True, compile_step()))
        except BaseException as err:  # re-raised on the caller's thread
            outcome.append((False, err))

    with _lock:
        limit = sys.getrecursionlimit()
        previous_stack = threading.stack_size(STACK_BYTES)
        try:
            sys.setrecursionlimit(max(limit, RECURSION_LIMIT))
            worker = threading.Thread(target=run, name=f"fsmooth compile {kernel_name}")
            worker.start()
            worker.join()
        finally:
            threading.stack_size(previous_stack)
            sys.setrecursionlimit(limit)
    succeeded, value = outcome[0]
    if succeeded:
        return value
    if isinstance(value, RecursionError):
        raise CompileError(f"kernel {kernel_name} is nested too deeply to compile (README.md, \"Errors\": "
                           f"statements in a row, operands of one expression and nested lambdas "
                           f"count together)", def_loc) from None
    raise value
