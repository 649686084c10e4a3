"""The on-disk build cache of compiled kernels: one CPython extension module per C artifact.

The module name is derived from a hash of everything that decides the machine code (C source,
cffi declarations, runtime headers, compiler flags and libraries -- the defaults and those a
variant adds, ``CArtifact.compile_args``/``libraries`` -- fsmooth and cffi versions, Python and
platform tags), so a hit never needs a rebuild and a change always misses.  An entry is a
manifest ``<dir>/<module>.json`` naming the module file ``<dir>/<module>-<digest><EXT_SUFFIX>``
and holding its SHA-256; the file name carries the start of that digest, so a module file is
never overwritten by different bytes (builds are not byte-reproducible: the temporary build
path ends up in the binary).

Writes are atomic: the module is built in a private temporary directory inside the cache
directory (same file system), moved into place with ``os.replace``, and only then is the
manifest replaced to point at it.  Concurrent processes may both build, but a reader sees either
no manifest or one naming a complete file; an entry whose file is missing or disagrees with its
manifest (a corrupted or truncated file) is rebuilt rather than loaded.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import cffi
import platformdirs

import fsmooth
from fsmooth.clib import HEADER_DIR

COMPILE_ARGS = ("-std=c99", "-O3", "-fwrapv")
LIBRARIES = ("m",)
CACHE_DIR_ENV = "FSMOOTH_CACHE_DIR"

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
        "compile_args": [*COMPILE_ARGS, *compile_args],
        "libraries": [*LIBRARIES, *libraries],
        "fsmooth": fsmooth.__version__,
        "cffi": cffi.__version__,
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


def _manifest_path(name: str) -> pathlib.Path:
    return cache_dir() / f"{name}.json"


def _import_extension(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_entry(name: str):
    """The cached module ``name``, or None if there is no complete, intact entry."""
    manifest_path = _manifest_path(name)
    try:
        manifest = json.loads(manifest_path.read_text())
        module_path = manifest_path.parent / manifest["file"]
        if module_path.parent != manifest_path.parent or manifest["sha256"] != _sha256_file(module_path):
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


def _build_entry(name: str, source: str, cdef: str, compile_args: tuple, libraries: tuple):
    global build_count
    manifest_path = _manifest_path(name)
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    # a variant's flags (-fopenmp) matter at the link too
    ffi.set_source(name, source, include_dirs=[str(HEADER_DIR)], extra_compile_args=[*COMPILE_ARGS, *compile_args],
                   extra_link_args=list(compile_args), libraries=[*LIBRARIES, *libraries])
    build_dir = tempfile.mkdtemp(dir=manifest_path.parent, prefix=".build-")
    try:
        try:
            built = pathlib.Path(ffi.compile(tmpdir=build_dir, verbose=False))
        except (cffi.VerificationError, OSError) as err:
            # Generated C that does not compile is a bug in fsmooth: keep the C for the report.
            kept = manifest_path.parent / f"{name}-failed.c"
            shutil.copyfile(pathlib.Path(build_dir) / f"{name}.c", kept)
            raise RuntimeError(f"fsmooth: the generated C did not compile ({err}); its source is {kept}") from err
        build_count += 1
        digest = _sha256_file(built)
        module_path = manifest_path.parent / f"{name}-{digest[:16]}{_ext_suffix()}"
        os.replace(built, module_path)
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)
    manifest = {"file": module_path.name, "sha256": digest}
    _write_atomically(manifest_path, json.dumps(manifest).encode())
    return _import_extension(name, module_path)


def load_module(source: str, cdef: str, compile_args: tuple = (), libraries: tuple = ()):
    """The compiled cffi extension module (``.ffi``, ``.lib``) of ``source``, built at most once
    per cache directory; ``compile_args`` and ``libraries`` add to the defaults."""
    name = module_name(cache_key(source, cdef, compile_args, libraries))
    module = _load_entry(name)
    return module if module is not None else _build_entry(name, source, cdef, compile_args, libraries)


@functools.lru_cache(maxsize=None)
def system_library_available(header: str, library: str) -> bool:
    """Whether this machine's C compiler finds ``<header>`` and links ``-l<library>`` (the gc
    variant needs Boehm's libgc, a system package, not a pip one)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "probe.c"
        src.write_text(f"#include <{header}>\nint main(void) {{ return 0; }}\n")
        result = subprocess.run(["cc", str(src), "-o", str(pathlib.Path(tmp) / "probe"), f"-l{library}"],
                                capture_output=True)
        return result.returncode == 0
