"""The parallel scan and filter of the OpenCL back end: NOVA §5's three-phase scan, in one place
(its translation to phrases, ``parallel_scan`` and ``parallel_filter``, and its OpenCL C,
``emit_group_scan``).

An ``iscan`` whose fold is ``acc ⊕ g(i)`` with ⊕ associative (``dps.reductions.scan_reduction``:
+ and * on numbers, min and max; a tuple state componentwise) has states
``init ⊕ g(0) ⊕ … ⊕ g(i)``.  Where it is a top-level command of its
kernel (not inside a parallel loop, a branch or a loop: ``dpia.hoist_opencl`` chooses the form
of a ``TopLevel``), it is three launches, each a ``GroupScan``:

1. reduce: ``G`` work-groups, group ``g`` folding its contiguous chunk of the ``n`` elements
   from the identity into ``partials[g]``;
2. partials: one work-group scans the ``G`` partials from ``init``, exclusively:
   ``offsets[g] = init ⊕ partials[0] ⊕ … ⊕ partials[g-1]``;
3. down: group ``g`` scans its chunk again from ``offsets[g]``, writing every state.

``partials`` and ``offsets`` are top-level ``new``s shared by launches: hoisted 'temp' buffers
of ``G`` elements (``dpia.hoist_opencl``), as the partial sums of the two-phase reduction of
``tests/corpus/blas.py``.  ``G = min(⌈n / T⌉, MAX_GROUPS)`` from the sizes (computed at launch
where ``n`` is symbolic), ``T = LOCAL · width`` the elements of a tile.

A group goes through its chunk tile by tile (``emit_group_scan``): the work-items compute the
tile's elements into local memory, work-item ``l`` at ``l, l + LOCAL, …`` (consecutive
work-items, consecutive elements); work-item ``l`` folds the ``width`` consecutive elements
``l · width …`` of the tile (the sequential part); the group scans those ``LOCAL`` runs in
local memory (Hillis–Steele: ``log2 LOCAL`` steps, each read, barrier, combine, barrier), so
that each work-item knows the state before its run; it then scans its run again from there
(an inclusive scan puts the states back into the tile and the group writes them out as it read
them; an exclusive one, a filter's positions, writes from the run); the state moves on by the
tile's total.  Every step keeps the elements in order, so ⊕ need not be commutative (min and
max keep the first of equals); only its grouping changes, which for + and * on floats changes
the rounding (README, "Scans").

Integer + and * fail exactly where the sequential fold does (an ``Index`` state leaving int64 is
an ``OverflowError``, status 6), though a partial may leave int64 where no state does: partials,
offsets and runs are computed modulo 2**64 (wrapping, which OpenCL defines on unsigned
integers), and only each state, in the down launch, with checked arithmetic from the state
before it.  Below the first state s_k that leaves int64 every state is in range, so the state
before s_k, computed modulo 2**64 and in range, is exact, and the checked step to s_k fails;
where no state leaves int64, none fails.

``fs.filter(pred, v)``, stored where it is a top-level command: the mask ``int(pred(v[i]))``
is the element, + on ``Card`` the operator (counts never exceed ``n``: no overflow), the
partials' scan starts from 0 and its total is the kept length; the down launch scans the mask
exclusively and writes ``v[i]`` at its position where the mask is 1 (scatter).
"""
from __future__ import annotations

import sympy

from fsmooth import prims
from fsmooth.dps.reductions import Monoid
from fsmooth.types import C_TYPE, Bool, Card

from . import phrases as p
from .emit import c_literal, indent, strip_parentheses
from .index_paths import RecordVariable, ScalarVariable, index_symbol

LOCAL = 256  # work-items of a group
MAX_GROUPS = 1024  # of the reduce and down launches: the partials launch scans at most this many
TILE_BYTES = 16384  # of a tile's elements in local memory: 16 floats or 8 doubles per work-item
BANKS = 32  # local memory banks: a tile has one unused slot after every 32, so that the work-items'
#             runs (a stride of ``width`` slots) fall in different banks

_FENCE = "barrier(CLK_LOCAL_MEM_FENCE);"


