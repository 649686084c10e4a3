"""accT/conT (``dpia.translate``) keeping each build's strategy on the ``parfor`` it becomes:
A(build n f)(A) = parfor⟨strategy⟩ n A (λ i o. A(f i)(o)), DPIA §6.2's mapGlobal/mapWorkgroup/
mapLocal/mapSeq as one primitive with its level.  Everything else translates as for C."""
from __future__ import annotations

from fsmooth.dps import ir as dps

from . import phrases as p
from .translate import Translation, dpia_program


class StrategyTranslation(Translation):
    def acc(self, e: p.Phrase, a: p.Phrase) -> p.Phrase:
        if isinstance(e, p.Build):
            o = self.names.fresh("o")
            body = self.acc(e.body, p.Ident(o, p.AccT(e.elem)))
            return p.ParFor(e.size, a, e.index, o, e.elem, body, e.strategy)
        return super().acc(e, a)


def strategy_program(program: dps.Program) -> p.ImperativeProgram:
    return dpia_program(program, StrategyTranslation)
