"""The C runtime that generated code includes (``fsmooth_rt.h``): headers only, shipped as
package data so that an installed fsmooth finds them next to its Python code."""
from __future__ import annotations

from pathlib import Path

HEADER_DIR = Path(__file__).resolve().parent