def parallel_scan(t, e: p.Scan, a: p.Phrase, sequential: p.Phrase) -> p.Phrase:
    """A(scan)(A) as a ``TopLevel``: the three launches, or ``sequential`` elsewhere; just
    ``sequential`` where the fold is not a regroupable reduction or its element needs more than
    private scalars."""
    fold = e.fold
    leaves = p.record_leaves(fold.data)
    if not e.monoids or _width(fold.data) == 0:  # a large record: its tiles would fill local memory
        return sequential
    n = sympy.sympify(p.data_of(p.proj_path(a, leaves[0][0])).size)

    def element(item: p.Phrase, index: str) -> p.Phrase:
        return t.acc(e.element, item)

    def write(state: p.Phrase, item: p.Phrase, index: str) -> p.Phrase:
        writes = []
        for path, leaf in leaves:
            arr = p.proj_path(a, path)
            at = p.Idx(arr, p.Ident(index, p.ExpT(p.IdxT(n))), leaf, n)
            writes.append(p.Assign(at, p.proj_path(state, path)))
        return p.seq(*writes)

    parallel = _three_launches(t, n, fold.data, e.monoids, fold.index, element,
                               lambda state: t.acc(fold.init, state), write, False, lambda state: p.Skip(),
                               checked=any(m.may_overflow for m in e.monoids))
    return sequential if parallel is None else p.TopLevel(parallel, sequential)


def parallel_filter(t, e: p.Filter, a: p.Phrase, sequential: p.Phrase) -> p.Phrase:
    """A(filter)(A) as a ``TopLevel``: mask, scan, scatter (module docstring), or ``sequential``."""
    arr = p.data_of(e.arr)
    n = sympy.sympify(arr.size)
    count = p.Num(Card)
    element_at = p.Idx(e.arr, p.Ident(e.index, p.ExpT(p.IdxT(n))), arr.elem, n)

    def mask(item: p.Phrase, index: str) -> p.Phrase:
        return t.con(e.pred, lambda c: p.Assign(item, p.ScalarOp("to_Index", (c,), count)))

    def scatter(state: p.Phrase, item: p.Phrase, index: str) -> p.Phrase:
        kept = p.ScalarOp("gt", (item, p.Literal(0, count)), p.Num(Bool))
        return p.IfCmd(kept, p.Assign(p.Idx(a, state, arr.elem, p.data_of(a).size), element_at), p.Skip())

    # counts never exceed n: no state is checked
    parallel = _three_launches(t, n, count, (Monoid("add", Card, 0),), e.index, mask,
                               lambda state: p.Assign(state, p.Literal(0, count)), scatter, True,
                               lambda state: p.Assign(p.Ident(e.length, p.AccT(count)), state), checked=False)
    return sequential if parallel is None else p.TopLevel(parallel, sequential)


