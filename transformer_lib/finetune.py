"""Fine-tuning a pretrained encoder for a task (chapter 20): MiniLM as a text classifier.

The whole recipe is three small pieces on top of chapter 14's encoder:

1. a **head**: mean-pool the last layer's token vectors over the real tokens (the same pooling
   that made MiniLM's sentence embeddings) and map the (B, D) vector to class logits with one
   ``nn.Linear(D, C)``: :class:`SentenceClassifier`;
2. a choice of **what to train**: :func:`set_trainable` freezes the encoder and unfreezes the top
   ``k`` layers (``k = 0``: the head alone; ``k = num_layers`` plus the embeddings: everything);
3. an ordinary **training loop**, cross-entropy and AdamW: :func:`train_classifier`.

A teaching shortcut that is also what practitioners do: layers that are frozen compute the same
thing every epoch, so :func:`frozen_states` runs them once and the loop starts from their output
(``start_layer``). Training the head alone is then logistic regression on cached features, and
training the top two layers costs a third of a full forward pass.

:func:`similarity_agreement` measures what fine-tuning costs on the task MiniLM was trained for
(sentence similarity): how well the tuned encoder's cosine similarities keep the original ranking.
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_bool, check_int, check_probability
from ._checks.finetune import (check_class_scores, check_embedding_pair, check_head_args, check_labelled_batch,
                               check_rank_pair, check_start_layer, check_training_settings)
from ._checks import check_instance
from ._checks.training import check_trainable
from .pretrained.minilm import BertEncoder, PretrainedEncoder, cosine_matrix, mean_pool
from .training import History, train_loop, warmup_schedule

__all__ = ["SentenceClassifier", "head_logits", "tokenize", "set_trainable", "count_trainable", "frozen_states",
           "train_classifier", "predict", "accuracy", "sentence_embeddings", "spearman",
           "similarity_agreement"]


def tokenize(lm: PretrainedEncoder, texts: list[str], max_tokens: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded ids (N, L) and mask (N, L), each text cut to ``max_tokens`` tokens ending in [SEP].

    Short inputs keep training affordable on a CPU: attention costs grow with L^2, the rest with L.
    """
    check_int("max_tokens", max_tokens, 2, lm.config.max_positions)
    ids, mask = lm.token_ids(texts)  # (N, L_max), (N, L_max); checks the texts
    if ids.shape[1] > max_tokens:
        long_rows = mask[:, max_tokens - 1].bool()  # rows cut in the middle
        ids, mask = ids[:, :max_tokens].clone(), mask[:, :max_tokens].clone()
        sep = lm.tokenizer.token_to_id("[SEP]")
        ids[long_rows, -1] = sep  # a cut text still ends the way BERT expects
    return ids, mask


class SentenceClassifier(nn.Module):
    """Encoder + mean pooling + a linear head: ``logits = W mean_pool(encoder(x)) + b``.

    ``forward(tokens, attention_mask)`` takes ids (B, L) and returns logits (B, num_classes).
    :meth:`forward_from` starts at the output of block ``start_layer - 1`` (see
    :func:`frozen_states`), so frozen lower layers need not be recomputed.
    """

    def __init__(self, encoder: BertEncoder, num_classes: int = 2, dropout: float = 0.1):
        super().__init__()
        check_instance("encoder", encoder, BertEncoder, "a BertEncoder (load_minilm().model)")
        check_int("num_classes", num_classes, 2)
        check_probability("dropout", dropout)
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(encoder.cfg.d_model, num_classes)  # the only new weights: D * C + C

    def pool(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return mean_pool(states, attention_mask)  # (B, L, D) -> (B, D), padding ignored

    def forward_from(self, states: torch.Tensor, attention_mask: torch.Tensor, start_layer: int) -> torch.Tensor:
        """Run blocks ``start_layer ..`` on ``states`` (B, L, D), pool, and apply the head."""
        key_mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L): True = a real key
        for block in self.encoder.blocks[start_layer:]:
            states = block(states, key_mask)  # (B, L, D)
        return self.head(self.dropout(self.pool(states, attention_mask)))  # (B, D) -> (B, C)

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.forward_from(self.encoder.embeddings(tokens), attention_mask, 0)


