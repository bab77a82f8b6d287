"""Shared by tests/test_hsdp_ep.py and tests/test_fsdp_ep.py: Mixtral-8x7B counted by hand, and the
pipeline program a prediction played with its bytes per collective group."""

from __future__ import annotations

from collections import defaultdict

import dpsim.predict.layout as layout_mod
from dpsim.predict.run import predict

MIXTRAL = dict(model="mixtral-8x7b", link="infiniband", precision="bf16-mixed", micro_batch=1, steps=1,
               recompute="full")

# Mixtral-8x7B by hand (hidden 4096, 32 blocks, 8 experts of ffn 14336, 32 query / 8 key-value heads of 128,
# vocabulary 32000, untied output): per block attention 2 x 4096^2 + 2 x 4096 x 1024 = 41,943,040, router
# 4096 x 8 = 32,768, two norms 8,192; one expert 3 x 4096 x 14336 = 176,160,768. Embedding and output
# 32000 x 4096 = 131,072,000 each, final norm 4096.
EXPERT = 176_160_768
DENSE_BLOCK = 41_943_040 + 32_768 + 8_192
DENSE = 32 * DENSE_BLOCK + 2 * 131_072_000 + 4096  # 1,605,636,096: every rank holds all of it (tp 1)


def program(monkeypatch, config):
    """``config``'s prediction and the pipeline program predict played for it."""
    seen = []
    real = layout_mod.build_pipeline_program

    def spy(*args, **kwargs):
        plan = real(*args, **kwargs)
        seen.append(plan)
        return plan
    monkeypatch.setattr(layout_mod, "build_pipeline_program", spy)
    result = predict(config)
    assert len(seen) == 1
    return result, seen[0]


def bytes_by_group(plan, stage: int = 0) -> dict[tuple[str, str], float]:
    """Bytes each (communicator, op) of ``stage`` carries in one step."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for op, stages in zip(plan.program.comms, plan.program.comm_stages):
        if stage in stages:
            out[op.group, op.op] += op.size_bytes
    return dict(out)
