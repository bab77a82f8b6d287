"""A pipeline stage's micro-batch split by what stretches it: per-rank compute factors, MoE routing load.

``predict`` records it per stage of a tensor/pipeline/expert layout
(:attr:`dpsim.predict.layout.LayoutReport.stage_parts`); :mod:`dpsim.variability.layout` stretches
the parts per step (a slow rank's compute, each dispatch's routing load), keeping communication's
own time.
"""

from __future__ import annotations


from dpsim.frozen import frozen_dataclass


@frozen_dataclass
class StageParts:
    """One pipeline stage's micro-batch, split by what stretches it (seconds, per micro-batch)."""

    work_s: float
    """Forward and backward of one micro-batch, its blocking collectives included."""
    compute_s: float
    """Of which compute: what a slow rank's factor stretches."""
    expert_compute_s: float
    """Of :attr:`compute_s`, the MoE layers' (forward, backward, recompute): what routing load stretches."""
    expert_comm_s: float
    """Of :attr:`work_s`, the MoE all-to-alls and expert-tensor collectives: routing load stretches them."""
    moe_layers: int
    """MoE layers on the stage (dispatches per micro-batch)."""
    optimizer_s: float
    """The stage's optimizer step, once per step."""

    def to_dict(self) -> dict:
        """JSON-able form (seconds)."""
        return {"work_s": self.work_s, "compute_s": self.compute_s, "expert_compute_s": self.expert_compute_s,
                "expert_comm_s": self.expert_comm_s, "moe_layers": self.moe_layers, "optimizer_s": self.optimizer_s}


def stage_parts(chunks, moe_layer: list[bool], optimizer_s) -> tuple[StageParts, ...]:
    """Every stage's :class:`StageParts` from its chunks' layer work (``chunks[stage][chunk]``:
    :class:`~dpsim.strategies.layout.ChunkWork`); ``moe_layer[i]``: layer ``i`` routes tokens;
    ``optimizer_s[stage]``: its optimizer step."""
    out = []
    for s, stage in enumerate(chunks):
        layers = [w for c in stage for w in c.layers]
        work = sum(w.forward_s + w.backward_s for w in layers)
        comm = sum(w.tp_exposed_s + w.cp_exposed_s + w.ep_comm_s + w.etp_comm_s for w in layers)
        compute = max(0.0, work - comm)
        moe = [w for w in layers if moe_layer[w.index]]
        expert = min(compute, sum(w.compute_forward_s + w.compute_backward_s + w.recompute_s for w in moe))
        out.append(StageParts(work_s=work, compute_s=compute, expert_compute_s=expert,
                              expert_comm_s=sum(w.ep_comm_s + w.etp_comm_s for w in moe), moe_layers=len(moe),
                              optimizer_s=float(optimizer_s[s])))
    return tuple(out)
