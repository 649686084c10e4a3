"""fsmooth: small functional array programs in Python, compiled to C with exact memory."""
import pathlib as _pathlib

# The stage packages install as fsmooth.shape, fsmooth.dps, fsmooth.dpia and fsmooth.clib
# (pyproject's package_dir), but a checkout keeps them at the top of the repository, as the
# layout has them; there, those subpackages are found beside this folder.
_SOURCE_ROOT = _pathlib.Path(__file__).resolve().parent.parent
if not (_pathlib.Path(__file__).resolve().parent / "dps").is_dir() and (_SOURCE_ROOT / "dps" / "ir.py").is_file():
    __path__.append(str(_SOURCE_ROOT))
from .builtins import abs, build, cos, exp, filter, floor, ifold, iscan, length, log, max, min, pow, sin, sqrt, tan  # noqa: A004
from .builtins import (acos, asin, atan, atan2, ceil, copysign, cosh, erf, erfc, expm1, hypot, isfinite, isinf,
                       isnan, lgamma, log1p, log2, log10, sinh, tanh, trunc)
from .errors import CompileError
from .foreign import Foreign, foreign
from .kernel import Kernel, kernel
from .strategies import (build_global, build_local, build_seq, build_workgroup, to_global, to_local,
                         to_private, vectorize)
from .types import Array, Bool, Card, Double, Float, Index

__version__ = "0.1.0"

__all__ = [
    "Array", "Bool", "Card", "CompileError", "Double", "Float", "Foreign", "Index", "Kernel", "abs", "build",
    "foreign",
    "cos", "exp", "floor", "ifold", "kernel", "length", "log", "max", "min", "pow", "sin", "sqrt",
    "tan", "iscan", "filter", "build_global", "build_workgroup", "build_local", "build_seq", "to_global", "to_local",
    "to_private", "vectorize",
    # the math library (IEEE semantics: fsmooth.builtins)
    "tanh", "sinh", "cosh", "asin", "acos", "atan", "atan2", "ceil", "trunc", "hypot", "log1p", "expm1",
    "log2", "log10", "lgamma", "erf", "erfc", "copysign", "isnan", "isinf", "isfinite",
]
