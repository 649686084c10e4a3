"""accT/conT (``dpia.translate``) keeping each build's strategy on the ``parfor`` it becomes:
A(build n f)(A) = parfor⟨strategy⟩ n A (λ i o. A(f i)(o)), DPIA §6.2's mapGlobal/mapWorkgroup/
mapLocal/mapSeq as one primitive with its level.  Everything else translates as for C."""
from __future__ import annotations

import sympy

from dps import ir as dps

from . import phrases as p
from .from_dps import functional_body
from .translate import Translation


class StrategyTranslation(Translation):
    def acc(self, e: p.Phrase, a: p.Phrase) -> p.Phrase:
        if isinstance(e, p.Build):
            o = self.fresh("o")
            body = self.acc(e.body, p.Ident(o, p.AccT(e.elem)))
            return p.ParFor(e.size, a, e.index, o, e.elem, body, e.strategy)
        return super().acc(e, a)


def imperative_kernel(k: dps.Kernel) -> p.ImperativeKernel:
    functional, result, params = functional_body(k)
    body = StrategyTranslation().acc(functional, p.Ident(k.dest, p.AccT(result)))
    return p.ImperativeKernel(k.name, k.dest, tuple(k.params), params, k.result, result,
                              tuple(k.result_dims), tuple(k.sizes), tuple(k.constraints),
                              sympy.sympify(k.scratch), functional, body)


def strategy_program(program: dps.Program) -> p.ImperativeProgram:
    return p.ImperativeProgram({name: imperative_kernel(k) for name, k in program.kernels.items()},
                               program.entry)
