"""The parallel scan and filter of the OpenCL back end, in one place (their translation to
phrases, ``parallel_scan`` and ``parallel_filter``, and their OpenCL C, ``emit_group_scan``): a
single pass of decoupled look-back (Merrill & Garland, *Single-pass Parallel Prefix Scan with
Decoupled Look-back*, the scan of NVIDIA's CUB), or NOVA §5's three-phase scan.

An ``iscan`` whose fold is ``acc ⊕ g(i)`` with ⊕ associative (``dps.reductions.scan_reduction``:
+ and * on numbers, min and max; a tuple state componentwise) has states
``init ⊕ g(0) ⊕ … ⊕ g(i)``.  Where it is a top-level command of its
kernel (not inside a parallel loop, a branch or a loop: ``dpia.hoist_opencl`` chooses the form
of a ``TopLevel``), it is one launch, the single pass below, unless its states are checked for
integer overflow or the device lacks 64-bit atomics (``LOOKBACK_EXTENSION``: the kernel is then
compiled with ``Options.single_pass_scan`` off, ``fsmooth.kernel``); else three launches, each a
``GroupScan``:

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

The single pass reads the elements once (the three phases read them twice: on a GPU a scan is
bound by memory).  A work-group takes a tile of ``LOCAL · width`` elements (``width`` from
``SINGLE_PASS_TILE_BYTES``); the groups that run at once work on neighbouring tiles, and each learns the
state before its tile from those before it:

1. ticket: work-item 0 takes the group's tile number from a counter (``atom_inc``), not from
   ``get_group_id``: a group then only ever waits on groups that have started before it, so it
   cannot wait on one that is not scheduled (OpenCL promises no progress across work-groups; on
   a device that runs groups one after the other, as Oclgrind does, every predecessor has
   finished);
2. the tile is loaded and scanned in local memory as in a launch of the three phases; work-item 0
   publishes the tile's aggregate (tile 0: its inclusive prefix, from the start state ``init``);
3. look-back: the group reads the published words of its ``LOOKBACK_WINDOW`` nearest
   predecessors at once (one per work-item), and work-item 0 combines them, nearest first, into
   the state before the tile, until it meets an inclusive prefix (a predecessor that has published
   nothing yet is read again); it publishes the tile's inclusive prefix;
4. the tile's states are written from there, as the three phases' down launch writes them.

Every access to the published words is an atomic operation on a 64-bit word
(``cl_khr_int64_base_atomics``): the high 32 bits are a tag, the low 32 bits a piece of a value
(a float's bits; a double's or an integer's low and high halves in two words), so a word is read
whole and needs no fence.  Aggregates and inclusive prefixes have words of their own, each
written once per call.  The tag is the call's epoch + 1: word 0 of the buffer counts the tickets
of the call in its low half and holds the epoch in its high half; the group that takes the last
ticket sets it to the next epoch with no ticket taken (every other ticket is taken by then), so
the next call finds the counter ready and every word of this call stale, and no launch resets
anything.  The buffer (role 'lookback') starts zeroed when the launcher allocates it; tags are
never 0 (the epochs skip 0xffffffff), so a zeroed word is never valid.  A word left by the call
2**32 - 1 calls before, with the same tag, in a tile no call since has written, would be taken as
this call's: the one case this scheme does not exclude.  Which predecessors' words a group
combines depends on timing, so a float + or * may round differently from call to call (min, max
and integers give the same bits).

``fs.filter(pred, v)``, stored where it is a top-level command: the mask ``int(pred(v[i]))``
is the element, + on ``Card`` the operator (counts never exceed ``n``: no overflow), the
scan starts from 0 and its total is the kept length (in the single pass, written by the last
tile's group; in the three phases, by the partials launch); the states are the mask scanned
exclusively, and ``v[i]`` is written at its position where the mask is 1 (scatter).  A filter
takes the single pass only where ``Options.single_pass_filter`` says so: on the H200 its three
launches were the faster.
"""
from __future__ import annotations

import sympy

from fsmooth import prims
from fsmooth.dps.reductions import Monoid
from fsmooth.types import C_TYPE, Bool, Card, Double, Float, Index

from . import phrases as p
from .emit import c_literal, indent, strip_parentheses
from .index_paths import RecordVariable, ScalarVariable, index_symbol

LOCAL = 256  # work-items of a group
MAX_GROUPS = 1024  # of the reduce and down launches: the partials launch scans at most this many
TILE_BYTES = 16384  # of a tile's elements in local memory: 16 floats or 8 doubles per work-item
BANKS = 32  # local memory banks: a tile has one unused slot after every 32, so that the work-items'
#             runs (a stride of ``width`` slots) fall in different banks

