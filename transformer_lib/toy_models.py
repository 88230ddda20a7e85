"""Small models that the chapters train live, all on one stem.

Every toy model here is the same :class:`TokenModel`: a token embedding ``embed`` plus learned
positions ``pos``, a stack of Pre-LN :class:`~transformer_lib.layers.TransformerBlock` modules
named ``blocks`` (the attribute name every model of the library uses for its stack), a final norm
``norm``, and its own head. What differs is the mask and the head:

* :class:`TokenClassifier` (chapter 13): one set of logits per token. ``causal=False`` is an
  encoder-only (BERT-like) tagger; ``causal=True`` gives the same parameters a causal mask, a
  decoder-only (GPT-style) tagger: one switch, two families.
* :class:`LookupModel` (chapter 3): causal blocks and one read-out per lookup task of
  :func:`~transformer_lib.tasks.three_lookups_batch`, small enough to train in seconds, so
  the heads' division of labour can be watched (:func:`train_lookup_model`).
* :class:`TransformerClassifier` (chapter 9): no mask, a head on the last position, with the
  interface of :class:`~transformer_lib.rnn.RNNClassifier` so the two train on the same task.

None of them stores attention weights: to look at them, run the model inside
:func:`transformer_lib.probes.record_attention`.
"""
from __future__ import annotations

import contextlib
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_int, check_tokens
from .device import cpu_threads, seed_everything
from .layers import TransformerBlock
from .masks import causal_mask
from .norms import LayerNorm
from .positional import LearnedPositionalEmbedding
from .tasks import LOOKUP_TASKS, three_lookups_batch
from .training import fit

__all__ = ["TokenModel", "TokenClassifier", "LookupModel", "TransformerClassifier", "lookup_loss",
           "lookup_accuracy", "train_lookup_model"]


class TokenModel(nn.Module):
    """The stem: ``embed`` + learned positions ``pos`` -> ``blocks`` -> ``norm`` (the head is the subclass's).

    ``same_init=True`` starts every block as a copy of one block (as
    :class:`~transformer_lib.model.Encoder` does); otherwise each block draws its own weights.
    ``norm`` is the class of the final norm. :meth:`last_block_states` returns the states after the last
    block, before the final norm: (B, L, d_model).
    """

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int,
                 d_ff: int | None = None, max_len: int = 64, norm_first: bool = True,
                 same_init: bool = False, norm: type[nn.Module] = LayerNorm):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("num_layers", num_layers),
                            ("max_len", max_len)):
            check_int(name, value)
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = LearnedPositionalEmbedding(max_len, d_model)

        def block() -> TransformerBlock:
            return TransformerBlock(d_model, num_heads, d_ff or 4 * d_model, norm_first=norm_first)

        if same_init:
            first = block()
            self.blocks = nn.ModuleList(copy.deepcopy(first) for _ in range(num_layers))
        else:
            self.blocks = nn.ModuleList(block() for _ in range(num_layers))
        self.norm = norm(d_model)  # Pre-LN blocks leave the last residual stream unnormalized

    def last_block_states(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L) token ids -> (B, L, d_model) states after the last block (before ``norm``)."""
        check_tokens(tokens)
        return self._last_block_states(tokens, mask)

    def _last_block_states(self, tokens: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """:meth:`last_block_states` without the input check, for the subclasses' ``forward``."""
        x = self.pos(self.embed(tokens))  # (B, L, D)
        for block in self.blocks:
            x = block(x, mask)  # (B, L, D)
        return x


class TokenClassifier(TokenModel):
    """Encoder-only (BERT-like) model: one set of logits per input token.

    ``forward(tokens (B, L))`` returns logits (B, L, num_classes) (``num_classes`` defaults to
    ``vocab_size``). ``causal=False`` (default): no mask, every position sees the whole sequence
    (bidirectional). ``causal=True``: the same modules and the same number of parameters, but
    every block gets a causal mask, so position t sees only tokens 0..t: a decoder-only
    (GPT-style) tagger. The switch is the whole difference between the two families' blocks,
    which is why chapter 13 trains both on one task.
    """

    def __init__(self, vocab_size: int, num_classes: int | None = None, d_model: int = 32,
                 num_heads: int = 4, num_layers: int = 2, d_ff: int | None = None, max_len: int = 64,
                 causal: bool = False):
        num_classes = vocab_size if num_classes is None else num_classes
        check_int("vocab_size", vocab_size)
        check_int("num_classes", num_classes)
        super().__init__(vocab_size, d_model, num_heads, num_layers, d_ff, max_len, same_init=True)
        self.causal = bool(causal)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_tokens(tokens)
        L = tokens.shape[1]
        mask = causal_mask(L, device=tokens.device) if self.causal else None  # (L, L) or none
        return self.head(self.norm(self._last_block_states(tokens, mask)))  # (B, L, num_classes)


