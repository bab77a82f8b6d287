"""PredictConfig checks itself once, on creation: every rule, its one-line message, its choices.

The ``Literal`` choices are spelled out in ``dpsim/predict/config.py`` (so type checkers and
``--help`` can read them); the tests here keep each equal to the registry it mirrors.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import (
    PARTS,
    SETTINGS,
    FsdpUnit,
    Optimizer,
    Placement,
    Precision,
    PredictConfig,
    Strategy,
    ZeroGrad,
    check_value,
    flag_name,
    setting_key,
)

ORIGINAL_DEFAULTS = {
    "gpus": 64, "link": "ethernet", "topology_file": None, "gpus_per_node": None, "gpu": None, "model": "gpt2-xl",
    "seq_len": None, "flash_attention": True, "micro_batch": 4, "precision": "amp-bf16", "optimizer": "adamw",
    "bucket_cap_mb": None, "overlap": True, "overlap_slowdown": 0.189, "compute_efficiency": None,
    "single_gpu_step_s": None, "steps": 3, "calibration": None, "strategy": "ddp", "grad_accum": 1,
    "activation_checkpointing": False, "fsdp_unit": "block", "input_shape": None, "algo": None, "proto": None,
    "jobs": 1, "placement": "packed",
}
"""Field names, order and defaults before the config checked itself (golden JSON prints them);
``compute_efficiency`` left out (``None``) is resolved per job (:func:`resolved_compute_efficiency`)."""


# ---------------------------------------------------------------- choices = registries

def test_precision_choices_are_the_precision_table():
    from dpsim.workload.precision import PRECISION_ALIASES, PRECISIONS

    assert typing.get_args(Precision) == tuple(PRECISIONS) + tuple(PRECISION_ALIASES)


def test_optimizer_choices_are_the_optimizer_table():
    from dpsim.workload.precision import OPTIMIZER_STATES

    assert typing.get_args(Optimizer) == tuple(OPTIMIZER_STATES)


def test_strategy_choices_are_the_strategy_registry():
    from dpsim.strategies.registry import STRATEGIES

    assert typing.get_args(Strategy) == tuple(STRATEGIES)


def test_fsdp_unit_choices_are_the_unit_table():
    from dpsim.strategies.registry import FSDP_UNITS

    assert typing.get_args(FsdpUnit) == tuple(FSDP_UNITS)


def test_placement_choices_are_the_job_layouts():
    from dpsim.collectives.nccl_tuning import PLACEMENTS, check_job_flags

    assert typing.get_args(Placement) == PLACEMENTS
    for placement in typing.get_args(Placement):
        check_job_flags(2, placement)
    with pytest.raises(ConfigError) as exc:
        check_job_flags(2, "round-robin")
    for placement in typing.get_args(Placement):
        assert placement in str(exc.value)


def test_zero_grad_choices_are_the_compute_modes():
    from dpsim.workload.compute import ZERO_GRAD_MODES

    assert typing.get_args(ZeroGrad) == ZERO_GRAD_MODES


def test_attention_kernel_choices_are_the_kernels_the_roofline_costs():
    from dpsim.predict.config import AttentionKernel
    from dpsim.workload.spec import ATTENTION_KERNELS

    assert typing.get_args(AttentionKernel) == ATTENTION_KERNELS


def test_each_closed_choice_is_a_literal():
    hints = {setting_key(f): typing.get_type_hints(cls)[f.name] for cls in PARTS.values()
             for f in dataclasses.fields(cls)}
    for name, literal in [("optimizer", Optimizer), ("strategy", Strategy),
                          ("fsdp_unit", FsdpUnit), ("placement", Placement), ("zero_grad", ZeroGrad)]:
        assert hints[name] is literal, name
    # a calibration profile decides it when left out (dpsim.predict.resolve)
    assert hints["precision"] == Precision | None


# ---------------------------------------------------------------- fields unchanged

def test_field_names_order_and_defaults_are_unchanged():
    # New fields come after these (the tensor/pipeline layout's: tests/test_layout.py).
    config = PredictConfig().settings()
    first = dict(list(config.items())[:len(ORIGINAL_DEFAULTS)])
    assert first == ORIGINAL_DEFAULTS
    assert list(first) == list(ORIGINAL_DEFAULTS)


def test_flag_names():
    assert flag_name("micro_batch") == "--micro-batch"
    assert flag_name("topology_file") == "--topology"
    assert flag_name("single_gpu_step_s") == "--single-gpu-step-ms"


# ---------------------------------------------------------------- one field at a time

def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert message and "\n" not in message
    return message


@pytest.mark.parametrize("kwargs, needles", [
    ({"gpus": 0}, ["--gpus: 0 is not valid", "an integer >= 1"]),
    ({"gpus": True}, ["--gpus: True", "an integer"]),  # a bool is not an int
    ({"gpus": 8.0}, ["--gpus: 8.0", "an integer"]),
    ({"gpus": "8"}, ["--gpus: '8'", "an integer"]),
    ({"micro_batch": 0}, ["--micro-batch: 0 is not valid; expected an integer >= 1"]),
    ({"seq_len": 0}, ["--seq-len: 0", ">= 1"]),
    ({"grad_accum": 0}, ["--grad-accum: 0", ">= 1"]),
    ({"steps": 0}, ["--steps: 0", ">= 1"]),
    ({"jobs": 0}, ["--jobs: 0", ">= 1"]),
    ({"gpus_per_node": 0}, ["--gpus-per-node: 0", ">= 1"]),
    ({"bucket_cap_mb": 0}, ["--bucket-cap-mb: 0", "> 0"]),
    ({"bucket_cap_mb": float("nan")}, ["--bucket-cap-mb: nan", "> 0"]),
    ({"bucket_cap_mb": float("inf")}, ["--bucket-cap-mb: inf", "> 0"]),
    ({"bucket_cap_mb": True}, ["--bucket-cap-mb: True", "a number"]),
    ({"overlap_slowdown": -0.1}, ["--overlap-slowdown: -0.1", ">= 0"]),
    ({"overlap_slowdown": float("inf")}, ["--overlap-slowdown: inf", ">= 0"]),
    ({"compute_efficiency": 0}, ["--compute-efficiency: 0", ">= 0.01 and <= 1"]),
    ({"compute_efficiency": 1.5}, ["--compute-efficiency: 1.5", ">= 0.01 and <= 1"]),
    ({"single_gpu_step_s": -0.001}, ["--single-gpu-step-ms: -1.0", ">= 0.001 ms"]),  # shown in the flag's units
    ({"single_gpu_step_s": float("nan")}, ["--single-gpu-step-ms: nan", ">= 0.001 ms"]),
    ({"overlap": 1}, ["--overlap: 1", "true or false"]),
    ({"flash_attention": None}, ["--flash-attention: None", "true or false"]),
    ({"link": 3}, ["--link: 3", "a string"]),  # None is "not given" (ethernet, or the --topology file)
    ({"model": 3}, ["--model: 3", "a string"]),
    ({"precision": "fp8"}, ["--precision: 'fp8' is not known", "fp16-mixed", "bf16-mixed"]),
    ({"optimizer": "lion"}, ["--optimizer: 'lion'", "adamw", "sgd-momentum"]),
    ({"strategy": "zero4"}, ["--strategy: 'zero4'", "zero3", "fsdp-hybrid"]),
    ({"fsdp_unit": "tile"}, ["--fsdp-unit: 'tile'", "block", "layer", "model"]),
    ({"placement": "random"}, ["--placement: 'random'", "packed", "interleaved"]),
    ({"algo": "ring,foo"}, ["--algo", "'foo'", "halving_doubling"]),
    ({"proto": "LL256"}, ["--proto", "'LL256'", "Simple"]),
])
def test_each_rule_is_one_line_naming_flag_value_and_allowed(kwargs, needles):
    with pytest.raises(ConfigError) as exc:
        PredictConfig(**kwargs)
    message = one_line(exc)
    for needle in needles:
        assert needle in message, message


@pytest.mark.parametrize("kwargs", [
    {"bucket_cap_mb": 1},  # an int is a number
    {"bucket_cap_mb": 0.5, "strategy": "zero2"},
    {"gpus": 1, "gpus_per_node": 1, "jobs": 3, "placement": "interleaved"},
    {"compute_efficiency": 1.0, "overlap_slowdown": 0},
    {"single_gpu_step_s": 0.18, "seq_len": 512},
    {"algo": "^nvls,nvls_tree", "proto": "LL128,Simple"},
    {"model": "my_model.py:build", "input_shape": "8,1024:int64"},
    {"precision": "fp16-mixed", "optimizer": "sgd", "strategy": "fsdp-hybrid", "fsdp_unit": "layer"},
])
def test_valid_configs_are_accepted(kwargs):
    config = PredictConfig(**kwargs)
    for name, value in kwargs.items():
        assert config.value_of(name) == value


def test_replace_checks_again():
    config = PredictConfig()
    with pytest.raises(ConfigError, match="--micro-batch"):
        dataclasses.replace(config, micro_batch=0)


def test_check_value_is_the_fields_own_rule():
    check_value("gpus", 8)
    check_value("seq_len", None)
    check_value("input_shape", "8,3")  # alone it is fine; with a catalog model it is not
    with pytest.raises(ConfigError, match="--gpus: 0"):
        check_value("gpus", 0)


# ---------------------------------------------------------------- between fields

@pytest.mark.parametrize("strategy", ["zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid"])
def test_bucket_cap_is_refused_for_per_unit_strategies(strategy):
    with pytest.raises(ConfigError) as exc:
        PredictConfig(strategy=strategy, bucket_cap_mb=25)
    message = one_line(exc)
    for needle in ("--bucket-cap-mb: 25", f"--strategy {strategy}", "per unit", "--fsdp-unit", "ddp, zero1, zero2"):
        assert needle in message, message


def test_the_bucket_cap_is_refused_exactly_for_the_strategies_that_communicate_per_unit():
    from dpsim.strategies.registry import UNIT_STRATEGIES

    for strategy in typing.get_args(Strategy):
        try:
            PredictConfig(strategy=strategy, bucket_cap_mb=5)
        except ConfigError:
            refused = True
        else:
            refused = False
        assert refused == (strategy in UNIT_STRATEGIES), strategy


def test_input_shape_only_with_a_torch_module():
    with pytest.raises(ConfigError) as exc:
        PredictConfig(model="gpt2", input_shape="8,1024")
    message = one_line(exc)
    assert "--input-shape: applies only to a torch module" in message and "'8,1024'" in message
    assert "--seq-len" in message


def test_seq_len_only_with_a_catalog_model():
    with pytest.raises(ConfigError) as exc:
        PredictConfig(model="my_model.py:build", seq_len=512)
    message = one_line(exc)
    assert "--seq-len: does not apply" in message and "512" in message and "--input-shape" in message


def test_to_dict_is_the_plain_settings():
    """PredictConfig.to_dict is every setting by its flat name, each a plain value. The training-script
    options are named only when set (golden outputs stay as they were)."""
    from dpsim.predict.config import SHOWN_WHEN_SET

    for config in (PredictConfig(), PredictConfig(gpus=64, link="ethernet", strategy="fsdp", micro_batch=2)):
        full = config.settings()
        assert config.to_dict() == {k: v for k, v in full.items() if k not in SHOWN_WHEN_SET}
        assert all(v is None or isinstance(v, (bool, int, float, str)) for v in config.to_dict().values())
    config = PredictConfig(clip_grad_norm=True, zero_grad="zero-loop", strategy="fsdp", fsdp_version="2",
                           fsdp_accumulate="sharded", recompute="full", recompute_every=2,
                           calibration="node.json", op_rates=True, fp8="te-delayed", compile=True,
                           attention_kernel="cudnn", activations="megatron", loss_impl="eager", fp8_params=True)
    cp_fields = ("cp", "cp_comm", "cp_balance", "offload")
    expert_options = ("ep", "etp", "moe_routing", "moe_capacity_factor", "moe_a2a", "moe_a2a_overlap",
                      "moe_node_limit", "mtp_depth", "moe_pad_to_capacity")
    zero_options = ("zero_impl", "zero_group")
    cluster_options = ("power_cap_w", "rack_placement")  # named only when given, like the options above
    assert config.to_dict() == {k: v for k, v in config.settings().items()
                                if k not in cp_fields + expert_options + zero_options + cluster_options}
    assert PredictConfig(**config.to_dict()) == config
    config = PredictConfig(gpus=64, cp=2, cp_comm="a2a", cp_balance=False, strategy="zero1", offload="optimizer",
                           clip_grad_norm=True, zero_grad="zero-loop", recompute="full", recompute_every=2,
                           calibration="node.json", op_rates=True)
    assert config.to_dict() == {k: v for k, v in config.settings().items()
                                if k not in ("fsdp_version", "fsdp_accumulate", "fp8", "compile", "attention_kernel",
                                             "activations", "loss_impl", "fp8_params") + expert_options
                                + zero_options + cluster_options}
    assert PredictConfig(**config.to_dict()) == config
    config = PredictConfig(gpus=64, gpu="a100", power_cap_w=350.0)
    assert config.to_dict()["power_cap_w"] == 350.0 and PredictConfig(**config.to_dict()) == config
    config = PredictConfig(gpus=80, link="gb200-nvl72", tp=4, pp=2, rack_placement="contiguous")
    assert config.to_dict()["rack_placement"] == "contiguous" and PredictConfig(**config.to_dict()) == config
    config = PredictConfig(gpus=64, strategy="zero1", zero_impl="internlm", zero_group=8)
    assert {k: config.to_dict()[k] for k in zero_options} == {"zero_impl": "internlm", "zero_group": 8}
    assert PredictConfig(**config.to_dict()) == config
    moe = {"ep": 2, "etp": 2, "moe_routing": "zipf:1", "moe_capacity_factor": 1.5, "moe_a2a": "hierarchical",
           "moe_a2a_overlap": True}
    config = PredictConfig(**moe)  # the expert options (a layout of their own, so apart from the above)
    assert {k: config.to_dict()[k] for k in moe} == moe
    assert PredictConfig(**config.to_dict()) == config


@pytest.mark.parametrize("name, value, expected", [
    ("zero_grad", "zero", "--zero-grad: 'zero' is not known; choose one of set-to-none, zero-loop"),
    ("zero_grad", None, "--zero-grad: None is not known; choose one of set-to-none, zero-loop"),
    ("clip_grad_norm", "yes", "--clip-grad-norm: 'yes' is not valid; expected true or false"),
    ("clip_grad_norm", 1, "--clip-grad-norm: 1 is not valid; expected true or false"),
])
def test_step_options_refused_in_one_line(name, value, expected):
    with pytest.raises(ConfigError) as exc:
        PredictConfig(**{name: value})
    assert one_line(exc) == expected


# ---------------------------------------------------------------- parts by layer

def test_every_setting_lives_in_one_part_with_its_docstring():
    from dpsim.cli.options import field_docs

    keys = [setting_key(f) for cls in PARTS.values() for f in dataclasses.fields(cls)]
    assert sorted(keys) == sorted(SETTINGS) and len(keys) == len(set(keys))
    assert set(field_docs()) == set(SETTINGS)
    for cls in PARTS.values():
        assert cls.__dataclass_params__.frozen and cls.__doc__
        with pytest.raises(TypeError):
            cls(1)  # keyword-only
    assert [f.name for f in dataclasses.fields(PredictConfig)] == list(PARTS)


def test_settings_and_parts_make_the_same_config():
    from dpsim.predict.config import ClusterConfig, ParallelismConfig

    flat = PredictConfig(gpus=32, link="infiniband", tp=4, micro_batch=2, calibration=None)
    nested = PredictConfig(cluster=ClusterConfig(gpus=32, link="infiniband"), parallelism=ParallelismConfig(tp=4),
                           micro_batch=2)
    assert flat == nested and hash(flat) == hash(nested)
    assert flat.parallelism.tp == 4 and flat.cluster.gpus == 32 and flat.workload.micro_batch == 2
    assert PredictConfig(**flat.settings()) == flat
    # settings given with parts go over them; dataclasses.replace takes settings by name
    assert PredictConfig(parallelism=ParallelismConfig(tp=2), tp=4, gpus=32, link="infiniband",
                         micro_batch=2) == flat
    assert dataclasses.replace(flat, tp=8).parallelism.tp == 8
    assert dataclasses.replace(flat, tp=8).cluster == flat.cluster
    # "calibration" is both a part and a setting (the profile)
    with_profile = PredictConfig(calibration="node.json")
    assert with_profile.calibration.profile == "node.json" and with_profile.value_of("calibration") == "node.json"
    assert with_profile.execution.precision is None  # the profile decides it (dpsim.predict.resolve)
    assert PredictConfig().execution.precision == "amp-bf16"


def test_a_part_checks_its_own_settings_and_the_whole_checks_between_parts():
    from dpsim.predict.config import ParallelismConfig

    with pytest.raises(ConfigError, match="--tp: 0 is not valid"):
        ParallelismConfig(tp=0)
    with pytest.raises(ConfigError, match="--gpus: 30 is not a multiple of --tp 4"):
        PredictConfig(gpus=30, parallelism=ParallelismConfig(tp=4))
    with pytest.raises(TypeError, match="unexpected setting 'tensor_parallel'"):
        PredictConfig(tensor_parallel=2)
    with pytest.raises(TypeError, match="expected a ParallelismConfig"):
        PredictConfig(parallelism={"tp": 2})


def test_a_flat_read_still_answers_with_a_deprecation_warning():
    from dpsim.predict.config import FlatSettingWarning

    config = PredictConfig(tp=2, gpus=8)
    with pytest.warns(FlatSettingWarning, match="config.parallelism.tp"):
        assert config.tp == 2
    with pytest.warns(FlatSettingWarning, match="config.parallelism.layout_active"):
        assert config.layout_active
    with pytest.raises(AttributeError):
        config.no_such_setting


def test_placement_alone_is_refused_not_dropped():
    # --placement interleaved with one job predicted exactly the packed step: nothing said so.
    with pytest.raises(ConfigError, match=r"--placement: 'interleaved' only applies with --jobs above 1"):
        PredictConfig(gpus=16, placement="interleaved")
    assert PredictConfig(gpus=16, jobs=2, placement="interleaved").cluster.placement == "interleaved"
    assert PredictConfig(gpus=16, placement="packed").cluster.placement == "packed"


def test_seq_len_on_a_transformers_configuration_names_its_context_field():
    """A Llama configuration is built from its shape at its context length; --input-shape would
    trace it instead (no --tp/--pp), so the refusal of --seq-len names the field that sets it."""
    with pytest.raises(ConfigError) as err:
        PredictConfig(model="transformers:LlamaConfig(num_hidden_layers=2)", seq_len=8192)
    assert "max_position_embeddings" in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------- compute efficiency's default

def test_compute_efficiency_default_is_the_multi_gpu_rate_only_where_compute_is_preset_costed():
    from dpsim.predict.config import resolved_compute_efficiency
    from dpsim.workload.compute import DEFAULT_COMPUTE_EFFICIENCY, MULTI_GPU_TRAINING_EFFICIENCY

    assert MULTI_GPU_TRAINING_EFFICIENCY < DEFAULT_COMPUTE_EFFICIENCY == 1.0
    from dpsim.cli.options import field_help  # --help states the default it uses
    assert f"Left out: {MULTI_GPU_TRAINING_EFFICIENCY:g} for preset-costed compute on several GPUs" in field_help("compute_efficiency")
    assert resolved_compute_efficiency(PredictConfig(gpus=8))[0] == MULTI_GPU_TRAINING_EFFICIENCY
    # One GPU: the roofline is fitted on single-GPU steps; a measured step: nothing to scale.
    assert resolved_compute_efficiency(PredictConfig(gpus=1, gpus_per_node=1))[0] == 1.0
    assert resolved_compute_efficiency(PredictConfig(gpus=8, single_gpu_step_s=0.2))[0] == 1.0
    # The user's value is the factor, whatever the job: never multiplied by the default.
    for gpus, given in ((8, 1.0), (8, 0.7), (1, 0.7)):
        config = PredictConfig(gpus=gpus, gpus_per_node=min(gpus, 8), compute_efficiency=given)
        assert resolved_compute_efficiency(config) == (given, "--compute-efficiency")


def test_predict_uses_the_resolved_compute_efficiency_and_says_which():
    from dpsim.predict.run import predict
    from dpsim.workload.compute import MULTI_GPU_TRAINING_EFFICIENCY

    job = dict(gpus=8, gpus_per_node=8, link="nvlink", gpu="h100", model="gpt2", steps=2)
    default = predict(PredictConfig(**job))
    assert default.step_time_s == predict(PredictConfig(**job, compute_efficiency=MULTI_GPU_TRAINING_EFFICIENCY)).step_time_s
    assert default.step_time_s > predict(PredictConfig(**job, compute_efficiency=1.0)).step_time_s
    assert f"compute efficiency {MULTI_GPU_TRAINING_EFFICIENCY:g}: default on several GPUs" in default.provenance.compute.detail
    # A calibration profile that measured collectives alone (a100-nvswitch-8gpu: "compute": null) leaves the
    # compute to the presets, default included (tests/test_fuzz_round15.py: a profile's measured rates are not
    # scaled by it).
    calibrated = PredictConfig(gpus=8, link="nvlink", gpu="a100", model="gpt2", calibration="a100-nvswitch-8gpu")
    assert resolved_compute_efficiency_of(calibrated) == MULTI_GPU_TRAINING_EFFICIENCY


def resolved_compute_efficiency_of(config: PredictConfig) -> float:
    from dpsim.predict.config import resolved_compute_efficiency

    return resolved_compute_efficiency(config)[0]


def test_one_gpu_throughput_of_a_multi_gpu_prediction_is_the_one_gpu_predictions():
    """The multi-GPU default is what several GPUs lose: ``single_gpu_samples_per_s`` (and so the
    scaling efficiency) is the one-GPU job's, which runs without it."""
    from dpsim.predict.run import predict
    from dpsim.workload.compute import MULTI_GPU_TRAINING_EFFICIENCY

    job = dict(link="nvlink", gpu="h100", model="gpt2", steps=2)
    one = predict(PredictConfig(gpus=1, gpus_per_node=1, **job))
    eight = predict(PredictConfig(gpus=8, gpus_per_node=8, **job))
    assert eight.single_gpu_samples_per_s == pytest.approx(one.single_gpu_samples_per_s, rel=1e-9)
    assert eight.scaling_efficiency < MULTI_GPU_TRAINING_EFFICIENCY + 1e-9
