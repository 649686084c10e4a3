"""Running an ``OpenCLArtifact`` through pyopencl, on a context and program of
``fsmooth.opencl_device``: host-side size functions (``fsmooth.shape.size_printer``), hoisted
buffers, launches in order, results back to numpy.

A call checks and converts its arguments exactly as the C runtime does (``fsmooth.runtime``'s
converters and size getter are reused), evaluates the kernel's size constraints, then looks up
the *plan* for its sizes: result dims, bytes of every buffer, global and local sizes of every
launch.  Sizes are computed as the C path's ``K_check_sizes`` computes them (``PYTHON_CHECKED``):
one that overflows int64 is an OverflowError, a zero divisor a ZeroDivisionError, and a buffer
larger than the device can allocate a MemoryError, before anything is allocated or launched.
The plan also says which launches run: those whose condition on the sizes holds (``Launch.when``,
a formula of value 1 or 0 among the others) and, of a launch and its fallback, the one the
device's local memory allows; a hoisted buffer that no launch that runs passes is not made.
All those formulas were turned into one Python function at construction (no sympy in the
call path) and plans are memoised per tuple of sizes.  Hoisted 'temp' buffers (and the staging
buffers of host inputs and outputs) are allocated once and reused while they are large enough,
and results left on the device come from a memory pool;
'local' buffers become ``cl.LocalMemory``; size symbols are passed as ``np.int64``.  All launches
go, in order, on one in-order queue with profiling enabled, so ``last_profile`` can report the
time of each launch from its event.

A failed run-time check in a kernel (a data-dependent index out of range, an integer division by
zero, ``int(x)`` of a NaN, an infinity or a float outside int64) raises as the C runtime does: the
'status' buffer, one ``int`` per launch, is zeroed before the launches and read after them (one
small transfer), and its first nonzero code goes through ``fsmooth.runtime``'s mapping
(1 → IndexError, 2 → ZeroDivisionError, 5 → ValueError, 6 → OverflowError for integer arithmetic
or a size computed in a kernel body that overflows int64, ...), naming the kernel.

Device arrays (``pyopencl.array.Array``) can be passed in and out: an input that is already on the
device is used in place, and the result stays on the device when ``device_result=True`` or when
any input was a device array.
"""
from __future__ import annotations

import math
import statistics
import threading
from dataclasses import dataclass

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
import pyopencl.tools as cl_tools
import sympy

from fsmooth.shape.size_printer import SIZE_OVERFLOW, compile_constraint_check, compile_size_function

from .opencl_artifact import STATUS_ELEM, OpenCLArtifact
from .opencl_device import build_program, default_context, require_capabilities
from .runtime import (MEMO_LIMIT, array_converter, assemble, raise_status, scalar_converter, size_getter,
                      tuple_flattener)
from .types import NUMPY_DTYPE, Bool, Card, TupleT, element_scalar, rank, type_str

# How a scalar parameter travels as a kernel argument (see opencl_artifact: Bool is a uchar,
# since OpenCL forbids bool kernel arguments).
_SCALAR_ARG_DTYPE = {s: (np.dtype(np.uint8) if s is Bool else NUMPY_DTYPE[s]) for s in NUMPY_DTYPE}

_ROLES = ("input", "output", "temp", "local", "lookback", "status", "counter", "handover")
_STATUS_DTYPE = np.dtype(np.int32)  # STATUS_ELEM, OpenCL's int


@dataclass(frozen=True)
class LaunchProfile:
    """The device time of one launch, from its profiling event (end - start)."""

    kernel: str
    seconds: float


@dataclass(frozen=True)
class Timing:
    """Device times of repeated calls: each the sum of one call's launch times, in seconds."""

    median: float
    times: tuple


@dataclass(frozen=True)
class _Plan:
    result_dims: tuple  # per output (one, or one per component of a tuple result)
    nbytes: dict  # buffer name -> bytes, for the non-input buffers
    launches: tuple  # (global size, local size or None) per launch; None: skipped (no work-item, or not chosen)
    passed: frozenset  # the buffers the launches that run pass


