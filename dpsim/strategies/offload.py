"""CPU offload of a sharded optimizer (``--offload``): DeepSpeed ZeRO-Offload and ZeRO-Infinity.

``optimizer`` (ZeRO-Offload: Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model
Training", arXiv:2101.06840, Sec. 4; DeepSpeed ``offload_optimizer: {device: cpu, pin_memory:
true}``): each rank's shard of the fp32 master weights and Adam moments lives in pinned host
memory; its gradient shard is copied to the host as it is reduced, the Adam step runs on the
CPU (``DeepSpeedCPUAdam``, a SIMD loop over the shard, "5X-7X faster than the standard PyTorch implementation", DeepSpeed's
ZeRO-Offload tutorial), and the updated 16-bit shard is copied back to the GPU before the next
forward. ``params+optimizer`` (ZeRO-Infinity: Rajbhandari et al. 2021, arXiv:2104.07857, Sec. 5;
``offload_param: {device: cpu}``) also keeps the 16-bit parameter shard on the host: each unit's
shard is copied to the GPU before its all-gather, so the GPU holds only the gathered working units.

**Time.** The CPU Adam step is charged as memory-bound on the host: per parameter it reads the
fp32 master, both moments and the fp32 gradient and writes the master, the moments and the 16-bit
copy (:data:`CPU_ADAM_BYTES_PER_PARAM`), all the node's ranks' shards over the node's host memory
bandwidth (:attr:`~dpsim.topology.spec.NodeSpec.host_memory_bandwidth_bytes_per_s` per socket) at the
fraction of it that DeepSpeed's CPU-Adam was measured to reach (:data:`CPU_ADAM_BANDWIDTH_EFFICIENCY`,
ZeRO-Offload's Table 4 on its DGX-2 host);
then each rank uploads its 16-bit shard over its PCIe link
(:attr:`~dpsim.topology.spec.NodeSpec.pcie_bandwidth_bytes_per_s`), exposed: the next forward
needs the updated weights (DeepSpeed's delayed parameter update is not modelled). The step's
other PCIe copies (gradient shard down, parameter shard up before each gather) are charged as
exposed too, an upper bound (:func:`host_step_s`).

**Memory per GPU** (:func:`dpsim.memory.offload_memory`): the optimizer state and the gradient
shard leave the GPU; with ``params+optimizer`` so does the parameter shard (and a layout's
kept-gathered parameters become the gathered working units). Host memory capacity is not checked.

``expert-activations`` offloads activations, not state: Megatron-Core's fine-grained activation
offloading with ``--offload-modules expert_fc1 moe_act`` (``docs/source/api-guide/
fine_grained_activation_offloading.md``: each listed module offloads its *input*), so every MoE
layer's routed experts copy the first grouped GEMM's input (the permuted tokens) and the gated
activation's input (that GEMM's output) to host memory in forward and back before their backward,
on a side stream overlapped with compute ("Make sure the offloading/reloading could be overlapped
with computing"). Those bytes leave the GPU's activations (:func:`expert_offload_bytes_per_sample`);
a block's copies in one direction over the GPU's host link
(:attr:`~dpsim.topology.spec.NodeSpec.host_link_bandwidth_bytes_per_s`) hide behind the block's
compute in that pass, and only what exceeds it is charged. A layer that is recomputed from its
input (``--recompute full`` or ``moe``) keeps nothing to offload. Layouts only.
"""

from __future__ import annotations

from dpsim.topology.spec import NodeSpec
from dpsim.workload.spec import LayerSpec

OFFLOAD: dict[str, str] = {
    "off": "optimizer state, gradients and parameters stay on the GPU",
    "optimizer": "ZeRO-Offload: optimizer state and gradient shard in host memory, Adam on the CPU",
    "params+optimizer": "ZeRO-Infinity: the parameter shard in host memory too, fetched before each gather",
    "expert-activations": "Megatron-Core's --offload-modules expert_fc1 moe_act: each MoE layer's expert GEMM "
                          "input and gated-activation input copied to the host, overlapped with compute",
}
"""``--offload`` choices."""

