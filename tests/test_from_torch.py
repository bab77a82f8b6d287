"""Torch-module workloads traced on the meta device.

Evidence that a ``--model file.py:fn`` workload is what torch runs:

* its parameters (names, shapes, registration order) are ``named_parameters()``;
* for the five catalog families, the tiny torch reference modules traced on meta give
  exactly the catalog builder's parameters, gradient-ready order and forward FLOPs;
* the gradient-ready order recorded on meta equals the order of a real CPU backward,
  and the DDP buckets built from the traced workload equal what real
  ``DistributedDataParallel`` (gloo, world size 1) rebuilds, at several caps;
* everything dpsim cannot trace is refused with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpsim.errors import WorkloadError
from dpsim.workload.from_torch import ROOT_LAYER_NAME, load_torch_workload, parse_input_shape, parse_model_ref, trace_summary, workload_from_module
from dpsim.workload.model_ref import is_torch_model_ref

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import torch_user_models as user  # noqa: E402  (tests/ is on sys.path)
from test_buckets import (  # noqa: E402  helpers only (no test functions)
    MLP,
    BigParam,
    MixedPrecision,
    StockEncoder,
    TinyGPT,
    _catalog_case,
    _tiny_configs,
    observed_ready_order,
    run_ddp,
)

HERE = Path(__file__).parent
USER_FILE = str(HERE / "torch_user_models.py")


# ------------------------------------------------------------------ spec strings


def test_model_refs_are_recognised_and_validated(tmp_path):
    assert is_torch_model_ref("a.py:build") and is_torch_model_ref("pkg.mod:build")
    assert not is_torch_model_ref("gpt2-xl")
    ref = parse_model_ref(f"{USER_FILE}:tied_lm")
    assert ref.is_file and ref.function == "tied_lm" and ref.example_function is None
    ref = parse_model_ref("torch_user_models:sharding_net:sharding_net_input")
    assert not ref.is_file and ref.example_function == "sharding_net_input"
    bad = ["x.py", ":build", "a.py:", "a.py:1fn", "a.py:class", "a b:c", "pkg..mod:fn", "a:b:c:d:e",
           str(tmp_path / "missing.py") + ":f", "dir/file.txt:f"]
    for text in bad:
        with pytest.raises(WorkloadError) as info:
            parse_model_ref(text)
        assert str(info.value).startswith("--model: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("text,shape,dtype", [
    ("8,3,224,224", (8, 3, 224, 224), "float32"), ("4x1024:int64", (4, 1024), "int64"),
    (" 2 , 16 :long", (2, 16), "int64"), ("1:bf16" if False else "1:bfloat16", (1,), "bfloat16"),
])
def test_input_shapes_parse(text, shape, dtype):
    assert parse_input_shape(text) == (shape, dtype)


@pytest.mark.parametrize("text", ["", "0,3", "2,-1", "a,b", "2,3:complex", "2,,3", "2.5",
                                  # torch's 64-bit sizes overflowed: a TypeError traceback from torch.zeros
                                  "99999999999999999999,64", "9" * 40 + ",1", "1048576,1048576,1024"])
def test_bad_input_shapes_name_the_flag(text):
    with pytest.raises(WorkloadError) as info:
        parse_input_shape(text)
    assert str(info.value).startswith("--input-shape: ")


# ------------------------------------------------------------- what is recorded


def test_file_and_module_refs_load_the_same_workload():
    a = load_torch_workload(f"{USER_FILE}:tied_lm")
    b = load_torch_workload("torch_user_models:tied_lm")
    assert [p.name for p in a.params] == [p.name for p in b.params]
    assert a.forward_flops_per_sample == b.forward_flops_per_sample


def test_parameters_are_named_parameters_in_registration_order():
    spec = load_torch_workload("torch_user_models:tied_lm")
    real = user.tied_lm()
    assert [(p.name, p.shape, p.dtype) for p in spec.params] == [
        (n, tuple(t.shape), "float32") for n, t in real.named_parameters()]
    assert spec.param_count == sum(t.numel() for t in real.parameters())  # tied weight counted once
    # blocks are registered before the embedding but run after it: layers follow execution.
    assert spec.layers[0].name == "wte" and spec.layers[0].params[0].name == "wte.weight"
    assert spec.registration_order is not None
    # the head uses the tied weight after the embedding: the embedding (first user) owns it.
    head = next(l for l in spec.layers if l.name == "head")
    assert head.params == () and head.forward_flops_per_sample == 2 * 16 * 33 * 101
    assert {l.unit for l in spec.layers} == {None, "blocks.0", "blocks.1", "blocks.2"}
    assert spec.tokens_per_sample == 16
    summary = trace_summary(spec)
    assert summary["units"] == ["blocks.0", "blocks.1", "blocks.2"]


def test_meta_ready_order_equals_cpu_backward():
    spec = load_torch_workload("torch_user_models:tied_lm")
    torch.manual_seed(0)
    cpu = observed_ready_order(user.tied_lm(), torch.randint(0, 101, (2, 16)))
    assert [p.name for p in spec.grad_ready_params] == cpu


def test_input_shape_gives_the_example_and_the_batch_divides():
    one = load_torch_workload("torch_user_models:sharding_net", input_shape="1,7")
    four = load_torch_workload("torch_user_models:sharding_net", input_shape="4x7")
    assert one.forward_flops_per_sample == pytest.approx(four.forward_flops_per_sample)
    assert one.activation_bytes_per_sample == pytest.approx(four.activation_bytes_per_sample)
    explicit = load_torch_workload("torch_user_models:sharding_net:sharding_net_input")
    assert explicit.forward_flops_per_sample == pytest.approx(one.forward_flops_per_sample)
    # 2 FLOPs per multiply-add of every Linear, per sample.
    d_in, d, h, n, out = 7, 33, 101, 3, 5
    assert one.forward_flops_per_sample == 2 * (d_in * d + n * 2 * d * h + d * out)
    assert one.tokens_per_sample is None  # float input: not a token model


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "vit", "resnet"])
def test_reference_modules_trace_to_the_catalog_workload(family):
    """Meta trace of the torch reference module == the catalog's own spec (params, order, FLOPs)."""
    refs = pytest.importorskip("torch_reference_models")
    from dpsim.workload.architectures import build_model

    cfg = _tiny_configs()[family]
    catalog = build_model(cfg)
    with torch.device("meta"):
        module = refs.torch_model_for(cfg)
    traced = workload_from_module(module, refs.example_input(cfg, batch=2), name=family)
    assert [(p.name, p.shape) for p in traced.params] == [(p.name, p.shape) for p in catalog.params]
    assert [p.name for p in traced.grad_ready_params] == [p.name for p in catalog.grad_ready_params]
    assert traced.forward_flops_per_sample == catalog.forward_flops_per_sample
    # the blocks found by the trace are the catalog's units
    assert {l.unit for l in traced.layers} - {None} == {l.unit for l in catalog.layers} - {None}


