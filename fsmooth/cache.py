"""The on-disk build cache of compiled kernels: one CPython extension module per C artifact.

The module name is derived from a hash of everything that decides the machine code (C source,
cffi declarations, runtime headers, compiler flags and libraries -- the defaults and those a
variant adds, ``CArtifact.compile_args``/``libraries`` -- fsmooth, cffi and numpy versions, Python and
platform tags), so a hit never needs a rebuild and a change always misses.  A build for the host
CPU (``-march=native``, ``host_flags``) also keys on what that flag means on this machine
(``host_cpu``), so a cache directory shared between machines never loads code built for another
CPU.  An entry is a
manifest ``<dir>/<module>.json`` naming the module file ``<dir>/<module>-<digest><EXT_SUFFIX>``
and holding its SHA-256; the file name carries the start of that digest, so a module file is
never overwritten by different bytes.

Concurrency: one build per entry.  Threads of a process wait on a lock per module name, processes
on ``flock`` of ``<dir>/<module>.lock``; whoever gets the lock first builds, the others then find
the entry.  The C compiler is run directly (cffi writes the C, nothing ``chdir``s), so a build
never touches the process's working directory.  Writes are atomic: the module is built in a
private temporary directory inside the cache directory (same file system), moved into place with
``os.replace``, and only then is the manifest replaced to point at it; an entry whose file is
missing or disagrees with its manifest (a corrupted or truncated file) is rebuilt rather than
loaded.  What a killed build leaves behind (temporary directories, superseded module files, old
failed sources) is removed by a later build once it is an hour old (a week for failed sources).
A cache directory that cannot be written (read-only, full, a directory where a file belongs)
does not stop a kernel: it is built in a temporary directory of this process, with a warning.
"""
from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings

import cffi
import numpy
import platformdirs

import fsmooth
from fsmooth.clib import HEADER_DIR

COMPILE_ARGS = ("-std=c99", "-O3", "-fwrapv")
LIBRARIES = ("m",)
# A CPython extension module with the full C API (not cffi's default of the limited one), for the
# kernels' entry points (fsmooth.python_entry), which use numpy's C API too.
EXTENSION_FLAGS = ("-shared", "-fPIC", "-DNDEBUG", "-D_CFFI_NO_LIMITED_API")
CACHE_DIR_ENV = "FSMOOTH_CACHE_DIR"
NATIVE_FLAGS = ("-march=native",)
NATIVE_ENV = "FSMOOTH_NATIVE"  # "0": no in-process build is for the host CPU (Options.native)

# Number of C builds this process ran; tests read it to prove that a cache hit built nothing.
build_count = 0


def cache_dir() -> pathlib.Path:
    override = os.environ.get(CACHE_DIR_ENV)
    return pathlib.Path(override) if override else pathlib.Path(platformdirs.user_cache_dir("fsmooth"))


def _runtime_headers() -> str:
    """The text of every header in ``clib/`` (fsmooth_rt.h and the fsmooth_scalar.h it includes):
    generated C includes them, so they are part of the key."""
    return "".join(f"// {p.name}\n{p.read_text()}" for p in sorted(HEADER_DIR.glob("*.h")))


