"""The OpenCL strategy of a program without annotations: its reductions run in parallel.

The default strategy (``dpia.strategy_check``) runs an ``ifold`` at the top of a kernel on one
work-item.  Where the program names no strategy at all (no ``build_*``, ``to_*`` or
``vectorize``: a user's annotations always win), each ``ifold`` at the top of the entry kernel
(run once per call, not inside a loop) that is a reduction (``dps.reductions``: ``acc ⊕ f(i)``
with ⊕ one of + * min max, or a tuple of such components) is rewritten here, in F̃, to the
two-phase reduction a user would write with strategies (``tests/corpus/blas.py``'s ``dot``), so
that every later stage is the one annotated programs take (``dpia.hoist_opencl`` makes its two
phases one launch, as for the user's):

    g = min(ceil(n / (E · items)), groups)               E = local · width (``OpenCLReduction``)
    partials = to_global(build_workgroup(g, λ c. tree(to_local(vectorize(width, build_local(E, λ t.
                   ifold(λ a j. let k = j·g·E + t + c·E in if k < n then step(a, k) else a, e, ⌈n / gE⌉)))))))
    total = to_global(build_workgroup(1, λ w. init ⊕ tree(to_local(vectorize(width, build_local(E, λ t.
                   ifold(λ a j. let k = j·E + t in if k < g then a ⊕ partials[k] else a, e, ⌈g / E⌉)))))))
    total[0]

``step`` is the ifold's own function, ``e`` the identity of ⊕ (from the fold: folding ``step``
from ``e`` over a share of the iterations gives that share's ⊕, since ``step(a, k)`` is
``a ⊕ f(k)``); ``tree`` halves a local array of E elements in local memory, one barrier a step,
and combines the last two.  A tuple state is reduced component by component, each a reduction of
its own (the other components' states replaced by their identities, which the component does not
read; the optimiser removes what it no longer needs), so it reads its inputs once per component.

What that changes: the iterations are regrouped (floating-point + and * may round differently;
min and max give the same value, though of equal operands of different bits, 0.0 and -0.0, the
one taken may differ: README, "Reductions on OpenCL").  Index and Card + and * stay sequential,
as ``dps.parallel`` keeps them: a regrouped sum may overflow int64 where the sequential one does
not, and an overflow must be an error exactly where the reference's is.  An ifold whose count is
not known from the input sizes (read from an array) stays sequential: a launch's NDRange is
fixed before it runs.  Whether a fold that can be parallel is, is the cost model's choice
(``fsmooth.cost_model.choose_fold``, for the device of ``Options.opencl_device``): a short count
known when compiling stays on one work-item, where a launch of work-groups would cost more than the fold; a
symbolic count, taken to be large, is made parallel.  A fold whose body
has loops of its own (GMM's builds over the components) gets whole elements per lane, one a round
(width 1, items 1): an element's work dwarfs the reduction's, so the more groups the better.

A map of reductions at the top of the entry kernel, ``build(m, λ i. … ifold(λ a j. a ⊕ f(i, j), z, n)
…)`` of scalars (row sums, gemv, softmax's per-row max and sum), gets a work-item per element
(the default) or one work-group per element, as the cost model (``fsmooth.cost_model.choose_rows``)
finds cheaper on the device, which also picks the group's size E: each reduction of the element's
body is folded by the group's E lanes (lane t the elements t, t + E, …) and reduced by the tree,
then combined with its init; the rest of the body every work-item computes alike.  On a GPU
(``GENERIC_GPU``) a group of ``local`` lanes per element, unless the rows are short (known
when compiling, or at the call: below); on a CPU a work-item per element where it streams its
own row and writes a scalar (gemv), a group of one SIMD vector where it writes a row (softmax: a
work-item's row written beside its neighbours' is a scatter).  A reduction whose count is read
from data stays in the element's body (each lane's trip count would be data too).

Where the rows' length is known only at the call (the reductions' counts one length n of the
sizes, each up to a constant: softmax's max over n and sum over n - 1), the model takes n to be
``SYMBOLIC_SIZE``, long; where it would nest short rows the other way
(``cost_model.rows_by_length``: on a GPU a work-item per row below the crossover T at which a
group's fixed cost, its tree and its lanes' launch, is paid back: 667 doubles, 326 floats a row
on ``GENERIC_GPU``), the map is nested both ways: ``AutoReductions.program`` for long rows,
``AutoReductions.short`` for short ones where ``when`` (``n < T``) holds.  The driver takes the
short program through the same passes to its OpenCL plan (``driver._short_rows``), and
``codegen_opencl.generate_opencl`` puts both plans' kernels in one program, each launch with its
condition (``Launch.when``), which the host evaluates from the call's sizes before any launch:
one nesting runs, and only its buffers are made.  One condition a program: a second map of
another row length keeps the long rows' nesting.

On a CPU, where every reduction of a scalar element is of floats and reads its elements at its
own index (``_contiguous_floats``: gemv's row and ``x``), the work-item per element may fold each
in vectors of its own (``_in_vectors``, the model's "in w-wide vectors"): lane t of a
``vectorize(w, build_seq(w, ·))`` folds the elements t, t + w, … of the ``n // w`` whole vectors,
with no guard, so its reads are vector loads; the w lanes are combined in order, then the last
``n mod w`` elements one by one, then the init.  A sum is regrouped as in the two-phase reduction.
Where those folds also read what every element shares (gemv's ``x``: ``_reads``), the model may
give a work-item several elements (``cost_model.JAM``): the build then asks for that jam
(``Strategy.jam``, set after the optimiser: ``_jammed``), which ``dpia.unroll_jam`` makes.

On a CPU (``Options.opencl_device`` of kind cpu) phase 1 is laid out for a core, not for a GPU's
lanes (``_two_phase``'s ``blocks``): the runtime runs a group's work-items one after another, each
as written, so a group's strided share would take a few elements of every page of the array.
Instead each work-item folds a block of ``CPU_BLOCK`` consecutive elements in vectors of its own
(the device's: 16 floats or 8 doubles with AVX-512; integers one at a time; the kernel hinted the
width, so that the runtime does not vectorise across work-items too), a step testing only its
vector's last element against n; a group is the device's smallest group size
(``cost_model.group_sizes``: one SIMD vector of work-items), and there are as many groups as the
blocks need, ``ceil(n / (L · CPU_BLOCK))``, whose partials phase 2 folds as before.  A fold whose
body has loops of its own keeps the strided layout (width 1, items 1).

The element may be a row whose lets are such reductions (or scalars computed from them), softmax's
``build(m, λ i. let mx = max_j x[i][j]; e = build(k, λ j. exp(x[i][j] - mx)); s = Σ_j e[j] in
build(k, λ j. e[j] / s))``: one work-group per row as well, each reduction the group's local
reduction (every lane then knows its result), and each build of scalars of the row's body (the
row itself, and an intermediate such as ``e``) a ``build_local``, its elements strided over the
group's lanes, an intermediate in local memory (one copy per group; where a row is longer than the
device's local memory holds, the launcher runs the fallback kernel that ``dpia.hoist_opencl`` plans
with it in global memory), the barrier after its loop ordering its writes before the reads.

The pass returns the rewritten program and one line per top-level ifold saying what was chosen
and why, which the OpenCL program's first comment repeats (``fsmooth explain --stage opencl``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import sympy

from . import core
from .cost_model import GENERIC_GPU, DeviceDescription, Rows, choose_fold, choose_rows, group_sizes, rows_by_length
from .core import Build, Get, If, Ifold, Lam, Let, Lit, PrimApp, Proj, Tuple, Var
from .names import NameSupply
from .options import OpenCLReduction, Options
from .strategies import Strategy
from .types import BYTES, ArrayT, Bool, Card, Double, Float, FunT, Index, Scalar, TupleT

SYMBOLS = {"add": "+", "mul": "*", "min": "min", "max": "max"}
# The elements one work-item folds in a CPU's two-phase reduction (``_two_phase``'s blocks): 16 KiB
# of floats, whole pages to one core's stream, and so many that its lanes' combination and its
# group's tree cost a small part of its work.
CPU_BLOCK = 4096


@dataclass(frozen=True)
class AutoReductions:
    """The program with its reductions made parallel, and why: one line per choice."""

    program: core.Program
    notes: tuple[str, ...]
    # the size constraints of the program before the rewrite (dps.bounds: its reads in range iff
    # they hold), which ``keep_constraints`` gives the rewritten one: it reads the same elements,
    # but its strided indices no longer give exact bounds, so their reads would be checked on the
    # device only, failing later and with another status than the sequential fold's host check
    constraints: tuple = ()
    # where a map of reductions is nested apart for short rows and long ones (``_rows``): the
    # program for short rows and where it runs (sympy over the sizes), ``program`` elsewhere
    short: core.Program | None = None
    when: sympy.Basic | None = None


def show_program(result: AutoReductions) -> str:
    shown = [*(f"-- {note}" for note in result.notes), core.show_program(result.program)]
    if result.short is not None:
        shown += [f"-- where {result.when}:", core.show_program(result.short)]
    return "\n".join(shown)


def verify(result: AutoReductions) -> None:
    core.verify_anf(result.program)
    if result.short is not None:
        core.verify_anf(result.short)


def auto_reductions(program: core.Program, options: Options) -> AutoReductions:
    """``program`` (in ANF, every call of its entry inlined) with each reduction at the top of its
    entry kernel made a two-phase parallel reduction (module docstring)."""
    entry = program.main
    folds = [e for e in _top_level(entry.body) if isinstance(e, Ifold) or _map_of_folds(e)]
    if not folds:
        return AutoReductions(program, ())
    if core.has_strategy(entry.body):
        return AutoReductions(program, ())  # the program's own strategy, its OpenCL as before
    if not options.auto_reductions:
        return AutoReductions(program, ("automatic reductions off (Options.auto_reductions)",))
    found, constraints = _reductions(program)
    names = core.name_supply(entry)
    tuning = options.opencl_reduction
    device = options.opencl_device or GENERIC_GPU
    notes, rewritten, jams = [], {}, {}
    short_rows = {}  # id of a map of reductions -> its _ShortRows, all of one condition
    for fold in folds:
        if isinstance(fold, Build):
            rows, note, jam, short = _rows(fold, found, tuning, device, names)
            if rows is not None:
                rewritten[id(fold)] = rows
            if jam > 1:
                jams[fold.fn.params[0][0]] = jam
            if short is not None and all(other.when == short.when for other in short_rows.values()):
                # one condition a call: maps of other row lengths keep the long rows' nesting
                short_rows[id(fold)] = short
                note = (f"the top-level build of {fold.fn.params[0][0]} has rows whose length is known only at "
                        f"the call, and the cost model nests short rows and long ones apart: both are compiled, "
                        f"the launch choosing by the call's sizes; where {short.when} (the model's crossover on "
                        f"{device.name}): {short.note}; otherwise: {note}")
            notes.extend([note] if note else [])
            continue
        state = fold.fn.params[0][0]
        why_not = _why_sequential(found.get(state))
        if why_not:
            notes.append(f"the ifold over {fold.count} (state {state}) runs on one work-item: {why_not}")
            continue
        red, count = found[state]
        shape = _shape(fold, tuning)
        # a CPU: each work-item folds a contiguous block in vectors of its own (_two_phase)
        blocks = device.kind == "cpu" and shape == tuning
        if blocks:
            shape = replace(tuning, local=min(group_sizes(device, tuning.local)), width=min(16, device.simd_width))
        choice = choose_fold(_constant(count), device, shape.local if blocks else tuning.local,
                             shape.width if blocks else tuning.width, tuning.items, tuning.groups, tuning.launches)
        if choice.chosen.strategy == "one work-item":
            notes.append(f"the ifold over {fold.count} (state {state}) runs on one work-item: {count} iterations"
                         f"{', known when compiling,' if count.is_Integer else ''} cost less on one work-item "
                         f"than a parallel reduction ({choice.explain()})")
            continue
        layout = partial(_two_phase, vector_bytes=device.simd_width * 4) if blocks else _two_phase
        rewritten[id(fold)] = _parallel(fold, red.monoids, shape, names, layout)
        notes.append(_note(state, count, red.monoids, shape, blocks) + ("" if shape == tuning or blocks else
                     "; its body has loops of its own, so each lane takes whole elements, one a round "
                     "at least (width 1, items 1): an element's work dwarfs the reduction's")
                     + f" ({choice.explain()})")
    if not rewritten and not short_rows:
        return AutoReductions(program, tuple(notes))
    long = _rewritten(program, rewritten, jams, options)
    if not short_rows:
        return AutoReductions(long, tuple(notes), constraints)
    index = {id(fold): fold.fn.params[0][0] for fold in folds}
    short_jams = {**jams, **{index[at]: short.jam for at, short in short_rows.items()}}
    short = _rewritten(program, {**rewritten, **{at: s.build for at, s in short_rows.items()}},
                       {i: jam for i, jam in short_jams.items() if jam > 1}, options)
    return AutoReductions(long, tuple(notes), constraints, short, next(iter(short_rows.values())).when)


def _rewritten(program: core.Program, rewritten: dict, jams: dict, options: Options) -> core.Program:
    """``program`` with the top-level expressions of its entry kernel ``rewritten`` (by id; None:
    left as they are), optimised again, its builds in ``jams`` jammed (``_jammed``)."""
    from .anf import anf_kernel
    from .optimize import optimize_program

    entry = program.main
    rewritten = {at: e for at, e in rewritten.items() if e is not None}
    if not rewritten:
        return program
    body = _replace_top_level(entry.body, rewritten)
    kernels = {**program.kernels, entry.name: anf_kernel(program, replace(entry, body=body))}
    # the optimiser simplifies what the rewrite leaves (a tuple's unread components) as it did the rest
    optimised = optimize_program(core.Program(kernels, program.entry), options)
    return _jammed(optimised, jams)


def _jammed(program: core.Program, jams: dict) -> core.Program:
    """``program`` with each top-level build of ``jams`` (by its index: ANF's binders are unique)
    asking for its jam (``Strategy.jam``), after the optimiser, which leaves the body of a build
    with a strategy as it is (``fsmooth.licm``)."""
    entry = program.main
    marked = {id(e): replace(e, strategy=Strategy(jam=jams[e.fn.params[0][0]])) for e in _top_level(entry.body)
              if isinstance(e, Build) and e.fn.params[0][0] in jams}
    if not marked:
        return program
    return core.Program({**program.kernels, entry.name: replace(entry, body=_replace_top_level(entry.body, marked))},
                        program.entry)


def keep_constraints(dps_program, result: AutoReductions):
    """The DPS program of the rewritten program with the constraints of the one before it first."""
    k = dps_program.kernels[dps_program.entry]
    if not result.constraints:
        return dps_program
    constraints = (*result.constraints, *(c for c in k.constraints if c not in result.constraints))
    return replace(dps_program, kernels={**dps_program.kernels, k.name: replace(k, constraints=constraints)})


def _map_of_folds(e: core.Expr) -> bool:
    """``e`` is a plain ``build`` whose element is computed with ifolds: a scalar, or a row (a
    build of scalars) after them."""
    return (isinstance(e, Build) and e.strategy is None
            and (isinstance(e.ty.elem, Scalar) or _row_of_scalars(e.fn.body))
            and any(isinstance(inner, Ifold) for inner in _top_level(e.fn.body)))


def _row_of_scalars(body: core.Expr) -> bool:
    """``body``'s result (after its lets) is a plain build of scalars: the element is a row."""
    *_, result = _top_level(body)
    return isinstance(result, Build) and result.strategy is None and isinstance(result.ty.elem, Scalar)


def _rows(build: Build, found: dict, tuning: OpenCLReduction, device: DeviceDescription, names: NameSupply):
    """A map of reductions, ``build m (λ i. … ifold(λ a j. a ⊕ f(i, j), z, n) …)``, as one work-group
    per element, whose lanes fold the reductions of its body and reduce them in local memory
    (the rest of the body each work-item computes alike), and a note; None (and a note, or None)
    where it is left to one work-item per element: no reduction in it that a group can fold (one
    that may overflow, or whose count is read from data), or the cost model
    (``fsmooth.cost_model.choose_rows``) finds a work-item per element cheaper on ``device``
    (short rows on a GPU, whose group's lanes would mostly idle; a CPU, where a work-item streams
    its own row through its cache).  The group's size is the model's choice too.  A reduction
    whose count is known when compiling and below the group's size is computed by every lane
    alike.  Where the element is a row (``build k (λ j. …)`` after the lets: softmax), the row's
    builds are the group's too, its lanes writing strided elements (``build_local``).  Where the
    reductions' counts are one length known only at the call and the model nests short rows and
    long ones apart (``cost_model.rows_by_length``), that is the nesting for long rows, and the
    last of the four results (else None) the one for short rows (``_ShortRows``)."""
    *_, result = _top_level(build.fn.body)
    row = isinstance(build.ty.elem, ArrayT)
    i = build.fn.params[0][0]
    folds = []  # (the ifold, its reduction, its count): those a group can fold
    for fold in _top_level(build.fn.body):
        if not isinstance(fold, Ifold):
            continue
        red, count = found.get(fold.fn.params[0][0]) or (None, None)
        if red is None or any(m.may_overflow for m in red.monoids) or count is None:
            continue  # a count read from data: its lanes' trip counts are data too (kept per row)
        folds.append((fold, red, count))
    if not folds:
        return None, None, 1, None
    row_builds = [node for node in _top_level(build.fn.body)
                  if row and isinstance(node, Build) and node.strategy is None and isinstance(node.ty.elem, Scalar)]
    varying = _varying_with(build.fn.body, {i})
    own, shared = zip(*(_reads(fold, varying) for fold, _, _ in folds))
    shape = Rows(elements=_literal(build.size), counts=tuple(_constant(count) for _, _, count in folds),
                 row_length=_literal(result.size) if row else None, row_builds=len(row_builds),
                 elem_bytes=max(BYTES[scalar] for _, red, _ in folds for scalar in (m.ty for m in red.monoids)),
                 contiguous=all(_contiguous_floats(fold, red) for fold, red, _ in folds),
                 own_reads=sum(own), shared_reads=sum(shared))
    length = _row_length(count for _, _, count in folds)
    split = rows_by_length(shape, device, tuning.local) if length is not None else None
    if split is None:
        return (*_nested(build, folds, row_builds, choose_rows(shape, device, tuning.local), tuning, names), None)
    # the row length known only at the call, and the model nests short rows and long ones apart:
    # both are compiled, the launch runs the one for the call's length
    long = _nested(build, folds, row_builds, split.long, tuning, names)
    short = _ShortRows(sympy.StrictLessThan(length, split.threshold),
                       *_nested(build, folds, row_builds, split.short, tuning, names))
    return (*long, short)


def _row_length(counts) -> sympy.Expr | None:
    """The one length the reductions' ``counts`` not known when compiling are, each up to a
    constant (softmax's max over n, its sum over n - 1 from its first element; gemv's
    ``min(m_d1, x_d0)``), which the cost model takes them all to be
    (``cost_model.rows_by_length``); None where there is none."""
    symbolic = [n for n in counts if not n.is_Integer]
    if not symbolic:
        return None
    n = symbolic[0]
    return n if all((count - n).is_Integer for count in symbolic) else None


@dataclass(frozen=True)
class _ShortRows:
    """A map of reductions as it is nested for short rows (``cost_model.rows_by_length``): where
    ``when`` holds (its row length below the model's crossover), ``build`` (None: a work-item per
    element, as the map is), and why (``note``), each work-item taking ``jam`` elements."""

    when: sympy.Basic
    build: Build | None
    note: str
    jam: int


def _nested(build: Build, folds: list, row_builds: list, choice, tuning: OpenCLReduction, names: NameSupply):
    """The map of reductions ``build`` nested as ``choice`` (``cost_model.choose_rows``) says: the
    rewritten build (None: a work-item per element, as it is), the note saying so, and the
    elements a work-item jams (``_rows``)."""
    *_, result = _top_level(build.fn.body)
    row = isinstance(build.ty.elem, ArrayT)
    i = build.fn.params[0][0]
    E, width, jam = choice.chosen.local, choice.chosen.width, choice.chosen.jam
    if width > 1:
        # a work-item per element (the default strategy), its reductions in vectors of its own
        vectorised = {id(fold): _parallel(fold, red.monoids, replace(tuning, width=width), names, _in_vectors)
                      for fold, red, _ in folds}
        described = "; ".join(f"{', '.join(SYMBOLS[m.op] for m in red.monoids)} over {count}" for _, red, count in folds)
        fn = replace(build.fn, body=_replace_top_level(build.fn.body, vectorised))
        per = (f"{jam} elements, unrolled and jammed (their folds' steps in one loop, what they share read once "
               f"for the {jam}; the elements past the last multiple of {jam} one by one)" if jam > 1 else "element")
        return replace(build, fn=fn), (
            f"the top-level build of {i} is a map of reductions ({described}): a work-item per {per}, each "
            f"reduction in {width}-wide vectors of its own (lane t folds the elements t, t + {width}, …; then "
            f"the lanes, then the last ones one by one) ({choice.explain()})"), jam
    if E is None:
        counts = ", ".join(str(count) for _, _, count in folds)
        what = (f"makes rows of {result.size.value} elements, known when compiling" if row and isinstance(result.size, Lit)
                else f"makes rows of {result.size}" if row else f"is a map of reductions of {counts} elements each")
        return None, f"the top-level build of {i} {what}: a work-item per {'row' if row else 'element'} ({choice.explain()})", 1
    rewritten, described = {}, []
    for fold, red, count in folds:
        if count.is_Integer and count < E:
            continue  # short: every lane folds it alike
        rewritten[id(fold)] = _parallel(fold, red.monoids, replace(tuning, local=E), names, _in_group)
        described.append(f"{', '.join(SYMBOLS[m.op] for m in red.monoids)} over {count}")
    if row:
        # the row's builds (its result, and intermediates such as softmax's exponentials) spread
        # over the group's lanes, strided by the group's size; an intermediate, which only its
        # group reads, is in local memory, one per group (dpia.hoist_opencl plans the fallback
        # with it in global memory, for rows longer than local memory holds), and the barrier
        # after its loop orders its writes before the lanes' reads of it
        for node in row_builds:
            rewritten[id(node)] = replace(node, strategy=Strategy("local", "local"))
    intermediates = len(row_builds) > 1  # the row itself is the last
    fn = replace(build.fn, body=_replace_top_level(build.fn.body, rewritten))
    note = (f"the top-level build of {i} is a map of reductions ({'; '.join(described)}): one work-group per "
            f"element, each of its {E} lanes folding a strided share, then a tree in local memory "
            + ("(every lane then knows the results); the row's builds spread over the lanes, strided "
               "by the group's size " if row else "")
            + ("with an intermediate row in local memory (in global memory in the fallback kernel, for "
               "rows that exceed the device's local memory) " if intermediates else "")
            + f"(tuning local={tuning.local}: Options.opencl_reduction, FSMOOTH_OPENCL_REDUCTION; {choice.explain()})")
    return replace(build, fn=fn, strategy=Strategy("workgroup", "global")), note, 1


def _contiguous_floats(fold: Ifold, red) -> bool:
    """Whether a work-item can fold ``fold`` (a reduction ``red``) in vectors of its own: its
    components are floats (OpenCL's vectors), its body has no loop, and each read in it is at
    the fold's index plus an amount the fold does not change (lane t's element beside lane
    t - 1's: one vector load, ``dpia.vectorize``) or does not depend on the index at all (one
    load for every lane).  In ANF the body is a chain of lets of atoms' operations."""
    if any(m.ty not in (Float, Double) for m in red.monoids):
        return False
    (state, _), (index, _) = fold.fn.params
    shifted = {index}  # the index plus an amount the fold does not change
    varying = {index, state}  # what depends on the index or on the state
    lets, result = core.let_chain(fold.fn.body)
    for name, rhs in [*((let.name, let.rhs) for let in lets), (None, result)]:
        uses = core.free_vars(rhs) & varying
        match rhs:
            case Get(arr, at):
                if core.free_vars(arr) & varying or (core.free_vars(at) & varying and not (
                        isinstance(at, Var) and at.name in shifted)):
                    return False  # another row a step, or a gather
            case PrimApp("add", operands):
                moving = [x for x in operands if core.free_vars(x) & varying]
                if len(moving) == 1 and isinstance(moving[0], Var) and moving[0].name in shifted and name is not None:
                    shifted.add(name)
            case PrimApp() | Var() | Lit() | Proj() | Tuple():
                pass
            case _ if uses:
                return False  # a loop, a branch or a call of the index: lane by lane
        if uses and name is not None:
            varying.add(name)
    return True


def _varying_with(body: core.Expr, varying: set) -> set:
    """``varying`` and the names of ``body``'s let chain computed from them."""
    lets, _ = core.let_chain(body)
    varying = set(varying)
    for let in lets:
        if core.free_vars(let.rhs) & varying:
            varying.add(let.name)
    return varying


def _reads(fold: Ifold, varying: set) -> tuple[int, int]:
    """Of the reads of ``fold``'s step (``Rows.own_reads``, ``Rows.shared_reads``): those that
    depend on the element (``varying``: its index and what the element computes from it before
    the fold), and those every element makes alike (gemv's ``x[j]``)."""
    lets, _ = core.let_chain(fold.fn.body)
    varying = _varying_with(fold.fn.body, varying)
    reads = [let for let in lets if isinstance(let.rhs, Get)]
    own = sum(1 for let in reads if core.free_vars(let.rhs) & varying)
    return own, len(reads) - own


def _literal(size: core.Expr) -> int | None:
    """A size known when compiling (a literal after the optimiser), else None."""
    return size.value if isinstance(size, Lit) else None


def _shape(fold: Ifold, tuning: OpenCLReduction) -> OpenCLReduction:
    """The shape of ``fold``'s reduction: ``tuning``, but where the body has loops of its own
    (GMM's per-point builds over the components) no vectors, whose lanes would run those loops one
    by one anyway, and as many groups as elements allow, since each element is much work."""
    if any(isinstance(node, (Build, Ifold, core.Iscan, core.Filter)) for node in core.walk(fold.fn.body)):
        return replace(tuning, width=1, items=1)
    return tuning


def _top_level(e: core.Expr):
    """The right-hand sides of the let chain at the top of a body, and its result."""
    while isinstance(e, Let):
        yield e.rhs
        e = e.body
    yield e


def _replace_top_level(e: core.Expr, rewritten: dict) -> core.Expr:
    match e:
        case Let(rhs=rhs, body=body):
            return replace(e, rhs=rewritten.get(id(rhs), rhs), body=_replace_top_level(body, rewritten))
    return rewritten.get(id(e), e)


def _reductions(program: core.Program) -> dict:
    """Every ifold of the entry kernel's DPS form, by its state's name (unique: ANF's binders are):
    (its ``dps.reductions.Reduction`` or None, its count over the sizes or None where it is not
    known from them); and the kernel's size constraints."""
    from .dps import ir
    from .dps.reductions import reduction
    from .dps.translate import dps_kernels
    from .shape.translate import shape_program

    k = dps_kernels(program, shape_program(program))[program.entry]
    sizes = {s.name for s in k.sizes}
    return {t.state: (reduction(t), t.count if isinstance(t.count, sympy.Basic)
                      and {s.name for s in t.count.free_symbols} <= sizes else None)
            for t in ir.walk(k.body) if isinstance(t, ir.Ifold)}, k.constraints


def _why_sequential(found) -> str | None:
    """Why a top-level ifold cannot be a parallel reduction; None where it can (the cost model
    then says whether it should)."""
    if found is None:
        return "not a fold of scalars"
    red, count = found
    if red is None:
        return "not a reduction (its body is not acc ⊕ f(i) with ⊕ one of + * min max, per component)"
    if count is None:
        return "its count is not known from the input sizes, and a launch's size is fixed before it runs"
    overflowing = [m for m in red.monoids if m.may_overflow]
    if overflowing:
        m = overflowing[0]
        return (f"{SYMBOLS[m.op]} on {m.ty.name} may overflow int64 in another grouping, and an overflow "
                f"must fail where the sequential fold's does")
    return None


def _constant(n: sympy.Expr | None) -> int | None:
    """A size known when compiling, else None (symbolic, or not known from the sizes)."""
    return int(n) if n is not None and n.is_Integer else None


def _note(state: str, n: sympy.Expr, monoids, tuning: OpenCLReduction, blocks: bool = False) -> str:
    ops = ", ".join(f"{SYMBOLS[m.op]} on {m.ty.name}" for m in monoids)
    per = tuning.elements * tuning.items
    groups = f"ceil({n}/{tuning.local * CPU_BLOCK})" if blocks else f"min(ceil({n}/{per}), {tuning.groups})"
    lanes = (f"each of its {tuning.local} work-items folding a contiguous block of {CPU_BLOCK} elements in vectors "
             f"of its own, then their lanes, into a local array of {tuning.local}" if blocks else
             f"each folding at least {tuning.items} elements per lane into a local array of {tuning.elements} "
             f"({tuning.local} lanes of {{width}})")
    width = [f"{tuning.width}-wide vectors" if m.ty in (Float, Double) and tuning.width > 1 else "scalars"
             for m in monoids]
    launches = tuning.launches * len(monoids)
    per_component = f" ({'one' if tuning.launches == 1 else 'two'} per component)" if len(monoids) > 1 else ""
    combiner = ("the work-group that finishes last (the last ticket of an atomic counter) combines the "
                "partials in the same launch" if tuning.launches == 1 else
                "a second launch of one work-group combines the partials")
    return (f"the ifold over {n} (state {state}) is a reduction of {ops}: parallel, "
            f"{launches} launch{'es' if launches > 1 else ''}{per_component}, reassociated; phase 1: {groups} "
            f"work-groups, {lanes.format(width=', '.join(sorted(set(width))))}, "
            f"then a tree in local memory, one partial per group; phase 2: {combiner} the same way, in "
            f"a fixed order, then with the init (tuning {tuning}: Options.opencl_reduction, "
            f"FSMOOTH_OPENCL_REDUCTION)")


# ----------------------------------------------------------------------------- the rewrite

def _parallel(fold: Ifold, monoids, tuning: OpenCLReduction, names: NameSupply, reduce=None) -> core.Expr:
    """``fold`` reduced by ``reduce`` (``_two_phase``, or ``_in_group``), component by component."""
    reduce = reduce or _two_phase
    if not isinstance(fold.ty, TupleT):
        return reduce(fold.fn, fold.init, fold.count, monoids[0], tuning, names)
    (state, _), (index, _) = fold.fn.params
    components = []
    for k, m in enumerate(monoids):
        # component k of the state: the fold's function with the other components at their
        # identities (component k reads only its own: dps.reductions)
        a, j = names.fresh("acc"), names.fresh("j")
        whole = Tuple(tuple(Var(a, m.ty) if q == k else _lit(other.identity, other.ty)
                            for q, other in enumerate(monoids)), fold.ty)
        step = Lam(((a, m.ty), (j, Index)),
                   Proj(core.App(fold.fn, (whole, Var(j, Index)), fold.ty), k, m.ty), FunT((m.ty, Index), m.ty))
        components.append(reduce(step, Proj(fold.init, k, m.ty), fold.count, m, tuning, names))
    return Tuple(tuple(components), fold.ty)


def _two_phase(step: Lam, init: core.Expr, n: core.Expr, m, tuning: OpenCLReduction, names: NameSupply,
               vector_bytes: int | None = None) -> core.Expr:
    """``ifold step init n`` as two phases (module docstring; one launch: ``dpia.hoist_opencl``);
    ``m``: its ``Monoid``; ``vector_bytes``: a CPU's vector, where each work-item of phase 1 folds a
    contiguous block in vectors of its own (``blocks``), not the group's strided share."""
    E = tuning.elements
    width = tuning.width if m.ty in (Float, Double) else 1  # OpenCL vectors of floats only (dpia.vectorize)
    g, partials, total = Var(names.fresh("groups"), Card), names.fresh("partials"), names.fresh("total")
    arr = ArrayT(m.ty)

    def lanes(c: Var | None, count: core.Expr, element) -> core.Expr:
        """A group's local array of E partial results: lane t folds from the identity the elements
        k = j·stride + first + t below ``count``; ``element(a, k)`` adds element k to ``a``."""
        t, a, j, k = (names.fresh(base) for base in ("t", "acc", "j", "k"))
        stride = _card("mul", g, _card_lit(E)) if c is not None else _card_lit(E)
        at = _index("add", _index("mul", Var(j, Index), _to_index(stride)), Var(t, Index))
        if c is not None:
            at = _index("add", at, _index("mul", c, _index_lit(E)))
        trips = _card("floordiv", _card("sub", _card("add", count, stride), _card_lit(1)), stride)
        body = Let(k, at, If(PrimApp("lt", (Var(k, Index), _to_index(count)), Bool),
                             element(Var(a, m.ty), Var(k, Index)), Var(a, m.ty), m.ty), m.ty)
        fold = Ifold(Lam(((a, m.ty), (j, Index)), body, FunT((m.ty, Index), m.ty)), _lit(m.identity, m.ty), trips, m.ty)
        return Build(_card_lit(E), Lam(((t, Index),), fold, FunT((Index,), m.ty)), arr,
                     strategy=Strategy("local", "local", width))

    v = min(16, vector_bytes // BYTES[m.ty]) if vector_bytes and m.ty in (Float, Double) else 1

    def blocks(c: Var) -> core.Expr:
        """A group's local array of L = ``tuning.local`` partial results on a CPU, whose runtime runs
        the group's work-items one after another, each as it is written: work-item t folds from
        the identity the ``CPU_BLOCK`` elements from (c·L + t)·CPU_BLOCK, those below n, in v-wide
        vectors of its own (lane u the elements u, u + v, … of the block), then its lanes.  A core
        so streams contiguous memory, where the group's strided share would take a few elements of
        each page of the whole array.  The block is a constant: its start is then an index below
        n + CPU_BLOCK·L, which needs no overflow test.  A step tests its vector's last element
        first, which no lane changes: below n, the lanes load whole vectors with no test of
        their own (only the block with the end of the array tests them)."""
        L = tuning.local
        t, u, a, q, k, parts, s, r = (names.fresh(base) for base in ("t", "u", "acc", "q", "k", "lanes", "s", "u"))
        first = _index("mul", _index("add", _index("mul", c, _index_lit(L)), Var(t, Index)), _index_lit(CPU_BLOCK))
        vector = _index("add", first, _index("mul", Var(q, Index), _index_lit(v)))
        trips = _card_lit(CPU_BLOCK // v)
        below = lambda i: PrimApp("lt", (i, _to_index(n)), Bool)  # noqa: E731
        element = core.App(step, (Var(a, m.ty), Var(k, Index)), m.ty)
        body = Let(k, _index("add", vector, Var(u, Index)), If(
            below(_index("add", vector, _index_lit(v - 1))), element,
            If(below(Var(k, Index)), element, Var(a, m.ty), m.ty), m.ty), m.ty)
        lane = Ifold(Lam(((a, m.ty), (q, Index)), body, FunT((m.ty, Index), m.ty)), _lit(m.identity, m.ty), trips, m.ty)
        vectors = Build(_card_lit(v), Lam(((u, Index),), lane, FunT((Index,), m.ty)), arr,
                        strategy=Strategy("seq", "private", v))
        combined = Ifold(Lam(((s, m.ty), (r, Index)), _combine(m, Var(s, m.ty), Get(Var(parts, arr), Var(r, Index), m.ty)),
                             FunT((m.ty, Index), m.ty)), _lit(m.identity, m.ty), _card_lit(v), m.ty)
        return Build(_card_lit(L), Lam(((t, Index),), Let(parts, vectors, combined, m.ty), FunT((Index,), m.ty)), arr,
                     strategy=Strategy("local", "local"))

    c, w = Var(names.fresh("c"), Index), names.fresh("w")
    shares, size = (blocks(c), tuning.local) if vector_bytes else (lanes(c, n, lambda a, k: core.App(step, (a, k), m.ty)), E)
    phase1 = Build(g, Lam(((c.name, Index),), _tree(shares, m, size, names), FunT((Index,), m.ty)), arr,
                   strategy=Strategy("workgroup", "global"))
    combined = _tree(lanes(None, g, lambda a, k: _combine(m, a, Get(Var(partials, arr), k, m.ty))), m, E, names)
    phase2 = Build(_card_lit(1), Lam(((w, Index),), _combine(m, init, combined), FunT((Index,), m.ty)), arr,
                   strategy=Strategy("workgroup", "global"))
    # a CPU: a group per L blocks, however many (phase 2 folds their partials the same way)
    per = tuning.local * CPU_BLOCK if vector_bytes else E * tuning.items
    count = _card("floordiv", _card("add", n, _card_lit(per - 1)), _card_lit(per))
    if not vector_bytes:
        count = _card("min", count, _card_lit(tuning.groups))
    return Let(g.name, count, Let(partials, phase1, Let(total, phase2, Get(Var(total, arr), _index_lit(0), m.ty), m.ty),
                                  m.ty), m.ty)


def _in_group(step: Lam, init: core.Expr, n: core.Expr, m, tuning: OpenCLReduction, names: NameSupply) -> core.Expr:
    """``ifold step init n`` by the lanes of one work-group: lane t folds the elements t, t + E, …
    from the identity, then the group's tree, then the init."""
    E = tuning.local
    t, a, j, k = (names.fresh(base) for base in ("t", "acc", "j", "k"))
    at = _index("add", _index("mul", Var(j, Index), _index_lit(E)), Var(t, Index))
    trips = _card("floordiv", _card("add", n, _card_lit(E - 1)), _card_lit(E))
    body = Let(k, at, If(PrimApp("lt", (Var(k, Index), _to_index(n)), Bool),
                         core.App(step, (Var(a, m.ty), Var(k, Index)), m.ty), Var(a, m.ty), m.ty), m.ty)
    fold = Ifold(Lam(((a, m.ty), (j, Index)), body, FunT((m.ty, Index), m.ty)), _lit(m.identity, m.ty), trips, m.ty)
    lanes = Build(_card_lit(E), Lam(((t, Index),), fold, FunT((Index,), m.ty)), ArrayT(m.ty),
                  strategy=Strategy("local", "local"))
    return _combine(m, init, _tree(lanes, m, E, names))


def _in_vectors(step: Lam, init: core.Expr, n: core.Expr, m, tuning: OpenCLReduction, names: NameSupply) -> core.Expr:
    """``ifold step init n`` by one work-item in vectors of ``w = tuning.width`` lanes: lane t
    folds the elements t, t + w, … below ``w · (n // w)`` from the identity (no guard: those are
    all in range, so the lanes read whole vectors), the lanes are combined in order, then the
    last ``n mod w`` elements one by one, then the init:

        parts = to_private(vectorize(w, build_seq(w, λ t. ifold(λ a q. step(a, q·w + t), e, n // w))))
        init ⊕ ifold(λ a k. step(a, (n // w)·w + k), ifold(λ s t. s ⊕ parts[t], e, w), n mod w)"""
    w = tuning.width
    t, a, q, lanes_name, s, u, b, k = (names.fresh(base) for base in ("t", "acc", "q", "lanes", "s", "t", "acc", "k"))
    whole = _card("floordiv", n, _card_lit(w))
    lane_fold = Ifold(Lam(((a, m.ty), (q, Index)), core.App(step, (Var(a, m.ty), _index(
        "add", _index("mul", Var(q, Index), _index_lit(w)), Var(t, Index))), m.ty), FunT((m.ty, Index), m.ty)),
        _lit(m.identity, m.ty), whole, m.ty)
    parts = Build(_card_lit(w), Lam(((t, Index),), lane_fold, FunT((Index,), m.ty)), ArrayT(m.ty),
                  strategy=Strategy("seq", "private", w))
    lanes = Ifold(Lam(((s, m.ty), (u, Index)), _combine(m, Var(s, m.ty), Get(Var(lanes_name, ArrayT(m.ty)), Var(u, Index), m.ty)),
                      FunT((m.ty, Index), m.ty)), _lit(m.identity, m.ty), _card_lit(w), m.ty)
    last = _index("add", _index("mul", _to_index(whole), _index_lit(w)), Var(k, Index))
    rest = Ifold(Lam(((b, m.ty), (k, Index)), core.App(step, (Var(b, m.ty), last), m.ty), FunT((m.ty, Index), m.ty)),
                 lanes, _card("mod", n, _card_lit(w)), m.ty)
    return Let(lanes_name, parts, _combine(m, init, rest), m.ty)


def _tree(s: core.Expr, m, size: int, names: NameSupply) -> core.Expr:
    """``s[0] ⊕ … ⊕ s[size-1]`` (``size`` a power of two) by one work-group: halved in local
    memory, element l of each half ``s[l] ⊕ s[l + h]``, down to two."""
    h = size // 2
    if h == 0:
        return Get(s, _index_lit(0), m.ty)
    name = names.fresh("s")
    v = Var(name, ArrayT(m.ty))
    if h == 1:
        return Let(name, s, _combine(m, Get(v, _index_lit(0), m.ty), Get(v, _index_lit(1), m.ty)), m.ty)
    l = names.fresh("l")
    li = Var(l, Index)
    half = Build(_card_lit(h), Lam(((l, Index),), _combine(m, Get(v, li, m.ty), Get(v, _index("add", li, _index_lit(h)), m.ty)),
                                   FunT((Index,), m.ty)), ArrayT(m.ty), strategy=Strategy("local", "local"))
    return Let(name, s, _tree(half, m, h, names), m.ty)


def _combine(m, a: core.Expr, b: core.Expr) -> core.Expr:
    """``a ⊕ b``, ``a`` the earlier (min and max keep the first of equal operands)."""
    return PrimApp(m.op, (a, b), m.ty)


def _lit(value, ty: Scalar) -> Lit:
    return Lit(float(value) if ty in (Float, Double) else int(value), ty)


def _card_lit(v: int) -> Lit:
    return Lit(v, Card)


def _index_lit(v: int) -> Lit:
    return Lit(v, Index)


def _card(op: str, *args) -> PrimApp:
    return PrimApp(op, args, Card)


def _index(op: str, *args) -> PrimApp:
    return PrimApp(op, args, Index)


def _to_index(e: core.Expr) -> PrimApp:
    return PrimApp("to_Index", (e,), Index)
