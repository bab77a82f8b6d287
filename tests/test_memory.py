"""Memory per GPU: the seed's and the ZeRO paper's numbers exactly, every strategy, the verdict and advice."""

from __future__ import annotations

import json

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.memory import (
    FRAMEWORK_OVERHEAD_BYTES,
    HEADROOM_FRACTION,
    MemoryBreakdown,
    activation_bytes_per_sample,
    ddp_memory,
    fit_advice,
    memory_breakdown,
)
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import memory_for_config, predict
from dpsim.strategies.registry import STRATEGIES
from dpsim.strategies.shards import fsdp_shard_numel, wrap_units
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import PRECISIONS, check_precision_on_gpu, get_precision
from dpsim.workload.spec import LayerSpec, ModelSpec, ParamSpec

H100 = get_gpu("h100")


def flat_model(n_params: int, name: str = "flat") -> ModelSpec:
    """A model of exactly ``n_params`` parameters, split over 4 blocks and a root layer."""
    per = n_params // 5
    layers = [LayerSpec(name="emb", params=(ParamSpec(name="emb.w", shape=(n_params - 4 * per,)),))]
    layers += [LayerSpec(name=f"b{i}", unit=f"b{i}", params=(ParamSpec(name=f"b{i}.w", shape=(per,)),),
                         activation_bytes_per_sample=1e6, input_bytes_per_sample=1e3) for i in range(4)]
    return ModelSpec(name=name, layers=tuple(layers))


def mem(model, strategy="ddp", precision="bf16-mixed", optimizer="adamw", n=1, **kw):
    return memory_breakdown(model, H100, precision=get_precision(precision), optimizer=optimizer, micro_batch=1,
                            strategy=strategy, n_gpus=n, **kw)


# ------------------------------------------------------------------ the seed


def test_seed_70b_bf16_numbers_exactly():
    """Seed: 70B in BF16 -> weights 140 GB + gradients 140 GB + AdamW moments 280 GB (> 400 GB)."""
    m = mem(flat_model(70_000_000_000), precision="bf16")
    assert m.weights_bytes == 140e9
    assert m.gradients_bytes == 140e9
    assert m.optimizer_bytes == 280e9
    assert m.model_state_bytes == 560e9  # 8 bytes per parameter


@pytest.mark.parametrize("precision", ["bf16-mixed", "fp16-mixed"])
def test_standard_mixed_precision_is_16_bytes_per_param(precision):
    m = mem(flat_model(70_000_000_000), precision=precision)
    assert (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes) == (140e9, 140e9, 840e9)
    assert m.model_state_bytes == 1.12e12


@pytest.mark.parametrize("precision,optimizer,per_param", [
    ("fp32", "adamw", 16), ("fp32", "sgd-momentum", 12), ("fp32", "sgd", 8), ("amp", "adam", 16),
    ("bf16-mixed", "sgd", 8), ("bf16-mixed", "sgd-momentum", 12), ("bf16", "sgd-momentum", 6),
])
def test_bytes_per_param_by_precision_and_optimizer(precision, optimizer, per_param):
    n = 1_000_000
    assert mem(flat_model(n), precision=precision, optimizer=optimizer).model_state_bytes == per_param * n


def test_catalog_70b_ddp_does_not_fit_and_ddp_memory_is_kept():
    model = get_model("llama-2-70b")
    old = ddp_memory(model, H100, precision=get_precision("bf16-mixed"), optimizer="adamw", micro_batch=1)
    assert old == mem(model)
    assert old.weights_bytes == 2 * model.param_count and not old.fits
    assert old.comm_buffers_bytes == old.gradients_bytes  # DDP bucket copies


# ----------------------------------------------------------------- ZeRO paper


def test_zero_paper_figure_1_example():
    """ZeRO paper Fig. 1: Ψ = 7.5B, N = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per GPU."""
    model = flat_model(7_500_000_000)
    got = {s: mem(model, s, n=64).model_state_bytes for s in ("ddp", "zero1", "zero2", "zero3")}
    assert got["ddp"] == 120e9
    assert got["zero1"] == 2 * 7.5e9 + 2 * 7.5e9 + 12 * 7.5e9 / 64  # 31.40625 GB
    assert got["zero2"] == 2 * 7.5e9 + 14 * 7.5e9 / 64  # 16.640625 GB
    assert got["zero3"] == 16 * 7.5e9 / 64  # 1.875 GB
    assert [round(got[s] / 1e9, 1) for s in ("ddp", "zero1", "zero2", "zero3")] == [120.0, 31.4, 16.6, 1.9]


