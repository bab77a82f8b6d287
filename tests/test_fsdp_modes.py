"""FSDP1 vs FSDP2, accumulation with and without no_sync, and the one checkpointing policy:
memory per rank against a hand count of a small model, communication per step against the
closed form, the recompute charged, and every new flag's one-line refusal."""

from __future__ import annotations

import itertools

import pytest

from dpsim.errors import ConfigError, DpsimError
from dpsim.hardware import get_gpu
from dpsim.memory import memory_breakdown
from dpsim.predict.config import FsdpAccumulate, FsdpVersion, PredictConfig, Recompute
from dpsim.strategies.build import build_step_program
from dpsim.strategies.checkpointing import RECOMPUTE, CheckpointPolicy, op_recompute_share
from dpsim.strategies.registry import FSDP_ACCUMULATE, FSDP_VERSIONS
from dpsim.workload.compute import compute_profile
from dpsim.workload.precision import get_precision
from dpsim.workload.spec import LayerSpec, MatmulOp, MemoryOp, ModelSpec, ParamSpec

H100 = get_gpu("h100")
BF16 = get_precision("bf16-params")
N = 4
K = 4  # micro-batches per step


def tiny() -> ModelSpec:
    """A root embedding (10x4) and two blocks of a 6x4 weight and a 5-element bias: FSDP1 pads each
    unit's flat parameter to a multiple of N, FSDP2 each parameter's dim 0."""
    ops = (MemoryOp(name="norm", elements=32.0, forward=((2, "stream"),), backward=((3, "stream"),)),
           MatmulOp(name="proj", m=8, n=6, k=4))
    layers = [LayerSpec(name="emb", params=(ParamSpec(name="emb.w", shape=(10, 4)),),
                        activation_bytes_per_sample=100.0)]
    for b in range(2):
        layers.append(LayerSpec(
            name=f"h.{b}.attn", unit=f"h.{b}",
            params=(ParamSpec(name=f"h.{b}.w", shape=(6, 4)), ParamSpec(name=f"h.{b}.b", shape=(5,))),
            activation_bytes_per_sample=1000.0, input_bytes_per_sample=64.0, forward_flops_per_sample=2 * 8 * 6 * 4,
            ops=ops))
    return ModelSpec(name="tiny", layers=tuple(layers), tokens_per_sample=8)


# Hand count. FSDP1: ceil(40/4) = 10 for the root, ceil(29/4) = 8 per block. FSDP2: the root's
# 10 rows -> 3 per rank x 4 = 12; a block's 6 rows -> 2 x 4 = 8 and 5 -> 2: 10.
SHARD = {"1": 10 + 8 + 8, "2": 12 + 10 + 10}
ROOT_FULL = {"1": 40, "2": 48}
BLOCK_FULL = {"1": 32, "2": 40}
PSI = 40 + 2 * 29
# Activations per sample: off keeps all; full keeps the emb's, two block inputs and one block
# again; selective drops the attention core (1000 - 13 x 64/2 = 584) of each block; op keeps a
# block's input and its matmul's 8 x 6 output at 2 bytes (64 + 96), plus one block's rest.
ACTIVATIONS = {
    ("off", 1): 100 + 1000 + 1000,
    ("full", 1): 100 + 2 * 64 + 1000,
    ("full", 2): 100 + 1000 + 64 + 1000,  # only the 2nd block checkpointed
    ("selective", 1): 100 + 2 * (1000 - 584),
    ("op", 1): 100 + 2 * (64 + 96) + (1000 - 160),
}
POLICIES = [CheckpointPolicy(mode=m, every=e) for m, e in ACTIVATIONS]


@pytest.mark.parametrize("version,accumulate,policy",
                         list(itertools.product(("1", "2"), ("auto", "unsharded", "sharded"), POLICIES)))