def _three_launches(t, n, data: p.Data, monoids: tuple, index: str, element, init, write, exclusive: bool,
                    kept, checked: bool) -> p.Phrase | None:
    """The reduce, partials and down launches under the ``new``s of the partials and offsets;
    None where an element needs more than private scalars.  ``element(item, index)``: writes
    element ``index`` through ``item``; ``init(state)``: writes the first state;
    ``write(state, item, index)``: stores a state; ``kept(state)``: what the partials launch does
    with the total (a filter's kept length); ``checked``: the states are computed with checked
    arithmetic (module docstring)."""
    leaves = p.record_leaves(data)
    width = _width(data)
    groups = sympy.Min(sympy.ceiling(n / (LOCAL * width)), MAX_GROUPS)
    partials = [t.names.fresh("partials") for _ in leaves]
    offsets = [t.names.fresh("offsets") for _ in leaves]

    def arrays(names: list, phrase_type) -> list:
        return [p.Ident(name, phrase_type(p.Arr(groups, leaf))) for name, (_, leaf) in zip(names, leaves)]

    def at(arrays_: list, i: p.Phrase) -> p.Phrase:
        """The record of element ``i`` of each leaf's array."""
        elements = [p.Idx(x, i, leaf, groups) for x, (_, leaf) in zip(arrays_, leaves)]
        return _record(data, dict(zip((path for path, _ in leaves), elements)))

    def assign(acc: p.Phrase, exp: p.Phrase) -> p.Phrase:
        return p.seq(*(p.Assign(p.proj_path(acc, path), p.proj_path(exp, path)) for path, _ in leaves))

    def step(count, groups_, index_, element_, start, write_, exclusive_, total, checked_=False) -> p.GroupScan:
        group, state, item = t.names.fresh("group"), t.names.fresh("state"), t.names.fresh("item")
        g = p.Ident(group, p.ExpT(p.IdxT(groups_)))
        state_exp, item_exp = p.Ident(state, p.ExpT(data)), p.Ident(item, p.ExpT(data))
        slots = LOCAL * width + LOCAL * width // BANKS
        tiles = tuple(p.Ident(t.names.fresh("tile"), p.AccT(p.Arr(sympy.Integer(slots), leaf)))
                      for _, leaf in leaves)
        sums = tuple(p.Ident(t.names.fresh("runs"), p.AccT(p.Arr(sympy.Integer(LOCAL), leaf))) for _, leaf in leaves)
        return p.GroupScan(count, groups_, group, index_, data, monoids, state, item,
                           start(p.Ident(state, p.AccT(data)), g), element_(p.Ident(item, p.AccT(data)), index_),
                           write_(state_exp, item_exp, index_), exclusive_, checked_, total(state_exp, g), tiles,
                           sums, LOCAL, width)

    partial_index = t.names.fresh("g")
    launches = (
        step(n, groups, index, element, lambda s, g: p.Skip(), lambda s, x, i: p.Skip(), False,
             lambda s, g: assign(_record_acc(arrays(partials, p.AccT), g, data, leaves), s)),
        step(groups, sympy.Integer(1), partial_index,
             lambda x, i: assign(x, at(arrays(partials, p.ExpT), p.Ident(i, p.ExpT(p.IdxT(groups))))),
             lambda s, g: init(s),
             lambda s, x, i: assign(_record_acc(arrays(offsets, p.AccT), p.Ident(i, p.ExpT(p.IdxT(groups))), data,
                                                leaves), s),
             True, lambda s, g: kept(s)),
        step(n, groups, index, element, lambda s, g: assign(s, at(arrays(offsets, p.ExpT), g)), write, exclusive,
             lambda s, g: p.Skip(), checked),
    )
    if not all(_private_only(part) for launch in launches for part in (launch.element, launch.start)):
        return None
    body = p.seq(*launches)
    for name, (_, leaf) in reversed(list(zip(partials + offsets, leaves + leaves))):
        body = p.New(name, p.Arr(groups, leaf), body)
    return body


def _width(data: p.Data) -> int:
    """Elements per work-item of a tile of states ``data`` (0: too large a state)."""
    state_bytes = sum(4 if p.scalar_of(leaf).name == "Float" else 8 for _, leaf in p.record_leaves(data))
    return TILE_BYTES // (LOCAL * state_bytes)


def _record(data: p.Data, by_path: dict, path: tuple = ()) -> p.Phrase:
    if isinstance(data, p.Rec):
        return p.Record(tuple(_record(x, by_path, path + (k,)) for k, x in enumerate(data.items)), data)
    return by_path[path]


def _record_acc(arrays_: list, i: p.Phrase, data: p.Data, leaves: list) -> p.Phrase:
    elements = [p.Idx(x, i, leaf, p.data_of(x).size) for x, (_, leaf) in zip(arrays_, leaves)]
    return _record(data, dict(zip((path for path, _ in leaves), elements)))


def _private_only(c: p.Phrase) -> bool:
    """Whether ``c`` runs in one work-item with private scalars only: no array storage, no
    loop over work-items, no call."""
    return not any(isinstance(node, (p.ParFor, p.VectorParFor, p.DoubleBuffer, p.CallCmd, p.CallExp, p.ParallelReduce,
                                      p.TopLevel, p.GroupScan)) or (isinstance(node, p.New) and node.arena_offset is not None)
                   for node in p.walk(c))


# ----------------------------------------------------------------------------- OpenCL C