def test_unit_classes_override_block_detection():
    spec = workload_from_module(user.tied_lm().to("meta"), user.example_input(), name="t",
                                unit_classes=["LayerNorm"])
    assert {l.unit for l in spec.layers} - {None} == {"blocks.0.ln", "blocks.1.ln", "blocks.2.ln", "ln_f"}


# ----------------------------------------------------------------- refusals


@pytest.mark.parametrize("fn,shape,needle", [
    ("not_a_module", "2,4", "returned int, not a torch.nn.Module"),
    ("data_dependent", "2,4", "forward failed on the meta device"),
    ("unused", "2,4", "'spare.weight' is not used by forward"),
    ("frozen", "2,4", "requires_grad=False"),
    ("sparse", "2,3:int64", "sparse gradients"),
    ("custom_kernel", "2,4", "dpsim_tests::fused_matmul, whose FLOPs dpsim cannot count"),
    ("raises", "2,4", "raises() failed on the meta device: ValueError"),
    ("missing_fn", "2,4", "has no function 'missing_fn'"),
])
def test_unsupported_models_get_one_clear_line(fn, shape, needle):
    with pytest.raises(WorkloadError) as info:
        load_torch_workload(f"torch_user_models:{fn}", input_shape=shape)
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and msg.startswith("--model: ")