def test_memory_per_rank_is_the_hand_count(version, accumulate, policy):
    w, g, k = 2, 2, 12
    assert (BF16.weight_bytes, BF16.grad_bytes) == (w, g)
    m = memory_breakdown(tiny(), H100, precision=BF16, optimizer="adamw", micro_batch=1, strategy="fsdp",
                         n_gpus=N, grad_accum=K, checkpointing=policy, fsdp_version=version,
                         fsdp_accumulate=accumulate)
    unsharded = accumulate == "unsharded" or (accumulate == "auto" and version == "1")
    shard, root, block = SHARD[version], ROOT_FULL[version], BLOCK_FULL[version]
    # Mixed precision: the kept parameter shard is the fp32 master (in k; FSDP frees the bf16 shard
    # once gathered) and the sharded gradient is cast back to fp32 (_cast_grad_to_param_dtype).
    assert m.weights_bytes == 0
    assert m.gradients_bytes == (PSI * g if unsharded else shard * BF16.master_bytes)
    assert m.optimizer_bytes == shard * k
    gathered = (root + 2 * block) * w  # root + current + prefetched unit
    grad_work = 0 if unsharded else (root + block) * g  # unsharded gradients of the root and one unit
    staging = block * (w + g) if version == "2" else 0  # FSDP2's all-gather output and reduce-scatter input
    assert m.comm_buffers_bytes == gathered + grad_work + staging
    assert m.activations_bytes == ACTIVATIONS[(policy.mode, policy.every)]


@pytest.mark.parametrize("version", ["1", "2"])
def test_fsdp2_keeps_unsharded_gradients_in_the_parameters_dtype(version):
    """bf16 parameters reduced in fp32 (OLMo-core's FSDP2): autograd writes the unit's unsharded
    gradients in bf16, and only the reduce-scatter input (staged) is fp32 (foreach_reduce:
    ``grad_dtype = unsharded_grads[0].dtype``, ``torch.empty(..., dtype=reduce_dtype)``)."""
    precision = get_precision("bf16-fp32-grads")
    w, g = precision.weight_bytes, precision.grad_bytes
    assert (w, g) == (2, 4)
    m = memory_breakdown(tiny(), H100, precision=precision, optimizer="adamw", micro_batch=1, strategy="fsdp",
                         n_gpus=N, grad_accum=K, fsdp_version=version, fsdp_accumulate="sharded")
    root, block = ROOT_FULL[version], BLOCK_FULL[version]
    unsharded_grad = w if version == "2" else g
    staging = block * (w + g) if version == "2" else 0
    assert m.comm_buffers_bytes == (root + 2 * block) * w + (root + block) * unsharded_grad + staging


def _program(strategy="fsdp", version="1", accumulate="auto", policy=None, grad_accum=K):
    model = tiny()
    compute = compute_profile(model, H100, micro_batch=1, precision=BF16, optimizer="adamw")
    return build_step_program(strategy, model, compute, precision=BF16, n_gpus=N, grad_accum=grad_accum,
                              checkpointing=policy, fsdp_version=version, fsdp_accumulate=accumulate,
                              compute_gpu=H100), compute


@pytest.mark.parametrize("version", ["1", "2"])
@pytest.mark.parametrize("accumulate", ["unsharded", "sharded"])
def test_communication_per_step_is_the_closed_form(version, accumulate):
    plan, _ = _program(version=version, accumulate=accumulate)
    root, block = ROOT_FULL[version], BLOCK_FULL[version]
    w = g = 2
    reductions = 1 if accumulate == "unsharded" else K  # no_sync: only the last micro-batch reduces
    # Every micro-batch gathers every unit for forward and the non-root ones again for backward.
    assert plan.bytes_by_op == {"all_gather": K * (root + 2 * block) * w + K * 2 * block * w,
                                "reduce_scatter": reductions * (root + 2 * block) * g}
    assert plan.gradient_bytes == reductions * (root + 2 * block) * g


def test_shard_grad_op_keeps_units_only_under_no_sync():
    kept, _ = _program("fsdp-shard-grad-op", accumulate="unsharded")
    freed, _ = _program("fsdp-shard-grad-op", accumulate="sharded")
    full = (ROOT_FULL["1"] + 2 * BLOCK_FULL["1"]) * 2
    assert kept.bytes_by_op["all_gather"] == full  # gathered once, kept across no_sync micro-batches
    assert freed.bytes_by_op["all_gather"] == K * full  # a synchronising backward frees them