class OpenCLExecutable:
    """An ``OpenCLArtifact`` built for one device, callable on numpy arrays, Python scalars and
    ``pyopencl.array.Array``s."""

    def __init__(self, artifact: OpenCLArtifact, context: cl.Context | None = None, signature: tuple = ()):
        self.artifact = artifact
        self.interface = interface = artifact.interface
        # a tuple parameter is passed as its components (fsmooth.runtime.tuple_flattener)
        self._flatten = tuple_flattener(interface.name, signature)
        self.name = name = interface.name
        self.context = context if context is not None else default_context()
        self.device = self.context.devices[0]
        require_capabilities(artifact, self.device)
        self._check_artifact()

        self.queue = cl.CommandQueue(self.context, self.device,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.program = build_program(self.context, self.device, artifact.source)
        # One Kernel object per launch: a kernel's arguments are state, and two launches of one
        # OpenCL kernel may take different ones.
        self._kernels = tuple(cl.Kernel(self.program, launch.kernel) for launch in artifact.launches)

        self._params = dict(interface.params)
        self._nparams = len(interface.params)
        self._converters = tuple(
            array_converter(name, pname, ty) if rank(ty) else scalar_converter(name, pname, ty)
            for pname, ty in interface.params)
        self._size_getter = size_getter(interface)
        self._symbols = tuple(s.symbol for s in interface.sizes)
        self._check_sizes = compile_constraint_check(self._symbols, [c.cond for c in interface.constraints], name)

        # Per output buffer (one, or one per component of a tuple result): its rank and dtype.
        self._outputs = tuple(b for b in artifact.buffers.values() if b.role == "output")
        self._result_types = tuple((rank(ty), NUMPY_DTYPE[element_scalar(ty)]) for _, ty, _ in interface.outputs)
        self._tuple_result = isinstance(interface.result, TupleT)
        self._status = next((b for b in artifact.buffers.values() if b.role == "status"), None)
        self._status_zeros = np.zeros(len(artifact.launches), dtype=_STATUS_DTYPE)
        self._sized = tuple(b for b in artifact.buffers.values() if b.role not in ("input", "status", "counter"))
        launches = artifact.launches
        # the launches that run only where a condition on the sizes holds, each condition a size
        # formula of value 1 or 0, the last of the formulas
        self._conditional = tuple(j for j, launch in enumerate(launches) if launch.when is not None)
        formulas = ([d for _, _, dims in interface.outputs for d in dims] + [b.count for b in self._sized]
                    + [g for launch in launches for g in launch.global_size]
                    + [l for launch in launches for l in (launch.local_size or ())]
                    + list(artifact.fitting)
                    + [sympy.Piecewise((1, launches[j].when), (0, True)) for j in self._conditional])
        self._sizes_of = compile_size_function(self._symbols, formulas, name)
        self._formulas = formulas
        self._formula_names = (["result size" for _, _, dims in interface.outputs for _ in dims]
                               + [f"element count of buffer '{b.name}'" for b in self._sized]
                               + [f"global size of launch {launch.kernel}" for launch in launches
                                  for _ in launch.global_size]
                               + [f"local size of launch {launch.kernel}" for launch in launches
                                  for _ in (launch.local_size or ())]
                               + ["index arithmetic of the kernels"] * len(artifact.fitting)
                               + [f"condition of launch {launches[j].kernel}" for j in self._conditional])
        self._plans: dict[tuple, _Plan] = {}
        self._max_group = self.device.max_work_group_size

        self._device_buffers: dict[str, tuple[int, cl.Buffer]] = {}  # name -> (capacity, buffer)
        # Results left on the device come from a pool: a freed result's memory serves the next
        # call, where a fresh buffer would be mapped in by the kernel that first writes it (on an
        # H100, 15% of a 128 Mi-float scal).
        self._result_pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(self.queue))
        self._lock = threading.Lock()  # temps and kernel arguments are shared by all calls
        self._events: tuple = ()

    def __repr__(self) -> str:
        return f"<fsmooth OpenCL executable {self.name} on {self.device.name.strip()}>"

    # -- construction
    def _check_artifact(self):
        a, where = self.artifact, self.name
        symbols = {s.symbol for s in self.interface.sizes}
        arrays = {p for p, ty in self.interface.params if rank(ty)}
        scalars = {p for p, ty in self.interface.params if not rank(ty)}
        for bname, buf in a.buffers.items():
            if buf.name != bname or buf.role not in _ROLES:
                raise ValueError(f"{where}: buffer {bname!r} has name {buf.name!r} and role "
                                 f"{buf.role!r}; roles are {', '.join(_ROLES)}")
            if buf.role == "input" and bname not in arrays:
                raise ValueError(f"{where}: input buffer {bname!r} is not an array parameter")
            if buf.role == "input" and buf.elem != element_scalar(self._param_type(bname)):
                raise ValueError(f"{where}: input buffer {bname!r} holds {buf.elem}, but the "
                                 f"parameter is {type_str(self._param_type(bname))}")
        statuses = [b for b in a.buffers.values() if b.role == "status"]
        if len(statuses) > 1 or any(b.elem != STATUS_ELEM or b.count != len(a.launches) for b in statuses):
            raise ValueError(f"{where}: needs at most one 'status' buffer, of {STATUS_ELEM} and one "
                             f"element per launch ({len(a.launches)})")
        if any(b.elem != STATUS_ELEM or b.count != 1 for b in a.buffers.values() if b.role == "counter"):
            raise ValueError(f"{where}: a 'counter' buffer holds one {STATUS_ELEM}")
        if statuses and any(statuses[0].name not in launch.args for launch in a.launches):
            raise ValueError(f"{where}: every launch must pass the status buffer {statuses[0].name!r}")
        outputs = [b for b in a.buffers.values() if b.role == "output"]
        components = self.interface.outputs
        if len(outputs) != len(components):
            wanted = "exactly one 'output' buffer" if len(components) == 1 else \
                f"{len(components)} 'output' buffers, one per component of the result"
            raise ValueError(f"{where}: needs {wanted}, has {len(outputs)}")
        for buffer, (_, ty, _) in zip(outputs, components):
            if buffer.elem != element_scalar(ty):
                raise ValueError(f"{where}: the output buffer {buffer.name} holds {buffer.elem}, but its "
                                 f"component of the result is {type_str(ty)}")
        for j, launch in enumerate(a.launches):
            if launch.fallback and (j == 0 or a.launches[j - 1].fallback):
                raise ValueError(f"{where}: the fallback launch of {launch.kernel} follows no launch it can replace")
            if launch.fallback and a.launches[j - 1].when != launch.when:
                raise ValueError(f"{where}: the fallback launch of {launch.kernel} has another condition than "
                                 f"the launch it replaces")
            if not 1 <= len(launch.global_size) <= 3 or (
                    launch.local_size is not None and len(launch.local_size) != len(launch.global_size)):
                raise ValueError(f"{where}: launch of {launch.kernel} needs 1 to 3 global dims and "
                                 f"as many local dims")
            for arg in launch.args:
                if arg not in a.buffers and arg not in symbols and arg not in scalars:
                    raise ValueError(f"{where}: launch of {launch.kernel} passes {arg!r}, which is no "
                                     f"buffer, size symbol or scalar parameter")

    def _param_type(self, pname: str):
        return dict(self.interface.params)[pname]

    # -- the steps of a call
    def _convert(self, args: tuple) -> tuple[dict, tuple, bool]:
        """(value by parameter name, the C runtime's argument layout for the size getter, whether
        any argument is a device array).  Host values go through the C runtime's converters."""
        if len(args) != self._nparams:
            params = ", ".join(p for p, _ in self.interface.params)
            raise TypeError(f"{self.name}({params}) takes {self._nparams} argument"
                            f"{'' if self._nparams == 1 else 's'}, got {len(args)}")
        values, layout, on_device = {}, [], False
        for x, convert, (pname, ty) in zip(args, self._converters, self.interface.params):
            if isinstance(x, cl_array.Array):
                value, on_device = self._device_argument(pname, ty, x), True
            else:
                value = convert(x)
            values[pname] = value
            layout.append(value)
            if rank(ty):
                layout.extend(value.shape)
        return values, tuple(layout), on_device

    def _device_argument(self, pname: str, ty, x: cl_array.Array) -> cl_array.Array:
        """A device array checked like a host array, but never converted: a conversion would be a
        hidden device copy of another dtype, so the caller is asked for the right one."""
        where = f"{self.name}: argument '{pname}' ({type_str(ty)})"
        if not rank(ty):
            raise TypeError(f"{where} must be a scalar, got a device array")
        dtype = NUMPY_DTYPE[element_scalar(ty)]
        if x.ndim != rank(ty):
            raise TypeError(f"{where} must be a {rank(ty)}-D array, got a {x.ndim}-D device array")
        if x.dtype != dtype:
            raise TypeError(f"{where} must be a device array of {dtype}, got {x.dtype}")
        if x.context.int_ptr != self.context.int_ptr:
            raise ValueError(f"{where} is a device array of another OpenCL context")
        if not x.flags.c_contiguous or x.offset:
            x = x.copy()  # the kernel reads one contiguous buffer from its start
            if not x.flags.c_contiguous:
                raise ValueError(f"{where} must be a C-contiguous device array")
        if element_scalar(ty) is Card and x.size and cl_array.min(x, queue=self.queue).get() < 0:
            raise ValueError(f"{where} has negative elements, but Card values are >= 0")
        return x

    def _plan(self, sizes: tuple) -> _Plan:
        plan = self._plans.get(sizes)
        if plan is not None:
            return plan
        shown = ", ".join(f"{s}={v}" for s, v in zip(self._symbols, sizes))
        try:  # sizes computed as K_check_sizes and K_shape do: exactly, within int64, no divisor zero
            failed = self._check_sizes(sizes)
            if failed:
                constraint = self.interface.constraints[failed - 1]
                raise ValueError(f"{self.name}: argument '{constraint.param}': {constraint.message} "
                                 f"(sizes: {shown})")
            computed = self._sizes_of(sizes)
        except ZeroDivisionError:
            raise ZeroDivisionError(f"{self.name}: a size of this call divides by zero (sizes: {shown})") from None
        self._refuse_overflow(computed, shown)
        values = iter(computed)
        dims = tuple(tuple(next(values) for _ in component_dims) for _, _, component_dims in self.interface.outputs)
        nbytes = {b.name: next(values) * NUMPY_DTYPE[b.elem].itemsize for b in self._sized}
        launches = self.artifact.launches
        chosen = self._chosen(nbytes, computed[len(computed) - len(self._conditional):])
        passed = frozenset(arg for launch, runs in zip(launches, chosen) if runs for arg in launch.args)
        self._refuse_buffers(nbytes, shown, passed)
        global_sizes = [tuple(next(values) for _ in launch.global_size) for launch in launches]
        local_sizes = [tuple(next(values) for _ in launch.local_size) if launch.local_size else None
                       for launch in launches]
        if any(d < 0 for ds in dims for d in ds) or any(n < 0 for n in nbytes.values()):
            raise RuntimeError(f"{self.name}: a size formula gave a negative size for {sizes}")
        for buffer, ds, (_, dtype) in zip(self._outputs, dims, self._result_types):
            want = math.prod(ds) * dtype.itemsize
            if nbytes[buffer.name] != want:
                raise RuntimeError(f"{self.name}: the output buffer {buffer.name} has {nbytes[buffer.name]} "
                                   f"bytes, but its result needs {want}")
        planned = []
        for launch, gsize, lsize, runs in zip(launches, global_sizes, local_sizes, chosen):
            if any(g < 0 for g in gsize) or (lsize and any(l <= 0 for l in lsize)):
                raise RuntimeError(f"{self.name}: launch of {launch.kernel} has global size {gsize} "
                                   f"and local size {lsize}")
            if 0 in gsize or not runs:
                planned.append(None)
                continue
            if lsize and (any(g % l for g, l in zip(gsize, lsize)) or math.prod(lsize) > self._max_group):
                raise RuntimeError(f"{self.name}: launch of {launch.kernel}: local size {lsize} must "
                                   f"divide the global size {gsize} and hold at most "
                                   f"{self._max_group} work-items on this device")
            planned.append((gsize, lsize))
        if len(self._plans) >= MEMO_LIMIT:
            self._plans.clear()
        plan = self._plans[sizes] = _Plan(dims, nbytes, tuple(planned), passed)
        return plan

    def _local_bytes(self, buffer, nbytes: dict) -> int:
        """The bytes of __local memory a 'local' buffer is passed as (at least one element)."""
        return max(nbytes[buffer.name], NUMPY_DTYPE[buffer.elem].itemsize)

    def _chosen(self, nbytes: dict, conditions: tuple) -> list:
        """Whether each launch runs: where its condition on the sizes holds (``conditions``: 1 or
        0 per launch of ``_conditional``), and of a launch and its fallback, the launch where the
        'local' buffers it passes fit the device's local memory, else the fallback
        (opencl_artifact)."""
        launches, buffers = self.artifact.launches, self.artifact.buffers
        chosen = [True] * len(launches)
        for j, holds in zip(self._conditional, conditions):
            chosen[j] = holds == 1
        for j, launch in enumerate(launches):
            if launch.fallback:
                local = sum(self._local_bytes(buffers[arg], nbytes) for arg in launches[j - 1].args
                            if arg in buffers and buffers[arg].role == "local")
                fits = local <= self.device.local_mem_size
                chosen[j - 1], chosen[j] = chosen[j] and fits, chosen[j] and not fits
        return chosen

    def _arguments_of(self, formula) -> str:
        """The parameters a size formula's symbols come from, for an error message."""
        symbols = {s.name for s in sympy.sympify(formula).free_symbols}
        params = dict.fromkeys(s.param for s in self.interface.sizes if s.symbol in symbols)
        return ", ".join(f"'{p}'" for p in params) or "no argument"

    def _refuse_overflow(self, computed: tuple, shown: str) -> None:
        """OverflowError where a size formula's value (or a value on its way) overflows int64,
        as the C path's K_check_sizes refuses it, naming the arguments the size comes from."""
        if SIZE_OVERFLOW not in computed:
            return
        j = computed.index(SIZE_OVERFLOW)
        raise OverflowError(f"{self.name}: the {self._formula_names[j]} of this call overflows int64 (from the "
                            f"arguments {self._arguments_of(self._formulas[j])}; sizes: {shown})")

    def _refuse_buffers(self, nbytes: dict, shown: str, passed: frozenset) -> None:
        """OverflowError where a buffer's bytes overflow int64, MemoryError where they are more than
        the device can allocate (its largest buffer, or its local memory for a 'local' one), before
        anything is allocated or launched; of the hoisted buffers, those the chosen launches pass."""
        for buffer in self._sized:
            if buffer.role in ("temp", "local") and buffer.name not in passed:
                continue
            n = nbytes[buffer.name]
            where = f"{self.name}: buffer '{buffer.name}' (from the arguments {self._arguments_of(buffer.count)})"
            if n >= 2**63:
                raise OverflowError(f"{where} would have {n} bytes, which overflows int64 (sizes: {shown})")
            limit = self.device.local_mem_size if buffer.role == "local" else self.device.max_mem_alloc_size
            if n > limit:
                raise MemoryError(f"{where} would have {n} bytes, more than this device's limit of {limit} "
                                  f"(sizes: {shown})")

    def _reused_buffer(self, name: str, nbytes: int, zeroed: bool = False) -> cl.Buffer:
        """A device buffer of at least ``nbytes`` (never zero, which OpenCL forbids) kept under
        ``name`` and reused by later calls while it is large enough; ``zeroed``: filled with zeros
        when made (a copy, which Oclgrind counts as initialising: a 'lookback' or 'handover' buffer,
        which the kernels then keep consistent)."""
        capacity, buffer = self._device_buffers.get(name, (-1, None))
        if capacity < nbytes or buffer is None:
            capacity = max(nbytes, 1)
            buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, capacity)
            self._device_buffers[name] = (capacity, buffer)
            if zeroed:
                cl.enqueue_copy(self.queue, buffer, np.zeros(capacity, np.uint8), is_blocking=True)
        return buffer

    def _launch(self, values: dict, sizes: tuple, plan: _Plan, device_result: bool):
        """Enqueue every launch; return the device result arrays (device_result) or the output
        buffers, one per output, and the read of the status buffer enqueued after them (None
        without one)."""
        bound = {}
        for bname, buf in self.artifact.buffers.items():
            if buf.role == "input":
                bound[bname] = self._input_buffer(bname, values[bname])
            elif bname not in plan.passed:
                continue  # a hoisted buffer of a launch not chosen (a fallback's, say)
            elif buf.role in ("temp", "handover", "lookback"):
                bound[bname] = self._reused_buffer(f"temp {bname}", plan.nbytes[bname], zeroed=buf.role != "temp")
            elif buf.role == "local":
                bound[bname] = cl.LocalMemory(self._local_bytes(buf, plan.nbytes))
            elif buf.role == "counter":
                # made once, zeroed; the launches leave it at zero
                bound[bname] = self._reused_buffer(f"temp {bname}", _STATUS_DTYPE.itemsize, zeroed=True)
        results = []
        for buffer, dims, (_, dtype) in zip(self._outputs, plan.result_dims, self._result_types):
            out = buffer.name
            if device_result:
                results.append(cl_array.empty(self.queue, dims, dtype, allocator=self._result_pool))
                bound[out] = results[-1].base_data if results[-1].size else self._reused_buffer(f"empty {out}", 1)
            else:
                results.append(bound.setdefault(out, self._reused_buffer(f"output {out}", plan.nbytes[out])))
        for symbol, value in zip(self._symbols, sizes):
            bound.setdefault(symbol, np.int64(value))
        for pname, ty in self.interface.params:
            if not rank(ty):
                bound.setdefault(pname, _SCALAR_ARG_DTYPE[ty].type(values[pname]))
        if self._status is not None:
            status_bytes = len(self.artifact.launches) * _STATUS_DTYPE.itemsize
            bound[self._status.name] = status = self._reused_buffer("status", status_bytes)
            # a copy, not clEnqueueFillBuffer, which Oclgrind does not count as initialising;
            # the zeros live as long as the executable, so the copy need not block
            cl.enqueue_copy(self.queue, status, self._status_zeros, is_blocking=False)

        events = []
        for launch, kernel, sizes_of_launch in zip(self.artifact.launches, self._kernels, plan.launches):
            if sizes_of_launch is None:
                continue
            kernel.set_args(*(bound[arg] for arg in launch.args))
            gsize, lsize = sizes_of_launch
            events.append((launch.kernel, cl.enqueue_nd_range_kernel(self.queue, kernel, gsize, lsize)))
        self._events = tuple(events)
        status_read = None
        if self._status is not None:
            codes = np.empty(len(self.artifact.launches), dtype=_STATUS_DTYPE)
            # after the launches on the in-order queue: ready once they are done
            event = cl.enqueue_copy(self.queue, codes, bound[self._status.name], is_blocking=False)
            status_read = (codes, event)
        return results, status_read

    def _raise_failed_check(self, status_read) -> None:
        """Raise for the first failed check of the call, as the C runtime does for its status."""
        if status_read is None:
            return
        codes, event = status_read
        event.wait()
        failed = codes[codes != 0]
        if failed.size:
            # the C runtime's mapping from STATUS codes to exceptions, message naming the kernel
            raise_status(self.interface.name, int(failed[0]))

    def _input_buffer(self, pname: str, value) -> cl.Buffer:
        if isinstance(value, cl_array.Array):
            return value.base_data if value.size else self._reused_buffer(f"empty input {pname}", 1)
        buffer = self._reused_buffer(f"input {pname}", value.nbytes)
        if value.nbytes:
            # Blocking: the numpy array may be a temporary of the conversion.
            cl.enqueue_copy(self.queue, buffer, value, is_blocking=True)
        return buffer

    # -- public
    def call(self, *args, device_result: bool | None = None):
        """Run the kernel.  The result is a numpy array (array result) or a Python float/int/bool,
        or a ``pyopencl.array.Array`` left on the device when ``device_result`` is true or, by
        default, when some argument was a device array; a Python tuple of these for a tuple."""
        return self._call(self._flatten(args) if self._flatten is not None else args, device_result)

    def _call(self, args: tuple, device_result: bool | None):
        """``call`` on the arguments of the OpenCL kernels: a tuple parameter's components."""
        values, layout, on_device = self._convert(args)
        sizes = self._size_getter(layout)
        plan = self._plan(sizes)
        keep_on_device = on_device if device_result is None else device_result
        with self._lock:
            outs, status_read = self._launch(values, sizes, plan, keep_on_device)
            if keep_on_device:
                self._raise_failed_check(status_read)
                return self._assemble(outs)
            values = []
            for out, dims, (result_rank, dtype) in zip(outs, plan.result_dims, self._result_types):
                host = np.empty(dims, dtype=dtype)
                if host.nbytes:
                    cl.enqueue_copy(self.queue, host, out, is_blocking=True)
                values.append(host if result_rank else host.item())
            self._raise_failed_check(status_read)
        return self._assemble(values)

    def _assemble(self, values: list):
        if self.interface.kept_length:  # a filter: the kept elements (a device array's too)
            kept, count = values
            return kept[:int(count.get()) if hasattr(count, "get") else count]
        return assemble(self.interface.result, iter(values)) if self._tuple_result else values[0]

    __call__ = call

    def temp_buffer(self, name: str) -> cl.Buffer | None:
        """The device buffer now backing the 'temp' (or 'counter') buffer ``name`` (None before the
        first call)."""
        return self._device_buffers.get(f"temp {name}", (0, None))[1]

    @property
    def last_profile(self) -> tuple:
        """``LaunchProfile`` per launch of the latest call, in order (waits for them to finish)."""
        events = self._events
        if events:
            cl.wait_for_events([e for _, e in events])
        return tuple(LaunchProfile(kernel, (e.profile.end - e.profile.start) * 1e-9) for kernel, e in events)

    def to_device(self, *args) -> tuple:
        """The arguments checked and converted, arrays copied to this executable's device once
        (for repeated calls without host transfers)."""
        if self._flatten is not None:
            args = self._flatten(args)  # the tuples' components, as the device arguments are
        values, _, _ = self._convert(args)
        return tuple(values[p] if not rank(ty) or isinstance(values[p], cl_array.Array)
                     else cl_array.to_device(self.queue, values[p])
                     for p, ty in self.interface.params)

    def run_timed(self, args, repeats: int = 100, warmup: int = 1) -> Timing:
        """Device time of ``repeats`` calls (after ``warmup`` untimed ones) with the inputs
        uploaded once and the results left on the device: per call, the sum of its launch
        times from the profiling events."""
        if repeats < 1:
            raise ValueError("run_timed needs repeats >= 1")
        device_args = self.to_device(*args)
        for _ in range(warmup):
            self._call(device_args, device_result=True)
        times = []
        for _ in range(repeats):
            self._call(device_args, device_result=True)
            times.append(sum(p.seconds for p in self.last_profile))
        return Timing(statistics.median(times), tuple(times))
