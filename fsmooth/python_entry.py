"""CPython entry points: per exported kernel ``K``, a C function that Python calls directly
(``METH_FASTCALL``), written for the kernel's interface and compiled into the same extension
module as ``K`` (``fsmooth.runtime.load_library`` appends ``entry_module``'s C to the artifact's
source), so a call pays no cffi conversion and runs no Python.

The entry point takes the common case and hands every other call, unchanged, to the Python call
of ``fsmooth.runtime.call_function`` (its *fallback*), which converts or rejects it with the
messages it always had.  The common case, tested in C, is what that Python call passes on as it
is or converts as the C does: the right number of arguments; no reference run under way (the
kernel's ContextVar); a Double or Float argument an exact ``float``, or an exact ``int`` that
``float()`` takes (``PyLong_AsDouble``, what ``float()`` runs); an Index an exact ``int`` in
int64, a Card one in [0, 2^63); a Bool ``True`` or ``False``; an array an exact
``numpy.ndarray`` whose dtype *is* the parameter's (``NUMPY_DTYPE``), of the parameter's rank
and C-contiguous, and for a Card array with no negative element.  Then, in C: the sizes (dims
and Card values, as ``KernelInterface.sizes`` lists them; OpenMP's thread count for a parallel
kernel), ``K_check_sizes`` (a failed constraint goes to the fallback, which names it),
``K_shape`` and ``K_scratch_bytes`` (a negative answer goes to the fallback, which reports it),
the result arrays (``PyArray_Empty``), this thread's arena grown to the scratch bytes
(``fs_py_scratch``: 64-byte aligned, one per thread, freed at the thread's exit; an allocation
that fails goes to the fallback, whose allocation raises ``MemoryError``; a kernel whose scratch
formula is 0 neither asks nor takes it, and gets ``fs_py_no_scratch``), ``K`` without the
GIL, and a nonzero status raised through ``fsmooth.runtime.raise_status``.  Nothing runs Python
between taking the arena and calling ``K``, so no other call on this thread can move the arena
under it.

Kept on the Python call: kernels with tuple parameters (their flattening is the fallback's),
checked arenas (``Options.check_arena``) and kernels returning a filter (the result is sliced to
its kept length, ``has_entry_point``); ``fsmooth.runtime.Executable`` installs no entry point
for them.
"""
from __future__ import annotations

import hashlib

from .artifact import CArtifact, KernelInterface
from .types import C_TYPE, NUMPY_DTYPE, Bool, Card, Double, Float, Scalar, TupleT, Type, element_scalar, rank

# The state tuple an entry point is made with (``entry_state``), item by item.
STATE_FALLBACK, STATE_REFERENCE, STATE_RAISE_STATUS, STATE_NAME = range(4)
STATE_DTYPES = 4  # then the dtype of each array parameter, then of each array result component

