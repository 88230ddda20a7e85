"""transformer_lib.instruct: chat examples in SmolLM2's template, the answer-only loss (against
transformers' causal-LM loss), gradient accumulation equal to the whole batch, the training loop,
and the chapter's JSON task."""
import copy

import pytest
import torch
from hypothesis import given, settings, strategies as st

import transformer_lib as tl
from transformer_lib import instruct
from transformer_lib.lora import add_lora

U = 2.0 ** -24


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return tl.DecoderOnlyLM(37, d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=24, init_std=0.02)


def random_examples(n, seed=0, vocab=37):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        p, a = int(torch.randint(2, 9, (1,), generator=g)), int(torch.randint(1, 8, (1,), generator=g))
        ids = torch.randint(0, vocab, (p + a,), generator=g)
        out.append((ids, torch.tensor([False] * p + [True] * a)))
    return out


# -- the loss -----------------------------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_answer_only_loss_equals_transformers_causal_lm_loss(n, seed):
    loss_utils = pytest.importorskip("transformers.loss.loss_utils")
    tokens, mask = instruct.pad_batch(random_examples(n, seed), pad_id=0)
    logits = torch.randn(*tokens.shape, 37, generator=torch.Generator().manual_seed(seed))
    ours = instruct.answer_only_loss(logits, tokens, mask)
    ref = loss_utils.ForCausalLMLoss(logits, instruct.answer_labels(tokens, mask), vocab_size=37)
    # a mean of <= 5 * 8 cross-entropies of 37 logits: a few hundred float32 roundings
    assert abs(float(ours) - float(ref)) <= 500 * U * max(1.0, abs(float(ref)))
    s = instruct.answer_only_loss(logits, tokens, mask, reduction="sum")
    assert torch.allclose(s / mask[:, 1:].sum(), ours, rtol=1e-5)


def test_prompt_and_padding_positions_do_not_change_the_loss():
    tokens, mask = instruct.pad_batch(random_examples(4, 3), pad_id=0)
    logits = torch.randn(*tokens.shape, 37)
    base = instruct.answer_only_loss(logits, tokens, mask)
    predicts_answer = torch.zeros_like(mask)
    predicts_answer[:, :-1] = mask[:, 1:]  # position t-1's logits predict token t
    noisy = torch.where(predicts_answer[..., None], logits, torch.randn_like(logits) * 100)
    assert torch.equal(instruct.answer_only_loss(noisy, tokens, mask), base)
    changed = logits.clone()
    changed[predicts_answer] += torch.randn(int(predicts_answer.sum()), 37)
    assert not torch.allclose(instruct.answer_only_loss(changed, tokens, mask), base)


# -- gradient accumulation ------------------------------------------------------------------------------------

def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("parts", [2, 3, 6])
def test_accumulated_gradients_equal_the_whole_batch(parts):
    examples = random_examples(6, 5)  # answers of different lengths
    model = tiny_model()
    add_lora(model, 2, 4.0, ["q_proj", "v_proj"])
    for m in tl.lora.lora_modules(model).values():
        torch.nn.init.normal_(m.lora_B, std=0.1)
    whole = copy.deepcopy(model)
    size = 6 // parts
    loss_acc = instruct.accumulate_gradients(model, [instruct.pad_batch(examples[i:i + size], 0)
                                                     for i in range(0, 6, size)])
    loss_whole = instruct.accumulate_gradients(whole, [instruct.pad_batch(examples, 0)])
    assert abs(loss_acc - loss_whole) <= 1e-5 * abs(loss_whole)
    for name, g in _grads(whole).items():
        assert torch.allclose(_grads(model)[name], g, rtol=1e-4, atol=1e-6 * float(g.abs().max())), name
    # the naive version (the mean of each micro-batch's mean) is a different gradient here
    naive = copy.deepcopy(whole)
    naive.zero_grad()
    for i in range(0, 6, size):
        t, m = instruct.pad_batch(examples[i:i + size], 0)
        (instruct.answer_only_loss(naive(t), t, m) / parts).backward()
    diff = max(float((p.grad - _grads(whole)[n]).abs().max()) for n, p in naive.named_parameters() if p.requires_grad)
    assert diff > 1e-4


def test_train_lora_lowers_the_answer_loss_and_trains_only_the_adapters():
    torch.manual_seed(1)  # torch's own initialisation: the tied head can reach large logits
    model = tl.DecoderOnlyLM(37, d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=24)
    frozen = {n: p.clone() for n, p in model.named_parameters()}
    add_lora(model, 4, 8.0, ["out_proj", "linear2"])  # the layers that write into the residual stream
    # a fixed response format, as in the chapter: every answer is the tokens 5, 6, 7
    g = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(16):
        ids = torch.randint(0, 37, (5,), generator=g)
        examples.append((torch.cat([ids, torch.tensor([5, 6, 7])]), torch.tensor([False] * 5 + [True] * 3)))
    losses = instruct.train_lora(model, examples, steps=20, batch_size=8, accumulation=2, lr=3e-2, seed=0)["loss"]
    assert not model.training
    assert len(losses) == 20 and sum(losses[-5:]) / 5 < 0.3 * sum(losses[:5]) / 5
    for n, p in model.named_parameters():
        key = n.replace(".base.", ".")
        if key in frozen:
            assert torch.equal(p, frozen[key]), n


# -- the task -------------------------------------------------------------------------------------------------

