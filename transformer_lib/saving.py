"""Saving a model and loading it back: weights plus configuration, the way every library does it.

    save_pretrained(model, "my-gpt")   # my-gpt/config.json, my-gpt/model.safetensors
    model = from_pretrained("my-gpt")  # the same model: equal configuration, equal logits

Both model families are saved this way: a :class:`~transformer_lib.model.DecoderOnlyLM` with its
:class:`~transformer_lib.config.ModelConfig`, a :class:`~transformer_lib.model.Seq2SeqTransformer`
with its :class:`~transformer_lib.config.Seq2SeqConfig`.

``config.json`` is the model's :class:`~transformer_lib.config.ModelConfig` (every field, so a
later change of a default cannot change what the file builds); ``model.safetensors`` holds the
weights in the safetensors format (a flat table of named tensors, no pickled code: loading a file
from someone else runs none of their code). A tied head is stored once, as the embedding.

Only what the configuration describes can be saved: a model whose modules were changed after it
was built (LoRA adapters not merged, quantized layers) is refused with the names that differ;
merge the adapters first (:func:`transformer_lib.lora.merge_lora`), or save the float model and
quantize after loading.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn

from ._checks import check_instance, check_path
from .config import ModelConfig, Seq2SeqConfig
from .model import DecoderOnlyLM, Seq2SeqTransformer

__all__ = ["save_pretrained", "from_pretrained", "CONFIG_FILE", "WEIGHTS_FILE", "MODELS"]

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
# the model classes a folder can hold, by the name config.json gives: (class, its configuration)
MODELS = {"transformer_lib.DecoderOnlyLM": (DecoderOnlyLM, ModelConfig),
          "transformer_lib.Seq2SeqTransformer": (Seq2SeqTransformer, Seq2SeqConfig)}


def _format(model: nn.Module) -> str:
    return next(name for name, (cls, _) in MODELS.items() if type(model) is cls)


def _tied(model: nn.Module) -> bool:
    return getattr(model.config, "tie_weights", False)


def _expected_state(model: nn.Module) -> dict[str, tuple]:
    """Name -> shape of every tensor of the model ``model.config`` builds (on the meta device: no memory)."""
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in type(model)(model.config).state_dict().items()}


def save_pretrained(model: nn.Module, folder) -> Path:
    """Write ``model`` (a :class:`~transformer_lib.model.DecoderOnlyLM` or
    :class:`~transformer_lib.model.Seq2SeqTransformer`) to ``folder``: its configuration as
    ``config.json`` and its weights as ``model.safetensors``. Returns the folder."""
    from safetensors.torch import save_file

    check_instance("model", model, (DecoderOnlyLM, Seq2SeqTransformer), "a DecoderOnlyLM or a Seq2SeqTransformer")
    folder = check_path("folder", folder, "a folder to write the model into")
    state = model.state_dict()
    expected = _expected_state(model)
    have = {k: tuple(v.shape) for k, v in state.items()}
    if have != expected:
        extra, missing = sorted(set(have) - set(expected)), sorted(set(expected) - set(have))
        reshaped = sorted(k for k in set(have) & set(expected) if have[k] != expected[k])
        raise ValueError(f"model: its modules differ from what its configuration builds (extra {extra[:4]}, "
                         f"missing {missing[:4]}, other shapes {reshaped[:4]}); merge LoRA adapters, or save the "
                         f"float model and quantize after loading")
    if _tied(model):
        state.pop("head.weight")  # the same tensor as embed.weight: stored once
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": _format(model)})
    (folder / CONFIG_FILE).write_text(json.dumps({"format": _format(model), **model.config.to_dict()}, indent=2) + "\n")
    return folder


def from_pretrained(folder, device: torch.device | str | None = None) -> nn.Module:
    """The model saved by :func:`save_pretrained` in ``folder`` (the class config.json names), in
    eval mode, on ``device`` (default: the CPU)."""
    from safetensors.torch import load_file

    folder = check_path("folder", folder, "a folder written by save_pretrained")
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise ValueError(f"folder: {folder} has no {name} (not written by save_pretrained)")
    values = json.loads((folder / CONFIG_FILE).read_text())
    kind = values.pop("format", None)
    if kind not in MODELS:
        raise ValueError(f"folder: {folder / CONFIG_FILE} does not describe a model of this library "
                         f"(format {kind!r}, expected one of {sorted(MODELS)})")
    cls, config_cls = MODELS[kind]
    model = cls(config_cls.from_dict(values))  # on the CPU: tables that are not weights (sinusoids) are built
    state = load_file(str(folder / WEIGHTS_FILE))
    if _tied(model):
        state["head.weight"] = state["embed.weight"]
    model.load_state_dict(state, strict=True)  # copies into the model's tensors: a tied head stays tied
    return model.to(device or "cpu").eval()
