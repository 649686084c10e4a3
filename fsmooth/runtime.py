"""Calling compiled kernels from Python: load the C of a ``CArtifact`` through cffi (API mode,
built once and cached on disk by ``fsmooth.cache``), with a CPython entry point per kernel
compiled into the same module (``fsmooth.python_entry``), and call one kernel on numpy arrays.

A call checks and converts its arguments, computes the size symbols from them, asks the C side
whether the sizes satisfy the kernel's constraints (``K_check_sizes``), how large the result is
(``K_shape``) and how much scratch it needs (``K_scratch_bytes``), then runs ``K``.  Everything
that depends only on the kernel's interface is planned once, in ``Executable.__init__``.  The
call (``Executable.call``) is the kernel's C entry point: in C, it takes the common case (exact
floats and ints, C-contiguous arrays of the parameter's dtype and rank) through the size
functions, the result arrays, the thread's arena and ``K``, and hands every other call to the
Python call (``Executable.python_call``), a Python function written for the kernel
(``call_function``): straight-line code that tests each argument's exact type (and dtype, rank,
layout) and passes it on, calling the general converter only for anything else, with the three
size functions' answers memoised per tuple of sizes.  Either way a call does no symbolic work,
builds no dictionary and walks no list of parameters.  Checked arenas and kernels with tuple
parameters have the Python call only.

Checked arenas (``Options.check_arena``, or ``FSMOOTH_CHECK_ARENA=1``): each call gets a fresh
scratch buffer filled with a byte pattern, with guard bytes of the pattern before it and after
its ``K_scratch_bytes``.  The kernel runs twice, under the pattern and under its complement (a
byte the kernel writes can equal at most one of them), and the highest byte that differs from the
pattern in either run is the measured high-water mark (``Executable.last_high_water``,
``last_high_water(kernel)``).  A changed guard byte is an overrun: a loud ``RuntimeError``.

Errors, all raised before ``K`` runs unless noted:
  - wrong number of arguments, a non-array for an array parameter, a wrong rank, an element type
    that cannot be converted without loss (floats for Index/Card, anything but bools for Bool,
    bools for numbers), a non-number for a number → ``TypeError`` naming the parameter;
  - a negative Card, an integer outside int64, sizes that break a size constraint of the kernel
    (e.g. reads past the end of an array) → ``ValueError`` naming the parameter;
  - a failure ``K`` itself reports (``fsmooth.artifact.STATUS``): a data-dependent index out of
    range → ``IndexError``, an integer division by zero → ``ZeroDivisionError``, a size
    constraint checked inside → ``ValueError``, a failed allocation (the malloc variants) →
    ``MemoryError``, ``int(x)`` of a NaN, an infinity or a float outside int64 → ``ValueError``,
    anything else → ``RuntimeError``;
  - in checking mode, a write outside the scratch arena → ``RuntimeError``, after ``K`` ran.
"""
from __future__ import annotations

import numbers
import operator
import threading

import numpy as np

from . import cache
from .artifact import STATUS, CArtifact, KernelInterface
from .python_entry import entry_module, entry_state, has_entry_point
from .types import (C_TYPE, NUMPY_DTYPE, Bool, Card, Double, Float, Index, Scalar, TupleT, Type, element_scalar,
                    rank, type_str)

SCRATCH_ALIGN = 64
GUARD_BYTES = 256  # checked arenas: pattern bytes on either side of the scratch
_INT64_MIN, _INT64_MAX = -(2 ** 63), 2 ** 63 - 1
MEMO_LIMIT = 256  # distinct size tuples remembered per kernel

_libraries: dict[tuple[str, str], object] = {}
# cffi module name -> (the module of its kernels' entry points, the interfaces they were written for)
_entry_points: dict[str, tuple[object, dict]] = {}