def test_json_task_splits_are_disjoint_and_hold_out_countries():
    train, test = instruct.json_task(seed=0)
    assert len(train) == 96 and len(test) == 24
    assert not {p for p, _, _ in train} & {p for p, _, _ in test}
    train_text = " ".join(p for p, _, _ in train)
    held = [c for c, cap in instruct.CAPITALS if any(cap == v for _, _, v in test)]
    assert held and not any(c in train_text for c in held)
    for _, target, value in train + test:
        assert instruct.follows_format(target) == (True, value)
    assert instruct.json_task(seed=0) == (train, test)


@pytest.mark.parametrize("text, ok", [('{"answer": "Paris"}', True), (' {"answer": 42}\n', True),
                                      ("Paris", False), ('{"answer": 1, "why": 2}', False),
                                      ('["answer"]', False), ('{"Answer": 1}', False), ("", False)])
def test_follows_format(text, ok):
    assert instruct.follows_format(text)[0] is ok


# -- with SmolLM2's real template and tokenizer ----------------------------------------------------------------

@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("transformer_lib.pretrained")
    from _smollm2 import smollm2  # a copy of the process's one load (tests/_smollm2.py)
    try:
        return smollm2("cpu")
    except (FileNotFoundError, ImportError) as err:
        pytest.skip(f"SmolLM2 not installed: {err}")


def test_chat_example_masks_exactly_the_answer_and_end_of_turn(smol):
    ids, mask = instruct.chat_example(smol, "What is 2 + 3?", '{"answer": 5}')
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    prompt = smol.prompt_ids(messages)
    assert torch.equal(ids[:len(prompt)], prompt)  # the tokens generate() will see
    assert not mask[:len(prompt)].any() and mask[len(prompt):].all()
    assert smol.tokenizer.decode(ids[mask].tolist(), skip_special_tokens=False) == '{"answer": 5}<|im_end|>'
    full = smol.chat(messages + [{"role": "assistant", "content": '{"answer": 5}'}], add_generation_prompt=False)
    assert smol.tokenizer.decode(ids.tolist(), skip_special_tokens=False) == full.rstrip("\n")


# -- bad input ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, name", [
    (lambda: instruct.answer_only_loss(torch.randn(1, 4, 5), torch.zeros(1, 4, dtype=torch.long),
                                       torch.zeros(1, 4, dtype=torch.bool)), ValueError, "mask"),
    (lambda: instruct.answer_only_loss(torch.randn(1, 4, 5), torch.zeros(1, 4, dtype=torch.long),
                                       torch.ones(1, 4)), ValueError, "mask"),
    (lambda: instruct.answer_only_loss(torch.randn(1, 3, 5), torch.zeros(1, 4, dtype=torch.long),
                                       torch.ones(1, 4, dtype=torch.bool)), ValueError, "logits"),
    (lambda: instruct.answer_only_loss(torch.randn(1, 4, 5), torch.zeros(1, 4, dtype=torch.long),
                                       torch.ones(1, 4, dtype=torch.bool), reduction="avg"), ValueError, "reduction"),
    (lambda: instruct.answer_labels(torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=torch.bool)),
     ValueError, "tokens"),
    (lambda: instruct.answer_labels([1, 2], torch.ones(1, 2, dtype=torch.bool)), TypeError, "tokens"),
    (lambda: instruct.pad_batch([], 0), ValueError, "examples"),
    (lambda: instruct.accumulate_gradients(tiny_model(), []), ValueError, "micro_batches"),
    (lambda: instruct.train_lora(tiny_model().requires_grad_(False), random_examples(8), steps=2), ValueError,
     "trainable"),
    (lambda: instruct.train_lora(tiny_model(), random_examples(8), steps=0), ValueError, "steps"),
    (lambda: instruct.train_lora(tiny_model(), random_examples(8), steps=1, batch_size=4, accumulation=5),
     ValueError, "accumulation"),
    (lambda: instruct.train_lora(tiny_model(), random_examples(2), steps=1, batch_size=4), ValueError, "examples"),
    (lambda: instruct.train_lora(tiny_model(), random_examples(8), steps=1, lr=-1.0), ValueError, "lr"),
    (lambda: instruct.json_task(n_train=0), ValueError, "n_train"),
])
def test_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_chat_example_bad_input(smol):
    with pytest.raises(ValueError, match="answer"):
        instruct.chat_example(smol, "Hi", "  ")
    with pytest.raises(TypeError, match="prompt"):
        instruct.chat_example(smol, 3, "x")


def test_the_committed_adapter_teaches_the_format_and_switches_off_exactly(smol):
    """The chapter's adapter (benchmarks/lora.py): < 5 MB, loads onto SmolLM2's q/v matrices, makes a
    held-out question come back as {"answer": ...}; switched off, the logits are the base model's."""
    from pathlib import Path

    from transformer_lib.lora import count_parameters, load_lora, lora_disabled, merge_lora

    path = Path(instruct.__file__).parent / "data" / "smollm2_lora_json.pt"
    assert path.stat().st_size < 5e6
    question = [{"role": "user", "content": instruct.json_task(seed=0)[1][1][0]}]  # held out: 14 minus 13
    ids = smol.prompt_ids(question)
    base_logits = smol.model(ids[None])
    meta = load_lora(smol.model, path)
    try:
        assert meta["task"] == "json_answer"
        assert count_parameters(smol.model)[0] == 30 * 8 * ((576 + 576) + (576 + 192))  # q and v of 30 blocks
        assert instruct.follows_format(smol.generate_text(question, max_new_tokens=10))[0]
        with lora_disabled(smol.model):
            assert torch.equal(smol.model(ids[None]), base_logits)
        assert not torch.allclose(smol.model(ids[None]), base_logits)
    finally:
        merge_lora(smol.model)  # leave the fixture a plain model (with the update folded in)