@pytest.mark.parametrize("n", [2, 8, 64, 1000])
def test_sharded_sizes_divide_as_the_paper_says(n):
    model = flat_model(70_000_000_000)  # 14e9 per unit: no padding at these N
    ddp = mem(model)
    z1, z2, z3, f = (mem(model, s, n=n) for s in ("zero1", "zero2", "zero3", "fsdp"))
    assert z1.optimizer_bytes == ddp.optimizer_bytes / n and z1.gradients_bytes == ddp.gradients_bytes
    assert z2.gradients_bytes == ddp.gradients_bytes / n and z2.weights_bytes == ddp.weights_bytes
    assert z3.weights_bytes == ddp.weights_bytes / n
    assert z3.model_state_bytes == f.model_state_bytes == ddp.model_state_bytes / n
    sgo = mem(model, "fsdp-shard-grad-op", n=n)
    # ZeRO-2-like, but FSDP's mixed precision keeps the gradient shard in fp32, not bf16.
    assert sgo.model_state_bytes == z2.model_state_bytes + (4 - 2) * model.param_count / n
    hybrid = mem(model, "fsdp-hybrid", n=n * 8, gpus_per_node=8)
    assert hybrid.shard_group_size == 8 and hybrid.model_state_bytes == ddp.model_state_bytes / 8


def test_fsdp_mixed_precision_keeps_16_bytes_per_parameter_whatever_the_reduce_dtype():
    # FSDP keeps the fp32 shard (the master), an fp32 gradient shard (cast back after the
    # reduce-scatter) and Adam's two fp32 moments: reducing in fp32 (Composer's DEFAULT, OLMo-core)
    # costs no persistent memory over reducing in bf16. ZeRO-3 keeps its bf16 partition besides.
    model = flat_model(70_000_000_000)
    for version in ("1", "2"):
        bf16, fp32 = (mem(model, "fsdp", precision=p, n=64, fsdp_version=version)
                      for p in ("bf16-params", "bf16-fp32-grads"))
        assert bf16.model_state_bytes == fp32.model_state_bytes == 16 * model.param_count / 64
    assert mem(model, "zero3", precision="bf16-fp32-grads", n=64).model_state_bytes == 18 * model.param_count / 64


def test_fsdp_shards_are_padded_per_unit():
    model = get_model("gpt2")
    m = mem(model, "fsdp", n=48)
    shard = sum(fsdp_shard_numel([p.numel for p in u.params], 48) for u in wrap_units(model) if u.params)
    # bf16 parameters over an fp32 master: the fp32 shard is the master (optimizer state) and the
    # gradient shard is fp32; no bf16 shard is kept between all-gathers.
    assert m.weights_bytes == 0 and m.gradients_bytes == 4 * shard and shard * 48 >= model.param_count
    assert m.shard_group_size == 48


def test_fsdp_working_set_holds_root_and_two_units():
    model = get_model("llama-2-7b")
    m = mem(model, "fsdp", n=64)
    units = [u for u in wrap_units(model) if u.params]
    root = next(u for u in units if u.is_root)
    block = max(u.numel for u in units if not u.is_root)
    pad = lambda x: fsdp_shard_numel([x], 64) * 64  # noqa: E731  (one flat parameter per unit)
    # gathered: root + current + prefetched unit; unsharded gradients of the root and of one unit
    expected = (pad(root.numel) + 2 * pad(block)) * 2 + (pad(root.numel) + pad(block)) * 2
    assert m.comm_buffers_bytes == pytest.approx(expected, rel=1e-6)


def test_fsdp_accumulation_keeps_full_gradients():
    model = flat_model(8_000_000)
    assert mem(model, "fsdp", n=8, grad_accum=4).gradients_bytes == 2 * 8_000_000  # no_sync()
    assert mem(model, "zero3", n=8, grad_accum=4).gradients_bytes == 2 * 8_000_000 / 8  # reduced every micro-batch


def test_deepspeed_gradient_buffers():
    model = flat_model(8_000_000)
    assert mem(model, "zero2", n=8).comm_buffers_bytes == 2 * 500_000_000 * 2  # two 5e8-element ipg buffers
    assert mem(model, "zero2", n=8, overlap=False).comm_buffers_bytes == 500_000_000 * 2


# ------------------------------------------------------------- activations


