"""The flattened step (transformer_lib.serving.varlen): decoding rows and prompt chunks of many
sequences in one forward pass give each sequence the logits of its own one-at-a-time forward
(float32 rounding), and a mixed step equals the same sequences run in separate steps, ids and
logits, for a RoPE grouped-query model, a Llama-style one (float and int4), learned and
sinusoidal positions, post-norm blocks and QK-norm."""
from __future__ import annotations

import copy

import pytest
import torch

import transformer_lib as tl
from transformer_lib.model import LLAMA_SWITCHES
from transformer_lib.quantization import quantize
from transformer_lib.serving import PagedKVCache
from transformer_lib.serving.varlen import check_varlen_model, varlen_forward

V = 89
MODELS = {
    "rope-gqa": dict(positional="rope", num_kv_heads=2),
    "llama": dict(num_kv_heads=2, d_ff=64, **LLAMA_SWITCHES),
    "learned": dict(positional="learned"),
    "sinusoidal-post-norm": dict(positional="sinusoidal", norm_first=False),
    "qk-norm": dict(positional="rope", qk_norm=True),
}


def _model(name):
    torch.manual_seed(0)
    return tl.DecoderOnlyLM(V, 32, 4, 2, max_len=128, **MODELS[name]).eval()


def _prompts():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, V, (n,), generator=g).tolist() for n in (5, 9, 3, 12)]


def _alone(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]))[0, -1].float()  # (V,): the last position, one forward pass


def _steps(model, schedule, block_size=4):
    """Run ``schedule`` (a list of steps, each a list of (sequence, ids)) through varlen_forward; the
    logits of each step, in its order."""
    cache = PagedKVCache(len(model.blocks), num_blocks=64, block_size=block_size)
    out = []
    with torch.no_grad():
        for step in schedule:
            for seq, _ in step:
                if seq not in cache.tables:
                    cache.add_sequence(seq)
            out.append(varlen_forward(model, cache, [s for s, _ in step], [ids for _, ids in step]))
    return out, cache


@pytest.mark.parametrize("name", list(MODELS))
def test_a_mixed_step_gives_each_sequence_its_own_forward_pass_logits(name):
    model, p = _model(name), _prompts()
    (first,), _ = _steps(model, [[(0, p[0]), (1, p[1])]])
    t = first.argmax(-1).tolist()
    # step 2 alone: two decoding rows, a whole prompt and the first chunk (7 of 12) of another
    (a, b), cache = _steps(model, [[(0, p[0]), (1, p[1])],
                                   [(0, [t[0]]), (1, [t[1]]), (2, p[2]), (3, p[3][:7])]])
    want = [_alone(model, p[0] + [t[0]]), _alone(model, p[1] + [t[1]]), _alone(model, p[2])]
    torch.testing.assert_close(b[:3], torch.stack(want), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a, torch.stack([_alone(model, p[0]), _alone(model, p[1])]), atol=1e-5, rtol=1e-5)
    assert cache.seq_lengths == {0: 6, 1: 10, 2: 3, 3: 7}
    with torch.no_grad():  # the chunk's rest, beside a decoding row: the whole prompt's logits
        rest = varlen_forward(model, cache, [3, 2], [p[3][7:], [b[2].argmax().item()]])
    torch.testing.assert_close(rest[0], _alone(model, p[3]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rest[1], _alone(model, p[2] + [b[2].argmax().item()]), atol=1e-5, rtol=1e-5)


def test_a_mixed_step_equals_the_same_sequences_in_separate_steps():
    model, p = _model("llama"), _prompts()

    def run(mixed):
        # 0 and 1 prefilled, then 2's prompt with 0 and 1's next tokens: in one forward pass (mixed)
        # or in two (decoding rows, then the prompt alone); then 3 decoding steps of all three
        cache = PagedKVCache(len(model.blocks), num_blocks=64, block_size=4)
        for s in (0, 1, 2):
            cache.add_sequence(s)
        ids, logits = {s: [] for s in (0, 1, 2)}, {s: [] for s in (0, 1, 2)}

        def keep(seqs, out):
            for s, row in zip(seqs, out):
                ids[s].append(row.argmax().item())
                logits[s].append(row)

        with torch.no_grad():
            keep([0, 1], varlen_forward(model, cache, [0, 1], [p[0], p[1]]))
            if mixed:
                keep([0, 1, 2], varlen_forward(model, cache, [0, 1, 2], [[ids[0][-1]], [ids[1][-1]], p[2]]))
            else:
                keep([0, 1], varlen_forward(model, cache, [0, 1], [[ids[0][-1]], [ids[1][-1]]]))
                keep([2], varlen_forward(model, cache, [2], [p[2]]))
            for _ in range(3):
                keep([0, 1, 2], varlen_forward(model, cache, [0, 1, 2], [[ids[s][-1]] for s in (0, 1, 2)]))
        return ids, {s: torch.stack(rows) for s, rows in logits.items()}

    sep_ids, sep_logits = run(mixed=False)
    mix_ids, mix_logits = run(mixed=True)
    assert mix_ids == sep_ids and [len(mix_ids[s]) for s in (0, 1, 2)] == [5, 5, 4]
    for s in (0, 1, 2):
        torch.testing.assert_close(mix_logits[s], sep_logits[s], atol=1e-5, rtol=1e-5)


def test_int4_weights_run_the_flattened_step():
    torch.manual_seed(0)
    llama = tl.DecoderOnlyLM(97, 64, 4, 2, num_kv_heads=2, d_ff=128, max_len=64, **LLAMA_SWITCHES).eval()
    q4 = quantize(copy.deepcopy(llama), 4)
    p = [torch.randint(0, 97, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (4, 11)]
    (out,), _ = _steps(q4, [[(0, p[0]), (1, p[1])]])
    torch.testing.assert_close(out, torch.stack([_alone(q4, p[0]), _alone(q4, p[1])]), atol=1e-4, rtol=1e-5)


def test_models_the_step_cannot_run_are_refused():
    with pytest.raises(ValueError, match="alibi"):
        check_varlen_model(tl.DecoderOnlyLM(V, 32, 4, 2, positional="alibi"))
    with pytest.raises(ValueError, match="MultiHeadAttention"):
        check_varlen_model(tl.DecoderOnlyLM(V, 32, 4, 2, positional="rope", attention="mla"))
