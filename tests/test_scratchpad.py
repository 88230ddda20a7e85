"""The addition scratchpad (chapter 26): its format, its parser and its training rows."""
import torch

from transformer_lib.reasoning import decode, sft_batch
from transformer_lib.scratchpad import (SCRATCHPAD_MAX_LEN, parse_scratchpad, scratchpad, scratchpad_batch,
                                        scratchpad_length, train_scratchpad_model)


def test_columns_carry_and_answer():
    assert scratchpad(47, 381, 3) == "7180" "4821" "0340" "=824$"
    assert scratchpad(999, 1, 3) == "9101" "9001" "9001" "=0001$"  # the last carry is the answer's top digit
    for a, b, d in [(0, 0, 1), (5, 5, 1), (12345, 98765, 5), (70, 80, 2)]:
        text = scratchpad(a, b, d)
        assert parse_scratchpad(text) == a + b
        assert len(text) <= scratchpad_length(d)
    assert scratchpad_length(5) + 12 <= SCRATCHPAD_MAX_LEN


def test_parse_reads_only_the_final_answer():
    assert parse_scratchpad("7180=824$") == 428
    assert parse_scratchpad("7180=824$$$") == 428
    assert parse_scratchpad("7180824$") is None  # no '=' before the end
    assert parse_scratchpad("7180=824") is None  # never ends
    assert parse_scratchpad("7180=8+4$") is None
    assert parse_scratchpad("7180=$") is None


def test_batch_uses_the_answer_only_problems():
    tokens, mask = scratchpad_batch(8, 3, torch.Generator().manual_seed(5))
    plain, _ = sft_batch(8, 3, torch.Generator().manual_seed(5))
    assert torch.equal(tokens[:, :8], plain[:, :8])  # the same prompts, drawn the same way
    for row, m in zip(tokens.tolist(), mask.tolist()):
        prompt, response = decode(row[:8]), decode([t for t, k in zip(row, m) if k])
        a, b = (int(x) for x in prompt[:-1].split("+"))
        assert response == scratchpad(a, b, 3)


def test_training_lowers_the_loss():
    model, losses = train_scratchpad_model(30, max_digits=2, batch_size=16)
    assert model.config.max_len == SCRATCHPAD_MAX_LEN
    assert sum(losses[-5:]) < sum(losses[:5])