def test_fsdp2_defaults_to_reduce_scatter_every_micro_batch():
    v2, _ = _program(version="2")
    assert v2.bytes_by_op["reduce_scatter"] == K * (ROOT_FULL["2"] + 2 * BLOCK_FULL["2"]) * 2
    one, _ = _program(version="2", grad_accum=1)
    assert one.bytes_by_op["reduce_scatter"] == v2.bytes_by_op["reduce_scatter"] / K


def _recompute_s(plan):
    return sum(t.duration_s for t in plan.program.tasks if t.kind == "recompute")


def test_recompute_charged_per_policy():
    model = tiny()
    full, compute = _program(policy=CheckpointPolicy(mode="full"), grad_accum=1)
    block_fwd = compute.layers[1].forward_s  # both blocks are alike
    assert _recompute_s(full) == pytest.approx(2 * block_fwd)
    every2, _ = _program(policy=CheckpointPolicy(mode="full", every=2), grad_accum=1)
    assert _recompute_s(every2) == pytest.approx(block_fwd)
    op, _ = _program(policy=CheckpointPolicy(mode="op"), grad_accum=1)
    share = op_recompute_share(model.layers[1], H100, BF16, 1)
    assert 0 < share < 1  # the norm re-runs, the matmul does not
    assert _recompute_s(op) == pytest.approx(2 * share * block_fwd)
    selective, _ = _program(policy=CheckpointPolicy(mode="selective"), grad_accum=1)
    assert _recompute_s(selective) == 0.0  # the block's FLOPs are its one linear: no attention core
    off, _ = _program(grad_accum=1)
    assert _recompute_s(off) == 0.0


def test_checkpointing_saves_memory_on_a_catalog_model_in_the_expected_order():
    from dpsim.workload.catalog import get_model
    model = get_model("llama-2-7b")
    act = {m: memory_breakdown(model, H100, precision=BF16, optimizer="adamw", micro_batch=1, strategy="fsdp",
                               n_gpus=8, checkpointing=CheckpointPolicy(mode=m)).activations_bytes
           for m in ("off", "op", "full")}
    assert act["full"] < act["op"] < act["off"]


def test_choices_mirror_the_registries():
    import typing
    assert typing.get_args(FsdpVersion) == tuple(FSDP_VERSIONS)
    assert typing.get_args(FsdpAccumulate) == tuple(FSDP_ACCUMULATE)
    assert typing.get_args(Recompute) == tuple(RECOMPUTE)


@pytest.mark.parametrize("flags,needle", [
    ({"fsdp_version": "3"}, "--fsdp-version: '3' is not known; choose one of 1, 2"),
    ({"fsdp_accumulate": "never"}, "--fsdp-accumulate: 'never' is not known; choose one of auto, unsharded, sharded"),
    ({"strategy": "ddp", "fsdp_version": "2"}, "--fsdp-version: 2 applies to fsdp, fsdp-shard-grad-op, fsdp-hybrid"),
    ({"strategy": "zero3", "fsdp_accumulate": "unsharded"}, "--fsdp-accumulate: unsharded applies to fsdp"),
    ({"recompute": "sometimes"}, "--recompute: 'sometimes' is not known; choose one of off, selective, op, full"),
    ({"recompute_every": 0}, "--recompute-every: 0 is not valid"),
    ({"recompute_every": 2}, "--recompute-every: 2 applies with --recompute full"),
    ({"recompute": "op", "activation_checkpointing": True}, "--activation-checkpointing: means --recompute full"),
    ({"strategy": "fsdp", "fsdp_version": "2", "tp": 2, "gpus": 16}, "--fsdp-version: '2' applies to data "
                                                                      "parallelism alone"),
])
def test_bad_values_are_one_line_naming_the_flag(flags, needle):
    with pytest.raises(ConfigError) as err:
        PredictConfig(**{"strategy": "fsdp", **flags})
    assert isinstance(err.value, DpsimError)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("flags", [
    {"model": "gpt2", "gpus": 8, "link": "nvlink", "strategy": "fsdp"},
    {"model": "llama-2-7b", "gpus": 16, "link": "dgx-a100", "tp": 2, "pp": 2},
])
def test_recompute_every_past_the_last_block_is_refused(flags):
    """fuzz5: --recompute full --recompute-every 1000 on a 32-block model checkpointed no block and
    reported the step of a run without recomputation, exit status 0."""
    from dpsim import predict
    blocks = {"gpt2": 12, "llama-2-7b": 32}[flags["model"]]
    with pytest.raises(ConfigError, match=rf"^--recompute-every: {blocks + 1} checkpoints every {blocks + 1}-th "
                                          rf"block, but the model has {blocks}, so none would be recomputed"):
        predict(PredictConfig(**flags, recompute="full", recompute_every=blocks + 1, micro_batch=1))
    assert predict(PredictConfig(**flags, recompute="full", recompute_every=blocks, micro_batch=1)).step_time_s > 0


