"""Chapter 21 (LoRA and instruction tuning) exercises: the LoRA layer's output, merging the update
into the weight, and the loss on answer tokens only. Each checker compares with the library's
public functions (:class:`transformer_lib.lora.LoRALinear`,
:func:`transformer_lib.instruct.answer_only_loss`) on small random inputs, so no stored numbers
are needed."""
import torch
from torch import nn

from ..instruct import answer_only_loss, pad_batch
from ..lora import LoRALinear
from ._core import NotYet, compare_arrays, exercise, seed_cpu, to_number, to_numpy

_SHAPES = ((6, 4, 2, 3), (8, 8, 1, 5), (5, 9, 4, 2))  # (in_features, out_features, rank, rows)


def _layers():
    """LoRA layers with B != 0 (at B = 0 any update would look right) and different alphas."""
    seed_cpu(21)
    out = []
    for (d_in, d_out, r, rows), alpha in zip(_SHAPES, (16.0, 1.0, 8.0)):
        layer = LoRALinear(nn.Linear(d_in, d_out), r, alpha)
        with torch.no_grad():
            layer.lora_B.copy_(torch.randn(d_out, r))
        out.append((layer, torch.randn(rows, d_in)))
    return out


def _args(layer):
    b = layer.base
    return b.weight.detach().clone(), b.bias.detach().clone(), layer.lora_A.detach().clone(), \
        layer.lora_B.detach().clone(), layer.alpha


@exercise("lora.forward", call="lora_forward(x, W, b, A, B, alpha)",
          hint="the base layer x W^T + b, plus (alpha / r) * (x A^T) B^T with r = A.shape[0]; multiply x by A^T "
               "first, a (rows, r) result, never form the (out, in) matrix")
def _check_forward(answer):
    for n, (layer, x) in enumerate(_layers()):
        with torch.no_grad():
            want = layer(x)
        got = answer(x.clone(), *_args(layer))
        got_np = to_numpy(got, f"your output for layer #{n + 1}")
        if got_np.shape != tuple(want.shape):
            raise NotYet(f"layer #{n + 1}: expected shape {tuple(want.shape)} (rows, out_features), got {got_np.shape}")
        compare_arrays(got, want, f"your output for layer #{n + 1} (rank {layer.rank}, alpha {layer.alpha:g})",
                       atol=1e-4, rtol=1e-4)
    return f"right on {len(_SHAPES)} layers (ranks 2, 1, 4; alpha / r = 8, 1, 2)."


@exercise("lora.merge", call="merge(W, A, B, alpha)",
          hint="W' = W + (alpha / r) * B @ A with r = A.shape[0]; B is (out, r) and A is (r, in), so B @ A has W's "
               "shape (out, in)")
def _check_merge(answer):
    for n, (layer, x) in enumerate(_layers()):
        W, _, A, B, alpha = _args(layer)
        want = layer.merged().weight.detach()
        got = answer(W.clone(), A.clone(), B.clone(), alpha)
        got_np = to_numpy(got, f"your merged weight #{n + 1}")
        if got_np.shape != tuple(want.shape):
            raise NotYet(f"layer #{n + 1}: the merged weight has W's shape {tuple(want.shape)}, yours is {got_np.shape}")
        compare_arrays(got, want, f"your merged weight #{n + 1}", atol=1e-4, rtol=1e-4)
        with torch.no_grad():
            merged_out = x @ torch.as_tensor(got_np, dtype=torch.float32).T + layer.base.bias
            compare_arrays(merged_out, layer(x), f"x times your merged weight for layer #{n + 1}", atol=1e-4, rtol=1e-4)
    return "merged weights right on all 3 layers: the merged layer gives the unmerged output."


def _loss_batches():
    seed_cpu(22)
    cases = []
    for b, vocab in ((3, 11), (2, 7), (4, 13)):
        examples = []
        for _ in range(b):
            p, a = int(torch.randint(2, 7, ())), int(torch.randint(1, 6, ()))
            examples.append((torch.randint(0, vocab, (p + a,)), torch.tensor([False] * p + [True] * a)))
        tokens, mask = pad_batch(examples, pad_id=0)  # answers of different lengths, then padding
        cases.append((torch.randn(*tokens.shape, vocab) * 2, tokens, mask))
    return cases


@exercise("lora.answer_loss", call="answer_loss(logits, tokens, mask)",
          hint="the logits at position t predict token t + 1: use logits[:, :-1] against tokens[:, 1:], keep the "
               "positions where mask[:, 1:] is True, and average the cross-entropy over all those tokens of the batch")
def _check_answer_loss(answer):
    for n, (logits, tokens, mask) in enumerate(_loss_batches()):
        want = float(answer_only_loss(logits, tokens, mask))
        got = to_number(answer(logits.clone(), tokens.clone(), mask.clone()), f"your loss for batch #{n + 1}")
        if abs(got - want) > 1e-4 * max(1.0, abs(want)):
            per_row = float(torch.stack([answer_only_loss(logits[i:i + 1], tokens[i:i + 1], mask[i:i + 1])
                                         for i in range(len(tokens))]).mean())
            if abs(got - per_row) < 1e-4 * max(1.0, abs(per_row)):
                raise NotYet(f"batch #{n + 1}: you averaged each row's mean; average over all answer tokens instead "
                             "(a longer answer has more tokens, and each token counts once)")
            raise NotYet(f"batch #{n + 1}: your loss differs from the answer-only cross-entropy "
                         f"(batch of {len(tokens)}, {int(mask[:, 1:].sum())} answer tokens)")
    return "right on 3 batches of answers of different lengths, with padding."