def test_activation_checkpointing_keeps_block_inputs():
    model = get_model("gpt2")
    full = activation_bytes_per_sample(model)
    ck = activation_bytes_per_sample(model, activation_checkpointing=True)
    s, d = 1024, 768
    blocks = [l for l in model.layers if l.unit]
    root = sum(l.activation_bytes_per_sample for l in model.layers if not l.unit)
    per_block = blocks[0].activation_bytes_per_sample + blocks[1].activation_bytes_per_sample
    assert ck == root + 12 * 2 * s * d + per_block  # Korthikanti Sec. 5: 2sbh per block + one block recomputed
    assert ck < full / 3
    on = memory_breakdown(model, H100, precision=get_precision("bf16-mixed"), optimizer="adamw", micro_batch=8,
                          activation_checkpointing=True)
    assert on.activations_bytes == 8 * ck
    fp32 = memory_breakdown(model, H100, precision=get_precision("fp32"), optimizer="adamw", micro_batch=8)
    assert fp32.activations_bytes == 2 * 8 * full  # 4-byte activations


# ---------------------------------------------------------------- verdict


def test_verdict_uses_headroom():
    cap = H100.memory_bytes
    b = MemoryBreakdown(weights_bytes=cap * (1 - HEADROOM_FRACTION) - FRAMEWORK_OVERHEAD_BYTES, gradients_bytes=0,
                        optimizer_bytes=0, activations_bytes=0, comm_buffers_bytes=0,
                        overhead_bytes=FRAMEWORK_OVERHEAD_BYTES, capacity_bytes=cap)
    assert b.fits and b.usable_bytes == pytest.approx(0.95 * cap)
    assert not MemoryBreakdown(**{**b.__dict__, "weights_bytes": b.weights_bytes + 1}).fits


def test_advice_smallest_zero_stage_that_fits():
    model = get_model("llama-2-7b", flash_attention=True)
    kw = dict(precision=get_precision("bf16-mixed"), optimizer="adamw", micro_batch=1, n_gpus=8,
              gpus_per_node=8)
    assert not memory_breakdown(model, H100, **kw).fits
    advice = fit_advice(model, H100, **kw)
    assert not advice.fits and advice.strategy == "zero1"
    assert memory_breakdown(model, H100, strategy=advice.strategy, **kw).fits
    assert "--strategy zero1" in advice.message
    assert fit_advice(model, H100, strategy="zero1", **kw).fits


def test_advice_gpu_count_for_70b():
    model = get_model("llama-2-70b", flash_attention=True)
    kw = dict(precision=get_precision("bf16-mixed"), optimizer="adamw", micro_batch=1, gpus_per_node=8)
    advice = fit_advice(model, H100, strategy="zero3", n_gpus=8, **kw)
    assert advice.gpus is not None and advice.gpus % 8 == 0 and advice.activation_checkpointing
    ok = memory_breakdown(model, H100, strategy="zero3", n_gpus=advice.gpus, activation_checkpointing=True, **kw)
    assert ok.fits
    smaller = memory_breakdown(model, H100, strategy="zero3", n_gpus=advice.gpus - 8,
                               activation_checkpointing=True, **kw)
    assert not smaller.fits  # the smallest whole number of nodes
    assert f"--gpus {advice.gpus}" in advice.message


def test_advice_says_when_nothing_fits():
    model = get_model("llama-3-405b")
    advice = fit_advice(model, get_gpu("v100-16gb"), precision=get_precision("fp16-mixed"), optimizer="adamw",
                        micro_batch=1, strategy="zero3", n_gpus=8, gpus_per_node=8)
    assert advice.gpus is None and "no data-parallel configuration fits" in advice.message
    assert "tensor/pipeline parallelism" in advice.message


def test_predict_memory_carries_the_suggestion():
    # bf16 parameters: under amp-bf16 autocast's cache would hold a bf16 copy of every weight of
    # ZeRO-3's leaf parameters until forward ends (test_activation_dtypes), and nothing data-parallel fits.
    p = predict(PredictConfig(gpus=64, link="infiniband", model="llama-2-70b", micro_batch=1, steps=1,
                              precision="bf16-params"))
    assert not p.memory.fits and "--strategy zero3" in p.memory.suggestion
    d = p.to_dict()["memory"]
    assert d["suggestion"] == p.memory.suggestion and d["advice"]["strategy"] == "zero3"
    ok = predict(PredictConfig(gpus=64, link="infiniband", model="llama-2-70b", micro_batch=1, steps=1,
                               strategy="zero3", activation_checkpointing=True, precision="bf16-params"))
    assert ok.memory.fits and ok.memory.suggestion is None


# ------------------------------------------------------------- precision x GPU


