"""LoRA from scratch: a frozen matrix plus a trainable low-rank update (chapter 21).

Fine-tuning changes a weight matrix ``W`` (out_features, in_features) by some ``ΔW``. LoRA (Hu et
al., 2021) bets that the useful ``ΔW`` has low rank and writes it as a product

    ΔW = (alpha / rank) * B A,     A: (rank, in_features),  B: (out_features, rank)

so a layer of ``in * out`` weights trains only ``rank * (in + out)`` numbers. ``W`` stays frozen:
the optimizer keeps no state for it and, once training is done, ``W + ΔW`` can be folded into one
plain ``nn.Linear`` (:meth:`LoRALinear.merged`) that costs nothing extra at inference.

Initialisation follows the paper and ``peft``: ``B = 0`` (so the wrapped model starts out *equal*
to the pretrained one, and training starts from it) and ``A`` Kaiming-uniform, as ``nn.Linear``
initialises its own weight (if both were zero no gradient would reach either). The factor
``alpha / rank`` is the paper's: it was meant to keep the update's size when the rank changes,
but with Adam it does not. Adam's first step moves each entry of ``B`` by about the learning
rate whatever its gradient, so the ``rank`` columns of ``B A`` add up and the first-order change
of the loss grows with ``(alpha / rank) * rank = alpha``: ranks trained with the same ``alpha``
move at about the same pace (chapter 21 measures it), and rsLoRA (Kalajdzievski, 2023) scales by
``alpha / sqrt(rank)`` for large ranks instead.

Everything is ordinary PyTorch: :func:`add_lora` swaps the chosen ``nn.Linear`` modules for
:class:`LoRALinear` in place and freezes every other parameter, so any optimizer over
``model.parameters()`` with ``requires_grad`` trains only the adapters.
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import lora as _lc

FORMAT = "transformer_lib.lora/1"  # the tag save_lora writes and load_lora expects

__all__ = ["LoRALinear", "add_lora", "merge_lora", "lora_modules", "count_parameters", "lora_state_dict",
           "save_lora", "load_lora", "lora_disabled", "matches_target"]


class LoRALinear(nn.Module):
    """``base(x) + (alpha / rank) * dropout(x) A^T B^T``: a frozen ``nn.Linear`` and its low-rank update.

    ``lora_A`` (rank, in_features) is Kaiming-uniform, ``lora_B`` (out_features, rank) starts at
    zero, both on ``base``'s device and dtype. The base's weight and bias are frozen. Dropout (as
    in ``peft``) acts on the input of the update only, never on the pretrained path.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float = 0.0):
        super().__init__()
        _lc.check_lora_linear(base, rank, alpha, dropout)
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)  # the pretrained matrix does not move
        self.rank, self.alpha, self.scaling = int(rank), float(alpha), float(alpha) / int(rank)
        w = base.weight
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, device=w.device, dtype=w.dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, device=w.device, dtype=w.dtype))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as nn.Linear (and peft) initialise a weight
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.enabled = True  # lora_disabled(model) switches the update off, to compare with the base

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha:g}, scaling={self.scaling:g}"

    def delta_weight(self) -> torch.Tensor:
        """The update folded into ``W``: ``(alpha / rank) * B A``, (out_features, in_features)."""
        return self.scaling * (self.lora_B @ self.lora_A)  # (out, r) @ (r, in) -> (out, in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)  # (..., out): the frozen path
        if not self.enabled:
            return out
        # Two thin products, never the (out, in) matrix B A: (..., in) -> (..., r) -> (..., out)
        update = F.linear(F.linear(self.dropout(x), self.lora_A), self.lora_B)
        return out + update * self.scaling

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` with weight ``W + (alpha / rank) B A`` and the base's bias (copies:
        this layer is left as it is). Its parameters keep the base's ``requires_grad`` (frozen)."""
        b = self.base
        out = nn.Linear(b.in_features, b.out_features, bias=b.bias is not None, device=b.weight.device,
                        dtype=b.weight.dtype)
        out.weight.copy_(b.weight + self.delta_weight())
        if b.bias is not None:
            out.bias.copy_(b.bias)
        for p, q in zip(out.parameters(), b.parameters()):
            p.requires_grad_(q.requires_grad)
        return out


def matches_target(path: str, targets) -> bool:
    """Does the module path end with one of ``targets``, as a whole name component? ``"q_proj"``
    matches ``"blocks.0.self_attn.q_proj"`` but not ``"blocks.0.self_attn.xq_proj"`` (``peft``'s rule)."""
    return any(path == t or path.endswith("." + t) for t in targets)


def _set_module(model: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, name, module)  # an nn.ModuleList child named "0" works too


def add_lora(model: nn.Module, rank: int, alpha: float, targets, dropout: float = 0.0) -> list[str]:
    """Wrap every ``nn.Linear`` whose module path ends with one of ``targets`` in a
    :class:`LoRALinear`, in place; freeze every other parameter. Returns the wrapped paths.

    ``targets`` are name suffixes, e.g. ``["q_proj", "v_proj"]`` for the query and value matrices
    of every block (the paper's choice), or ``["self_attn.q_proj"]`` to be more specific. Each target
    must match at least one ``nn.Linear``: a misspelt name would otherwise train nothing, silently.
    The adapters are created in module order from the global random generator (seed it first).
    """
    targets = _lc.check_add_lora(model, rank, alpha, targets, dropout)
    found = [(path, m) for path, m in model.named_modules() if path and isinstance(m, nn.Linear)
             and matches_target(path, targets)]
    missing = [t for t in targets if not any(matches_target(path, [t]) for path, _ in found)]
    _lc.check_targets_found(model, missing)
    for p in model.parameters():
        p.requires_grad_(False)
    for path, linear in found:
        _set_module(model, path, LoRALinear(linear, rank, alpha, dropout))
    return [path for path, _ in found]


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    """Path -> :class:`LoRALinear` for every adapter in ``model``, in module order."""
    _lc.check_lora_model(model)
    return {path: m for path, m in model.named_modules() if isinstance(m, LoRALinear)}


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` numbers of parameters (shared tensors counted once)."""
    _lc.check_lora_model(model)
    params = list(model.parameters())  # parameters() already yields a tied tensor once
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def merge_lora(model: nn.Module) -> list[str]:
    """Replace every :class:`LoRALinear` by its :meth:`~LoRALinear.merged` ``nn.Linear``, in place;
    returns the merged paths. The model is then a plain model again, as fast as the original."""
    modules = lora_modules(model)
    for path, m in modules.items():
        _set_module(model, path, m.merged())
    return list(modules)


@contextlib.contextmanager
def lora_disabled(model: nn.Module):
    """``with lora_disabled(model):`` every adapter is switched off (the pretrained model's output,
    exactly); on leaving they are switched back on. For before/after comparisons in one model."""
    modules = list(lora_modules(model).values())
    before = [m.enabled for m in modules]
    for m in modules:
        m.enabled = False
    try:
        yield model
    finally:
        for m, flag in zip(modules, before):
            m.enabled = flag


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapters' tensors: ``"<path>.lora_A"`` and ``"<path>.lora_B"`` (detached copies on the CPU)."""
    state = {}
    for path, m in lora_modules(model).items():
        state[f"{path}.lora_A"] = m.lora_A.detach().cpu().clone()
        state[f"{path}.lora_B"] = m.lora_B.detach().cpu().clone()
    return state