# The single pass (module docstring): a tile of SINGLE_PASS_TILE_BYTES of states, LOCAL work-items
# each holding consecutive ones (32 floats, 16 doubles, a record in proportion), where the device's
# local memory is at least 48 KiB (NVIDIA's per work-group), else half as many, so that a device
# with OpenCL's minimum of 32 KiB still has room for the runs and the look-back's window.  Fewer,
# larger tiles mean fewer look-backs: on the H200 a cumsum of 16 / 128 Mi floats took 0.097 / 0.694
# ms in 8 KiB tiles, 0.073 / 0.475 in 16 KiB, 0.065 / 0.389 in 32 KiB (torch.cumsum: 0.067 / 0.443).
SINGLE_PASS_TILE_BYTES = 32768
MIN_LOCAL_MEMORY = 32 * 1024  # OpenCL's CL_DEVICE_LOCAL_MEM_SIZE for a full-profile device, at least
LOOKBACK_WINDOW = 32  # the predecessors a group reads at once in its look-back, one per work-item
LOOKBACK_EXTENSION = "cl_khr_int64_base_atomics"  # what the single pass needs of the device
_SINGLE_PASS_SCALARS = {Float: 1, Double: 2, Index: 2, Card: 2}  # 32-bit pieces of a leaf's bits

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

    init = lambda state: t.acc(fold.init, state)  # noqa: E731
    checked = any(m.may_overflow for m in e.monoids)
    parallel = None
    if t.single_pass_scan and not checked:  # an integer state's overflow is checked per state: three phases
        parallel = _single_pass(t, n, fold.data, e.monoids, fold.index, element, init, write, False,
                                lambda state: p.Skip())
    if parallel is None:
        parallel = _three_launches(t, n, fold.data, e.monoids, fold.index, element, init, write, False,
                                   lambda state: p.Skip(), checked=checked)
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
    shape = (n, count, (Monoid("add", Card, 0),), e.index, mask, lambda state: p.Assign(state, p.Literal(0, count)),
             scatter, True, lambda state: p.Assign(p.Ident(e.length, p.AccT(count)), state))
    parallel = (_single_pass(t, *shape) if t.single_pass_filter else None) or _three_launches(t, *shape, checked=False)
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

    partial_index = t.names.fresh("g")

    def step(count, groups_, index_, element_, start, write_, exclusive_, total, checked_=False) -> p.GroupScan:
        return _group_scan(t, count, groups_, index_, data, monoids, element_, start, write_, exclusive_, total,
                           checked_, width)

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


def _single_pass(t, n, data: p.Data, monoids: tuple, index: str, element, init, write, exclusive: bool,
                 kept) -> p.Phrase | None:
    """The one launch of the single pass (module docstring), as ``_three_launches``'s arguments
    say; None where a leaf is no scalar it publishes or an element needs more than private
    scalars.  One group per tile, and one for ``n = 0``, which writes the total (a filter's kept
    length)."""
    leaves = p.record_leaves(data)
    width = _width(data, t.tile_bytes)
    if width == 0 or any(p.scalar_of(leaf) not in _SINGLE_PASS_SCALARS for _, leaf in leaves):
        return None
    groups = sympy.Max(1, sympy.ceiling(n / (LOCAL * width)))
    scan = _group_scan(t, n, groups, index, data, monoids, element, lambda s, g: init(s), write, exclusive,
                       lambda s, g: kept(s), False, width, lookback=True)
    return scan if _private_only(scan.element) and _private_only(scan.start) else None