def test_library_refuses_bad_policy_and_options():
    with pytest.raises(ConfigError, match="--recompute-every: 3 applies with --recompute full"):
        CheckpointPolicy(mode="op", every=3)
    with pytest.raises(ConfigError, match="--fsdp-accumulate: 'x' is not known"):
        memory_breakdown(tiny(), H100, precision=BF16, optimizer="adamw", micro_batch=1, strategy="fsdp", n_gpus=N,
                         fsdp_accumulate="x")


def test_predict_runs_the_new_flags_end_to_end():
    from dpsim.predict.run import predict
    base = dict(gpus=16, link="infiniband", model="llama-2-7b", micro_batch=1, grad_accum=4, strategy="fsdp",
                steps=1)
    no_sync = predict(PredictConfig(**base))
    every = predict(PredictConfig(**base, fsdp_accumulate="sharded"))
    assert every.memory.gradients_bytes < no_sync.memory.gradients_bytes / 10
    assert every.comm_bytes_by_op["reduce_scatter"] == pytest.approx(4 * no_sync.comm_bytes_by_op["reduce_scatter"])
    op = predict(PredictConfig(**base, recompute="op"))
    assert op.memory.activations_bytes < no_sync.memory.activations_bytes
    assert op.step_time_s > no_sync.step_time_s  # recomputation is charged


def test_fsdp2_copies_are_charged_at_streaming_bandwidth():
    from dpsim.workload.roofline import Efficiencies, memory_term

    v2, compute = _program(version="2", accumulate="sharded", grad_accum=1)
    (root, block), (root_shard, block_shard) = (ROOT_FULL["2"], BLOCK_FULL["2"]), (12, 10)
    w = g = 2
    master = 4  # bf16-params: the shards stay fp32, gathered and reduced in bf16
    t = lambda size: memory_term(size, H100).time_s(Efficiencies())  # noqa: E731
    # Around every all-gather (3 units forward, 2 re-gathered for backward): the shard cast to bf16
    # and copied into the all-gather input, then the gathered buffer copied out. Around every
    # reduce-scatter (3 units): the gradients copied in, then the bf16 output cast to fp32.
    gather = lambda full, n: t(2 * full * w) + t(n * (master + w) + 2 * n * w)  # noqa: E731
    scatter = lambda full, n: t(full * (w + g)) + t(n * (g + master))  # noqa: E731
    forward_s = gather(root, root_shard) + 2 * gather(block, block_shard)
    expected = forward_s + 2 * gather(block, block_shard) + scatter(root, root_shard) + 2 * scatter(block, block_shard)
    assert v2.framework_s == pytest.approx(expected)
    forward = sum(t.duration_s for t in v2.program.tasks if t.kind == "forward")
    assert forward == pytest.approx(compute.forward_s + forward_s)
    # Accumulating: every reduce-scatter after the step's first adds its fp32 output into the gradient.
    accumulating, _ = _program(version="2", accumulate="sharded", grad_accum=K)
    added = (K - 1) * (t(3 * root_shard * master) + 2 * t(3 * block_shard * master))
    assert accumulating.framework_s == pytest.approx(K * expected + added)