_SUPPORT = r"""
/* ---- CPython entry points (fsmooth.python_entry) */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* One arena per thread, for every kernel of this module: a call takes it only between its last
 * Python call and K, so calls on one thread never share it. */
typedef struct { void *base; int64_t capacity; } fs_py_arena;
static pthread_key_t fs_py_arena_key;

static void fs_py_free_arena(void *arena) {
    free(((fs_py_arena *)arena)->base);
    free(arena);
}

/* The scratch of a kernel whose scratch formula is 0: never written, aligned as an arena is. */
static char fs_py_no_scratch[64] __attribute__((aligned(64)));

/* This thread's arena, grown to at least `nbytes` (doubling), 64-byte aligned; NULL if it cannot be. */
static inline void *fs_py_scratch(int64_t nbytes) {
    fs_py_arena *arena = pthread_getspecific(fs_py_arena_key);
    if (arena == NULL) {
        arena = calloc(1, sizeof *arena);
        if (arena == NULL) return NULL;
        if (pthread_setspecific(fs_py_arena_key, arena) != 0) { free(arena); return NULL; }
    }
    if (arena->base == NULL || arena->capacity < nbytes) {
        int64_t doubled = arena->capacity > INT64_MAX / 2 ? INT64_MAX : 2 * arena->capacity;
        int64_t capacity = nbytes > doubled ? nbytes : doubled;
        void *base;
        if (capacity < 64) capacity = 64;
        if ((uint64_t)capacity > (uint64_t)SIZE_MAX || posix_memalign(&base, 64, (size_t)capacity) != 0) return NULL;
        free(arena->base);
        arena->base = base;
        arena->capacity = capacity;
    }
    return arena->base;
}

/* Whether x is what the Python call passes on unconverted: an exact ndarray whose dtype is
 * `dtype`, of rank `rank`, C-contiguous. */
static inline int fs_py_is_array(PyObject *x, PyObject *dtype, int rank) {
    return Py_TYPE(x) == &PyArray_Type && (PyObject *)PyArray_DESCR((PyArrayObject *)x) == dtype
        && PyArray_NDIM((PyArrayObject *)x) == rank && PyArray_IS_C_CONTIGUOUS((PyArrayObject *)x);
}

/* Whether the int64 array x has no negative element (a Card array). */
static inline int fs_py_nonnegative(PyObject *x) {
    const int64_t *data = PyArray_DATA((PyArrayObject *)x);
    npy_intp n = PyArray_SIZE((PyArrayObject *)x);
    for (npy_intp i = 0; i < n; i++)
        if (data[i] < 0) return 0;
    return 1;
}

/* The int64 value of the exact int x if it lies in [lowest, INT64_MAX], in *value. */
static inline int fs_py_int(PyObject *x, int64_t lowest, int64_t *value) {
    int overflow;
    long long v;
    if (!PyLong_CheckExact(x)) return 0;
    v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    *value = (int64_t)v;
    return v >= lowest;
}

/* The value of the exact float or int x in *value, as Python's float(x) gives it (an int too
 * large for a double is left to the fallback, which reports it). */
static inline int fs_py_real(PyObject *x, double *value) {
    if (PyFloat_CheckExact(x)) {
        *value = PyFloat_AS_DOUBLE(x);
        return 1;
    }
    if (!PyLong_CheckExact(x)) return 0;
    *value = PyLong_AsDouble(x);
    if (*value == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

/* Whether a reference run is under way: the kernel's ContextVar (None: it has none) is true;
 * -1 with an exception. */
static inline int fs_py_in_reference(PyObject *var) {
    PyObject *value;
    int truth;
    if (var == Py_None) return 0;
    if (PyContextVar_Get(var, NULL, &value) < 0) return -1;
    if (value == NULL) return 0;
    truth = value == Py_False ? 0 : PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* A new C-contiguous array of `dtype` (borrowed) and the given dims. */
static inline PyObject *fs_py_empty(int rank, const int64_t *dims, PyObject *dtype) {
    npy_intp shape[NPY_MAXDIMS];
    for (int j = 0; j < rank; j++) shape[j] = (npy_intp)dims[j];
    Py_INCREF(dtype);  /* PyArray_Empty steals it */
    return PyArray_Empty(rank, shape, (PyArray_Descr *)dtype, 0);
}

/* A tuple of the n new references in items (stolen); NULL, and every one released, where one is
 * NULL (its exception set) or the tuple cannot be made. */
static inline PyObject *fs_py_pack(Py_ssize_t n, PyObject **items) {
    PyObject *tuple = NULL;
    Py_ssize_t j;
    for (j = 0; j < n && items[j] != NULL; j++) {}
    if (j == n) tuple = PyTuple_New(n);
    if (tuple == NULL) {
        for (j = 0; j < n; j++) Py_XDECREF(items[j]);
        return NULL;
    }
    for (j = 0; j < n; j++) PyTuple_SET_ITEM(tuple, j, items[j]);
    return tuple;
}

/* The exception of a nonzero status (fsmooth.runtime.raise_status raises it): NULL. */
static inline PyObject *fs_py_raise_status(PyObject *state, int status) {
    PyObject *result = PyObject_CallFunction(PyTuple_GET_ITEM(state, %(raise)d), "Oi",
                                             PyTuple_GET_ITEM(state, %(name)d), status);
    Py_XDECREF(result);
    if (result != NULL) PyErr_SetString(PyExc_RuntimeError, "fsmooth: raise_status returned");
    return NULL;
}

/* The fallback: the Python call of the kernel (fsmooth.runtime.call_function), on the arguments as given. */
static inline PyObject *fs_py_fallback(PyObject *state, PyObject *const *args, Py_ssize_t nargs) {
    return PyObject_Vectorcall(PyTuple_GET_ITEM(state, %(fallback)d), args, nargs, NULL);
}
""" % {"raise": STATE_RAISE_STATUS, "name": STATE_NAME, "fallback": STATE_FALLBACK}