def test_missing_example_input_and_import_errors(tmp_path):
    with pytest.raises(WorkloadError, match="needs an example input"):
        load_torch_workload("torch_user_models:sharding_net:no_such_input_fn")
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_package_xyz\n")
    with pytest.raises(WorkloadError, match="importing .* failed: ModuleNotFoundError"):
        load_torch_workload(f"{broken}:build", input_shape="1,2")
    with pytest.raises(WorkloadError, match="importing 'no_such_pkg_xyz' failed"):
        load_torch_workload("no_such_pkg_xyz:build", input_shape="1,2")
    with pytest.raises(WorkloadError, match="--input-shape: give it or the example function"):
        load_torch_workload("torch_user_models:sharding_net:sharding_net_input", input_shape="1,7")



def test_a_lazy_module_gets_one_line(tmp_path):
    # LazyLinear's weight is uninitialized until a forward: registering its gradient hook raised
    # torch's ValueError, a traceback.
    path = tmp_path / "lazy.py"
    path.write_text("import torch\ndef build():\n    return torch.nn.Sequential(torch.nn.Flatten(), "
                    "torch.nn.LazyLinear(4))\n")
    with pytest.raises(WorkloadError, match=r"parameter '1.weight' is not initialized \(a torch.nn.Lazy"):
        load_torch_workload(f"{path}:build", input_shape="2,3,4")