def emit_group_scan(em, c: p.GroupScan, env: dict, ranges) -> list[str]:
    """The OpenCL C of one launch (module docstring); ``em``: the kernel's emitter
    (``dpia.codegen_opencl``), which writes the phrases inside."""
    leaves = p.record_leaves(c.data)
    local, width = c.local, c.width
    tile = local * width
    types = [C_TYPE[p.scalar_of(leaf)] for _, leaf in leaves]
    identities = [c_literal(m.identity, m.ty) for m in c.monoids]

    def combine(k: int, a: str, b: str) -> str:
        monoid = c.monoids[k]
        if monoid.may_overflow:  # modulo 2**64 (module docstring)
            return f"as_long(as_ulong({a}) {'+' if monoid.op == 'add' else '*'} as_ulong({b}))"
        return prims.prim(monoid.op).c.format(a, b, t=prims.c_suffix(monoid.ty))

    def step_to(k: int, q: str, x: str) -> list[str]:
        """``q = q ⊕ x`` for a state: checked where the launch checks its states."""
        if not (c.checked and c.monoids[k].may_overflow):
            return [f"{q} = {combine(k, q, x)};"]
        flag = f"fs_overflow{em.fresh_number()}"
        return [f"bool {flag} = false;", f"{q} = fs_checked_{c.monoids[k].op}_i64({q}, {x}, &{flag});",
                em.integer_overflow(flag)]

    def declare(stem: str, values) -> tuple[list, list]:
        names = [em.namer.fresh(stem) for _ in leaves]
        return names, [f"{ty} {name} = {value};" for ty, name, value in zip(types, names, values)]

    def variables(names: list, data: p.Data = c.data, path: tuple = ()):
        if isinstance(data, p.Rec):
            return RecordVariable(tuple(variables(names, x, path + (k,)) for k, x in enumerate(data.items)))
        return ScalarVariable(names[[q for q, _ in leaves].index(path)])

    def each(template: str, *columns) -> list[str]:
        """``template`` per leaf, formatted with the leaf's entry of each column."""
        return [template.format(*row) for row in zip(*columns)]

    def slot(e: str) -> str:
        """The tile's slot of element ``e`` (its padding: ``BANKS``)."""
        return f"{e} + ({e}) / {BANKS}"

    fresh = em.namer.fresh
    tiles = [em._binding(x, env, ranges).cname for x in c.tiles]
    runs = [em._binding(x, env, ranges).cname for x in c.sums]
    n = em.rename(c.count, env)
    n_text = strip_parentheses(em.cint(n, ranges))
    g, lid, chunk, lo, hi, base, j, d, i = (fresh(x) for x in ("group", "l", "chunk", "lo", "hi", "tile_start", "j",
                                                                "d", c.index))
    group_ranges = ranges.inside(index_symbol(g), em.rename(c.groups, env) - 1)
    element_ranges = group_ranges.inside(index_symbol(i), n - 1)
    state, state_decl = declare(c.state, identities)
    state_env = {**env, c.state: variables(state), c.group: ScalarVariable(g)}
    lines = [f"const int64_t {g} = get_group_id(0);", f"const int64_t {lid} = get_local_id(0);",
             "/* whole tiles per group, as many groups as the launch has: the last chunk may be shorter */",
             f"const int64_t {chunk} = (({n_text} + {tile - 1}) / {tile} + get_num_groups(0) - 1) / get_num_groups(0)"
             f" * {tile};",
             f"const int64_t {lo} = {g} * {chunk};",
             f"const int64_t {hi} = {lo} + {chunk} < {n_text} ? {lo} + {chunk} : {n_text};"]
    lines += state_decl + em._with_scoped_exit(lambda: em.comm(c.start, state_env, group_ranges))
    # 1. the tile's elements into local memory, consecutive work-items at consecutive elements
    item, item_decl = declare(c.item, identities)
    element_env = {**state_env, c.index: ScalarVariable(i), c.item: variables(item)}
    element = em._with_scoped_exit(lambda: em.comm(c.element, element_env, element_ranges))
    body = [f"for (int64_t {j} = 0; {j} < {width}; {j}++) {{",
            f"    const int64_t {i} = {base} + {j} * {local} + {lid};"]
    body += indent(item_decl + [f"if ({i} < {hi}) {{"] + indent(element) + ["}"]
                   + each(f"{{}}[{slot(f'{j} * {local} + {lid}')}] = {{}};", tiles, item)) + ["}", _FENCE]
    # 2. each work-item's run of `width` consecutive elements, folded; the runs scanned
    run, run_decl = declare("run", identities)
    body += run_decl + [f"for (int64_t {j} = 0; {j} < {width}; {j}++) {{"]
    at = slot(f"{lid} * {width} + {j}")
    body += indent([f"{r} = {combine(k, r, f'{x}[{at}]')};" for k, (r, x) in enumerate(zip(run, tiles))])
    body += ["}"] + each(f"{{}}[{lid}] = {{}};", runs, run) + [_FENCE]
    scanning = not isinstance(c.write, p.Skip)
    if scanning:  # Hillis–Steele: after the step of d, runs[l] combines the runs l - 2d + 1 .. l
        before, before_decl = declare("before", identities)
        body += [f"for (int64_t {d} = 1; {d} < {local}; {d} *= 2) {{"]
        body += indent(before_decl + each(f"if ({lid} >= {d}) {{}} = {{}}[{lid} - {d}];", before, runs) + [_FENCE]
                       + [f"if ({lid} >= {d}) {{"]
                       + indent([f"{x}[{lid}] = {combine(k, b, f'{x}[{lid}]')};" for k, (b, x) in enumerate(zip(before, runs))])
                       + ["}", _FENCE])
        body += ["}"]
    else:  # only the total, by a tree that keeps the order: runs[l] combines the runs l .. l + 2d - 1
        body += [f"for (int64_t {d} = 1; {d} < {local}; {d} *= 2) {{"]
        body += indent([f"if ({lid} % (2 * {d}) == 0) {{"]
                       + indent([f"{x}[{lid}] = {combine(k, f'{x}[{lid}]', f'{x}[{lid} + {d}]')};" for k, x in enumerate(runs)])
                       + ["}", _FENCE])
        body += ["}"]
    # 3. each run scanned again from the state before it, the states written
    if scanning:
        prefix, prefix_decl = declare("prefix", state)
        body += prefix_decl + [f"if ({lid} > 0) {{"]
        body += indent([f"{q} = {combine(k, q, f'{x}[{lid} - 1]')};" for k, (q, x) in enumerate(zip(prefix, runs))])
        body += ["}"]
        if c.exclusive:  # the state before each element, with the element: written from the run
            mine, mine_decl = declare(c.item, [f"{x}[{at}]" for x in tiles])
            write_env = {**element_env, c.state: variables(prefix), c.item: variables(mine)}
            write = em._with_scoped_exit(lambda: em.comm(c.write, write_env, element_ranges))
            body += [f"for (int64_t {j} = 0; {j} < {width}; {j}++) {{",
                     f"    const int64_t {i} = {base} + {lid} * {width} + {j};"]
            body += indent(mine_decl + [f"if ({i} < {hi}) {{"] + indent(write) + ["}"]
                           + [f"{q} = {combine(k, q, x)};" for k, (q, x) in enumerate(zip(prefix, mine))]) + ["}"]
        else:  # the states back into the tile, then written as the elements were read
            body += [f"for (int64_t {j} = 0; {j} < {width}; {j}++) {{"]
            body += indent([line for k, (q, x) in enumerate(zip(prefix, tiles)) for line in step_to(k, q, f"{x}[{at}]")]
                           + each(f"{{}}[{at}] = {{}};", tiles, prefix)) + ["}", _FENCE]
            written, written_decl = declare("written", [f"{x}[{slot(f'{j} * {local} + {lid}')}]" for x in tiles])
            write_env = {**element_env, c.state: variables(written)}
            write = em._with_scoped_exit(lambda: em.comm(c.write, write_env, element_ranges))
            body += [f"for (int64_t {j} = 0; {j} < {width}; {j}++) {{",
                     f"    const int64_t {i} = {base} + {j} * {local} + {lid};"]
            body += indent([f"if ({i} < {hi}) {{"] + indent(written_decl + write) + ["}"]) + ["}"]
    # the state after the tile; no work-item writes the tile or the runs before all have read them
    last = local - 1 if scanning else 0
    body += [f"{s} = {combine(k, s, f'{x}[{last}]')};" for k, (s, x) in enumerate(zip(state, runs))] + [_FENCE]
    lines += [f"for (int64_t {base} = {lo}; {base} < {hi}; {base} += {tile}) {{"] + indent(body) + ["}"]
    total = em._with_scoped_exit(lambda: em.comm(c.total, state_env, group_ranges))
    if total:
        lines += [f"if ({lid} == 0) {{"] + indent(total) + ["}"]
    return lines
