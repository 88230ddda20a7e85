"""Chapter 13's checkers (transformer_lib/exercises/ch13_encoder_decoder.py) accept a right answer
written here, reject every registered wrong answer, take the answer types the chapter promises, and
leave the reader's random state alone."""
import pytest
import torch
import torch.nn.functional as F

from exercise_answers import wrong_answers
from transformer_lib import tasks
from transformer_lib.exercises import get


def _generate(model, src, bos_id, max_len):
    memory = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    steps = []
    for _ in range(max_len):
        logits = model.decode(ys, memory)[:, -1]
        steps.append(logits)
        ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
    return ys[:, 1:], torch.stack(steps, dim=1)


SOLUTIONS = {
    "encdec.teacher_forcing_loss":
        lambda m, s, t: F.cross_entropy(m(s, tasks.shift_right(t)).flatten(0, 1), t.flatten()),
    "encdec.generate_with_logits": _generate,
    "encdec.prefix_lm_mask": lambda n, L: (torch.arange(L)[None] <= torch.arange(L)[:, None]) | (torch.arange(L)[None] < n),
    "encdec.extra_decoder_parameters": lambda d: 4 * (d * d + d) + 2 * d,
}


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
def test_checker_accepts_a_right_answer_and_rejects_the_wrong_ones(name):
    exercise = get(name)
    assert exercise.run(SOLUTIONS[name]).passed, exercise.run(SOLUTIONS[name]).message
    for wrong in wrong_answers(name):
        assert not exercise.run(wrong).passed


def test_the_loss_checker_accepts_a_python_float_and_rejects_a_vector():
    right = SOLUTIONS["encdec.teacher_forcing_loss"]
    exercise = get("encdec.teacher_forcing_loss")
    assert exercise.run(lambda m, s, t: right(m, s, t).item()).passed
    result = exercise.run(lambda m, s, t: F.cross_entropy(m(s, tasks.shift_right(t)).flatten(0, 1), t.flatten(),
                                                          reduction="none"))
    assert not result.passed and "one number" in result.message


def test_checkers_do_not_disturb_the_readers_random_state():
    torch.manual_seed(5)
    before = torch.rand(3)
    torch.manual_seed(5)
    get("encdec.generate_with_logits").run(_generate)
    get("encdec.extra_decoder_parameters").run(SOLUTIONS["encdec.extra_decoder_parameters"])
    assert torch.equal(torch.rand(3), before)
