"""accT/conT (``dpia.translate``) keeping each build's strategy on the ``parfor`` it becomes:
A(build n f)(A) = parfor⟨strategy⟩ n A (λ i o. A(f i)(o)), DPIA §6.2's mapGlobal/mapWorkgroup/
mapLocal/mapSeq as one primitive with its level.  A scan of a regroupable fold and a filter
also get their parallel form (``dpia.scan_opencl``), which ``dpia.hoist_opencl`` takes where
they are top-level commands.  Everything else translates as for C."""
from __future__ import annotations

from fsmooth.dps import ir as dps
from fsmooth.options import Options

from . import phrases as p
from .scan_opencl import MIN_LOCAL_MEMORY, parallel_filter, parallel_scan, single_pass_tile_bytes
from .translate import Translation, dpia_program


class StrategyTranslation(Translation):
    """``options.single_pass_scan``: a scan of floats or without overflow checks may take the
    single pass (``dpia.scan_opencl``), which needs the device's 64-bit atomics;
    ``options.single_pass_filter``: a filter too.  Its tiles are as large as the local memory of
    ``options.opencl_device`` allows; where no device is named (``fsmooth compile``'s host code,
    which any device may run), as OpenCL's minimum of 32 KiB allows."""

    def __init__(self, options: Options):
        super().__init__()
        self.single_pass_scan = options.single_pass_scan
        self.single_pass_filter = options.single_pass_scan and options.single_pass_filter
        device = options.opencl_device
        self.tile_bytes = single_pass_tile_bytes(device.local_memory_bytes if device else MIN_LOCAL_MEMORY)

    def acc(self, e: p.Phrase, a: p.Phrase) -> p.Phrase:
        if isinstance(e, p.Build):
            o = self.names.fresh("o")
            body = self.acc(e.body, p.Ident(o, p.AccT(e.elem)))
            return p.ParFor(e.size, a, e.index, o, e.elem, body, e.strategy)
        if isinstance(e, p.Scan):
            return parallel_scan(self, e, a, super().acc(e, a))
        if isinstance(e, p.Filter):
            return parallel_filter(self, e, a, super().acc(e, a))
        return super().acc(e, a)


def strategy_program(program: dps.Program, options: Options) -> p.ImperativeProgram:
    return dpia_program(program, lambda: StrategyTranslation(options))