def test_a_builder_that_prints_leaves_predict_json_valid(tmp_path, capsys):
    # A print() in the user's file went to stdout ahead of --json's object, which no longer parsed.
    from dpsim.cli import main

    path = tmp_path / "chatty.py"
    path.write_text("import torch\nprint('importing')\ndef build():\n    print('building')\n"
                    "    return torch.nn.Linear(16, 16)\n")
    assert main(["predict", "--gpus", "8", "--link", "nvlink", "--model", f"{path}:build", "--input-shape", "4,16",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["n_gpus"] == 8 and "building" in err


@pytest.mark.parametrize("source, ref_tail, needle", [
    ("import sys\nsys.exit(0)\n", ":build", "importing .* failed: SystemExit: 0"),
    ("import sys\ndef build():\n    sys.exit(3)\n", ":build", r"build\(\) failed on the meta device: SystemExit: 3"),
    ("import torch\ndef build():\n    return torch.nn.Linear(2, 2)\ndef example():\n    raise SystemExit('no')\n",
     ":build:example", "the example-input function failed: SystemExit: no"),
    ("import torch\nclass M(torch.nn.Linear):\n    def forward(self, x):\n        raise SystemExit(1)\n"
     "def build():\n    return M(2, 2)\n", ":build", "forward failed on the meta device .*SystemExit: 1"),
])
def test_user_code_calling_sys_exit_gets_one_line(tmp_path, source, ref_tail, needle):
    # SystemExit is no Exception: it went past every handler and ended dpsim with the file's status
    # and no message (sys.exit(0) in a model file: exit status 0, no prediction printed).
    path = tmp_path / "exits.py"
    path.write_text(source)
    with pytest.raises(WorkloadError, match=needle) as info:
        load_torch_workload(f"{path}{ref_tail}", input_shape=None if ref_tail.count(":") > 1 else "1,2")
    assert "\n" not in str(info.value)


def test_a_lazy_package_whose_dependency_is_broken_gets_one_line(tmp_path, monkeypatch):
    # transformers resolves `transformers:LlamaConfig` through a module __getattr__ that imports
    # the class's module on first access; a torchvision built for another torch makes that raise
    # (ModuleNotFoundError, or RuntimeError "operator torchvision::nms does not exist") at the
    # attribute lookup, after the package itself imported cleanly.
    (tmp_path / "lazy_pkg_xyz.py").write_text(
        "def __getattr__(name):\n"
        "    raise ModuleNotFoundError(f'Could not import module {name!r}.')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for ref in ("lazy_pkg_xyz:LlamaConfig", "lazy_pkg_xyz:build"):
        with pytest.raises(WorkloadError) as info:
            load_torch_workload(ref, input_shape="1,2")
        msg = str(info.value)
        assert msg.startswith("--model: importing ") and "ModuleNotFoundError" in msg and "\n" not in msg
    (tmp_path / "lazy_example_xyz.py").write_text(
        "import torch\n"
        "def build():\n"
        "    return torch.nn.Linear(2, 2)\n"
        "def __getattr__(name):\n"
        "    raise RuntimeError('operator torchvision::nms does not exist')\n")
    with pytest.raises(WorkloadError, match="importing 'example_input' from 'lazy_example_xyz' failed: RuntimeError"):
        load_torch_workload("lazy_example_xyz:build")

def test_lstm_decomposes_to_counted_matmuls():
    spec = load_torch_workload("torch_user_models:lstm", input_shape="2,3,4")
    # 3 steps x (input 4 + hidden 8) x 4 gates x hidden 8 multiply-adds x 2.
    assert spec.forward_flops_per_sample == 3 * 2 * (4 * 32 + 8 * 32)


# ------------------------------------------------------ real DDP on the traced spec


def _groups(plan):
    return [list(b.param_names) for b in plan.buckets]


USER_MODELS = [MLP, BigParam, TinyGPT, MixedPrecision, StockEncoder]


@pytest.mark.slow
@pytest.mark.parametrize("cap", [None, 0.5, 1, 4], ids=lambda c: f"cap={c}")
@pytest.mark.parametrize("model_cls", USER_MODELS, ids=lambda m: m.__name__)
def test_traced_workload_buckets_equal_real_ddp(process_group, model_cls, cap):
    """Parameter order, sizes and buckets of the traced workload == what real DDP builds."""
    from dpsim.workload.buckets import ddp_buckets

    with torch.device("meta"):
        meta_module = model_cls()
    spec = workload_from_module(meta_module, model_cls.example(), name=model_cls.__name__)
    torch.manual_seed(0)
    module = model_cls()
    assert [(p.name, p.shape, p.dtype) for p in spec.params] == [
        (n, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in module.named_parameters()]
    groups, sizes, ready, _ = run_ddp(module, model_cls.example(), cap)
    assert [p.name for p in spec.grad_ready_params] == ready
    plan = ddp_buckets(spec, bucket_cap_mb=cap)
    assert _groups(plan) == groups
    assert [b.size_bytes for b in plan.buckets] == sizes


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "vit", "resnet"])
def test_traced_reference_modules_bucket_like_ddp(process_group, family):
    from dpsim.workload.buckets import ddp_buckets

    refs = pytest.importorskip("torch_reference_models")
    cfg = _tiny_configs()[family]
    with torch.device("meta"):
        meta_module = refs.torch_model_for(cfg)
    spec = workload_from_module(meta_module, refs.example_input(cfg, batch=2), name=family)
    _, caps, ddp_run = _catalog_case(family)
    for cap in caps[1:4]:
        groups, sizes, _ = ddp_run(cap)
        plan = ddp_buckets(spec, bucket_cap_mb=cap)
        assert _groups(plan) == groups, cap
        assert [b.size_bytes for b in plan.buckets] == sizes, cap


# --------------------------------------------------------------- end to end


def test_predict_and_memory_take_a_torch_module(capsys):
    from dpsim.cli.app import main

    assert main(["predict", "--model", f"{USER_FILE}:tied_lm", "--gpus", "8", "--link", "nvlink",
                 "--strategy", "fsdp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["param_count"] == sum(t.numel() for t in user.tied_lm().parameters())
    assert out["strategy"] == "fsdp" and out["config"]["model"].endswith(":tied_lm")
    assert main(["memory", "--model", "torch_user_models:sharding_net", "--input-shape", "4,7",
                 "--strategy", "zero3", "--gpus", "8", "--link", "nvlink", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert mem["schema"] == "dpsim.memory/1" and mem["fits"] is True


@pytest.mark.parametrize("args,needle", [
    (["--model", "torch_user_models:data_dependent", "--input-shape", "2,4"], "--model: forward failed"),
    (["--model", "torch_user_models:tied_lm", "--seq-len", "8"], "--seq-len: does not apply"),
    (["--model", "gpt2", "--input-shape", "2,4"], "--input-shape: applies only to a torch module"),
    (["--model", "nope_dir/x.py:f"], "--model: file 'nope_dir/x.py' does not exist"),
])
def test_cli_torch_errors_are_one_line_exit_2(capsys, args, needle):
    from dpsim.cli.app import main

    assert main(["predict", "--gpus", "8", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_work_in_the_root_forward_is_a_root_layer():
    class Root(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(4, 3))

        def forward(self, x):
            return x @ self.w  # the root module itself computes

    spec = workload_from_module(Root(), torch.zeros(2, 4), name="root")
    assert [l.name for l in spec.layers] == [ROOT_LAYER_NAME]
    assert spec.layers[0].forward_flops_per_sample == 2 * 4 * 3
    plain = load_torch_workload("torch_user_models:sharding_net", input_shape="1,7")
    assert ROOT_LAYER_NAME not in [l.name for l in plain.layers]  # its root only calls children


@pytest.mark.slow  # builds MAX_TRACED_MODULES + 1 torch modules (1.5-2.5 s): the full suite runs it
def test_a_model_of_more_modules_than_the_limit_is_refused_before_tracing():
    import torch

    from dpsim.limits import MAX_TRACED_MODULES

    deep = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(MAX_TRACED_MODULES)])  # + itself
    with pytest.raises(WorkloadError, match=f"has {MAX_TRACED_MODULES + 1:,} modules; expected at most"):
        workload_from_module(deep, torch.zeros(2, 4), name="deep")


def test_nested_blocks_give_the_outermost_units():
    import torch

    class Block(torch.nn.Module):
        def __init__(self, inner: bool):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.sub = torch.nn.ModuleList([Block(False), Block(False)]) if inner else None

        def forward(self, x):
            x = self.lin(x)
            for b in self.sub or ():
                x = b(x)
            return x

    model = torch.nn.Sequential(Block(True), Block(True))
    spec = workload_from_module(model, torch.zeros(2, 4), name="nested", unit_classes=["Block"])
    assert {layer.unit for layer in spec.layers} == {"0", "1"}


def test_attention_with_a_value_head_of_its_own_size_traces():
    """MLA's attention (DeepSeek-V2/V3: q and k heads of 192, v heads of 128): the trace ran it as the
    flash kernel, which needs one head size (sdp_utils.cpp check_head_dim_size_flash), and the meta
    flash kernel returned q's head size, so the output projection failed to trace (fuzz6:
    transformers:DeepseekV3Config(num_hidden_layers=2) was refused). SDPA runs the memory-efficient
    kernel there, whose output has v's head size."""
    import torch

    class Mla(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qk = torch.nn.Linear(64, 2 * 4 * 24)
            self.v = torch.nn.Linear(64, 4 * 16)
            self.o = torch.nn.Linear(4 * 16, 64)

        def forward(self, x):
            b, s, _ = x.shape
            q, k = self.qk(x).view(b, s, 2, 4, 24).permute(2, 0, 3, 1, 4)
            v = self.v(x).view(b, s, 4, 16).transpose(1, 2)
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(out.transpose(1, 2).reshape(b, s, 64))

    spec = workload_from_module(Mla(), torch.zeros(2, 8, 64), name="mla")
    assert spec.param_count == sum(p.numel() for p in Mla().parameters())
    assert spec.forward_flops_per_sample > 0
