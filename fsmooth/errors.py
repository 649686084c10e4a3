"""Located compile errors, pointing into the user's Python source."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in the user's source: 1-based line, 0-based column (as Python's ``ast``)."""

    filename: str
    lineno: int
    col_offset: int
    source_line: str = ""
    end_col_offset: int | None = None

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}:{self.col_offset + 1}"


class CompileError(Exception):
    """A program outside the F̃ subset, or ill-typed, or with ill-shaped arrays.

    ``str(err)`` reads ``file:line:col: error: message`` followed by the source line
    and a caret under the offending construct.
    """

    def __init__(self, message: str, loc: Loc | None = None):
        self.message = message
        self.loc = loc
        self.filename = loc.filename if loc else None
        self.lineno = loc.lineno if loc else None
        self.col_offset = loc.col_offset if loc else None
        super().__init__(self._render())

    def _render(self) -> str:
        if self.loc is None:
            return f"error: {self.message}"
        loc = self.loc
        text = f"{loc}: error: {self.message}"
        if loc.source_line:
            line = loc.source_line.rstrip("\n")
            width = 1
            if loc.end_col_offset is not None and loc.end_col_offset > loc.col_offset:
                width = loc.end_col_offset - loc.col_offset
            width = max(1, min(width, len(line) - loc.col_offset))
            text += f"\n    {line}\n    {' ' * loc.col_offset}^{'~' * (width - 1)}"
        return text


class IRError(Exception):
    """An ill-formed intermediate program (``verify`` of an IR found it): a bug in the compiler,
    never in the user's program.  The driver's message names the pass whose output it is."""
