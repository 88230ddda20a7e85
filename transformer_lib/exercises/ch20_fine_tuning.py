"""Chapter 20 (Fine-tuning for a task) exercises: freezing all but the top k layers, the
classification head on mean-pooled states, and its cross-entropy loss. Each checker compares with
the library's public functions (:mod:`transformer_lib.finetune`, ``mean_pool``) on small random
models and batches, so no stored numbers are needed."""
import torch
import torch.nn.functional as F

from ..finetune import SentenceClassifier, count_trainable, head_logits, set_trainable
from ..pretrained.minilm import BertEncoder, MiniLMConfig
from ._core import NotYet, compare_function, exercise, seed_cpu, to_int

_TINY = MiniLMConfig(vocab_size=50, d_model=16, num_layers=4, num_heads=2, d_ff=32, max_positions=16)


def _tiny_classifier() -> SentenceClassifier:
    seed_cpu(20)
    return SentenceClassifier(BertEncoder(_TINY), num_classes=3)


@exercise("finetune.freeze_top_k", call="freeze_all_but_top(model, k)",
          hint="first requires_grad_(False) on the whole model; then requires_grad_(True) on the head and on "
               "model.encoder.blocks[-k:] (careful: blocks[-0:] is every block); return the number of "
               "parameters with requires_grad")
def _check_freeze_top_k(answer):
    for k in range(_TINY.num_layers + 1):
        mine, ref = _tiny_classifier(), _tiny_classifier()
        mine.requires_grad_(True)
        mine.encoder.embeddings.requires_grad_(k % 2 == 0)  # a leftover state that must not matter
        count = to_int(answer(mine, k), f"your count for k = {k}")
        want = set_trainable(ref, k)
        flags = {n for n, p in mine.named_parameters() if p.requires_grad}
        right = {n for n, p in ref.named_parameters() if p.requires_grad}
        if flags != right:
            extra, missing = sorted(flags - right), sorted(right - flags)
            what = f"{extra[0]} should be frozen" if extra else f"{missing[0]} should train"
            raise NotYet(f"k = {k}: {what}")
        if count != count_trainable(mine) or count != want:
            raise NotYet(f"k = {k}: the flags are right but the count you return is not the number of trainable "
                         "parameters (numel of each, summed)")
    return f"right flags and counts for k = 0 .. {_TINY.num_layers} (the head always trains)."


def _pool_inputs():
    seed_cpu(21)
    cases = []
    for b, length, d, c in ((3, 5, 8, 2), (4, 7, 16, 3), (1, 4, 6, 2)):
        states = torch.randn(b, length, d)
        mask = torch.ones(b, length, dtype=torch.long)
        for row in range(b):
            real = int(torch.randint(1, length + 1, ()))
            mask[row, real:] = 0
            states[row, real:] += 50.0  # padding holds junk: it must not leak into the mean
        cases.append((states, mask, torch.randn(c, d), torch.randn(c)))
    return cases


@exercise("finetune.pooled_head", call="classify(states, mask, weight, bias)",
          hint="mean over the real tokens only: (states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True); "
               "then logits = pooled @ weight.T + bias, shape (B, C)")
def _check_pooled_head(answer):
    return compare_function(answer, head_logits, _pool_inputs(), what="your logits", atol=1e-4)


def _loss_inputs():
    seed_cpu(22)
    out = []
    for b, c in ((4, 2), (6, 3), (5, 5)):
        logits = torch.randn(b, c) * 3
        logits[0, 0] = 120.0  # a confident row: exp(120) overflows float32 if computed naively
        out.append((logits, torch.randint(0, c, (b,))))
    return out


@exercise("finetune.cross_entropy", call="head_loss(logits, labels)",
          hint="log-softmax each row stably (subtract its max, or use torch.logsumexp), take the entry of the "
               "row's label, negate and average over the batch")
def _check_cross_entropy(answer):
    msg = compare_function(answer, lambda lg, y: F.cross_entropy(lg, y), _loss_inputs(), what="your loss",
                           atol=1e-4)  # a naive exp(120) is inf in float32: the first input's loss would be NaN
    return msg.replace("test inputs.", "test inputs, a logit of 120 included.")