def cache_key(source: str, cdef: str, compile_args: tuple = (), libraries: tuple = ()) -> str:
    parts = {
        "source": source,
        "cdef": cdef,
        "headers": _runtime_headers(),
        "compiler": c_compiler(),
        "compile_args": [*EXTENSION_FLAGS, *COMPILE_ARGS, *compile_args],
        "host_cpu": host_cpu(tuple(c_compiler())) if NATIVE_FLAGS[0] in compile_args else None,
        "libraries": [*LIBRARIES, *libraries],
        "fsmooth": fsmooth.__version__,
        "cffi": cffi.__version__,
        "numpy": numpy.__version__,  # the entry points are built against its C API
        "python": sys.implementation.cache_tag,
        "platform": sysconfig.get_platform(),
        "ext_suffix": _ext_suffix(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def module_name(key: str) -> str:
    return f"_fsmooth_{key[:24]}"


def _ext_suffix() -> str:
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def _sha256_file(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


STALE_SECONDS = 3600  # older temporaries belong to a build that was killed
FAILED_SOURCE_SECONDS = 7 * 24 * 3600

_loaded: dict[str, object] = {}  # module name -> module, this process
_name_locks: dict[str, threading.Lock] = {}
_name_locks_guard = threading.Lock()
_private_dir: pathlib.Path | None = None  # this process's fallback when the cache cannot be written


def _import_extension(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_companion(module, name: str):
    """The extension module ``name`` whose init function (``PyInit_<name>``) is in the file of the
    extension module ``module``: the kernels' entry points, built into their cffi module's file."""
    return _import_extension(name, pathlib.Path(module.__file__))


def _load_entry(directory: pathlib.Path, name: str):
    """The cached module ``name``, or None if there is no complete, intact entry."""
    manifest_path = directory / f"{name}.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        module_path = directory / manifest["file"]
        if module_path.parent != directory or manifest["sha256"] != _sha256_file(module_path):
            return None
        return _import_extension(name, module_path)
    except (OSError, ValueError, ImportError, KeyError, TypeError):
        return None


def _write_atomically(path: pathlib.Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def c_compiler() -> list[str]:
    """The C compiler every build runs: $CC, else cc."""
    return shlex.split(os.environ.get("CC") or "cc")


def host_flags() -> tuple:
    """The flags that build for this machine's CPU (``-march=native``), or none where
    ``FSMOOTH_NATIVE=0`` or where the C compiler cannot say what the flag means here (it rejects
    it): a build is never for a CPU the cache key does not name."""
    if os.environ.get(NATIVE_ENV, "1") == "0" or host_cpu(tuple(c_compiler())) is None:
        return ()
    return NATIVE_FLAGS


@functools.lru_cache(maxsize=None)
def host_cpu(compiler: tuple) -> str | None:
    """What ``-march=native`` means for ``compiler`` on this machine: the target flags it expands
    to (gcc's ``-march=X -m...  --param ...``, clang's ``-target-cpu``/``-target-feature``), read
    from its ``-###`` dry run, with the CPU's model name and feature flags from /proc/cpuinfo
    where there is one; None where the compiler does not take the flag."""
    command = [*compiler, *NATIVE_FLAGS, "-###", "-S", "-x", "c", os.devnull, "-o", os.devnull]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError:
        return None
    if result.returncode != 0:
        return None
    tokens = [token.strip("\"'") for token in result.stderr.split()]
    target = [token for before, token in zip(["", *tokens], tokens)
              if (token.startswith(("-m", "--param")) and token not in NATIVE_FLAGS)
              or before in ("--param", "-target-cpu", "-target-feature")]
    try:
        cpuinfo = [line for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith(("model name", "flags", "Features", "CPU part"))]
    except OSError:
        cpuinfo = []
    if not target and not cpuinfo:
        return None  # nothing that tells this CPU from another
    return "\n".join([platform.machine(), " ".join(target), *dict.fromkeys(cpuinfo)])


def _compile_extension(c_path: pathlib.Path, out: pathlib.Path, compile_args: tuple, libraries: tuple) -> None:
    """The shared object ``out`` of cffi's C ``c_path``; a variant's flags (-fopenmp) matter at the
    link too."""
    command = [*c_compiler(), *EXTENSION_FLAGS, *COMPILE_ARGS, *compile_args,
               f"-I{sysconfig.get_paths()['include']}", f"-I{numpy.get_include()}", f"-I{HEADER_DIR}", str(c_path), "-o", str(out),
               *[f"-l{lib}" for lib in (*LIBRARIES, *libraries)]]
    if sys.platform == "darwin":
        command += ["-undefined", "dynamic_lookup"]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as err:
        raise RuntimeError(f"fsmooth: cannot run the C compiler {command[0]!r} ({err}); install gcc or "
                           f"set CC") from None
    if result.returncode != 0:
        raise _CompilerFailed(result.stderr.strip() or f"{command[0]} exited with {result.returncode}")


class _CompilerFailed(Exception):
    pass


def _build_entry(directory: pathlib.Path, name: str, source: str, cdef: str, compile_args: tuple,
                 libraries: tuple):
    global build_count
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(name, source, compiler_verbose=0)
    build_dir = pathlib.Path(tempfile.mkdtemp(dir=directory, prefix=".build-"))
    try:
        c_path = build_dir / f"{name}.c"
        ffi.emit_c_code(str(c_path))
        built = build_dir / f"{name}{_ext_suffix()}"
        try:
            _compile_extension(c_path, built, compile_args, libraries)
        except _CompilerFailed as err:
            # Generated C that does not compile is a bug in fsmooth: keep the C for the report.
            kept = directory / f"{name}-failed.c"
            shutil.copyfile(c_path, kept)
            raise RuntimeError(f"fsmooth: the generated C did not compile:\n{err}\nits source is {kept}") from None
        build_count += 1
        digest = _sha256_file(built)
        module_path = directory / f"{name}-{digest[:16]}{_ext_suffix()}"
        os.replace(built, module_path)
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    _write_atomically(directory / f"{name}.json", json.dumps({"file": module_path.name, "sha256": digest}).encode())
    return _import_extension(name, module_path)


def _remove_stale(directory: pathlib.Path) -> None:
    """Remove what killed or superseded builds left: temporaries, module files no manifest names,
    old failed sources.  Entries in use by a live build are younger than STALE_SECONDS."""
    now = time.time()
    named = set()
    for manifest in directory.glob("_fsmooth_*.json"):
        try:
            named.add(json.loads(manifest.read_text())["file"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    for path in directory.iterdir():
        try:
            age = now - path.lstat().st_mtime
            if path.name.startswith((".build-", ".tmp-")) and age > STALE_SECONDS:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
            elif (path.name.startswith("_fsmooth_") and path.name.endswith(_ext_suffix())
                  and path.name not in named and age > STALE_SECONDS):
                path.unlink()
            elif path.name.endswith("-failed.c") and age > FAILED_SOURCE_SECONDS:
                path.unlink()
        except OSError:
            pass  # another process removed it first


def _name_lock(name: str) -> threading.Lock:
    with _name_locks_guard:
        return _name_locks.setdefault(name, threading.Lock())


def _load_or_build_in(directory: pathlib.Path, name: str, *build_args):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            module = _load_entry(directory, name)
            if module is None:
                _remove_stale(directory)
                module = _build_entry(directory, name, *build_args)
            return module
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _private_build_dir() -> pathlib.Path:
    global _private_dir
    if _private_dir is None:
        _private_dir = pathlib.Path(tempfile.mkdtemp(prefix="fsmooth-"))
        # a loaded shared object stays mapped after its file is removed
        atexit.register(shutil.rmtree, _private_dir, True)
    return _private_dir


def load_module(source: str, cdef: str, compile_args: tuple = (), libraries: tuple = ()):
    """The compiled cffi extension module (``.ffi``, ``.lib``) of ``source``, built at most once
    per cache directory and loaded once per process; ``compile_args`` and ``libraries`` add to the
    defaults."""
    name = module_name(cache_key(source, cdef, compile_args, libraries))
    build_args = (source, cdef, compile_args, libraries)
    with _name_lock(name):
        module = _loaded.get(name)
        if module is None:
            directory = cache_dir()
            try:
                module = _load_or_build_in(directory, name, *build_args)
            except OSError as err:
                warnings.warn(f"fsmooth: the build cache {directory} cannot be used ({err}); building in a "
                              f"temporary directory of this process instead (set {CACHE_DIR_ENV} to a "
                              f"writable directory)", RuntimeWarning, stacklevel=2)
                module = _load_or_build_in(_private_build_dir(), name, *build_args)
            _loaded[name] = module
    return module


@functools.lru_cache(maxsize=None)
def system_library_available(header: str, library: str) -> bool:
    """Whether this machine's C compiler finds ``<header>`` and links ``-l<library>`` (the gc
    variant needs Boehm's libgc, a system package, not a pip one)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "probe.c"
        src.write_text(f"#include <{header}>\nint main(void) {{ return 0; }}\n")
        result = subprocess.run([*c_compiler(), str(src), "-o", str(pathlib.Path(tmp) / "probe"), f"-l{library}"],
                                capture_output=True)
        return result.returncode == 0
