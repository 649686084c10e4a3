"""Registering Intel's OpenCL CPU runtime from PyPI with the OpenCL ICD loader.

The ``intel-opencl-rt`` wheel installs ``libintelocl.so`` (Intel's OpenCL CPU device) into the
environment's ``lib/``; the ``libimf``/``libsvml``/``libirng``/``libintlc`` it needs come from
``intel-cmplr-lib-rt`` into the same folder, where the library's RUNPATH (``$ORIGIN``) finds them.
The ``.icd`` file the wheel ships names a path of Intel's build machine, so no ICD loader finds the
device.  This module writes an ``.icd`` that names the installed library into a folder of
fsmooth's cache and points ``OCL_ICD_VENDORS`` at that folder.

``OCL_ICD_VENDORS`` replaces the loader's system folder (``/etc/OpenCL/vendors``), so the folder
also holds a copy of every ``.icd`` found there: a GPU's runtime stays listed.  The ICD loader of
pyopencl's wheel (ocl-icd) reads the ``.icd`` files that pyopencl ships (PoCL's, Oclgrind's)
besides.  Both loaders read the variable once, when the process first asks for the platforms, so
registering must come first: ``fsmooth.opencl_device`` does it when it is imported.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import os
import pathlib
import shutil
import sys
import tempfile
import warnings

from .cache import cache_dir

INTEL_CPU_RUNTIME = "intel-opencl-rt"  # the PyPI distribution
INTEL_CPU_LIBRARY = "libintelocl.so"
ICD_VENDORS_ENV = "OCL_ICD_VENDORS"
SYSTEM_VENDORS = pathlib.Path("/etc/OpenCL/vendors")
ICD_NAME = "fsmooth-intel-opencl-rt.icd"


def intel_cpu_library() -> pathlib.Path | None:
    """The installed ``libintelocl.so`` of ``intel-opencl-rt``; None when it is not installed."""
    try:
        distribution = importlib.metadata.distribution(INTEL_CPU_RUNTIME)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in distribution.files or ():
        if file.name == INTEL_CPU_LIBRARY:
            path = pathlib.Path(distribution.locate_file(file)).resolve()
            return path if path.is_file() else None
    return None


def vendor_files(library: pathlib.Path, system_vendors: pathlib.Path) -> dict[str, str]:
    """The ``.icd`` files of the folder ``OCL_ICD_VENDORS`` names: the system's, and one naming
    ``library``; {} when a system ``.icd`` already names an Intel CPU runtime (it is listed)."""
    system = {p.name: p.read_text() for p in sorted(system_vendors.glob("*.icd")) if p.is_file()}
    if any(INTEL_CPU_LIBRARY in text for text in system.values()):
        return {}
    return {**system, ICD_NAME: f"{library}\n"}


def write_vendors_folder(files: dict[str, str], parent: pathlib.Path) -> pathlib.Path:
    """A folder holding ``files``, named after their content, so that it is written once and never
    changes afterwards (another environment's library gets another folder).  The files are
    written in a temporary folder moved into place whole, so a loader never reads half of one."""
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    folder = parent / digest
    if folder.is_dir():
        return folder
    parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".tmp-", dir=parent))
    try:
        for name, text in files.items():
            (staging / name).write_text(text)
        os.rename(staging, folder)
    except OSError:
        if not folder.is_dir():  # not another process's folder that won the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def register_intel_cpu_runtime(system_vendors: pathlib.Path = SYSTEM_VENDORS) -> pathlib.Path | None:
    """Point ``OCL_ICD_VENDORS`` at a folder that lists Intel's CPU runtime and the system's
    runtimes, and return the folder.  Nothing is done (None) off Linux, without
    ``intel-opencl-rt``, when ``OCL_ICD_VENDORS`` is already set (the user's choice, or a parent
    fsmooth's, stands), when the system already lists an Intel CPU runtime, or when the folder
    cannot be written (with a warning)."""
    if not sys.platform.startswith("linux") or os.environ.get(ICD_VENDORS_ENV):
        return None
    library = intel_cpu_library()
    if library is None:
        return None
    try:
        files = vendor_files(library, system_vendors)
        if not files:
            return None
        folder = write_vendors_folder(files, cache_dir() / "opencl-vendors")
    except OSError as err:  # an unreadable system .icd, or a cache folder that cannot be written
        warnings.warn(f"fsmooth: cannot write the OpenCL ICD file of {library} ({err}); Intel's "
                      f"CPU runtime is not registered", RuntimeWarning, stacklevel=2)
        return None
    os.environ[ICD_VENDORS_ENV] = str(folder)
    return folder


def registered_library() -> pathlib.Path | None:
    """The library the folder of ``OCL_ICD_VENDORS`` registers as fsmooth's (registered by this
    process or by the parent it inherited the variable from); None when there is none."""
    folder = os.environ.get(ICD_VENDORS_ENV)
    icd = pathlib.Path(folder) / ICD_NAME if folder else None
    return pathlib.Path(icd.read_text().strip()) if icd is not None and icd.is_file() else None


def why_unlisted(library: pathlib.Path) -> str:
    """Why the ICD loader lists no platform of ``library`` (it skips an ICD it cannot load without
    a word)."""
    if registered_library() != library:
        return (f"OCL_ICD_VENDORS is {os.environ.get(ICD_VENDORS_ENV) or 'unset'}, not a folder fsmooth "
                f"wrote for it (fsmooth leaves an OCL_ICD_VENDORS that is set alone)")
    try:
        ctypes.CDLL(str(library))
    except OSError as err:
        return f"it does not load ({err}); intel-cmplr-lib-rt must be installed beside intel-opencl-rt"
    return ("this process listed the OpenCL platforms before fsmooth.opencl_device was imported, and "
            "the ICD loader reads OCL_ICD_VENDORS only once: import fsmooth.opencl_device first")
