"""The C runtime that generated code includes (``fsmooth_rt.h``, which includes
``fsmooth_scalar.h``): headers only, shipped as package data so that an installed fsmooth finds
them next to its Python code; ``fsmooth_opencl_rt.h`` and ``fsmooth_cl.h`` are the host runtime of
the OpenCL target's C (``fsmooth.opencl_host``).  ``fsmooth_scalar.h`` is also the text of the OpenCL prelude's
scalar helpers (``dpia.codegen_opencl.prelude``)."""
from __future__ import annotations

from pathlib import Path

HEADER_DIR = Path(__file__).resolve().parent
RUNTIME_HEADER = "fsmooth_rt.h"  # what generated C includes
SCALAR_HEADER = "fsmooth_scalar.h"  # the helpers C and OpenCL share; fsmooth_rt.h includes it
# Every header a build of generated C needs beside it.
C_HEADERS = (RUNTIME_HEADER, SCALAR_HEADER)
# ... and of the host code of ``fsmooth compile --target opencl``: its OpenCL runtime and the
# declarations of the OpenCL API it calls (pip's OpenCL wheels ship no CL headers).
OPENCL_HOST_HEADERS = (*C_HEADERS, "fsmooth_opencl_rt.h", "fsmooth_cl.h")