def _scalar_argument(ty: Scalar, x: str, v: str) -> list[str]:
    """C that takes the argument ``x`` of a ``ty`` parameter into ``v`` where it is the common
    case (else goes to the fallback); a Double or Float goes through ``fs_real``."""
    if ty in (Double, Float):
        return [f"if (!fs_py_real({x}, &fs_real)) goto fallback;", f"{v} = ({C_TYPE[ty]})fs_real;"]
    if ty is Bool:
        return [f"if ({x} != Py_True && {x} != Py_False) goto fallback;", f"{v} = {x} == Py_True;"]
    lowest = "0" if ty is Card else "INT64_MIN"
    return [f"if (!fs_py_int({x}, {lowest}, &{v})) goto fallback;"]


def _scalar_result(ty: Scalar, v: str) -> str:
    """C: a new reference to the Python value of the C scalar ``v``, as cffi reads it."""
    if ty in (Double, Float):
        return f"PyFloat_FromDouble((double){v})"
    if ty is Bool:
        return f"PyBool_FromLong({v})"
    return f"PyLong_FromLongLong((long long){v})"


def entry_function(interface: KernelInterface) -> str:
    """The C of ``interface``'s entry point, ``fs_py_call_<symbol>(state, args, nargs)``."""
    symbol = interface.symbol
    n_args = len(interface.params) - (interface.threads is not None)
    declarations, body, c_args, value_of = [], [], [], {}
    if any(ty in (Double, Float) for _, ty in interface.params):
        declarations.append("double fs_real;")
    dtype_slot = STATE_DTYPES
    for k, (pname, ty) in enumerate(interface.params):
        if k == n_args:  # a parallel kernel's thread count: OpenMP's, as the Python call passes it
            declarations.append("int64_t fs_threads;")
            body.append("fs_threads = omp_get_max_threads();")
            c_args.append("fs_threads")
            value_of[(pname, None)] = "fs_threads"
            continue
        x, v = f"args[{k}]", f"fs_a{k}"
        if not rank(ty):
            declarations.append(f"{C_TYPE[ty]} {v};")
            body += _scalar_argument(ty, x, v)
            c_args.append(v)
            value_of[(pname, None)] = v
            continue
        elem = element_scalar(ty)
        test = f"fs_py_is_array({x}, PyTuple_GET_ITEM(state, {dtype_slot}), {rank(ty)})"
        if elem is Card:
            test += f" && fs_py_nonnegative({x})"
        dtype_slot += 1
        body.append(f"if (!({test})) goto fallback;")
        c_args.append(f"(const {C_TYPE[elem]} *)PyArray_DATA((PyArrayObject *){x})")
        for j in range(rank(ty)):
            declarations.append(f"int64_t {v}_d{j};")
            body.append(f"{v}_d{j} = (int64_t)PyArray_DIM((PyArrayObject *){x}, {j});")
            c_args.append(f"{v}_d{j}")
            value_of[(pname, j)] = f"{v}_d{j}"
    sizes = ", ".join(value_of[(s.param, s.dim)] for s in interface.sizes)

    outputs = interface.outputs
    arrays = [j for j, (_, ty, _) in enumerate(outputs) if rank(ty)]
    needs_scratch = interface.scratch_formula != 0
    declarations += ["int fs_status;", *(["int64_t fs_nbytes;", "void *fs_scratch;"] if needs_scratch else [])]
    if arrays:
        declarations.append(f"PyObject *fs_r[{len(arrays)}] = {{NULL}};")
    body.append(f"if ({symbol}_check_sizes({sizes}) != 0) goto fallback;")
    if needs_scratch:
        body += [f"fs_nbytes = {symbol}_scratch_bytes({sizes});", "if (fs_nbytes < 0) goto fallback;"]
    outs, values = [], []
    for j, (suffix, ty, _) in enumerate(outputs):
        elem = element_scalar(ty)
        if rank(ty):
            slot, dims = arrays.index(j), f"fs_dims{j}"
            declarations.append(f"int64_t {dims}[{rank(ty)}];")
            body.append(f"{symbol}_shape{suffix}({', '.join([dims] + ([sizes] if sizes else []))});")
            body.append(f"if ({' || '.join(f'{dims}[{d}] < 0' for d in range(rank(ty)))}) goto fallback;")
            outs.append(f"({C_TYPE[elem]} *)PyArray_DATA((PyArrayObject *)fs_r[{slot}])")
            values.append(f"fs_r[{slot}]")
        else:
            declarations.append(f"{C_TYPE[elem]} fs_out{j};")
            outs.append(f"&fs_out{j}")
            values.append(_scalar_result(elem, f"fs_out{j}"))
    for slot, j in enumerate(arrays):
        _, ty, _ = outputs[j]
        body += [f"fs_r[{slot}] = fs_py_empty({rank(ty)}, fs_dims{j}, PyTuple_GET_ITEM(state, {dtype_slot + slot}));",
                 f"if (fs_r[{slot}] == NULL) goto failed;"]
    release = [f"for (int fs_j = 0; fs_j < {len(arrays)}; fs_j++) Py_XDECREF(fs_r[fs_j]);"] if arrays else []
    # no Python runs from here to K: the arena stays this call's
    if needs_scratch:
        body += ["fs_scratch = fs_py_scratch(fs_nbytes);",
                 "if (fs_scratch == NULL) {", *[f"    {line}" for line in release], "    goto fallback;", "}"]
    scratch = "fs_scratch" if needs_scratch else "fs_py_no_scratch"
    body += ["Py_BEGIN_ALLOW_THREADS",
             f"fs_status = {symbol}({', '.join([scratch, *outs, *c_args])});",
             "Py_END_ALLOW_THREADS",
             "if (fs_status != 0) {", *[f"    {line}" for line in release],
             "    return fs_py_raise_status(state, fs_status);", "}"]
    result_lines, result = _assembled(interface.result, iter(values), [0])
    body += result_lines + [f"return {result};"]
    failed = ["failed:", *release, "return NULL;"] if arrays else []
    lines = [f"static PyObject *fs_py_call_{symbol}(PyObject *state, PyObject *const *args, Py_ssize_t nargs) {{",
             *[f"    {line}" for line in declarations],
             f"    if (nargs != {n_args} || fs_py_in_reference(PyTuple_GET_ITEM(state, {STATE_REFERENCE})) != 0)",
             "        goto fallback;",
             *[f"    {line}" for line in body],
             *[f"    {line}" if not line.endswith(":") else line for line in failed],
             "fallback:",
             "    if (PyErr_Occurred()) return NULL;",
             "    return fs_py_fallback(state, args, nargs);",
             "}"]
    return "\n".join(lines)


