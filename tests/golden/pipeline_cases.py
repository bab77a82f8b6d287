"""Golden cases of the pipeline schedules (``predict --pp``): every schedule on stages whose
block counts do not divide (the default split, lighter first and last), the interleaved
schedule over any block count and over a split given per virtual stage, ZB-H1 and DualPipe.

Kept in their own family (``pipeline.json``) so that other layout cases can be added beside
them without touching these.
"""

from __future__ import annotations


def pipeline_cases() -> dict[str, list[str]]:
    llama7 = ["--link", "infiniband", "--model", "llama-2-7b", "--micro-batch", "1"]
    cases = {
        "1f1b-uneven": ["--gpus", "24", *llama7, "--pp", "3", "--global-batch", "48"],
        "gpipe-uneven": ["--gpus", "24", *llama7, "--pp", "3", "--global-batch", "48", "--schedule", "gpipe"],
        "deepspeed-uneven": ["--gpus", "24", *llama7, "--pp", "3", "--global-batch", "48", "--schedule",
                             "deepspeed"],
        "zb-h1": ["--gpus", "32", *llama7, "--pp", "4", "--global-batch", "64", "--schedule", "zb-h1"],
        "zb-h1-tp-uneven": ["--gpus", "48", *llama7, "--tp", "2", "--pp", "3", "--global-batch", "48",
                            "--schedule", "zb-h1", "--strategy", "zero1", "--sequence-parallel"],
        "dualpipe": ["--gpus", "32", *llama7, "--pp", "4", "--global-batch", "64", "--schedule", "dualpipe"],
        "dualpipe-tied-uneven": ["--gpus", "48", "--link", "infiniband", "--model", "gpt2-xl", "--micro-batch", "2",
                                 "--pp", "6", "--global-batch", "192", "--schedule", "dualpipe", "--strategy",
                                 "zero1"],
        "interleaved-any-blocks": ["--gpus", "48", *llama7, "--pp", "6", "--global-batch", "96", "--schedule",
                                   "1f1b-interleaved", "--virtual-stages", "3"],
        "interleaved-per-virtual-stage": ["--gpus", "32", *llama7, "--pp", "4", "--global-batch", "64",
                                          "--schedule", "1f1b-interleaved", "--virtual-stages", "2",
                                          "--stage-layers", "3,4,4,4,4,4,4,5"],
        "interleaved-per-stage-odd": ["--gpus", "32", *llama7, "--pp", "4", "--global-batch", "64",
                                      "--schedule", "1f1b-interleaved", "--virtual-stages", "2",
                                      "--stage-layers", "7,9,9,7", "--recompute", "full"],
    }
    return {f"predict/{k}": ["predict", *v, "--json"] for k, v in cases.items()}
