"""A custom operator for ``torch_user_models.custom_kernel``, defined once per process.

``tests/torch_user_models.py`` is imported both by name and by file path (a second module,
``--model tests/torch_user_models.py:fn``). Defining the operator there ran
``torch.library.custom_op`` twice under one name: the second definition deletes the first one's
library while the operator's dispatch entries still point into it, a use after free in torch
(pytorch/pytorch#98541) that crashed the test process now and then (a segmentation fault in
``test_unsupported_models_get_one_clear_line[custom_kernel]``). Both copies import this module by
name (the file's folder heads sys.path while it is imported), so the operator is defined once.
"""

from __future__ import annotations

import torch


@torch.library.custom_op("dpsim_tests::fused_matmul", mutates_args=())
def fused_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


@fused_matmul.register_fake
def _(x, w):
    return x.new_empty(x.shape[:-1] + w.shape[-1:])