def _group_scan(t, count, groups, index: str, data: p.Data, monoids: tuple, element, start, write, exclusive: bool,
                total, checked: bool, width: int, lookback: bool = False) -> p.GroupScan:
    """One ``GroupScan`` of ``count`` elements over ``groups`` work-groups; ``lookback``: the
    single pass, with its look-back words and window."""
    leaves = p.record_leaves(data)
    group, state, item = t.names.fresh("group"), t.names.fresh("state"), t.names.fresh("item")
    g = p.Ident(group, p.ExpT(p.IdxT(groups)))
    state_exp, item_exp = p.Ident(state, p.ExpT(data)), p.Ident(item, p.ExpT(data))
    slots = LOCAL * width + LOCAL * width // BANKS
    tiles = tuple(p.Ident(t.names.fresh("tile"), p.AccT(p.Arr(sympy.Integer(slots), leaf))) for _, leaf in leaves)
    sums = tuple(p.Ident(t.names.fresh("runs"), p.AccT(p.Arr(sympy.Integer(LOCAL), leaf))) for _, leaf in leaves)
    words, window = None, ()
    if lookback:  # the counter, then per tile its aggregate's and its inclusive prefix's pieces
        pieces = sum(_SINGLE_PASS_SCALARS[p.scalar_of(leaf)] for _, leaf in leaves)
        words = p.Ident(t.names.fresh("lookback"), p.AccT(p.Arr(1 + 2 * pieces * groups, p.Num(Index))))
        window = (p.Ident(t.names.fresh("control"), p.AccT(p.Arr(sympy.Integer(LOOKBACK_WINDOW + 4), p.Num(Index)))),
                  *(p.Ident(t.names.fresh("window"), p.AccT(p.Arr(sympy.Integer(LOOKBACK_WINDOW + 1), leaf)))
                    for _, leaf in leaves))
    return p.GroupScan(count, groups, group, index, data, monoids, state, item,
                       start(p.Ident(state, p.AccT(data)), g), element(p.Ident(item, p.AccT(data)), index),
                       write(state_exp, item_exp, index), exclusive, checked, total(state_exp, g), tiles,
                       sums, LOCAL, width, words, window)


def single_pass_tile_bytes(local_memory_bytes: int) -> int:
    """The bytes of the single pass's tile on a device with ``local_memory_bytes`` per group."""
    return SINGLE_PASS_TILE_BYTES if local_memory_bytes >= 48 * 1024 else SINGLE_PASS_TILE_BYTES // 2


def scan_notes(bodies) -> tuple[str, ...]:
    """Which scan each parallel scan or filter of the launches' ``bodies`` is, and why (the
    strategy comment of the OpenCL source: ``fsmooth explain --stage opencl``)."""
    notes = []
    for c in (node for body in bodies for node in p.walk(body) if isinstance(node, p.GroupScan)):
        if c.words is not None:
            notes.append(f"a scan of {c.count} elements: one launch, the single-pass scan (decoupled look-back, "
                         f"Merrill & Garland): a work-group per tile of {c.local * c.width} elements takes its state "
                         f"from its predecessors' published ones ({LOOKBACK_EXTENSION})")
        elif not isinstance(c.write, p.Skip) and c.groups != 1:  # the last of the three launches
            why = ("its states are checked for integer overflow, each from the one before" if c.checked
                   else "it is a filter's and single_pass_filter is off (the default: on the H200 a filter's three "
                   "launches were the faster)" if c.exclusive
                   else f"single_pass_scan is off or the device lacks {LOOKBACK_EXTENSION}")
            notes.append(f"a scan of {c.count} elements: three launches (NOVA §5: reduce, scan of the partials, "
                         f"down-sweep), since {why}")
    return tuple(notes)


def _width(data: p.Data, tile_bytes: int = TILE_BYTES) -> int:
    """Elements per work-item of a tile of ``tile_bytes`` of states ``data`` (0: too large a
    state): the three phases' tiles, or the single pass's."""
    state_bytes = sum(4 if p.scalar_of(leaf).name == "Float" else 8 for _, leaf in p.record_leaves(data))
    return tile_bytes // (LOCAL * state_bytes)


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
    single_pass = c.words is not None
    if single_pass:  # one tile, the ticket's (module docstring)
        words = em._binding(c.words, env, ranges).cname
        control, *window = (em._binding(x, env, ranges).cname for x in c.window)
        tag = fresh("tag")
        lines = [f"/* single-pass scan (decoupled look-back): one tile of {tile} elements per work-group */",
                 f"const int64_t {lid} = get_local_id(0);"]
        lines += _ticket(fresh, words, control, lid)
        lines += [f"const int64_t {g} = {control}[{LOOKBACK_WINDOW + 2}];",
                  f"const uint {tag} = (uint){control}[{LOOKBACK_WINDOW + 3}];",
                  f"const int64_t {lo} = {g} * {tile};",
                  f"const int64_t {hi} = {lo} + {tile} < {n_text} ? {lo} + {tile} : {n_text};"]
    else:
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
    if single_pass:  # the state before the tile, from the predecessors' published states
        body += _look_back(fresh, c, types, identities, combine, words, control, window, runs, state, g, lid, tag)
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
    # (in the single pass, there is no next tile: only the total reads it)
    last = local - 1 if scanning else 0
    if not (single_pass and isinstance(c.total, p.Skip)):
        body += [f"{s} = {combine(k, s, f'{x}[{last}]')};" for k, (s, x) in enumerate(zip(state, runs))] + [_FENCE]
    if single_pass:
        lines += [f"const int64_t {base} = {lo};"] + body
    else:
        lines += [f"for (int64_t {base} = {lo}; {base} < {hi}; {base} += {tile}) {{"] + indent(body) + ["}"]
    total = em._with_scoped_exit(lambda: em.comm(c.total, state_env, group_ranges))
    if total:  # in the single pass, the last tile's state is the total
        last_group = f" && {g} == get_num_groups(0) - 1" if single_pass else ""
        lines += [f"if ({lid} == 0{last_group}) {{"] + indent(total) + ["}"]
    return lines


