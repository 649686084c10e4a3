"""What the OpenCL back end hands to the pyopencl launcher (DPIA paper §6).

One F̃ kernel may need several OpenCL kernels run in order (a two-phase reduction); every
global or local ``new`` of the imperative program has been hoisted to a kernel argument
(§6.4), sized by the enclosing parallel loops.  Sizes are sympy expressions over the size
symbols of ``interface.sizes`` (the same symbols as the C back end); the launcher turns them
into one Python function at load time (``fsmooth.shape.size_printer``), so a call does no
symbolic work.

The launcher (``fsmooth.opencl_executable``) relies on these conventions:
  - A launch argument names a ``Buffer`` (passed as its ``cl.Buffer``, or as ``__local``
    memory of ``count`` elements for a 'local' one), else a size symbol of
    ``interface.sizes`` (passed as ``long``), else a scalar parameter of the F̃ kernel (passed
    by value: Double as ``double``, Float as ``float``, Index/Card as ``long``, Bool as
    ``uchar`` 0/1).  Array elements keep their numpy layout (Bool arrays are bytes).
  - Exactly one Buffer has role 'output'.  For an array result its ``count`` is the product
    of ``interface.result_dims``; for a scalar result it is 1 and the launcher returns that
    one element.  Every 'input' Buffer is named after an array parameter.
  - ``interface.constraints[k].cond`` is a sympy condition over the size symbols, evaluated on
    the host before any launch.
  - A launch whose global size has a zero dimension is skipped (no work-item would run);
    ``local_size``, when given, must divide ``global_size`` in every dimension.
  - A launch marked ``fallback`` follows the launch it can replace: of the two, the first runs
    where the 'local' buffers it passes hold at most the device's local memory
    (``CL_DEVICE_LOCAL_MEM_SIZE``) in all, for this call's sizes, and the fallback (the same
    work, those arrays in 'temp' buffers) runs otherwise.
  - A launch with a condition ``when`` runs only in a call whose sizes satisfy it, evaluated on
    the host before any launch, as the constraints are: a kernel nested one way for short rows
    and another for long ones (``fsmooth.auto_reductions``) has the launches of both, each with
    its condition, one true and the other false for any sizes.  A launch and its fallback have
    the same condition; of the two, the local memory decides where it holds.
  - A buffer only launches that do not run pass is neither allocated nor checked against the
    device's limits.
  - Failed run-time checks (generated kernels; optional in hand-written artifacts): at most one
    Buffer has role 'status', of ``STATUS_ELEM`` (OpenCL ``int``), one element per launch, and
    every launch passes it.  The launcher zeroes it before the launches and reads it after
    them: launch j writes only element j, the code of ``fsmooth.artifact.STATUS`` of its first
    failed check (``atomic_cmpxchg``), and a launch after a failed one does nothing, so the
    first nonzero element is the call's failure and raises as the C runtime does.  One element
    per launch, rather than one for the call, lets a kernel test the earlier launches' statuses
    with plain reads that no work-item of its own launch writes (no race; the same value for a
    whole work-group, so no barrier is skipped by some of its work-items only).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from .artifact import KernelInterface
from .types import Scalar

# The element of the 'status' buffer: OpenCL's 32-bit ``int`` (atomics on it are core OpenCL,
# 64-bit ones an extension); no F̃ scalar, so the launcher treats the role specially.
STATUS_ELEM = Scalar("Int32")


@dataclass(frozen=True)
class Buffer:
    """A kernel argument that is memory.

    role: 'input' (a parameter of the F̃ kernel, by name), 'output' (the result), 'temp' (a
    hoisted global ``new``: allocated once per shape by the launcher and reused across calls),
    'local' (a hoisted local ``new``: passed as ``__local`` memory of ``count`` elements
    per work-group), 'status' (the failed-check codes, one per launch: see above), 'counter'
    (one ``int`` of ``STATUS_ELEM``, the tickets of a one-launch reduction: zeroed when the
    launcher allocates it, left at zero by every launch, kept across calls), 'handover' (a
    'temp' that crosses the work-groups of a launch, a one-launch reduction's partials, accessed
    with atomics: zeroed when the launcher allocates it, since an atomic store reads the old value;
    its kernels write every element they read before reading it) or 'lookback' (the published
    states of a single-pass scan, ``dpia.scan_opencl``: as 'temp', but zeroed when allocated and
    never otherwise written by the host, since the kernel leaves it ready for the next call)."""

    name: str
    role: str
    elem: Scalar
    count: sympy.Expr  # number of elements, over the size symbols


@dataclass(frozen=True)
class Launch:
    """One ``clEnqueueNDRangeKernel``: the OpenCL kernel ``kernel`` with arguments ``args``
    (names of ``Buffer``s or of size symbols, passed as ``long``), over ``global_size`` work
    items in work-groups of ``local_size`` (None: the implementation chooses)."""

    kernel: str
    args: tuple  # str
    global_size: tuple  # sympy.Expr per dimension
    local_size: tuple | None
    # run instead of the launch before it where that one's 'local' buffers need more bytes in all
    # than the device's local memory (see above)
    fallback: bool = False
    # runs only where this condition on the sizes holds (sympy over the size symbols; None: always)
    when: sympy.Basic | None = None


@dataclass(frozen=True)
class OpenCLArtifact:
    source: str  # OpenCL C, all kernels of the program
    buffers: dict  # name -> Buffer
    launches: tuple  # Launch, run in order
    interface: KernelInterface  # params, result, sizes, constraints: as for C
    needs_fp64: bool
    # a one-launch reduction's 32-bit global atomics (core in OpenCL 1.1, an extension in 1.0)
    needs_atomics: bool = False
    extensions: tuple = ()  # the OpenCL extensions the source needs of the device, beside fp64
    # sizes the kernels' index arithmetic computes, formulas of the interface's sizes: the host
    # refuses a call where one overflows int64 (status 6's OverflowError, before any launch)
    fitting: tuple = ()