def save_lora(model: nn.Module, path: str | Path, **metadata) -> int:
    """Write only the adapters (and each one's rank and alpha) to ``path``; returns the file's size in
    bytes. Extra ``metadata`` (str, numbers, lists of those: the base model's name, the task) is kept."""
    modules = lora_modules(model)
    _lc.check_has_adapters(modules)
    record = {"format": FORMAT, "modules": {p: {"rank": m.rank, "alpha": m.alpha} for p, m in modules.items()},
              "state": lora_state_dict(model), "metadata": dict(metadata)}
    path = Path(path)
    torch.save(record, path)
    return path.stat().st_size


def load_lora(model: nn.Module, path: str | Path, dropout: float = 0.0) -> dict:
    """Load adapters written by :func:`save_lora` into ``model``, in place, and return the file's metadata.

    A model without adapters is wrapped first (the stored paths, each with its stored rank and
    alpha; every other parameter frozen, as :func:`add_lora` does); a model that has adapters must
    have exactly the stored ones. The file is read with ``torch.load(weights_only=True)``: tensors
    and plain values only, no pickled code runs.
    """
    _lc.check_lora_model(model)
    record = torch.load(Path(path), map_location="cpu", weights_only=True)
    _lc.check_adapter_record(record, path, FORMAT)
    stored, have = record["modules"], lora_modules(model)
    if not have:
        names = dict(model.named_modules())
        _lc.check_adapter_targets(names, stored, path)
        for p in model.parameters():
            p.requires_grad_(False)
        for p, cfg in stored.items():
            _set_module(model, p, LoRALinear(names[p], cfg["rank"], cfg["alpha"], dropout))
        have = lora_modules(model)
    _lc.check_adapters_match(have, stored, path)
    with torch.no_grad():
        for p, m in have.items():
            for name in ("lora_A", "lora_B"):
                t = record["state"][f"{p}.{name}"]
                param = getattr(m, name)
                _lc.check_adapter_shape(f"{p}.{name}", t, param, path)
                param.copy_(t)
    return dict(record.get("metadata", {}))
