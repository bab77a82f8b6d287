"""The engine: a step as a program of compute tasks and FIFO comm ops, played by SimPy or by the fast players.

- :mod:`~dpsim.engine.program` — :class:`StepProgram` (tasks, comm ops, what waits for what)
- :mod:`~dpsim.engine.simulate` — the SimPy engine (:func:`run_program`), one process per distinct rank: the reference
- :mod:`~dpsim.engine.play` — :func:`play_program`: a homogeneous job (one distinct rank) without SimPy, bit for
  bit the SimPy engine's result (what ``predict`` runs)
- :mod:`~dpsim.engine.replay` — the exact vectorised replay of every rank (stragglers, noise)
- :mod:`~dpsim.engine.pipeline` — several stage programs joined by point-to-point transfers (pipeline parallelism)

The engine plays any program and knows no strategy; :mod:`dpsim.strategies` builds them.
"""

from __future__ import annotations

from dpsim.lazy import lazy_exports

_EXPORTS = {
    "CommOp": "dpsim.engine.program",
    "ComputeTask": "dpsim.engine.program",
    "StepProgram": "dpsim.engine.program",
    "SimulationResult": "dpsim.engine.simulate",
    "StepTiming": "dpsim.engine.simulate",
    "TraceEvent": "dpsim.engine.simulate",
    "run_program": "dpsim.engine.simulate",
    "play_program": "dpsim.engine.play",
    "PipelineProgram": "dpsim.engine.pipeline",
    "run_pipeline": "dpsim.engine.pipeline",
    "RankRun": "dpsim.engine.replay",
    "simulate_ranks": "dpsim.engine.replay",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