def load_library(artifact: CArtifact, native: bool = False):
    """The compiled cffi module (attributes ``ffi`` and ``lib``) of ``artifact``'s C, with its
    kernels' CPython entry points (``fsmooth.python_entry``) compiled in: from this process's
    table, else from the disk cache, else built (and then cached); ``native``: for this
    machine's CPU where ``fsmooth.cache.host_flags`` allows it (``Options.native``)."""
    flags = (*artifact.compile_args, *(cache.host_flags() if native else ()))
    entries = entry_module(artifact)
    source = artifact.source if entries is None else f"{artifact.source}\n{entries[1]}"
    key = (source, artifact.cdef, flags, artifact.libraries)
    library = _libraries.get(key)
    if library is None:
        library = cache.load_module(*key)
        if entries is not None:
            _entry_points[library.__name__] = (cache.load_companion(library, entries[0]),
                                                {k: i for k, i in artifact.interfaces.items() if has_entry_point(i)})
        library = _libraries.setdefault(key, library)
    return library


def last_high_water(kernel) -> int | None:
    """The scratch bytes the last checked call of ``kernel`` (a ``Kernel`` or an ``Executable``)
    wrote up to; None before any checked call."""
    executable = kernel if isinstance(kernel, Executable) else kernel.executable()
    return executable.last_high_water


# ----------------------------------------------------------------------------- argument conversion

def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        return f"a {x.ndim}-D array of {x.dtype}"
    return f"a value of type {type(x).__name__}"


def _element_kind_error(elem: Scalar, dtype: np.dtype) -> str | None:
    """Why an array of ``dtype`` cannot stand for elements of ``elem``, or None if it can."""
    kind = dtype.kind
    if elem is Bool:
        return None if kind == "b" else f"needs bool elements for {elem}, got {dtype}"
    if kind == "b":
        return f"needs numbers for {elem}, got booleans"
    if elem in (Double, Float):
        return None if kind in "iuf" else f"cannot convert {dtype} elements to {elem}"
    if kind in "iu":
        return None
    return f"cannot convert {dtype} elements to {elem} without loss"


def array_converter(kernel: str, name: str, ty: Type):
    want_rank = rank(ty)
    elem = element_scalar(ty)
    dtype = NUMPY_DTYPE[elem]
    where = f"{kernel}: argument '{name}' ({type_str(ty)})"

    def convert_slowly(x):
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as err:  # ragged nested lists, unconvertible objects
            raise TypeError(f"{where} must be a {want_rank}-D array: {err}") from None
        if arr.ndim != want_rank:
            raise TypeError(f"{where} must be a {want_rank}-D array, got {_describe(x)}")
        problem = _element_kind_error(elem, arr.dtype)
        if problem is not None:
            raise TypeError(f"{where} {problem}")
        if arr.dtype.kind == "u" and dtype.kind == "i" and arr.size and arr.max() > _INT64_MAX:
            raise ValueError(f"{where} has elements above the int64 range")
        arr = np.ascontiguousarray(arr, dtype=dtype)
        if elem is Card and arr.size and arr.min() < 0:
            raise ValueError(f"{where} has negative elements, but Card values are >= 0")
        return arr

    def convert(x):
        # The common case, a C-contiguous array of the right dtype, costs three attribute reads;
        # only a Card array still needs a look at its values.
        if (type(x) is np.ndarray and x.dtype is dtype and x.ndim == want_rank
                and x.flags.c_contiguous and elem is not Card):
            return x
        return convert_slowly(x)

    return convert


def scalar_converter(kernel: str, name: str, ty: Scalar):
    where = f"{kernel}: argument '{name}' ({ty})"

    def reject(x):
        raise TypeError(f"{where} must be {_expected(ty)}, got {_describe(x)}")

    if ty is Bool:
        def convert(x):
            if type(x) is bool or isinstance(x, np.bool_):
                return bool(x)
            return reject(x)
    elif ty in (Double, Float):
        def convert(x):
            if type(x) is float:
                return x
            if isinstance(x, numbers.Real) and not isinstance(x, bool):
                try:
                    return float(x)
                except OverflowError:
                    raise ValueError(f"{where}: {x} is too large for a floating-point number") from None
            return reject(x)
    else:
        lowest = 0 if ty is Card else _INT64_MIN

        def convert(x):
            if type(x) is int and lowest <= x <= _INT64_MAX:
                return x
            if isinstance(x, numbers.Integral) and not isinstance(x, bool):
                value = operator.index(x)
                if lowest <= value <= _INT64_MAX:
                    return value
                if value < 0 and ty is Card:
                    raise ValueError(f"{where} must be >= 0, got {value}")
                raise ValueError(f"{where}: {value} is outside the int64 range")
            return reject(x)

    return convert


