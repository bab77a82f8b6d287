"""What dpsim's catalog keeps of one Llama block, shared by the tests that compare it with what torch saves
(``test_activation_dtypes``: eager autograd; ``test_compiled_activations``: torch.compile's partitioner)."""

from __future__ import annotations

from dpsim.memory import activation_bytes_per_sample
from dpsim.workload.architectures import LlamaConfig, build_llama
from dpsim.workload.precision import get_precision


def catalog_block_bytes(precision: str, *, hidden: int, heads: int, kv_heads: int, inter: int, seq: int,
                        compile: bool = False) -> float:
    """The catalog's bytes for one block of this shape at ``precision``: the model's count less its root layers'."""
    p = get_precision(precision, compile=True) if compile else get_precision(precision)
    model = build_llama(LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=1,
                                    num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=64,
                                    max_position_embeddings=seq), flash_attention=True)
    root = sum(l.activation_bytes_per_sample for l in model.layers if l.unit is None)
    return (activation_bytes_per_sample(model, precision=p) - root) * p.activation_bytes / 2.0
