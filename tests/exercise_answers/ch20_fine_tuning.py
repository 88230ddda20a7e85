"""Answers for the checkers of transformer_lib/exercises/ch20_fine_tuning.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import numpy as np
import torch


def freeze_reference(model, k):
    model.requires_grad_(False)
    model.head.requires_grad_(True)
    for block in model.encoder.blocks[len(model.encoder.blocks) - k:]:
        block.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _freeze_by_name(model, k):
    n = len(model.encoder.blocks)
    keep = ("head.",) + tuple(f"encoder.blocks.{i}." for i in range(n - k, n))
    total = 0
    for name, p in model.named_parameters():
        p.requires_grad = name.startswith(keep)
        total += p.numel() if p.requires_grad else 0
    return total


def _freeze_negative_slice(model, k):  # blocks[-0:] is every block: k = 0 trains everything
    model.requires_grad_(False)
    model.head.requires_grad_(True)
    for block in model.encoder.blocks[-k:]:
        block.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _freeze_bottom(model, k):  # the first k blocks instead of the last k
    model.requires_grad_(False)
    model.head.requires_grad_(True)
    for block in model.encoder.blocks[:k]:
        block.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _freeze_forgets_head(model, k):
    model.requires_grad_(False)
    for block in model.encoder.blocks[len(model.encoder.blocks) - k:]:
        block.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _freeze_keeps_leftovers(model, k):  # never freezes what was trainable before
    model.head.requires_grad_(True)
    for block in model.encoder.blocks[:len(model.encoder.blocks) - k]:
        block.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _freeze_counts_tensors(model, k):
    freeze_reference(model, k)
    return sum(1 for p in model.parameters() if p.requires_grad)


def pooled_head_reference(states, mask, weight, bias):
    m = mask.to(states.dtype).unsqueeze(-1)
    return ((states * m).sum(1) / m.sum(1)) @ weight.T + bias


def _pooled_head_numpy(states, mask, weight, bias):
    s, m = states.numpy().astype(np.float64), mask.numpy().astype(np.float64)
    pooled = np.einsum("bld,bl->bd", s, m) / m.sum(1, keepdims=True)
    return pooled @ weight.numpy().T + bias.numpy()


def _pooled_head_loop(states, mask, weight, bias):
    rows = []
    for b in range(states.shape[0]):
        real = states[b][mask[b].bool()]
        rows.append(torch.nn.functional.linear(real.mean(0), weight, bias))
    return torch.stack(rows)


def _pooled_head_all_tokens(states, mask, weight, bias):  # averages the padding too
    return states.mean(1) @ weight.T + bias


def _pooled_head_cls(states, mask, weight, bias):  # the first token only
    return states[:, 0] @ weight.T + bias


def _pooled_head_sum(states, mask, weight, bias):  # a sum, not a mean
    return (states * mask.unsqueeze(-1)).sum(1) @ weight.T + bias


def _pooled_head_no_bias(states, mask, weight, bias):
    return pooled_head_reference(states, mask, weight, torch.zeros_like(bias))


def _pooled_head_max(states, mask, weight, bias):
    return states.masked_fill(~mask.bool().unsqueeze(-1), -1e9).amax(1) @ weight.T + bias


def loss_reference(logits, labels):
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -logp[torch.arange(len(labels)), labels].mean()


def _loss_numpy(logits, labels):
    z = logits.numpy().astype(np.float64)
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return -logp[np.arange(len(labels)), labels.numpy()].mean()


def _loss_naive(logits, labels):  # exp overflows for a logit of 120
    p = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    return -torch.log(p[torch.arange(len(labels)), labels]).mean()


def _loss_sum(logits, labels):
    return loss_reference(logits, labels) * len(labels)


def _loss_no_log(logits, labels):
    return -torch.softmax(logits, -1)[torch.arange(len(labels)), labels].mean()


def _loss_wrong_axis(logits, labels):
    logp = torch.log_softmax(logits, dim=0)
    return -logp[torch.arange(len(labels)), labels].mean()


def _loss_argmax(logits, labels):  # scores the prediction, not the label
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.max(-1).values.mean()


ANSWERS = {
    "finetune.freeze_top_k": {
        "solution": lambda: freeze_reference,
        "alternatives": lambda: [_freeze_by_name],
        "wrong": lambda: [_freeze_negative_slice, _freeze_bottom, _freeze_forgets_head, _freeze_keeps_leftovers,
                          _freeze_counts_tensors],
    },
    "finetune.pooled_head": {
        "solution": lambda: pooled_head_reference,
        "alternatives": lambda: [_pooled_head_numpy, _pooled_head_loop],
        "wrong": lambda: [_pooled_head_all_tokens, _pooled_head_cls, _pooled_head_sum, _pooled_head_no_bias,
                          _pooled_head_max],
    },
    "finetune.cross_entropy": {
        "solution": lambda: loss_reference,
        "alternatives": lambda: [_loss_numpy, lambda lg, y: torch.nn.functional.nll_loss(lg.log_softmax(-1), y)],
        "wrong": lambda: [_loss_naive, _loss_sum, _loss_no_log, _loss_wrong_axis, _loss_argmax],
    },
}