def test_bf16_on_v100_is_an_explicit_error():
    v100 = get_gpu("v100")
    for name in ("bf16-mixed", "bf16", "amp"):
        with pytest.raises(ConfigError) as info:
            check_precision_on_gpu(get_precision(name), v100)
        assert str(info.value).startswith("--precision: ") and "amp-fp16" in str(info.value)
    check_precision_on_gpu(get_precision("fp16-mixed"), v100)
    check_precision_on_gpu(get_precision("fp32"), v100)
    for name in PRECISIONS:
        check_precision_on_gpu(get_precision(name), H100)
    p = predict(PredictConfig(gpus=8, link="nvlink", gpu="v100", model="gpt2", precision="fp16-mixed", steps=1))
    assert p.memory.weights_bytes == 2 * p.param_count
    with pytest.raises(ConfigError, match="v100 has no tensor cores"):
        predict(PredictConfig(gpus=8, link="nvlink", gpu="v100", model="gpt2"))


def test_gradient_dtype_sets_all_reduce_bytes():
    fp16 = predict(PredictConfig(gpus=8, link="nvlink", model="gpt2", precision="fp16-mixed", steps=1))
    amp = predict(PredictConfig(gpus=8, link="nvlink", model="gpt2", precision="amp", steps=1))
    assert amp.gradient_bytes == 2 * fp16.gradient_bytes == 4 * fp16.param_count


# ---------------------------------------------------------------------- CLI