# ----------------------------------------------------------------------------- the look-back
#
# The words of a single pass: word 0 counts the tickets of this call (low 32 bits) in an epoch
# (high 32 bits); then per tile, its aggregate's pieces and its inclusive prefix's, each piece 32
# bits of a leaf's value under a 32-bit tag, the epoch + 1 of the call that wrote it.  A word is
# valid for a call when its tag is the call's: nothing needs resetting between calls.


def _ticket(fresh, words: str, control: str, lid: str) -> list[str]:
    """Work-item 0 takes the group's ticket, its tile (the groups that took earlier ones have
    started: the look-back only waits on those); the group that takes the last one starts the
    next epoch with no ticket taken, for the next call (no other group of this call takes one
    after it).  The epochs skip 0xffffffff, so no tag is 0, a zeroed word's (the buffer starts
    zeroed).  A launch has fewer than 2**32 groups (a tile holds 2048 or 4096 elements), so the
    tickets never reach the epoch's bits."""
    old, epoch = fresh("ticket"), fresh("epoch")
    return [f"if ({lid} == 0) {{",
            f"    const ulong {old} = (ulong)atom_inc({words});",
            f"    const uint {epoch} = (uint)({old} >> 32);",
            f"    if ((uint){old} == get_num_groups(0) - 1) {{",
            f"        atom_xchg({words}, (long)((ulong)({epoch} == 0xfffffffeu ? 0u : {epoch} + 1u) << 32));",
            "    }",
            f"    {control}[{LOOKBACK_WINDOW + 2}] = (uint){old};",
            f"    {control}[{LOOKBACK_WINDOW + 3}] = (long){epoch} + 1;",
            f"    {control}[{LOOKBACK_WINDOW}] = 0;  /* the look-back is not done */",
            "}", _FENCE]


