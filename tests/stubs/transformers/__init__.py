"""Stand-in for Hugging Face transformers (see tests/stubs/README.md): a tiny GPT-style
decoder and BERT-style encoder behind the classes dpsim uses."""

from typing import ClassVar

import torch
from torch import nn

__version__ = "0.0-stub"


class PreTrainedConfig:
    """transformers >= 5 name of the configuration base class (PretrainedConfig before)."""

    model_type = ""

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


class TinyGPTConfig(PreTrainedConfig):
    model_type = "tinygpt"

    def __init__(self, vocab_size=100, n_embd=32, n_layer=2, n_positions=16, **kwargs):
        super().__init__(vocab_size=vocab_size, n_embd=n_embd, n_layer=n_layer, n_positions=n_positions, **kwargs)


class TinyBertConfig(PreTrainedConfig):
    model_type = "tinybert"

    def __init__(self, vocab_size=100, hidden_size=32, num_hidden_layers=2, max_position_embeddings=24, **kwargs):
        super().__init__(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                         max_position_embeddings=max_position_embeddings, **kwargs)


class LlamaConfig(PreTrainedConfig):
    """transformers' LlamaConfig attribute names and defaults; no model behind it: dpsim reads its shape."""

    model_type = "llama"

    def __init__(self, vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                 tie_word_embeddings=False, head_dim=None, **kwargs):
        super().__init__(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
                         num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
                         num_key_value_heads=num_key_value_heads or num_attention_heads, hidden_act=hidden_act,
                         max_position_embeddings=max_position_embeddings, tie_word_embeddings=tie_word_embeddings,
                         head_dim=head_dim or hidden_size // num_attention_heads, **kwargs)


class NoLengthConfig(PreTrainedConfig):
    model_type = "nolength"


class PreTrainedModel(nn.Module):
    config_class = PreTrainedConfig

    def __init__(self, config):
        super().__init__()
        self.config = config


class _Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.proj(torch.relu(self.fc(self.ln(x))))


class TinyGPTForCausalLM(PreTrainedModel):
    config_class = TinyGPTConfig

    def __init__(self, config):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.h = nn.ModuleList(_Block(config.n_embd) for _ in range(config.n_layer))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, input_ids):
        x = self.wte(input_ids)
        for block in self.h:
            x = block(x)
        return {"logits": self.lm_head(x)}


class TinyBertForMaskedLM(PreTrainedModel):
    config_class = TinyBertConfig

    def __init__(self, config):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)),
                             persistent=False)
        self.layer = nn.ModuleList(_Block(config.hidden_size) for _ in range(config.num_hidden_layers))
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids):
        x = self.embeddings(input_ids)
        for block in self.layer:
            x = block(x)
        return {"logits": self.decoder(x)}


class _Auto:
    _mapping: ClassVar[dict] = {}

    @classmethod
    def from_config(cls, config):
        model = cls._mapping.get(type(config))
        if model is None:
            raise ValueError(f"Unrecognized configuration class {type(config)} for this kind of AutoModel: "
                             f"{cls.__name__}.\nModel type should be one of ...")
        return model(config)


class AutoModelForMaskedLM(_Auto):
    _mapping: ClassVar[dict] = {TinyBertConfig: TinyBertForMaskedLM}


class AutoModelForCausalLM(_Auto):
    _mapping: ClassVar[dict] = {TinyGPTConfig: TinyGPTForCausalLM}


class AutoModel(_Auto):
    _mapping: ClassVar[dict] = {}