def test_memory_command_json(capsys):
    from dpsim.cli.app import main

    assert main(["memory", "--model", "llama-2-70b", "--gpus", "64", "--link", "infiniband", "--micro-batch", "1",
                 "--precision", "bf16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "dpsim.memory/1"
    assert out["weights_bytes"] == 2 * out["param_count"] and out["optimizer_bytes"] == 4 * out["param_count"]
    assert out["fits"] is False and out["suggestion"] and out["advice"]["fits"] is False
    for key in ("gradients_bytes", "activations_bytes", "comm_buffers_bytes", "overhead_bytes", "total_bytes",
                "capacity_bytes", "usable_bytes", "strategy", "shard_group_size"):
        assert key in out


def test_memory_command_table(capsys):
    from dpsim.cli.app import main

    assert main(["memory", "--model", "llama-2-70b", "--gpus", "64", "--link", "infiniband",
                 "--micro-batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "what would fit" in out and "zero3" in out


@pytest.mark.parametrize("args,needle", [
    (["--strategy", "zero9"], "--strategy: 'zero9' is not known"),
    (["--grad-accum", "0"], "--grad-accum: 0 is not valid"),
    (["--micro-batch", "0"], "--micro-batch: 0 is not valid"),
    (["--precision", "bf8"], "--precision: 'bf8' is not known"),
    (["--gpu", "v100"], "--precision: 'amp-bf16' computes in bfloat16"),
    (["--model", "gpt-5"], "--model: 'gpt-5' is not a catalog model"),
])
def test_memory_command_bad_input_one_line(capsys, args, needle):
    from dpsim.cli.app import main

    assert main(["memory", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_memory_for_config_matches_predict():
    config = PredictConfig(gpus=16, link="infiniband", model="gpt2-xl", strategy="fsdp-hybrid", steps=1)
    m, advice, model, topology = memory_for_config(config)
    assert m == predict(config).memory and advice.fits and topology.n_gpus == 16


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_total_is_the_sum(strategy):
    m = mem(get_model("gpt2-xl"), strategy, n=16, gpus_per_node=8)
    assert m.total_bytes == pytest.approx(m.weights_bytes + m.gradients_bytes + m.optimizer_bytes
                                          + m.activations_bytes + m.comm_buffers_bytes + m.overhead_bytes)
    assert m.strategy == strategy


@pytest.mark.parametrize("kw, lever", [
    # 131,072 tokens: the checkpointed activations alone outgrow the GPU, which only
    # context parallelism divides among the data-parallel levers.
    (dict(model="llama-3-8b", seq_len=131072, gpus=8, fsdp_version="2"), "context parallelism (--cp)"),
    # FSDP2 pads Mixtral's 8 stacked experts to one row per rank of 64: expert parallelism
    # is what splits them.
    (dict(model="mixtral-8x7b", gpus=64, fsdp_version="2"), "expert parallelism (--ep)"),
])
def test_no_data_parallel_fit_names_the_lever_that_divides_what_is_left(kw, lever):
    config = PredictConfig(link="infiniband", gpu="h100", micro_batch=1, strategy="fsdp",
                           precision="bf16-params", recompute="full", steps=1, **kw)
    advice = predict(config).memory.suggestion
    assert advice.startswith("no data-parallel configuration fits") and lever in advice
    dense = predict(PredictConfig(link="infiniband", gpu="h100", micro_batch=1, strategy="zero3", gpus=8,
                                  model="llama-2-70b", precision="bf16-params", steps=1)).memory.suggestion
    assert "--cp" not in (dense or "") and "--ep" not in (dense or "")


def test_advice_names_16_bit_parameters_when_autocasts_weight_copies_fill_the_gpu():
    """torch.autocast keeps a 16-bit copy of every weight it casts until forward ends, and FSDP2's
    unsharded parameters are leaves it caches: Llama-3-70B FSDP2 on 64 H100 with full checkpointing
    holds ~130 GiB of copies that no GPU count divides. The advice said "use tensor/pipeline
    parallelism"; 16-bit parameters (FSDP's MixedPrecision, DeepSpeed bf16) fit as they are, and
    that is what it now says (modernjobs). An amp-fp16 job is pointed to fp16-params."""
    from dpsim.workload.catalog import get_model
    from dpsim.hardware import get_gpu
    from dpsim.memory import fit_advice, memory_breakdown
    from dpsim.strategies.checkpointing import CheckpointPolicy
    from dpsim.workload.precision import get_precision

    model, h100 = get_model("llama-3-70b", flash_attention=True), get_gpu("h100")
    full = CheckpointPolicy(mode="full")
    kw = dict(optimizer="adamw", micro_batch=1, strategy="fsdp", n_gpus=64, gpus_per_node=8, fsdp_version="2",
              checkpointing=full)
    for precision, advised in (("amp-bf16", "bf16-params"), ("amp-fp16", "fp16-params")):
        advice = fit_advice(model, h100, precision=get_precision(precision), **kw)
        assert not advice.fits and advice.precision == advised
        assert f"--precision {advised}" in advice.message and advice.to_dict()["precision"] == advised
        fixed = memory_breakdown(model, h100, precision=get_precision(advised), **kw)
        assert fixed.fits and advice.total_bytes == fixed.total_bytes
    # Nothing to say about precision when the job fits, or for 16-bit parameters already.
    assert "precision" not in fit_advice(model, h100, precision=get_precision("bf16-params"), **kw).to_dict()


def test_advice_offers_16_bit_parameters_on_the_most_sharded_strategy():
    """`dpsim memory --model llama-2-70b --gpus 64 --link infiniband --micro-batch 1` (DDP, amp-bf16), the first
    command of docs/strategies.md, said "no data-parallel configuration fits ... use tensor/pipeline parallelism":
    16-bit parameters were tried on DDP only, where the replicas alone overflow; ZeRO-3 with checkpointing and
    them fits at 32.0 GiB, which predict's own advice on zero3 already said. The advice names both changes and
    the advised command fits."""
    for strategy in ("ddp", "zero1", "zero2"):
        config = PredictConfig(gpus=64, link="infiniband", model="llama-2-70b", micro_batch=1, strategy=strategy)
        memory, advice, _, _ = memory_for_config(config)
        assert not memory.fits and memory.suggestion == advice.message
        assert (advice.strategy, advice.precision, advice.activation_checkpointing) == ("zero3", "bf16-params", True)
        assert advice.message.startswith("use --strategy zero3 --precision bf16-params --activation-checkpointing ")
        fixed, again, _, _ = memory_for_config(PredictConfig(gpus=64, link="infiniband", model="llama-2-70b",
                                                             micro_batch=1, strategy="zero3", precision="bf16-params",
                                                             activation_checkpointing=True))
        assert fixed.fits and again.fits and fixed.total_bytes == advice.total_bytes
    # On 16 GPUs no strategy fits either way; 16-bit parameters on more GPUs do (the GPUs are the smallest count
    # of whole nodes), where the advice said no data-parallel configuration fits.
    memory, advice, _, _ = memory_for_config(PredictConfig(gpus=16, link="infiniband", model="llama-2-70b",
                                                           micro_batch=1))
    assert (advice.strategy, advice.precision, advice.gpus) == ("zero3", "bf16-params", 24)
    assert advice.message.startswith("use --strategy zero3 --precision bf16-params --activation-checkpointing "
                                     "on --gpus 24 or more: ")
    for gpus, fits in ((24, True), (16, False)):
        assert memory_for_config(PredictConfig(gpus=gpus, link="infiniband", model="llama-2-70b", micro_batch=1,
                                               strategy="zero3", precision="bf16-params",
                                               activation_checkpointing=True))[0].fits == fits
