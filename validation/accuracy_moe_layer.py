"""One MoE layer's forward and backward on 8 H100 (EP8) against Megatron-LM's own benchmark.

Reads ``tests/data/moe_perf_layer.csv``: NVIDIA/Megatron-LM@32f2c9cfdd16
``tests/functional_tests/test_cases/common/moe_perf/`` times one ``MoELayer`` (TransformerEngine
grouped GEMM, permute and router fusion, forced load balancing, no gradient buffer) with CUDA
events, TP1 EP8, 4,096 tokens a rank, for a Mixtral-shaped and a DeepSeek-shaped proxy, under the
``alltoall`` dispatcher and the ``flex`` one with DeepEP or HybridEP (``test_cases.py``), and
keeps the H100 times in ``baseline.json``. dpsim prices the same layer as one rank runs it:

* :func:`dpsim.workload.layers.moe_ops` for the layer, each grouped GEMM over the rank's
  ``experts / ep`` local experts with the whole group's rows routed to them (what
  :func:`dpsim.strategies.tensor._expert_shard` does at TP1, balanced routing), costed by
  :func:`dpsim.workload.roofline.op_times` at ``bf16-params`` (bf16 weights and gradients; no
  gradient-accumulation fusion: the benchmark has no gradient buffer);
* two all-to-alls a pass (dispatch and combine; their transposes in backward) of the rank's
  ``tokens x top_k`` routed bf16 copies on one 8-GPU H100 server
  (:func:`dpsim.predict.layout.expert_a2a_s`): ``flat`` for ``alltoall``, ``hierarchical`` (DeepEP:
  a token once per destination rank) for ``flex``/DeepEP.

Rows whose ``scored`` column says ``no: ...`` are printed for reference only (HybridEP, FP8).
Nothing is fitted. Run: ``python validation/accuracy_moe_layer.py`` (a second).
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
from pathlib import Path

from dpsim.collectives.groups import Communicator
from dpsim.hardware import get_gpu
from dpsim.predict.layout import expert_a2a_s
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_preset
from dpsim.workload.layers import moe_ops
from dpsim.workload.precision import PRECISIONS
from dpsim.workload.roofline import op_times
from dpsim.workload.spec import MatmulOp, MoeSpec

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "moe_perf_layer.csv"

A2A_ALGORITHM = {"alltoall": "flat", "deepep": "hierarchical"}
"""Megatron-Core's dispatcher (and flex backend) -> dpsim's all-to-all; HybridEP has none."""

TOPOLOGY = "infiniband"
"""8x H100 per server on NVSwitch (the Megatron-Core MoE H100 rows' preset); the benchmark's EP8
group is one server, so only the NVLink side is used."""

BF16_BYTES = 2


def load_rows(path: Path = DATA) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def predict(row: dict) -> tuple[float, float]:
    """(forward, backward) seconds dpsim gives one rank's MoE layer of ``row``."""
    ep, tokens = int(row["ep"]), int(row["tokens_per_rank"])
    hidden, experts, top_k = int(row["hidden"]), int(row["experts"]), int(row["top_k"])
    moe = MoeSpec(experts=experts, top_k=top_k, expert_ffn=int(row["expert_ffn"]),
                  shared_experts=1 if int(row["shared_ffn"]) else 0, shared_ffn=int(row["shared_ffn"]))
    gpu = get_gpu(row["gpu"])
    precision = PRECISIONS["bf16-params"]
    forward = backward = 0.0
    for op in moe_ops(tokens, hidden, experts=experts, top_k=top_k, expert_ffn=moe.expert_ffn,
                      shared_ffn=moe.shared_ffn):
        if isinstance(op, MatmulOp) and op.name.startswith("experts."):
            # The rank's local experts, each with the rows every rank of the group routes to it.
            op = dataclasses.replace(op, m=max(1, round(op.m * ep)), batch=max(1, experts // ep))
        f, b = op_times(op, gpu, precision, 1)
        forward, backward = forward + f, backward + b
    topology = Topology(spec=load_preset(TOPOLOGY), n_gpus=ep)
    comm = Communicator(name="ep", topology=topology, job=topology)
    a2a = expert_a2a_s(comm, float(tokens * top_k * hidden * BF16_BYTES), None,
                       A2A_ALGORITHM[row["dispatcher"]], moe)
    return forward + 2 * a2a, backward + 2 * a2a


def scored(row: dict) -> bool:
    return row["scored"] == "yes"


def main() -> None:
    errors = []
    print(f"{'case':32} {'published fwd/bwd ms':>22} {'dpsim fwd/bwd ms':>18} {'total error':>12}")
    for row in load_rows():
        pub_f, pub_b = float(row["forward_ms"]), float(row["backward_ms"])
        if not scored(row):
            print(f"{row['case']:32} {pub_f:9.2f} / {pub_b:6.2f}   not scored: {row['scored'][4:]}")
            continue
        f, b = predict(row)
        err = ((f + b) * 1e3 / (pub_f + pub_b) - 1.0) * 100.0
        errors.append(abs(err))
        print(f"{row['case']:32} {pub_f:9.2f} / {pub_b:6.2f}   {f * 1e3:8.2f} / {b * 1e3:6.2f}   {err:+10.1f} %")
    print(f"{len(errors)} scored cases: median |error| {statistics.median(errors):.1f} %, worst {max(errors):.1f} %")


if __name__ == "__main__":
    main()