def _expected(ty: Scalar) -> str:
    if ty is Bool:
        return "a bool"
    if ty in (Index, Card):
        return "an int" if ty is Index else "a non-negative int"
    return "a real number"


# ----------------------------------------------------------------------------- executables

class Executable:
    """One exported kernel of a loaded library, callable on numpy arrays and Python scalars."""

    def __init__(self, interface: KernelInterface, library, check_arena: bool = False, signature: tuple = (),
                 reference: tuple | None = None):
        """``reference``: (``in_reference``, ``run_reference``) of the kernel (``fsmooth.kernel``): a
        call while the ContextVar ``in_reference`` is true is ``run_reference(args)``, the kernel's
        Python."""
        self.interface = interface
        # The parameters as the kernel declares them: a tuple parameter is passed to C as its
        # components (the interface's parameters), so its argument is flattened first.
        self._flatten = tuple_flattener(interface.name, signature)
        self.check_arena = check_arena
        self.last_high_water: int | None = None  # set by each checked call
        name, symbol = interface.name, interface.symbol
        ffi, lib = library.ffi, library.lib
        self._ffi = ffi
        self._library = library  # keeps the module alive as long as its functions are used
        self._kernel = getattr(lib, symbol)
        self._shapes = tuple(getattr(lib, f"{symbol}_shape{suffix}") for suffix, _, _ in interface.outputs)
        self._scratch_bytes = getattr(lib, f"{symbol}_scratch_bytes")
        self._check_sizes = getattr(lib, f"{symbol}_check_sizes")

        # a parallel kernel's last parameter, the thread count, is OpenMP's, not the caller's
        self._max_threads = lib.omp_get_max_threads if interface.threads is not None else None
        self._nparams = len(interface.params) - (interface.threads is not None)
        self._converters = tuple(
            array_converter(name, pname, ty) if rank(ty) else scalar_converter(name, pname, ty)
            for pname, ty in interface.params)
        # Per parameter, the cffi array type its buffer is passed as, or None for a scalar.
        self._buffer_types = tuple(
            ffi.typeof(f"{C_TYPE[element_scalar(ty)]}[]") if rank(ty) else None
            for _, ty in interface.params)
        self._size_getter = size_getter(interface)

        # Per out-parameter (one, or one per component of a tuple result): rank, dtype, cffi type.
        self._outputs = tuple(
            (rank(ty), NUMPY_DTYPE[element_scalar(ty)],
             ffi.typeof(f"{C_TYPE[element_scalar(ty)]}[]" if rank(ty) else f"{C_TYPE[element_scalar(ty)]} *"))
            for _, ty, _ in interface.outputs)
        self._tuple_result = isinstance(interface.result, TupleT)
        self._dims_type = ffi.typeof("int64_t[]")
        self._plans: dict[tuple, tuple[tuple, int]] = {}
        self._per_thread = threading.local()  # scratch buffers: K runs without the GIL
        # A kernel that never needs scratch gets an aligned buffer of its own, never written, so a
        # call skips the per-thread one.
        self._needs_scratch = interface.scratch_formula != 0
        self._no_scratch_buffer = np.empty(2 * SCRATCH_ALIGN, dtype=np.uint8)
        self._no_scratch = ffi.cast("void *", -(-self._no_scratch_buffer.ctypes.data // SCRATCH_ALIGN) * SCRATCH_ALIGN)
        # The call: the kernel's C entry point where its library has one for this interface,
        # handing what it does not take to the Python call (``fsmooth.python_entry``).
        self.python_call = call_function(self, reference)
        self.call = self.python_call
        entries, interfaces = _entry_points.get(getattr(library, "__name__", None), (None, {}))
        if interfaces.get(name) == interface and self._flatten is None and not check_arena:
            self.call = getattr(entries, symbol)(entry_state(interface, self.python_call,
                                                             reference[0] if reference else None, raise_status))

    def __repr__(self) -> str:
        return f"<fsmooth executable {self.interface.name}>"

    # -- the steps of a call
    def _c_args(self, args: tuple) -> list:
        """The arguments of ``K`` after ``scratch`` and ``out``: the inputs checked and converted, each
        array as its buffer followed by its dims."""
        if self._flatten is not None:
            args = self._flatten(args)
        if len(args) != self._nparams:
            raise self._arity_error(args)
        if self._max_threads is not None:
            args = (*args, self._max_threads())
        from_buffer = self._ffi.from_buffer
        c_args = []
        for x, convert, buffer_type in zip(args, self._converters, self._buffer_types):
            value = convert(x)
            if buffer_type is None:
                c_args.append(value)
            else:
                # The cdata keeps ``value`` alive for as long as the call needs its buffer.
                c_args.append(from_buffer(buffer_type, value))
                c_args.extend(value.shape)
        return c_args

    def _arity_error(self, args: tuple) -> TypeError:
        params = ", ".join(p for p, _ in self.interface.params[:self._nparams])
        return TypeError(f"{self.interface.name}({params}) takes {self._nparams} argument"
                         f"{'' if self._nparams == 1 else 's'}, got {len(args)}")

    def _plan(self, sizes: tuple) -> tuple[tuple, int]:
        """(result dims, scratch bytes) for ``sizes``, after checking the size constraints."""
        plan = self._plans.get(sizes)
        if plan is not None:
            return plan
        failed = self._check_sizes(*sizes)
        if failed:
            raise self._constraint_error(failed, sizes)
        dims_out = self._ffi.new(self._dims_type, max([r for r, _, _ in self._outputs] + [1]))
        dims = []
        for shape, (result_rank, _, _) in zip(self._shapes, self._outputs):
            shape(dims_out, *sizes)
            dims.append(tuple(dims_out[i] for i in range(result_rank)))
        dims = tuple(dims)
        nbytes = self._scratch_bytes(*sizes)
        if any(d < 0 for ds in dims for d in ds) or nbytes < 0:
            raise RuntimeError(f"{self.interface.name}: the shape or scratch function returned a "
                               f"negative size for sizes {self._show_sizes(sizes)}")
        if len(self._plans) >= MEMO_LIMIT:
            self._plans.clear()
        plan = self._plans[sizes] = (dims, nbytes)
        return plan

    def _show_sizes(self, sizes: tuple) -> str:
        return ", ".join(f"{s.symbol}={v}" for s, v in zip(self.interface.sizes, sizes))

    def _constraint_error(self, failed: int, sizes: tuple) -> Exception:
        constraints = self.interface.constraints
        if failed == len(constraints) + 1:  # K_check_sizes: a size is FS_SIZE_POISON
            return OverflowError(f"{self.interface.name}: the result or scratch size of this call overflows "
                                 f"int64 (sizes: {self._show_sizes(sizes)})")
        if failed == len(constraints) + 2:  # K_check_sizes: a size's divisor is zero
            return ZeroDivisionError(f"{self.interface.name}: a size of this call divides by zero "
                                     f"(sizes: {self._show_sizes(sizes)})")
        if not 1 <= failed <= len(constraints):
            return RuntimeError(f"{self.interface.name}: size check returned {failed}, "
                                f"which names no constraint")
        constraint = constraints[failed - 1]
        return ValueError(f"{self.interface.name}: argument '{constraint.param}': {constraint.message}"
                          f" (sizes: {self._show_sizes(sizes)})")

    def _scratch(self, nbytes: int):
        """An aligned pointer to at least ``nbytes`` of scratch, reused across this thread's calls:
        ``self._per_thread.arena`` is (capacity, pointer), which a planned call reads itself."""
        local = self._per_thread
        capacity, pointer = getattr(local, "arena", (-1, None))
        if capacity < nbytes:
            capacity = max(nbytes, 2 * capacity, SCRATCH_ALIGN)
            local.buffer = np.empty(capacity + SCRATCH_ALIGN - 1, dtype=np.uint8)
            address = -(-local.buffer.ctypes.data // SCRATCH_ALIGN) * SCRATCH_ALIGN
            pointer = self._ffi.cast("void *", address)
            local.arena = (capacity, pointer)
        return pointer


    def _run_checked(self, nbytes: int, outs: list, c_args: list) -> int:
        """Run ``K`` on a patterned scratch buffer between guards (the module docstring); its status."""
        total = GUARD_BYTES + nbytes + GUARD_BYTES
        raw = np.empty(total + SCRATCH_ALIGN, dtype=np.uint8)
        start = (-(raw.ctypes.data + GUARD_BYTES)) % SCRATCH_ALIGN  # the scratch itself starts aligned
        buffer = raw[start:start + total]
        pattern = ((np.arange(total, dtype=np.int64) * 37 + 0xA5) % 251).astype(np.uint8)
        scratch = self._ffi.cast("void *", buffer.ctypes.data + GUARD_BYTES)
        high, status = 0, 0
        for fill in (pattern, ~pattern):
            buffer[:] = fill
            status = self._kernel(scratch, *outs, *c_args)
            written = np.flatnonzero(buffer != fill)
            outside = written[(written < GUARD_BYTES) | (written >= GUARD_BYTES + nbytes)]
            if outside.size:
                where = int(outside[0]) - GUARD_BYTES
                raise RuntimeError(
                    f"{self.interface.name}: arena overrun: wrote byte {where} of a scratch arena of "
                    f"{nbytes} bytes ({self.interface.symbol}_scratch_bytes is wrong, or the kernel "
                    f"writes outside its regions)")
            if written.size:
                high = max(high, int(written[-1]) - GUARD_BYTES + 1)
        self.last_high_water = high
        return status

    # -- public
    def __call__(self, *args):
        """Run the kernel: a numpy array for an array result, else a Python float/int/bool
        (``self.call``, written for this kernel by ``call_function``)."""
        return self.call(*args)

    def scratch_bytes(self, *args) -> int:
        """The arena bytes a call with ``args`` needs (after the same checks), without running it."""
        return self._plan(self._size_getter(self._c_args(args)))[1]

    def plan_for_sizes(self, sizes: dict) -> tuple[tuple, int]:
        """(result dims, scratch bytes) for the size symbols' values ``sizes`` (a dict by symbol),
        after checking the kernel's size constraints (``ValueError``).  For a tuple result the
        dims are a tuple of each component's dims."""
        dims, nbytes = self._plan(tuple(sizes[s.symbol] for s in self.interface.sizes))
        return self._result_dims(dims), nbytes

    def _result_dims(self, dims: tuple):
        return assemble(self.interface.result, iter(dims)) if self._tuple_result else dims[0]

    def result_dims(self, *args) -> tuple:
        """The dims of the result of a call with ``args``, without running it."""
        return self._result_dims(self._plan(self._size_getter(self._c_args(args)))[0])


def call_function(executable: Executable, reference: tuple | None = None):
    """The function that runs ``executable``'s kernel on Python arguments, as Python source written
    for its interface and compiled once: per parameter, the test of the common case (a float for a
    Double; an int in range for an Index; a C-contiguous array of the right dtype and rank) with
    the general converter (``scalar_converter``, ``array_converter``) called for anything else, so
    every check and error message is theirs; then the sizes tuple, its memoised plan (``_plan``:
    ``K_check_sizes``, ``K_shape``, ``K_scratch_bytes``), the results and the call of ``K``.  With a
    ``reference`` (``Executable``), it first asks whether a reference run is under way."""
    interface = executable.interface
    ffi = executable._ffi
    env = {"ndarray": np.ndarray, "from_buffer": ffi.from_buffer, "new": ffi.new, "empty": np.empty,
           "kernel": executable._kernel, "plans": executable._plans, "make_plan": executable._plan,
           "scratch": executable._scratch, "no_scratch": executable._no_scratch, "per_thread": executable._per_thread,
           "run_checked": executable._run_checked, "raise_status": raise_status, "name": interface.name,
           "flatten": executable._flatten, "arity_error": executable._arity_error}
    lines = ["def call(*args):"]
    if reference is not None:
        env["in_reference"], env["run_reference"] = reference[0].get, reference[1]
        lines += ["    if in_reference():", "        return run_reference(args)"]
    if executable._flatten is not None:
        lines.append("    args = flatten(args)")  # checks the number of arguments itself
    names = [f"a{k}" for k in range(executable._nparams)]
    if names:  # unpacking checks the number of arguments (a try costs nothing in Python 3.11)
        lines += ["    try:", f"        {', '.join(names)}, = args", "    except ValueError:",
                  "        raise arity_error(args) from None"]
    else:
        lines += ["    if args:", "        raise arity_error(args)"]
    c_args, dims_of = [], {}
    for k, ((pname, ty), convert, buffer_type) in enumerate(
            zip(interface.params, executable._converters, executable._buffer_types)):
        if k == executable._nparams:  # a parallel kernel's thread count, OpenMP's (``_max_threads``)
            env["max_threads"] = executable._max_threads
            lines.append("    threads = max_threads()")
            c_args.append("threads")
            dims_of[(pname, None)] = "threads"
            continue
        a = names[k]
        env[f"convert{k}"] = convert
        if buffer_type is None:
            lines += [f"    if {_usual_scalar(a, ty)}:", f"        {a} = convert{k}({a})"]
            c_args.append(a)
            dims_of[(pname, None)] = a
            continue
        env[f"dtype{k}"], env[f"buffer{k}"] = NUMPY_DTYPE[element_scalar(ty)], buffer_type
        if element_scalar(ty) is Card:  # a Card array always needs a look at its values
            lines.append(f"    {a} = convert{k}({a})")
        else:
            lines += [f"    if not (type({a}) is ndarray and {a}.dtype is dtype{k} and {a}.ndim == {rank(ty)}"
                      f" and {a}.flags.c_contiguous):", f"        {a} = convert{k}({a})"]
        dims = [f"{a}_d{j}" for j in range(rank(ty))]
        lines.append(f"    {', '.join(dims)}, = {a}.shape")
        c_args += [f"from_buffer(buffer{k}, {a})", *dims]
        dims_of.update({(pname, j): d for j, d in enumerate(dims)})
    sizes = "".join(f"{dims_of[(s.param, s.dim)]}, " for s in interface.sizes)
    if any(result_rank for result_rank, _, _ in executable._outputs) or executable._needs_scratch \
            or executable.check_arena:
        lines += [f"    plan = plans.get(({sizes}))", "    if plan is None:", f"        plan = make_plan(({sizes}))",
                  "    dims, nbytes = plan"]
    else:  # the plan's answers are not needed, only its checks
        lines += [f"    if ({sizes}) not in plans:", f"        make_plan(({sizes}))"]
    outs, values = [], []
    for j, (result_rank, dtype, c_type) in enumerate(executable._outputs):
        env[f"out_type{j}"] = c_type
        if result_rank:
            env[f"out_dtype{j}"] = dtype
            lines += [f"    r{j} = empty(dims[{j}], dtype=out_dtype{j})"]
            outs.append(f"from_buffer(out_type{j}, r{j})")
            values.append(f"r{j}")
        else:
            lines.append(f"    r{j} = new(out_type{j})")
            outs.append(f"r{j}")
            values.append(f"r{j}[0]")
    if executable.check_arena:
        lines.append(f"    status = run_checked(nbytes, [{', '.join(outs)}], [{', '.join(c_args)}])")
    else:
        if executable._needs_scratch:  # this thread's arena, grown by ``_scratch`` where too small
            lines += ["    try:", "        capacity, arena = per_thread.arena", "    except AttributeError:",
                      "        capacity = -1", "    if capacity < nbytes:", "        arena = scratch(nbytes)"]
        arena = "arena" if executable._needs_scratch else "no_scratch"
        lines.append(f"    status = kernel({', '.join([arena, *outs, *c_args])})")
    lines += ["    if status:", "        raise_status(name, status)"]
    if interface.kept_length:  # a filter: the kept elements, out_0[:out_1]
        lines.append(f"    return r0[:{values[1]}]")
    else:
        lines.append(f"    return {_assembled(interface.result, iter(values))}")
    exec(compile("\n".join(lines) + "\n", f"<fsmooth call of {interface.name}>", "exec"), env)
    return env["call"]


def _usual_scalar(a: str, ty: Scalar) -> str:
    """Python source: whether the argument ``a`` is not the usual value of a ``ty`` parameter,
    which passes unconverted."""
    if ty is Bool:
        return f"type({a}) is not bool"
    if ty in (Double, Float):
        return f"type({a}) is not float"
    lowest = 0 if ty is Card else _INT64_MIN
    return f"type({a}) is not int or not {lowest} <= {a} <= {_INT64_MAX}"


def _assembled(ty: Type, values) -> str:
    """Python source of the value of type ``ty`` from its components' source, in order."""
    if isinstance(ty, TupleT):
        return f"({''.join(_assembled(t, values) + ', ' for t in ty.items)})"
    return next(values)


def assemble(ty: Type, values):
    """The value of type ``ty`` from its components in order (nested tuples of them)."""
    if isinstance(ty, TupleT):
        return tuple(assemble(t, values) for t in ty.items)
    return next(values)


def tuple_flattener(kernel: str, signature: tuple):
    """A function from the arguments of a kernel with tuple parameters to the arguments of its C
    function (each tuple replaced by its components, checked for length); None if it has none."""
    if not any(isinstance(ty, TupleT) for _, ty in signature):
        return None

    def flatten(value, ty, where: str, out: list):
        if not isinstance(ty, TupleT):
            out.append(value)
            return
        if not isinstance(value, (tuple, list)):
            raise TypeError(f"{kernel}: argument '{where}' must be a tuple of {len(ty.items)}, got "
                            f"{_describe(value)}")
        if len(value) != len(ty.items):
            raise TypeError(f"{kernel}: argument '{where}' must be a tuple of {len(ty.items)}, got one "
                            f"of {len(value)}")
        for k, (item, t) in enumerate(zip(value, ty.items)):
            flatten(item, t, f"{where}[{k}]", out)

    def flatten_all(args: tuple) -> tuple:
        if len(args) != len(signature):
            params = ", ".join(p for p, _ in signature)
            raise TypeError(f"{kernel}({params}) takes {len(signature)} argument"
                            f"{'' if len(signature) == 1 else 's'}, got {len(args)}")
        out: list = []
        for value, (name, ty) in zip(args, signature):
            flatten(value, ty, name, out)
        return tuple(out)

    return flatten_all


def raise_status(kernel: str, status: int):
    """Raise the exception a kernel's nonzero status means (``fsmooth.artifact.STATUS``), naming
    the kernel: the C and OpenCL runtimes report failed checks alike."""
    message = f"{kernel}: {STATUS.get(status, f'unknown status {status}')}"
    raise {1: IndexError, 2: ZeroDivisionError, 3: ValueError, 4: MemoryError,
           5: ValueError, 6: OverflowError}.get(status, RuntimeError)(message)


def size_getter(interface: KernelInterface):
    """A function from the argument list of ``K`` (after ``out``) to the kernel's sizes tuple:
    every size is one of those arguments, an array's dim or a Card parameter's value."""
    position, positions = 0, {}
    for pname, ty in interface.params:
        if rank(ty):
            positions.update({(pname, k): position + 1 + k for k in range(rank(ty))})
            position += 1 + rank(ty)
        else:
            positions[(pname, None)] = position
            position += 1
    picks = [positions[(s.param, s.dim)] for s in interface.sizes]
    if len(picks) >= 2:
        return operator.itemgetter(*picks)
    if len(picks) == 1:
        pick = picks[0]
        return lambda c_args: (c_args[pick],)
    return lambda c_args: ()
