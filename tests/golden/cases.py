"""Golden cases: CLI invocations whose ``--json`` output is frozen in ``tests/golden/*.json``.

They pin the numbers ``predict``, ``collective``, ``memory``, ``goodput``, ``sweep`` and ``mix``
print for every preset x strategy x a few models, plus the flags that change the
collective model (``--algo/--proto/--jobs/--calibration/--degrade``) and the
variability path; ``predict``'s tensor x pipeline layouts, a small ``plan`` search and
what a ``report`` page shows (tests/golden/run.py reads the page). A change that moves any of them must say why in its commit and
regenerate the files with ``python tests/golden/regenerate.py``.
"""

from __future__ import annotations

from pipeline_cases import pipeline_cases

PRESETS = ("nvlink", "infiniband", "ethernet", "pcie", "dgx-a100", "aws-p4de", "aws-p5")
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")
MODELS = (("gpt2", 4), ("llama-2-7b", 1), ("resnet50", 32))


def predict_cases() -> dict[str, list[str]]:
    cases: dict[str, list[str]] = {}
    for link in PRESETS:
        for strategy in STRATEGIES:
            for model, mb in MODELS:
                cases[f"{link}/{strategy}/{model}"] = [
                    "predict", "--gpus", "16", "--link", link, "--strategy", strategy, "--model", model,
                    "--micro-batch", str(mb)]
    extra = {
        "default": [],
        "ethernet-64-default": ["--gpus", "64", "--link", "ethernet"],
        "one-gpu": ["--gpus", "1", "--link", "infiniband"],
        "one-node": ["--gpus", "8", "--link", "infiniband"],
        "big-ib": ["--gpus", "65536", "--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "1"],
        "no-overlap": ["--gpus", "32", "--link", "infiniband", "--no-overlap"],
        "grad-accum": ["--gpus", "32", "--link", "ethernet", "--grad-accum", "4"],
        "grad-accum-zero2": ["--gpus", "32", "--link", "ethernet", "--grad-accum", "4", "--strategy", "zero2"],
        "ckpt": ["--gpus", "32", "--link", "infiniband", "--activation-checkpointing", "--model", "llama-2-7b",
                 "--micro-batch", "2"],
        "ckpt-fsdp": ["--gpus", "32", "--link", "infiniband", "--activation-checkpointing", "--model",
                      "llama-2-7b", "--micro-batch", "2", "--strategy", "fsdp"],
        "fsdp-layer": ["--gpus", "16", "--link", "nvlink", "--strategy", "fsdp", "--fsdp-unit", "layer"],
        "bucket-1": ["--gpus", "32", "--link", "ethernet", "--bucket-cap-mb", "1"],
        "bucket-100": ["--gpus", "32", "--link", "ethernet", "--bucket-cap-mb", "100"],
        "jobs-2-interleaved": ["--gpus", "32", "--link", "infiniband", "--jobs", "2", "--placement", "interleaved"],
        "jobs-3-packed": ["--gpus", "16", "--link", "ethernet", "--jobs", "3"],
        "algo-ring": ["--gpus", "32", "--link", "aws-p5", "--algo", "ring"],
        "algo-tree": ["--gpus", "32", "--link", "aws-p5", "--algo", "tree"],
        "algo-hier": ["--gpus", "32", "--link", "infiniband", "--algo", "hierarchical"],
        "algo-hd": ["--gpus", "32", "--link", "infiniband", "--algo", "halving_doubling"],
        "proto-simple": ["--gpus", "32", "--link", "nvlink", "--proto", "Simple"],
        "no-nvls": ["--gpus", "16", "--link", "nvlink", "--algo", "^nvls,nvls_tree"],
        "fat-tree": ["--gpus", "1024", "--topology", "topologies/examples/fat-tree-3tier.yaml"],
        "nvl72": ["--gpus", "144", "--topology", "topologies/examples/nvl72-ib.yaml", "--model", "llama-2-7b",
                  "--micro-batch", "1"],
        "gpn-4": ["--gpus", "32", "--link", "infiniband", "--gpus-per-node", "4"],
        "gpu-a100": ["--gpus", "16", "--link", "ethernet", "--gpu", "a100"],
        "v100-fp16": ["--gpus", "16", "--link", "pcie", "--gpu", "v100", "--precision", "fp16-mixed"],
        "fp32-sgd": ["--gpus", "16", "--link", "infiniband", "--precision", "fp32", "--optimizer", "sgd"],
        "amp-adam": ["--gpus", "16", "--link", "infiniband", "--precision", "amp", "--optimizer", "adam"],
        "bf16-momentum": ["--gpus", "16", "--link", "infiniband", "--precision", "bf16", "--optimizer",
                          "sgd-momentum"],
        "single-step": ["--gpus", "16", "--link", "nvlink", "--model", "gpt2", "--single-gpu-step-ms", "180"],
        "single-rate": ["--gpus", "16", "--link", "nvlink", "--model", "gpt2", "--single-gpu-samples-per-s", "30"],
        "slowdown-eff": ["--gpus", "16", "--link", "infiniband", "--overlap-slowdown", "0.3",
                         "--compute-efficiency", "0.4"],
        "seq-len": ["--gpus", "16", "--link", "infiniband", "--model", "gpt2", "--seq-len", "512"],
        "no-flash": ["--gpus", "16", "--link", "infiniband", "--model", "gpt2", "--no-flash-attention"],
        "steps-5": ["--gpus", "16", "--link", "infiniband", "--steps", "5"],
        "oom-70b": ["--gpus", "16", "--link", "infiniband", "--model", "llama-2-70b", "--micro-batch", "1"],
        "cal-a100": ["--gpus", "8", "--link", "dgx-a100", "--calibration", "a100-nvswitch-8gpu"],
        "cal-p4de": ["--gpus", "16", "--link", "aws-p4de", "--calibration", "aws-p4de-2node"],
        "cal-p4de-64": ["--gpus", "64", "--link", "aws-p4de", "--calibration", "aws-p4de-2node"],
        "cal-p4de-hybrid": ["--gpus", "16", "--link", "aws-p4de", "--calibration", "aws-p4de-2node",
                            "--strategy", "fsdp-hybrid"],
        "cal-p4de-zero3": ["--gpus", "16", "--link", "aws-p4de", "--calibration", "aws-p4de-2node",
                           "--strategy", "zero3"],
        "cal-p5": ["--gpus", "16", "--link", "aws-p5", "--calibration", "aws-p5-2node"],
        "straggler": ["--gpus", "32", "--link", "infiniband", "--straggler", "node1:1.5x"],
        "degrade-nic": ["--gpus", "32", "--link", "infiniband", "--degrade", "node0.nic0:50%"],
        "degrade-class": ["--gpus", "32", "--link", "ethernet", "--degrade", "ethernet:50%"],
        "degrade-hybrid": ["--gpus", "32", "--link", "infiniband", "--degrade", "node1.nic3:25%", "--strategy",
                           "fsdp-hybrid"],
        "noise": ["--gpus", "64", "--link", "infiniband", "--noise-cv", "0.05", "--mc-samples", "3",
                  "--mc-steps", "5"],
        "noise-lognormal": ["--gpus", "64", "--link", "ethernet", "--noise-cv", "0.1", "--noise-dist",
                            "lognormal", "--mc-samples", "2", "--mc-steps", "4", "--seed", "7"],
        "hiccups": ["--gpus", "64", "--link", "infiniband", "--hiccup-rate-per-s", "0.01", "--hiccup-s", "0.5",
                    "--mc-samples", "2", "--mc-steps", "5"],
        "cal-noise": ["--gpus", "16", "--link", "aws-p4de", "--calibration", "aws-p4de-2node", "--straggler",
                      "gpu3:1.2x"],
        # Transformers given by their shapes (tests/test_shapes.py cites them) under tensor x pipeline layouts.
        "shape-bloom-176b": ["--gpus", "320", "--link", "infiniband", "--gpu", "h100", "--tp", "8", "--pp", "10",
                             "--global-batch", "128", "--micro-batch", "1", "--recompute", "full", "--model",
                             "transformer:hidden=14336,layers=70,heads=112,vocab=250880,seq=2048,act=gelu,"
                             "norm=layernorm,pos=alibi,tied=true,embed_norm=true,dropout=0,name=bloom-176b"],
        "shape-opt-175b": ["--gpus", "192", "--link", "infiniband", "--gpu", "h100", "--tp", "8", "--pp", "12",
                           "--global-batch", "96", "--micro-batch", "1", "--sequence-parallel", "--recompute",
                           "selective", "--model", "transformer:hidden=12288,layers=96,heads=96,vocab=50272,"
                           "seq=2048,positions=2050,act=relu,norm=layernorm,pos=learned,tied=true,name=opt-175b"],
        # FP8 recipes (dpsim/workload/fp8.py): torchao float8 with FSDP2's float8 all-gather, TransformerEngine
        # delayed scaling under DDP + autocast, MXFP8 on Blackwell.
        "fp8-fsdp2-7b": ["--gpus", "8", "--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "2",
                         "--strategy", "fsdp", "--fsdp-version", "2", "--precision", "bf16-params", "--fp8",
                         "torchao-tensorwise"],
        "fp8-te-delayed": ["--gpus", "16", "--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "1",
                           "--fp8", "te-delayed"],
        "mxfp8-b200": ["--gpus", "16", "--link", "infiniband", "--gpu", "b200", "--model", "llama-2-7b",
                       "--micro-batch", "2", "--strategy", "fsdp", "--precision", "bf16-params", "--fp8", "mxfp8"],
        # torch.compile (dpsim/workload/compiled.py): Llama-2-7B FSDP on 8 H100s, bf16 and torchao float8.
        "compile-fsdp-7b": ["--gpus", "8", "--link", "nvlink", "--gpu", "h100", "--model", "llama-2-7b",
                            "--micro-batch", "2", "--strategy", "fsdp", "--precision", "bf16-params", "--compile"],
        "compile-fp8-fsdp2-7b": ["--gpus", "8", "--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "2",
                                 "--strategy", "fsdp", "--fsdp-version", "2", "--precision", "bf16-params", "--fp8",
                                 "torchao-tensorwise", "--compile"],
        # InternLM's ZeRO-1 (dpsim/strategies/zero.py): optimizer sharded within each node, and over every rank.
        "zero1-internlm-node": ["--gpus", "64", "--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "2",
                                "--grad-accum", "4", "--strategy", "zero1", "--precision", "bf16-params",
                                "--zero-impl", "internlm", "--zero-group", "8"],
        "zero1-internlm-all": ["--gpus", "64", "--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "2",
                               "--grad-accum", "4", "--strategy", "zero1", "--precision", "bf16-params",
                               "--zero-impl", "internlm"],
    }
    for name, args in extra.items():
        cases[f"extra/{name}"] = ["predict", *args]
    return {k: v + ["--json"] for k, v in cases.items()}


def collective_cases() -> dict[str, list[str]]:
    cases = {}
    for link in PRESETS:
        for op in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
            cases[f"{link}/{op}"] = ["collective", "--op", op, "--gpus", "16", "--link", link,
                                     "-b", "8", "-e", "4G", "-f", "4"]
        cases[f"{link}/one-node"] = ["collective", "--gpus", "8", "--link", link, "-b", "1K", "-e", "1G", "-f", "8"]
    cases["cal/a100"] = ["collective", "--gpus", "8", "--link", "dgx-a100", "--calibration", "a100-nvswitch-8gpu",
                         "-b", "32K", "-e", "16G", "-f", "4"]
    cases["cal/p4de-64"] = ["collective", "--gpus", "64", "--link", "aws-p4de", "--calibration", "aws-p4de-2node",
                            "-b", "64K", "-e", "4G", "-f", "4", "--op", "reduce_scatter"]
    cases["algo/ring-tree"] = ["collective", "--gpus", "64", "--link", "aws-p5", "--algo", "ring,tree",
                               "-b", "1M", "-e", "16G", "-f", "4"]
    cases["algo/hd"] = ["collective", "--gpus", "32", "--link", "infiniband", "--algo", "halving_doubling",
                        "-b", "1M", "-e", "1G", "-f", "8"]
    cases["dtype/half"] = ["collective", "--gpus", "16", "--link", "nvlink", "-d", "half", "-b", "8", "-e", "1M"]
    cases["fat-tree"] = ["collective", "--gpus", "2048", "--topology", "topologies/examples/fat-tree-3tier.yaml",
                         "-b", "1M", "-e", "1G", "-f", "8"]
    return {k: v + ["--json"] for k, v in cases.items()}


def memory_cases() -> dict[str, list[str]]:
    cases = {}
    for strategy in STRATEGIES:
        for model, mb in (("llama-2-7b", 1), ("llama-2-70b", 1), ("gpt2-xl", 8)):
            cases[f"{strategy}/{model}"] = ["memory", "--gpus", "64", "--link", "infiniband", "--strategy", strategy,
                                            "--model", model, "--micro-batch", str(mb)]
    cases["ckpt/70b"] = ["memory", "--gpus", "64", "--link", "infiniband", "--model", "llama-2-70b",
                         "--micro-batch", "2", "--activation-checkpointing", "--strategy", "zero3"]
    cases["fp8-fsdp2"] = ["memory", "--gpus", "8", "--link", "infiniband", "--strategy", "fsdp", "--fsdp-version", "2",
                          "--model", "llama-2-7b", "--micro-batch", "2", "--precision", "bf16-params", "--fp8",
                          "torchao-tensorwise"]
    cases["zero1-internlm"] = ["memory", "--gpus", "64", "--link", "infiniband", "--strategy", "zero1", "--zero-impl",
                               "internlm", "--zero-group", "8", "--model", "llama-2-7b", "--micro-batch", "1"]
    cases["v100"] = ["memory", "--gpus", "8", "--link", "pcie", "--gpu", "v100-16gb", "--precision", "fp16-mixed",
                     "--model", "bert-large", "--micro-batch", "16"]
    return {k: v + ["--json"] for k, v in cases.items()}


def goodput_cases() -> dict[str, list[str]]:
    cases = {
        "default": ["goodput", "--gpus", "1024", "--link", "infiniband", "--duration", "7d", "--runs", "20"],
        "tokens": ["goodput", "--gpus", "512", "--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "1",
                   "--tokens", "100B", "--runs", "20", "--checkpoint-interval", "30min"],
        "shrink": ["goodput", "--gpus", "256", "--link", "ethernet", "--duration", "3d", "--runs", "20",
                   "--elastic", "shrink", "--seed", "3"],
    }
    return {k: v + ["--json"] for k, v in cases.items()}


def sweep_cases() -> dict[str, list[str]]:
    return {
        "grid": ["sweep", "--gpus", "8,64", "--link", "infiniband,ethernet", "--model", "gpt2",
                 "--strategy", "ddp,zero3", "--json"],
        # Every row on half-rate NICs and one server's first NIC at a quarter (predict's --degrade).
        "degrade": ["sweep", "--gpus", "16,64", "--link", "infiniband", "--model", "gpt2", "--strategy",
                    "ddp,zero3", "--degrade", "infiniband:50%", "--degrade", "node1.nic0:50%", "--json"],
    }


def layout_cases() -> dict[str, list[str]]:
    """``predict --tp/--pp``: the layout engine (tensor, pipeline, schedules, sharded data parallelism)."""
    llama7 = ["--model", "llama-2-7b", "--micro-batch", "1"]
    cases = {
        "tp-only": ["--gpus", "64", "--link", "dgx-a100", *llama7, "--tp", "8", "--global-batch", "64"],
        "pp-1f1b": ["--gpus", "32", "--link", "infiniband", *llama7, "--pp", "4", "--global-batch", "64"],
        "pp-gpipe-uneven": ["--gpus", "32", "--link", "infiniband", *llama7, "--pp", "4", "--global-batch", "64",
                            "--schedule", "gpipe", "--stage-layers", "7,8,8,9"],
        "tp-pp-interleaved": ["--gpus", "64", "--link", "aws-p5", "--model", "llama-2-13b", "--micro-batch", "1",
                              "--tp", "4", "--pp", "4", "--schedule", "1f1b-interleaved", "--virtual-stages", "2",
                              "--global-batch", "128"],
        "zero1-sequence-parallel": ["--gpus", "64", "--link", "dgx-a100", *llama7, "--tp", "4", "--pp", "2",
                                    "--sequence-parallel", "--strategy", "zero1", "--global-batch", "128",
                                    "--recompute", "selective"],
        # HSDP under tensor and pipeline parallelism (torchtitan's dp_replicate x dp_shard x tp x pp): shard
        # groups of 4 data-parallel ranks, gradient shards all-reduced across the 4 groups.
        "hsdp-tp-pp": ["--gpus", "128", "--link", "infiniband", *llama7, "--tp", "4", "--pp", "2",
                       "--strategy", "fsdp-hybrid", "--zero-group", "4", "--global-batch", "64"],
        # HSDP with context parallelism (torchtitan's dp_shard_cp): shard groups of 4 data-parallel ranks and their
        # 2 context-parallel ranks, gradient shards all-reduced across the 2 groups.
        "hsdp-tp-cp": ["--gpus", "64", "--link", "infiniband", *llama7, "--seq-len", "16384", "--tp", "4", "--cp", "2",
                       "--strategy", "fsdp-hybrid", "--zero-group", "4", "--global-batch", "16"],
        # One NIC of node 3 at half rate under tp 8 x pp 2: the dp and pp copies holding it pace the step.
        "degrade-tp-pp": ["--gpus", "64", "--link", "infiniband", "--model", "llama-2-13b", "--tp", "8", "--pp", "2",
                          "--degrade", "node3.nic0:50%"],
        "deepspeed-pipeline": ["--gpus", "32", "--link", "ethernet", "--model", "gpt2-xl", "--micro-batch", "2",
                               "--pp", "4", "--schedule", "deepspeed", "--global-batch", "64",
                               "--no-grad-accum-fusion"],
        # Context parallelism (dpsim/strategies/context.py): a ring, a balanced-off all-gather, Ulysses,
        # and Llama-2-70B at 32K tokens with tensor, context, pipeline and data parallelism.
        "cp-ring": ["--gpus", "16", "--link", "aws-p5", *llama7, "--seq-len", "32768", "--cp", "8",
                    "--strategy", "zero1", "--recompute", "full", "--global-batch", "4"],
        "cp-allgather-unbalanced": ["--gpus", "16", "--link", "aws-p5", *llama7, "--seq-len", "16384", "--cp", "4",
                                    "--cp-comm", "all-gather", "--no-cp-balance", "--global-batch", "8",
                                    "--recompute", "selective", "--strategy", "zero1"],
        "cp-a2a-tp": ["--gpus", "16", "--link", "aws-p5", *llama7, "--seq-len", "32768", "--tp", "2", "--cp", "4",
                      "--cp-comm", "a2a", "--sequence-parallel", "--global-batch", "4", "--recompute", "full",
                      "--strategy", "zero1"],
        # PyTorch's async tensor parallelism as torchtitan runs it (FSDP2 x TP 8, sequence parallel).
        "tp-async-torchtitan": ["--gpus", "32", "--link", "aws-p5", "--model", "llama-3-8b", "--micro-batch", "1",
                                "--tp", "8", "--sequence-parallel", "--tp-comm-overlap", "async", "--strategy", "fsdp",
                                "--recompute", "full", "--global-batch", "32"],
        "cp-llama70b": ["--gpus", "128", "--link", "aws-p5", "--model", "llama-2-70b", "--micro-batch", "1",
                        "--seq-len", "32768", "--tp", "8", "--cp", "4", "--pp", "4", "--sequence-parallel",
                        "--strategy", "zero1", "--recompute", "full", "--global-batch", "16"],
    }
    return {f"predict/{k}": ["predict", *v, "--json"] for k, v in cases.items()}


def moe_cases() -> dict[str, list[str]]:
    """``predict --ep``: mixtures of experts with expert parallelism (Megatron-Core's published layouts)."""
    cases = {
        "mixtral-8x7b-tp1-ep8-pp4": ["--gpus", "64", "--link", "infiniband", "--gpu", "h100", "--model", "mixtral-8x7b",
                                     "--micro-batch", "1", "--tp", "1", "--ep", "8", "--pp", "4",
                                     "--schedule", "1f1b-interleaved", "--virtual-stages", "8", "--global-batch", "256",
                                     "--strategy", "zero1", "--precision", "bf16-params", "--recompute", "full"],
        # GShard-style fixed-shape experts: Megatron-Core's --moe-expert-capacity-factor 1.25
        # --moe-pad-expert-input-to-capacity (every expert computes its capacity in rows).
        "mixtral-8x7b-tp1-ep8-pp4-capacity-padded": [
            "--gpus", "64", "--link", "infiniband", "--gpu", "h100", "--model", "mixtral-8x7b", "--micro-batch", "1",
            "--tp", "1", "--ep", "8", "--pp", "4", "--schedule", "1f1b-interleaved", "--virtual-stages", "8",
            "--global-batch", "256", "--strategy", "zero1", "--precision", "bf16-params", "--recompute", "full",
            "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity"],
        "qwen3-235b-tp2-ep8-pp8": ["--gpus", "256", "--link", "infiniband", "--gpu", "h100", "--model",
                                   "qwen3-235b-a22b", "--micro-batch", "1", "--tp", "2", "--sequence-parallel",
                                   "--ep", "8", "--pp", "8", "--schedule", "1f1b-interleaved", "--virtual-stages", "4",
                                   "--global-batch", "2048", "--strategy", "zero1", "--precision", "bf16-params",
                                   "--recompute", "selective"],
        # Megatron-Core's --recompute-modules moe layernorm at 32K with cp (issue 28, R065's layout).
        "qwen3-235b-tp4-cp2-ep8-pp8-recompute-moe": [
            "--gpus", "256", "--link", "infiniband", "--gpu", "h100", "--model", "qwen3-235b-a22b", "--seq-len", "32768",
            "--micro-batch", "1", "--tp", "4", "--sequence-parallel", "--cp", "2", "--ep", "8", "--pp", "8",
            "--schedule", "1f1b-interleaved", "--virtual-stages", "4", "--global-batch", "256", "--strategy", "zero1",
            "--precision", "bf16-params", "--recompute", "moe", "--moe-a2a", "hierarchical"],
        # DeepEP across four servers: a token crosses once per server holding its experts (R062's layout).
        "qwen3-235b-tp2-ep32-pp8-hierarchical": [
            "--gpus", "256", "--link", "infiniband", "--gpu", "h100", "--model", "qwen3-235b-a22b", "--micro-batch", "1",
            "--tp", "2", "--sequence-parallel", "--ep", "32", "--pp", "8", "--schedule", "1f1b-interleaved",
            "--virtual-stages", "4", "--global-batch", "2048", "--strategy", "zero1", "--precision", "bf16-params",
            "--recompute", "op", "--moe-a2a", "hierarchical"],
        # R062's layout with Megatron-Core's --overlap-moe-expert-parallel-comm (A2A_OVERLAP=1).
        "qwen3-235b-tp2-ep32-pp8-a2a-overlap": [
            "--gpus", "256", "--link", "infiniband", "--gpu", "h100", "--model", "qwen3-235b-a22b", "--micro-batch", "1",
            "--tp", "2", "--sequence-parallel", "--ep", "32", "--pp", "8", "--schedule", "1f1b-interleaved",
            "--virtual-stages", "4", "--global-batch", "2048", "--strategy", "zero1", "--precision", "bf16-params",
            "--recompute", "op", "--moe-a2a", "hierarchical", "--moe-a2a-overlap"],
        # Without pipeline stages each backward pairs with the next micro-batch's forward.
        "mixtral-8x7b-ep8-a2a-overlap": [
            "--gpus", "64", "--link", "infiniband", "--gpu", "h100", "--model", "mixtral-8x7b", "--micro-batch", "1",
            "--ep", "8", "--global-batch", "256", "--strategy", "zero1", "--precision", "bf16-params",
            "--recompute", "full", "--moe-a2a-overlap"],
        # HSDP with expert parallelism (torchtitan's dp_replicate x dp_shard_in_ep x ep): shard groups of 16 ranks,
        # the experts sharded over 16 / 8 = 2 of them, both kinds' gradient shards all-reduced across 4 replicas;
        # resharded after each forward (no pipeline), then with pipeline stages (groups of 8, experts over 2).
        "mixtral-8x7b-hsdp16-ep8": [
            "--gpus", "64", "--link", "infiniband", "--gpu", "h100", "--model", "mixtral-8x7b", "--micro-batch", "1",
            "--ep", "8", "--global-batch", "128", "--strategy", "fsdp-hybrid", "--zero-group", "16",
            "--precision", "bf16-params", "--recompute", "full"],
        "mixtral-8x7b-hsdp8-ep4-pp2": [
            "--gpus", "64", "--link", "infiniband", "--gpu", "h100", "--model", "mixtral-8x7b", "--micro-batch", "1",
            "--ep", "4", "--pp", "2", "--global-batch", "128", "--strategy", "fsdp-hybrid", "--zero-group", "8",
            "--precision", "bf16-params", "--recompute", "full"],
        # fsdp with expert parallelism and no pipeline stages: the routed experts gathered and reduce-scattered
        # every micro-batch on their own 8-rank edp group (one rank a server), the dense parameters on dp (fsdpep).
        "mixtral-8x7b-fsdp-ep8": [
            "--gpus", "64", "--link", "infiniband", "--gpu", "h100", "--model", "mixtral-8x7b", "--micro-batch", "1",
            "--ep", "8", "--global-batch", "128", "--strategy", "fsdp", "--precision", "bf16-params",
            "--recompute", "full"],
        # Megatron-Core's --offload-modules expert_fc1 moe_act over PCIe.
        "mixtral-8x7b-ep8-pp4-offload-experts": [
            "--gpus", "64", "--link", "infiniband", "--gpu", "h100", "--model", "mixtral-8x7b", "--micro-batch", "2",
            "--ep", "8", "--pp", "4", "--global-batch", "256", "--strategy", "zero1", "--precision", "bf16-params",
            "--recompute", "op", "--offload", "expert-activations"],
    }
    return {f"predict/{k}": ["predict", *v, "--json"] for k, v in cases.items()}


def plan_cases() -> dict[str, list[str]]:
    return {
        "small": ["plan", "--gpus", "64", "--link", "dgx-a100", "--model", "llama-2-7b", "--global-batch", "256",
                  "--tp", "2,4,8", "--pp", "1,2", "--micro-batches", "1,2", "--recompute", "off,selective",
                  "--tokens", "10B", "--top", "5", "--verify", "1", "--json"],
        "goodput": ["plan", "--gpus", "64,128", "--link", "infiniband", "--model", "gpt2-xl", "--global-batch", "512",
                    "--tp", "1", "--pp", "1,2", "--micro-batches", "2", "--recompute", "off", "--tokens", "20B",
                    "--rank", "goodput", "--mtbf-gpu", "2000h", "--replace", "4h", "--top", "4", "--verify", "1",
                    "--json"],
        # MiCS: DeepSpeed ZeRO-3 over each whole-server shard group (--zero-group), data parallelism alone; a
        # 39B model that needs its state sharded over two 8-GPU nodes or more.
        "mics": ["plan", "--gpus", "64", "--link", "infiniband", "--model",
                 "transformer:hidden=8192,layers=48,heads=64,ffn=22016,vocab=32000,seq=2048", "--precision",
                 "bf16-mixed", "--global-batch", "64", "--tp", "1", "--pp", "1", "--micro-batches", "1",
                 "--recompute", "full", "--strategies", "zero3", "--top", "5", "--verify", "1", "--json"],
        # Every layout costed on half-rate NICs (--degrade), named again in the chosen layout's command.
        "degrade": ["plan", "--gpus", "64", "--link", "infiniband", "--model", "llama-2-7b", "--global-batch", "256",
                    "--tp", "1,2", "--pp", "1,2", "--micro-batches", "1", "--recompute", "full", "--top", "5",
                    "--verify", "1", "--degrade", "infiniband:50%", "--json"],
        # A mixture of experts: expert parallelism searched (issue 28).
        "moe": ["plan", "--gpus", "64", "--link", "infiniband", "--model", "mixtral-8x7b", "--global-batch", "256",
                "--tp", "1,2", "--pp", "1,2", "--micro-batches", "1", "--recompute", "full", "--top", "5",
                "--verify", "1", "--json"],
    }


def report_cases() -> dict[str, list[str]]:
    """``report`` without ``-o``: tests/golden/run.py writes the page to a temporary file and reads it."""
    return {
        "ddp-budget": ["report", "--gpus", "16", "--link", "infiniband", "--model", "gpt2", "--tokens", "10B"],
        "layout": ["report", "--gpus", "32", "--link", "dgx-a100", "--model", "llama-2-7b", "--micro-batch", "1",
                   "--tp", "4", "--pp", "2", "--global-batch", "64", "--scaling-gpus", "16,32,64"],
    }


def mix_cases() -> dict[str, list[str]]:
    """``mix``: a job mix whose switch cables fail (the jobs crossing them run on the cables left)."""
    return {"switch-cables-down": ["mix", "tests/data/mix/outages.yaml", "--sample-steps", "0", "--json"]}


FAMILIES = {
    "predict": predict_cases,
    "pipeline": pipeline_cases,
    "collective": collective_cases,
    "memory": memory_cases,
    "goodput": goodput_cases,
    "sweep": sweep_cases,
    "layout": layout_cases,
    "moe": moe_cases,
    "plan": plan_cases,
    "report": report_cases,
    "mix": mix_cases,
}