def _look_back(fresh, c: p.GroupScan, types: list, identities: list, combine, words: str, control: str, window: list,
               runs: list, state: list, g: str, lid: str, tag: str) -> list[str]:
    """After the runs' scan (``runs[LOCAL - 1]``: the tile's aggregate): work-item 0 publishes the
    aggregate (tile 0: its inclusive prefix, from the start state); the group reads its
    predecessors' words LOOKBACK_WINDOW at a time, one per work-item, and work-item 0 combines
    them from the nearest back, until an inclusive prefix (an invalid word: that tile again);
    work-item 0 publishes the inclusive prefix; every work-item's ``state`` becomes the state
    before the tile."""
    leaves = p.record_leaves(c.data)
    pieces = [_SINGLE_PASS_SCALARS[p.scalar_of(leaf)] for _, leaf in leaves]
    starts = [sum(pieces[:k]) for k in range(len(pieces))]
    per_tile = 2 * sum(pieces)
    bits = {"float": "as_uint", "double": "as_ulong", "int64_t": "as_ulong"}
    value_of = {"float": "as_float", "double": "as_double", "int64_t": "as_long"}
    window_size = LOOKBACK_WINDOW

    def word(tile: str, kind: int, k: int, q: int) -> str:
        """The address of piece ``q`` of leaf ``k`` of tile ``tile``'s aggregate (kind 0) or
        inclusive prefix (kind 1)."""
        return f"{words} + 1 + ({tile}) * {per_tile} + {kind * sum(pieces) + starts[k] + q}"

    def publish(tile: str, kind: int, values: list) -> list[str]:
        out = []
        for k, (ty, value) in enumerate(zip(types, values)):
            raw = f"{bits[ty]}({value})"
            for q in range(pieces[k]):
                piece = f"(uint)({raw} >> 32)" if q else f"(uint){raw}"
                out.append(f"atom_xchg({word(tile, kind, k, q)}, (long)(((ulong){tag} << 32) | {piece}));")
        return out

    def read(tile: str, kind: int) -> tuple[list, str, list]:
        """(the atomic reads of a published state's words, the test that every piece carries
        this call's tag, the leaves' values)."""
        out, valid, names = [], [], []
        for k, ty in enumerate(types):
            ws = [fresh("w") for _ in range(pieces[k])]
            out += [f"const ulong {w} = (ulong)atom_add({word(tile, kind, k, q)}, 0);" for q, w in enumerate(ws)]
            valid += [f"(uint)({w} >> 32) == {tag}" for w in ws]
            low = f"(ulong)(uint){ws[0]}" + (f" | ((ulong)(uint){ws[1]} << 32)" if len(ws) == 2 else "")
            names.append(f"{value_of[ty]}(({'uint' if ty == 'float' else 'ulong'})({low}))")
        return out, " && ".join(valid), names

    def read_both(tile: str, flag: str, into: list) -> list[str]:
        """Both states of a predecessor read at once (neither read waits for the other): its
        inclusive prefix (``flag = 2``) where published, else its aggregate (``flag = 1``)."""
        inclusive_reads, inclusive_valid, inclusive_values = read(tile, 1)
        aggregate_reads, aggregate_valid, aggregate_values = read(tile, 0)
        return (inclusive_reads + aggregate_reads
                + [f"if ({inclusive_valid}) {{", f"    {flag} = 2;"] + [f"    {x} = {v};" for x, v in zip(into, inclusive_values)]
                + [f"}} else if ({aggregate_valid}) {{", f"    {flag} = 1;"]
                + [f"    {x} = {v};" for x, v in zip(into, aggregate_values)] + ["}"])

    last = f"[{c.local - 1}]"
    aggregate = [f"{x}{last}" for x in runs]
    inclusive = [fresh("inclusive") for _ in leaves]
    lines = [f"if ({lid} == 0) {{",
             f"    if ({g} == 0) {{  /* the start state is the inclusive prefix of the tiles before the first */"]
    lines += ["        " + f"const {ty} {x} = {combine(k, s, a)};"
              for k, (ty, x, s, a) in enumerate(zip(types, inclusive, state, aggregate))]
    lines += ["        " + line for line in publish(g, 1, inclusive)]
    lines += ["    } else {"] + ["        " + line for line in publish(g, 0, aggregate)] + ["    }", "}"]
    prefix = [fresh("before_tile") for _ in leaves]
    predecessor, done, flag, tile, w, f = (fresh(x) for x in ("predecessor", "done", "flag", "tile", "w", "f"))
    values = [fresh("value") for _ in leaves]
    scan_window = ([f"int64_t {w} = 0;", f"for (; {w} < {window_size}; {w}++) {{",
                    f"    const long {f} = {control}[{w}];",
                    f"    if ({f} == 0) break;  /* not published yet: read it again */"]
                   + [f"    {x} = {combine(k, f'{y}[{w}]', x)};" for k, (x, y) in enumerate(zip(prefix, window))]
                   + [f"    if ({f} == 2) {{", f"        {control}[{window_size}] = 1;", "        break;", "    }", "}",
                      f"{control}[{window_size + 1}] = {predecessor} - {w};"])
    look = ([f"if ({lid} < {window_size}) {{",
             f"    const int64_t {tile} = {predecessor} - {lid};",
             f"    long {flag} = 0;"]
            + [f"    {ty} {v} = {e};" for ty, v, e in zip(types, values, identities)]
            + [f"    if ({tile} >= 0) {{"]
            + ["        " + line for line in read_both(tile, flag, values)]
            + ["    }", f"    {control}[{lid}] = {flag};"]
            + [f"    {y}[{lid}] = {v};" for y, v in zip(window, values)]
            + ["}", _FENCE, f"if ({lid} == 0) {{"] + indent(scan_window) + ["}", _FENCE,
               f"{done} = {control}[{window_size}];", f"{predecessor} = {control}[{window_size + 1}];"])
    lines += [f"if ({g} > 0) {{  /* the same for the whole group */"]
    lines += indent([f"{ty} {x} = {e};" for ty, x, e in zip(types, prefix, identities)]
                    + [f"int64_t {predecessor} = {g} - 1;", f"long {done} = 0;",
                       f"while (!{done}) {{"] + indent(look) + ["}", f"if ({lid} == 0) {{"]
                    + indent([f"const {ty} {x} = {combine(k, b, a)};"
                              for k, (ty, x, b, a) in enumerate(zip(types, inclusive, prefix, aggregate))]
                             + publish(g, 1, inclusive)
                             + [f"{y}[{window_size}] = {b};" for y, b in zip(window, prefix)])
                    + ["}", _FENCE] + [f"{s} = {y}[{window_size}];" for s, y in zip(state, window)])
    return lines + ["}"]
