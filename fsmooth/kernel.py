"""``@fsmooth.kernel``: a Python function that is also an F̃ program."""
from __future__ import annotations

import contextvars
import functools
import importlib
import types
import inspect
import operator
import pickle
import threading
from dataclasses import dataclass, replace

from .options import VARIANTS, Options, default_options

_in_reference = contextvars.ContextVar("fsmooth_in_reference", default=False)


@dataclass(frozen=True)
class SourceText:
    """The lines of a kernel's ``def`` as they were when it was defined (``inspect``), or why they
    could not be read: the compiler reads this, not the file, so an edit after the import
    changes neither the compiled code nor the reference."""

    filename: str
    lines: tuple[str, ...]
    first_line: int
    error: str | None = None

    @staticmethod
    def of(fn) -> "SourceText":
        code = fn.__code__
        try:
            lines, first_line = inspect.getsourcelines(fn)
            return SourceText(inspect.getsourcefile(fn) or code.co_filename, tuple(lines), first_line)
        except (OSError, TypeError) as err:
            return SourceText(code.co_filename, (), code.co_firstlineno, str(err))


class Kernel:
    """A decorated function.  Calling it runs the compiled C; ``reference`` runs it as Python.

    Thread-safe: the first calls from many threads compile once.  A kernel pickles by reference,
    as a function does (its module and qualified name, and its options), so it can be sent to
    ``multiprocessing``, ``concurrent.futures``, joblib or dask workers."""

    def __init__(self, fn, options: Options | None = None, source: SourceText | None = None):
        if not inspect.isfunction(fn):
            raise TypeError(f"@fsmooth.kernel needs a function defined with def, not {fn!r}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        self.options = options if options is not None else default_options()
        self.source = source if source is not None else SourceText.of(fn)
        self._lock = threading.RLock()
        self._program = None
        self._executable = None
        self._call = self._first_call  # what calling the kernel runs (``__call__``)
        self._opencl: dict = {}  # pyopencl context (None: the default) -> OpenCLExecutable
        self._with_options: dict = {}  # Options -> the same kernel compiled with them

    def __reduce__(self):
        module, qualname = self.fn.__module__, self.fn.__qualname__
        try:
            found = _kernel_named(module, qualname, self.options)
        except (ImportError, AttributeError, TypeError) as err:
            found, why = None, str(err)
        else:
            why = "a different object has that name"
        if found is None or found.fn is not self.fn:
            raise pickle.PicklingError(f"cannot pickle kernel {qualname}: kernels pickle by reference, and "
                                       f"{module}.{qualname} does not name it ({why}); define it at the top "
                                       f"level of a module")
        return _kernel_named, (module, qualname, self.options)

    def with_options(self, **changes) -> "Kernel":
        """The same kernel compiled with other options (``fsmooth.options.Options`` fields)."""
        return self._recompiled(replace(self.options, **changes))

    def variant(self, name: str) -> "Kernel":
        """The same kernel compiled as one of the DPS paper's variants (``options.VARIANTS``)."""
        return self._recompiled(VARIANTS[name])

    def _recompiled(self, options: Options) -> "Kernel":
        with self._lock:
            other = self._with_options.get(options)
            if other is None:
                other = self._with_options[options] = Kernel(self.fn, options, self.source)
                other._program = self._program  # the front end's result does not depend on options
            return other

    def __repr__(self) -> str:
        return f"<fsmooth kernel {self.name}>"

    # -- reference semantics
    def reference(self, *args):
        """Run the Python function itself, with the built-ins' Python implementations.

        Arrays are indexed with bounds checks (a negative index is an IndexError, as in the
        compiled code, not numpy's wrap-around); kernels called inside run as reference too.
        Numbers compute as in the compiled code (``fsmooth.builtins``: int64 integers, overflow an error,
        IEEE floats), so numpy's floating-point warnings are silenced.
        """
        import numpy as np

        from .builtins import checked, plain

        token = _in_reference.set(True)
        try:
            with np.errstate(all="ignore"):
                # checked: a result of literals alone (1 + 2**63 - 1) is Python's, and must fit too
                return plain(checked(self._run_reference(args)))
        finally:
            _in_reference.reset(token)

    def _run_reference(self, args):
        from . import builtins

        # the body's own globals, with F̃'s int and float where the module has not bound the names
        scope = dict(self.fn.__globals__)
        scope.setdefault("int", builtins.to_int)
        scope.setdefault("float", builtins.to_float)
        fn = types.FunctionType(self.fn.__code__, scope, self.fn.__name__, self.fn.__defaults__, self.fn.__closure__)
        return fn(*(builtins.checked(a) for a in args))

    # -- compiled
    def program(self):
        """The typed F̃ core program of this kernel and everything it calls."""
        with self._lock:
            if self._program is None:
                from .frontend import parse_program

                self._program = parse_program(self)
            return self._program

    def executable(self):
        with self._lock:
            if self._executable is None:
                from .driver import build_executable

                if self.program().main.is_helper:
                    raise TypeError(f"{self.name} is a helper (it takes a function): helpers are inlined where "
                                    f"kernels call them and cannot be called from Python, only from kernels")

                self._executable = build_executable(self, (_in_reference, self._run_reference))
                self._call = self._executable.call
            return self._executable

    # Calling a kernel calls ``self._call`` with no Python frame of its own (``attrgetter`` is C):
    # first ``_first_call``, which compiles, then the executable's call, the kernel's C entry point
    # (``fsmooth.python_entry``), which hands a call inside a reference run to the Python call that
    # runs the reference itself (``fsmooth.runtime.call_function``).
    __call__ = property(operator.attrgetter("_call"))

    def _first_call(self, *args):
        if _in_reference.get():
            return self._run_reference(args)
        return self.executable().call(*args)

    # -- OpenCL
    def opencl_artifact(self, device=None):
        """The OpenCL kernels, buffers and launches of this kernel (``fsmooth.opencl_artifact``),
        its strategy chosen for ``device`` where given (``fsmooth.cost_model``), unless the
        options name a device description; without either, for ``cost_model.GENERIC_GPU``; and
        without the single-pass scan where the device lacks the 64-bit atomics that needs
        (``dpia.scan_opencl``)."""
        from .driver import compile_to_opencl

        options = self.options
        if device is not None:
            from .dpia.scan_opencl import LOOKBACK_EXTENSION
            from .opencl_device import describe, global_atomics, has_extension

            if options.opencl_device is None:
                # an OpenCL program is built for one device: its strategy is chosen for it too
                options = replace(options, opencl_device=describe(device))
            if not global_atomics(device):
                # decided at build: a second launch combines the partials (OpenCLReduction.launches)
                options = replace(options, opencl_reduction=replace(options.opencl_reduction, launches=2))
            if options.single_pass_scan and not has_extension(device, LOOKBACK_EXTENSION):
                options = replace(options, single_pass_scan=False)
        return compile_to_opencl(self.program(), options)

    def opencl_executable(self, context=None):
        """The OpenCL build of this kernel for ``context`` (None: fsmooth's default context,
        ``PYOPENCL_CTX`` honoured), compiled once for its device and cached per context."""
        key = None if context is None else context.int_ptr
        with self._lock:
            executable = self._opencl.get(key)
            if executable is None:
                from .opencl_device import default_context
                from .opencl_executable import OpenCLExecutable

                context = context if context is not None else default_context()
                executable = self._opencl[key] = OpenCLExecutable(self.opencl_artifact(context.devices[0]), context,
                                                                  self.program().main.params)
            return executable

    def opencl(self, *args, context=None, device_result=None):
        """Run the kernel through OpenCL: numpy results, or ``pyopencl.array.Array``s left on the
        device with ``device_result=True`` (the default when an argument is a device array)."""
        return self.opencl_executable(context).call(*args, device_result=device_result)

    def c_source(self) -> str:
        from .driver import compile_to_c

        return compile_to_c(self.program(), self.options).source

    def scratch_bytes(self, *args) -> int:
        return self.executable().scratch_bytes(*args)


def kernel(fn=None, **options):
    """Mark ``fn`` as an F̃ kernel (README.md, "The language").

    ``@kernel`` or ``@kernel(parallel=True, ...)`` with ``fsmooth.options.Options`` fields."""
    if fn is None:
        return lambda f: Kernel(f, default_options(**options))
    return Kernel(fn)


def _kernel_named(module: str, qualname: str, options: Options) -> Kernel:
    """The kernel ``module.qualname`` compiled with ``options`` (how a kernel unpickles)."""
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not isinstance(found, Kernel):
        raise TypeError(f"{module}.{qualname} is not an fsmooth kernel")
    return found if found.options == options else found._recompiled(options)