class LookupModel(TokenModel):
    """Causal blocks and one linear read-out per lookup task (chapter 3).

    ``forward(tokens)`` returns ``{task: logits (B, L, classes)}`` for the tasks of
    :data:`~transformer_lib.tasks.LOOKUP_TASKS`. Small on purpose (defaults: 2 layers, 4 heads,
    d_model 32; about 28k parameters) so the chapter can train it live.
    """

    def __init__(self, vocab_size: int = 16, max_len: int = 12, d_model: int = 32, num_heads: int = 4,
                 num_layers: int = 2, d_ff: int | None = None):
        check_int("vocab_size", vocab_size, 2)
        check_int("max_len", max_len, 2)
        super().__init__(vocab_size, d_model, num_heads, num_layers, d_ff, max_len)
        self.vocab_size = vocab_size
        self.readouts = nn.ModuleDict({
            "previous": nn.Linear(d_model, vocab_size + 1),  # + 1: "no previous token"
            "first": nn.Linear(d_model, vocab_size),
            "max": nn.Linear(d_model, vocab_size),
        })

    def forward(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        check_tokens(tokens)
        mask = causal_mask(tokens.shape[1], device=tokens.device)  # (L, L)
        x = self.norm(self._last_block_states(tokens, mask))  # (B, L, D)
        return {task: readout(x) for task, readout in self.readouts.items()}  # each (B, L, classes)


class TransformerClassifier(TokenModel):
    """No mask, a linear head on the last position (chapter 9).

    Same interface as :class:`~transformer_lib.rnn.RNNClassifier`: ``forward(tokens (B, L))``
    returns logits (B, num_classes), and the token embedding is ``self.embed``. Reading the last
    position (rather than pooling) keeps the comparison fair: both models must move the first
    token's information to position L; the RNN needs L - 1 steps for that, attention one hop.
    """

    def __init__(self, vocab_size: int, d_model: int, num_classes: int, num_heads: int = 4,
                 num_layers: int = 1, max_len: int = 512, d_ff: int | None = None,
                 norm_first: bool = True):
        super().__init__(vocab_size, d_model, num_heads, num_layers, d_ff, max_len, norm_first,
                         norm=nn.LayerNorm)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.last_block_states(tokens)  # (B, L, D), checked; no mask: every position sees every other
        return self.head(self.norm(x[:, -1]))  # (B, num_classes)


# -- training the lookup model (chapter 3) ----------------------------------------------------------

def lookup_loss(model: LookupModel, batch) -> torch.Tensor:
    """Sum over the three tasks of the mean cross-entropy over all positions."""
    tokens, targets = batch
    logits = model(tokens)
    return sum(F.cross_entropy(logits[t].flatten(0, 1), targets[t].flatten()) for t in LOOKUP_TASKS)


@torch.no_grad()
def lookup_accuracy(model: LookupModel, batch) -> dict[str, float]:
    """Fraction of positions answered correctly, per task."""
    tokens, targets = batch
    logits = model(tokens)
    return {t: (logits[t].argmax(-1) == targets[t]).float().mean().item() for t in LOOKUP_TASKS}


def train_lookup_model(num_heads: int = 4, num_layers: int = 2, d_model: int = 32, steps: int = 300,
                       batch_size: int = 64, vocab_size: int = 16, length: int = 12, lr: float = 3e-3,
                       seed: int = 0, device=None, progress: bool = False):
    """Train a :class:`LookupModel` on fresh three-lookups batches with :func:`~transformer_lib.training.fit`;
    return ``(model, history)`` (``history["loss"]``: the loss of every step).

    Deterministic for a given ``seed`` on a given device. The defaults reach ~99% accuracy on all
    three tasks in 300 steps (a few seconds on a CPU core). On the CPU it trains on one thread
    (see :func:`~transformer_lib.device.cpu_threads`).
    """
    generator = seed_everything(seed)
    model = LookupModel(vocab_size, length, d_model, num_heads, num_layers).to(device)

    def make_batch(step):
        tokens, targets = three_lookups_batch(batch_size, length, vocab_size, generator)
        return tokens.to(device), {t: y.to(device) for t, y in targets.items()}

    on_cpu = next(model.parameters()).device.type == "cpu"
    with cpu_threads(1) if on_cpu else contextlib.nullcontext():
        history = fit(model, make_batch, lookup_loss, steps, lr=lr, progress=progress,
                     desc="three lookups")
    return model, history