def head_logits(states: torch.Tensor, attention_mask: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
    """What :class:`SentenceClassifier`'s head computes from the last block's token states
    (B, L, D): the mean over the real tokens (``attention_mask`` (B, L), 1 = real), then
    ``pooled @ weight.T + bias`` with ``weight`` (C, D) and ``bias`` (C,); returns logits (B, C)."""
    check_head_args(states, attention_mask, weight, bias)
    return F.linear(mean_pool(states, attention_mask), weight, bias)  # (B, D) -> (B, C)


def set_trainable(model: SentenceClassifier, top_layers: int, embeddings: bool = False) -> int:
    """Freeze the encoder, then unfreeze its top ``top_layers`` blocks (and the embeddings if
    ``embeddings``); the head always trains. Returns the number of trainable parameters.

    ``top_layers = 0``: the head on a frozen encoder. ``top_layers = num_layers`` with
    ``embeddings=True``: full fine-tuning.
    """
    check_instance("model", model, SentenceClassifier, "a SentenceClassifier")
    n = len(model.encoder.blocks)
    check_int("top_layers", top_layers, 0, n)
    check_bool("embeddings", embeddings)
    model.requires_grad_(False)
    model.head.requires_grad_(True)
    for block in model.encoder.blocks[n - top_layers:]:
        block.requires_grad_(True)
    model.encoder.embeddings.requires_grad_(embeddings)
    return count_trainable(model)


def count_trainable(model: nn.Module) -> int:
    """Parameters that receive gradients (``requires_grad``), summed."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@torch.no_grad()
def frozen_states(model: SentenceClassifier, tokens: torch.Tensor, attention_mask: torch.Tensor,
                  start_layer: int, batch_size: int = 64) -> torch.Tensor:
    """The input of block ``start_layer`` (N, L, D): the embeddings, then blocks ``0 .. start_layer-1``.

    Computed once, without gradients: the frozen part of the network is a fixed feature extractor.
    """
    check_int("start_layer", start_layer, 0, len(model.encoder.blocks))
    check_int("batch_size", batch_size, 1)
    out = []
    for i in range(0, tokens.shape[0], batch_size):
        ids, m = tokens[i:i + batch_size], attention_mask[i:i + batch_size]
        h = model.encoder.embeddings(ids)  # (b, L, D)
        key_mask = m.bool()[:, None, None, :]
        for block in model.encoder.blocks[:start_layer]:
            h = block(h, key_mask)
        out.append(h)
    return torch.cat(out)  # (N, L, D)


def _logits(model, inputs, mask, start_layer):
    if start_layer is None:
        return model(inputs, mask)
    return model.forward_from(inputs, mask, start_layer)


def train_classifier(model: SentenceClassifier, inputs: torch.Tensor, attention_mask: torch.Tensor,
                     labels: torch.Tensor, *, lr: float, epochs: int, batch_size: int = 32, seed: int = 0,
                     start_layer: int | None = None, weight_decay: float = 0.01, evaluate=None,
                     callback=None) -> History:
    """Train the parameters that ``requires_grad`` with AdamW on cross-entropy, on the loop core
    (:func:`~transformer_lib.training.train_loop`); returns its :class:`~transformer_lib.training.History`:
    ``loss`` (every step) and, one entry per epoch, ``epoch_loss`` (mean training loss),
    ``step_s`` (median seconds per step) and, when ``evaluate`` is given, ``eval`` =
    ``evaluate(model)`` after that epoch (in eval mode). ``callback(step, history)`` runs after
    every step.

    ``inputs`` are ids (N, L), or, with ``start_layer``, the states (N, L, D) from
    :func:`frozen_states` (then only blocks from ``start_layer`` up run). The learning rate is
    constant after a linear warm-up over the first 10% of steps; batches are reshuffled each
    epoch with ``seed``, so a run is reproducible.
    """
    check_labelled_batch(inputs, attention_mask, labels, model.head.out_features)
    check_training_settings(lr, epochs, batch_size, seed)
    params = check_trainable("model", model, "call set_trainable first")
    check_start_layer(inputs, start_layer, len(model.encoder.blocks))
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the head's dropout
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    steps_per_epoch = -(-inputs.shape[0] // batch_size)
    state = {"order": None, "t0": 0.0, "times": []}

    def step_fn(step):
        i = (step % steps_per_epoch) * batch_size
        if i == 0:  # a new epoch: reshuffle
            state["order"], state["times"] = torch.randperm(inputs.shape[0], generator=gen), []
        idx = state["order"][i:i + batch_size]
        state["t0"] = time.perf_counter()
        m = attention_mask[idx]
        width = int(m.sum(-1).max())  # drop columns that are padding in every row of this batch
        return F.cross_entropy(_logits(model, inputs[idx][:, :width], m[:, :width], start_layer), labels[idx])

    def end_of_step(step, history):
        state["times"].append(time.perf_counter() - state["t0"])
        if (step + 1) % steps_per_epoch == 0:  # the epoch's last step
            model.eval()
            losses, times = history["loss"][-steps_per_epoch:], state["times"]
            history.log(epoch_loss=sum(losses) / len(losses), step_s=sorted(times)[len(times) // 2])
            if evaluate is not None:
                history.log(eval=evaluate(model))
            model.train()
        if callback is not None:
            callback(step, history)

    warmup = max(1, (steps_per_epoch * epochs) // 10)
    return train_loop(model, opt, steps_per_epoch * epochs, step_fn, schedule=warmup_schedule(warmup),
                      params=params, callback=end_of_step)


@torch.no_grad()
def predict(model: SentenceClassifier, inputs: torch.Tensor, attention_mask: torch.Tensor,
            start_layer: int | None = None, batch_size: int = 128) -> torch.Tensor:
    """Logits (N, C) in eval mode (no dropout), in batches."""
    model.eval()
    out = []
    for i in range(0, inputs.shape[0], batch_size):
        m = attention_mask[i:i + batch_size]
        width = int(m.sum(-1).max())
        out.append(_logits(model, inputs[i:i + batch_size][:, :width], m[:, :width], start_layer))
    return torch.cat(out)


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """The share of rows whose largest logit is the label's."""
    check_class_scores(logits, labels)
    return (logits.argmax(-1) == labels).float().mean().item()


@torch.no_grad()
def sentence_embeddings(encoder: BertEncoder, tokens: torch.Tensor, attention_mask: torch.Tensor,
                        batch_size: int = 128) -> torch.Tensor:
    """Unit-length mean-pooled embeddings (N, D), as ``PretrainedEncoder.encode`` makes them."""
    encoder.eval()
    out = []
    for i in range(0, tokens.shape[0], batch_size):
        ids, m = tokens[i:i + batch_size], attention_mask[i:i + batch_size]
        out.append(F.normalize(mean_pool(encoder(ids, m), m), dim=-1))
    return torch.cat(out)


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation of two 1-D tensors (no ties expected: cosines of real text)."""
    check_rank_pair(a, b)
    ra = a.double().argsort().argsort().double()  # ranks 0 .. n-1
    rb = b.double().argsort().argsort().double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra @ rb) / (ra.norm() * rb.norm()))


def similarity_agreement(before: torch.Tensor, after: torch.Tensor) -> float:
    """Forgetting, measured: Spearman correlation between the pairwise cosine similarities of the
    same N sentences under two encoders, ``before`` and ``after`` embeddings (N, D) each.

    1.0: fine-tuning kept the pretrained similarity ranking exactly (what MiniLM was trained for);
    lower: it reshaped the embedding space for the new task.
    """
    check_embedding_pair(before, after)
    i, j = torch.triu_indices(before.shape[0], before.shape[0], offset=1)  # each pair once
    return spearman(cosine_matrix(before)[i, j], cosine_matrix(after)[i, j])
