"""A minimal recurrent baseline for the RNN-vs-Transformer chapter.

    h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)

:class:`ElmanRNN` writes the recurrence as a Python loop over time, so the n sequential steps
are visible in the code: step t cannot start before step t - 1 has finished. That chain is the
critical path a Transformer layer does not have. :func:`torch_rnn` builds ``nn.RNN`` / ``nn.GRU``
(cuDNN / oneDNN kernels) batch-first for timing comparisons.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ._checks import check_choice, check_features, check_int, check_torch_rnn

__all__ = ["ElmanRNN", "torch_rnn", "RNNClassifier"]


class ElmanRNN(nn.Module):
    """Single-layer tanh RNN, batch-first, written step by step.

    ``forward(x, h0=None)`` with x (B, L, input_size) returns (outputs (B, L, hidden), h_L (B, hidden)).
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        check_int("input_size", input_size)
        check_int("hidden_size", hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        self.ih = nn.Linear(input_size, hidden_size)  # W_ih, b_ih
        self.hh = nn.Linear(hidden_size, hidden_size)  # W_hh, b_hh

    def forward(self, x: torch.Tensor, h0: torch.Tensor | None = None):
        check_features("x", x, self.input_size, dims=3)
        B, L, _ = x.shape
        h = x.new_zeros(B, self.hidden_size) if h0 is None else h0
        x_proj = self.ih(x)  # (B, L, hidden): the input part has no dependency between steps
        outputs = []
        for t in range(L):  # the sequential part: n steps, each waiting for the previous one
            h = torch.tanh(x_proj[:, t] + self.hh(h))  # (B, hidden)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h  # (B, L, hidden), (B, hidden)

    @classmethod
    def from_torch(cls, rnn: nn.RNN) -> "ElmanRNN":
        """Copy a single-layer, unidirectional tanh ``torch.nn.RNN``."""
        check_torch_rnn(rnn)
        ours = cls(rnn.input_size, rnn.hidden_size).to(rnn.weight_ih_l0.device)
        with torch.no_grad():
            ours.ih.weight.copy_(rnn.weight_ih_l0)
            ours.ih.bias.copy_(rnn.bias_ih_l0)
            ours.hh.weight.copy_(rnn.weight_hh_l0)
            ours.hh.bias.copy_(rnn.bias_hh_l0)
        return ours


def torch_rnn(kind: str, input_size: int, hidden_size: int, num_layers: int = 1) -> nn.Module:
    """``nn.RNN`` or ``nn.GRU`` (batch_first=True): the fused-kernel baselines."""
    kinds = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}
    check_choice("kind", kind, sorted(kinds))
    return kinds[kind](input_size, hidden_size, num_layers=num_layers, batch_first=True)


class RNNClassifier(nn.Module):
    """Embedding -> recurrent layer -> linear head on the last state (or every state).

    A small wrapper used by the chapter's long-range recall task.
    """

    def __init__(self, vocab_size: int, hidden_size: int, num_classes: int, kind: str = "gru"):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden_size)
        self.rnn = ElmanRNN(hidden_size, hidden_size) if kind == "elman" else torch_rnn(kind, hidden_size, hidden_size)
        self.head = nn.Linear(hidden_size, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(tokens))  # (B, L, hidden)
        return self.head(out[:, -1])  # (B, num_classes)