def test_fsdp1_gradient_passes_are_charged_at_streaming_bandwidth():
    from dpsim.strategies.sharded import predivide_factor
    from dpsim.workload.roofline import Efficiencies, memory_term

    assert [predivide_factor(n) for n in (1, 2, 4, 8, 16, 64, 512)] == [1, 2, 2, 4, 4, 8, 32]
    v1, compute = _program(version="1", accumulate="sharded", grad_accum=1)
    (root, block), (root_shard, block_shard) = (ROOT_FULL["1"], BLOCK_FULL["1"]), (10, 8)
    w = g = 2
    master = 4
    t = lambda size: memory_term(size, H100).time_s(Efficiencies())  # noqa: E731
    # Each all-gather (3 forward, 2 backward) casts the fp32 shard to its bf16 copy first; every
    # backward concatenates the unit's gradients into the flat gradient; every reduction divides
    # it by 2 (N = 4) before the reduce-scatter, the shard by 2 after it, and casts the shard to fp32.
    gather = lambda n: t(n * (master + w))  # noqa: E731
    reduce = lambda full, n: t(2 * full * w) + t(2 * full * g) + t(2 * n * g) + t(n * (g + master))  # noqa: E731
    forward_s = gather(root_shard) + 2 * gather(block_shard)
    expected = forward_s + 2 * gather(block_shard) + reduce(root, root_shard) + 2 * reduce(block, block_shard)
    assert v1.framework_s == pytest.approx(expected)
    forward = sum(t.duration_s for t in v1.program.tasks if t.kind == "forward")
    assert forward == pytest.approx(compute.forward_s + forward_s)
    # ZeRO-3 (DeepSpeed) runs none of FSDP1's passes but its own (sharded._zero3_copies): each
    # gradient copied into the 5e8-element bucket, the bucket's rank chunks interleaved into one
    # buffer (several gradients in it), that buffer divided by N, the rank's partition copied out.
    zero3, _ = _program(strategy="zero3", grad_accum=1)
    numel = {"root": 40, "block": 29}
    z3 = lambda n, full, shard: 2 * t(2 * n * g) + t(2 * full * g) + t(2 * shard * g)  # noqa: E731
    assert zero3.framework_s == pytest.approx(z3(numel["root"], root, root_shard)
                                              + 2 * z3(numel["block"], block, block_shard))


def test_one_policy_serves_tensor_and_pipeline_layouts():
    from dpsim.predict.run import predict
    base = dict(gpus=16, tp=2, pp=2, link="infiniband", model="llama-2-7b", micro_batch=1, global_batch=32,
                steps=1)
    runs = {name: predict(PredictConfig(**base, **kw)) for name, kw in {
        "off": {}, "op": {"recompute": "op"}, "full": {"recompute": "full"},
        "every2": {"recompute": "full", "recompute_every": 2}}.items()}
    act = {k: r.memory.activations_bytes for k, r in runs.items()}
    step = {k: r.step_time_s for k, r in runs.items()}
    assert act["full"] < act["every2"] < act["off"] and act["full"] < act["op"] < act["off"]
    assert step["off"] < step["op"] < step["full"] and step["off"] < step["every2"] < step["full"]


@pytest.mark.parametrize("policy,advice", [
    (CheckpointPolicy(), "use --activation-checkpointing:"),
    (CheckpointPolicy(mode="op"), "use --recompute full:"),
    (CheckpointPolicy(mode="full", every=2), "use --recompute full without --recompute-every:"),
])
def test_fit_advice_names_the_flag_that_turns_full_checkpointing_on(policy, advice):
    from dpsim.memory import fit_advice
    from dpsim.workload.catalog import get_model
    a = fit_advice(get_model("llama-2-13b"), H100, precision=BF16, optimizer="adamw", micro_batch=4, strategy="fsdp",
                   n_gpus=8, gpus_per_node=8, checkpointing=policy)
    assert not a.fits and a.activation_checkpointing and a.message.startswith(advice)