OPTIMIZER_OFFLOADS = ("optimizer", "params+optimizer")
"""The ``--offload`` choices that move the sharded optimizer state (and its host Adam step)."""

_OFFLOADED_OPS = ("experts.gate_up",)
"""The grouped GEMM whose input (``expert_fc1``) and output (``moe_act``'s input) are offloaded."""


def offloads_optimizer(offload: str) -> bool:
    """Whether ``offload`` moves the optimizer state to the host."""
    return offload in OPTIMIZER_OFFLOADS


def expert_offload_bytes_per_sample(layer: LayerSpec, recompute: str) -> float:
    """What ``expert-activations`` copies to the host of one (tensor-parallel shard's) layer per
    sample, of what ``recompute`` keeps: its first expert GEMM's output at 2 bytes per element, and
    its input unless the policy does not count it (``op`` keeps only matmul outputs); nothing outside
    an MoE layer or where the layer is recomputed from its input (``full``, ``moe``)."""
    if recompute in ("full", "moe"):
        return 0.0
    total = 0.0
    for op in layer.ops:
        if getattr(op, "name", "") in _OFFLOADED_OPS:
            total += op.m * op.n * op.batch * _ACTIVATION_BYTES
            if recompute != "op":
                total += op.m * op.k * op.batch * _ACTIVATION_BYTES
    return total


_ACTIVATION_BYTES = 2
"""Activations at 2 bytes per element, as the catalog's and :mod:`~dpsim.strategies.checkpointing`'s."""


def offload_exposed_s(copy_s: float, compute_s: float) -> float:
    """What of ``copy_s`` of activation copies the compute they overlap (``compute_s``) does not hide."""
    return max(0.0, copy_s - compute_s)

OFFLOAD_STRATEGIES = ("zero1", "zero2", "zero3", "fsdp")
"""Strategies that shard the optimizer state over the replicas, whose shard offload moves
(``fsdp`` under a tensor/pipeline/context layout; data parallelism alone: DeepSpeed's ZeRO)."""

PARAM_OFFLOAD_STRATEGIES = ("zero3", "fsdp")
"""Strategies that shard the parameters too (``params+optimizer``)."""

CPU_ADAM_BYTES_PER_PARAM = 30
"""Host bytes per parameter of one CPU Adam step: read fp32 master, exp_avg, exp_avg_sq and the
fp32 gradient (16), write the three back (12) and the 16-bit parameter copy (2)
(``DeepSpeedCPUAdam.step``, deepspeed/ops/adam/cpu_adam.py, with ``fp32_optimizer_states``)."""


ZERO3_HOST_BYTES_PER_PARAM = 8 + 28 + 6
"""Host bytes per parameter of DeepSpeed ZeRO-3's offloaded step, three passes over the shard
(microsoft/DeepSpeed@70adb32aebc0 ``deepspeed/runtime/zero/stage3.py``, ``step``: per sub-group
``unscale_and_clip_grads``, ``_optimizer_step``, ``_reassign_or_swap_out_partitioned_parameters``; the
same three calls in later versions): the fp32 gradient scaled in place (``grad.data.mul_``, read and
write 4 + 4, run even at scale 1), CPU-Adam over the fp32 master only (``optimizer.step()`` without the
16-bit groups: :data:`CPU_ADAM_BYTES_PER_PARAM` less the 2-byte write, 28), then the 16-bit shard
copied from the fp32 master as its own pass (``fp16_partitioned_groups_flat.copy_``: read 4, write 2).
ZeRO-Offload's fused kernel (the paper's Algorithm 1, :data:`CPU_ADAM_BYTES_PER_PARAM`) writes the
16-bit copy inside the Adam loop instead; ZeRO-3 does not call it that way."""

ZERO_OFFLOAD_ADAM_PARAMS = 10e9
"""Parameters of the largest CPU-Adam measurement in Ren et al. 2021 (ZeRO-Offload, arXiv:2101.06840),
Sec. 6.2.4, Table 4 ("Adam latency (s)": 10 billion parameters)."""