def _assembled(ty: Type, values, counter: list) -> tuple[list[str], str]:
    """C statements and the expression of a new reference to the value of type ``ty`` from its
    components' expressions (new references, in order); NULL with an exception where one fails."""
    if not isinstance(ty, TupleT):
        return [], next(values)
    lines, items = [], []
    for item_type in ty.items:
        item_lines, item = _assembled(item_type, values, counter)
        lines += item_lines
        items.append(item)
    name = f"fs_t{counter[0]}"
    counter[0] += 1
    lines.append(f"PyObject *{name}[{len(items)}] = {{{', '.join(items)}}};")
    return lines, f"fs_py_pack({len(items)}, {name})"


def has_entry_point(interface: KernelInterface) -> bool:
    """Whether the module of ``interface``'s artifact has an entry point for it: not for a kernel
    returning a filter, whose result the Python call slices to its kept length."""
    return not interface.kept_length


def entry_module(artifact: CArtifact) -> tuple[str, str] | None:
    """(module name, C) of the extension module of ``artifact``'s entry points, to be appended to
    its source: per kernel its entry point and a factory, ``<module>.<symbol>(state)``, that
    makes the callable (``entry_state``); None for an artifact that names no kernel."""
    interfaces = [i for i in artifact.interfaces.values() if has_entry_point(i)]
    if not interfaces:
        return None
    functions = [entry_function(i) for i in interfaces]
    definitions = [
        f"static PyMethodDef fs_py_def_{i.symbol} = {{\"{i.name}\",\n"
        f"    (PyCFunction)(void (*)(void))fs_py_call_{i.symbol}, METH_FASTCALL,\n"
        f"    \"The compiled kernel {i.name} (fsmooth.python_entry).\"}};\n"
        f"static PyObject *fs_py_make_{i.symbol}(PyObject *module, PyObject *state) {{\n"
        f"    (void)module;\n"
        f"    if (!PyTuple_CheckExact(state) || PyTuple_GET_SIZE(state) != {state_size(i)}\n"
        f"            || (PyTuple_GET_ITEM(state, {STATE_REFERENCE}) != Py_None\n"
        f"                && !PyContextVar_CheckExact(PyTuple_GET_ITEM(state, {STATE_REFERENCE})))) {{\n"
        f"        PyErr_SetString(PyExc_TypeError, \"fsmooth: not the state of {i.name}'s entry point\");\n"
        f"        return NULL;\n"
        f"    }}\n"
        f"    return PyCFunction_New(&fs_py_def_{i.symbol}, state);\n"
        f"}}"
        for i in interfaces]
    # a parallel kernel's thread count is OpenMP's (its C includes omp.h, a hand-written one may not)
    openmp = ["int omp_get_max_threads(void);"] if any(i.threads is not None for i in interfaces) else []
    text = "\n\n".join([_SUPPORT, *openmp, *functions, *definitions])
    name = f"_fsmooth_entries_{hashlib.sha256(text.encode()).hexdigest()[:24]}"
    methods = [f"    {{\"{i.symbol}\", fs_py_make_{i.symbol}, METH_O, NULL}}," for i in interfaces]
    init = "\n".join([
        "static PyMethodDef fs_py_methods[] = {", *methods, "    {NULL, NULL, 0, NULL}", "};",
        f"static struct PyModuleDef fs_py_module = {{PyModuleDef_HEAD_INIT, \"{name}\", NULL, -1, fs_py_methods,",
        "                                             NULL, NULL, NULL, NULL};",
        f"PyMODINIT_FUNC PyInit_{name}(void) {{",
        "    import_array();",
        "    if (pthread_key_create(&fs_py_arena_key, fs_py_free_arena) != 0) {",
        "        PyErr_SetString(PyExc_RuntimeError, \"fsmooth: no thread-local key for the arena\");",
        "        return NULL;",
        "    }",
        "    return PyModule_Create(&fs_py_module);",
        "}"])
    return name, f"{text}\n\n{init}\n"


def state_size(interface: KernelInterface) -> int:
    arrays_in = sum(1 for _, ty in interface.params if rank(ty))
    arrays_out = sum(1 for _, ty, _ in interface.outputs if rank(ty))
    return STATE_DTYPES + arrays_in + arrays_out


def entry_state(interface: KernelInterface, fallback, reference_var, raise_status) -> tuple:
    """The state an entry point of ``interface`` is made with: the Python call it hands what it
    does not take to, the ContextVar that says a reference run is under way (or None), the
    function that raises a status's exception, the kernel's name, and the numpy dtype of each
    array parameter and of each array result component."""
    dtypes = [NUMPY_DTYPE[element_scalar(ty)] for _, ty in interface.params if rank(ty)]
    dtypes += [NUMPY_DTYPE[element_scalar(ty)] for _, ty, _ in interface.outputs if rank(ty)]
    return (fallback, reference_var, raise_status, interface.name, *dtypes)