ZERO_OFFLOAD_ADAM_S = 2.57
"""DeepSpeed's CPU-Adam step over :data:`ZERO_OFFLOAD_ADAM_PARAMS`, seconds (the same Table 4; 1.03 s at
4 billion, 0.22 s at 1 billion, where fixed costs weigh more)."""

DGX2_HOST_MEMORY_BYTES_PER_S = 2 * 6 * 2666e6 * 8
"""Peak DRAM bandwidth of the host that measured it, bytes/s: the DGX-2 of the paper's Table 2 (two Intel
Xeon Platinum 8168, DDR4-2666), six DDR4-2666 channels per socket (Intel ARK, Xeon Platinum 8168) of
8 bytes: 255.9 GB/s."""

CPU_ADAM_BANDWIDTH_EFFICIENCY = (ZERO_OFFLOAD_ADAM_PARAMS * CPU_ADAM_BYTES_PER_PARAM / ZERO_OFFLOAD_ADAM_S
                                 / DGX2_HOST_MEMORY_BYTES_PER_S)
"""What fraction of the host's peak DRAM bandwidth DeepSpeed's CPU-Adam moves its
:data:`CPU_ADAM_BYTES_PER_PARAM` at: 10e9 x 30 B / 2.57 s = 117 GB/s of 256 GB/s, 0.456 (the paper's own
measurement, on all of the host's cores). Charging the step at the peak bandwidth instead made it 2.2x
too fast. Adam is memory-bound on the host: its ~15 flops per parameter at 4e9 parameters/s are about
60 GFLOP/s, far below the cores' AVX-512 rate (the paper's Algorithm 1 vectorises it)."""


def host_bytes_per_param(strategy: str) -> int:
    """Host bytes per parameter of ``strategy``'s offloaded step: ZeRO-3's three passes
    (:data:`ZERO3_HOST_BYTES_PER_PARAM`; ``fsdp`` in a layout stands for it), else the fused CPU-Adam."""
    return ZERO3_HOST_BYTES_PER_PARAM if strategy in PARAM_OFFLOAD_STRATEGIES else CPU_ADAM_BYTES_PER_PARAM


def host_step_s(shard_numel: float, ranks_per_node: int, node: NodeSpec, weight_bytes: int, *,
                grad_bytes: int = 0, param_fetches: int = 0,
                host_bytes: int = CPU_ADAM_BYTES_PER_PARAM) -> float:
    """The offloaded optimizer step of one rank (see the module docstring): the node's CPU Adam over
    ``ranks_per_node`` shards of ``shard_numel`` at the bandwidth CPU-Adam reaches of the host's
    (:data:`CPU_ADAM_BANDWIDTH_EFFICIENCY`), then the rank's
    updated shard uploaded over PCIe. The step's other PCIe copies of the shard are charged here
    too, as if none overlapped compute (an upper bound): the gradient shard down (``grad_bytes``
    per element) and, with the parameters offloaded, the parameter shard fetched before each of
    its ``param_fetches`` gathers (forward, backward, and a recomputed forward). ``host_bytes``: host
    bytes per parameter of the step's passes (:func:`host_bytes_per_param`)."""
    host_bw = node.host_memory_bandwidth_bytes_per_s * node.sockets * CPU_ADAM_BANDWIDTH_EFFICIENCY
    # The separate scale and cast passes stream memory like Adam's loop: charged at its measured rate.
    adam = shard_numel * ranks_per_node * host_bytes / host_bw
    pcie = shard_numel * (weight_bytes * (1 + param_fetches) + grad_bytes) / node.pcie_bandwidth_bytes_per_s
    return adam + pcie


def param_fetches(offload: str, full_recompute: bool) -> int:
    """Gathers of every parameter shard a step fetches from the host: forward and backward, and
    the forward recomputed under full checkpointing (0 unless the parameters are offloaded)."""
    return (3 if full_recompute else 2) if offload == "params+optimizer" else 0
