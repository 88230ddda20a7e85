"""transformer_lib.evaluation: scoring, statistics, contamination, calibration and the built sets.

References: a full-sequence log-softmax written out here (the scorer goes through a KV cache),
SciPy's exact binomial test and Wilson interval (scipy.stats.binomtest), hand computations, and
simulation for the power formula. lm-evaluation-harness parity is tests/test_evaluation_lm_eval.py.
"""
import json
import math
import random

import pytest
import torch
from hypothesis import given, strategies as st

from transformer_lib.data import load_corpus, split_paragraphs
from transformer_lib.evaluation import (CAPITALS, NORMALISATIONS, ChoiceItem, ChoiceScores, Question,
                                        accuracy_interval, arithmetic_questions, capital_questions,
                                        choice_probabilities, cloze_questions, contaminated, correct, exact_match,
                                        expected_calibration_error, few_shot_prompt, items_needed, last_number,
                                        mcnemar_p_value, ngram_index, ngrams, normalise_answer, normalised_scores,
                                        overlap, paired_bootstrap, paired_comparison, power, predictions,
                                        reliability, score_choices, split_context, to_items, words,
                                        write_lm_eval_task)
from transformer_lib.model import DecoderOnlyLM


def char_encode(text):
    """A tokenizer with one token per character (ids 0-127), and one merge: ' P' is token 128."""
    ids, i = [], 0
    while i < len(text):
        if text[i:i + 2] == " P":
            ids.append(128)
            i += 2
        else:
            ids.append(ord(text[i]) % 128)
            i += 1
    return ids


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return DecoderOnlyLM(vocab_size=129, d_model=32, num_heads=4, num_layers=2, max_len=64).eval()


# -- scoring -----------------------------------------------------------------------------------

def test_split_context_follows_lm_eval():
    # a trailing space moves into the continuation, and the boundary merge " P" is kept
    assert split_context(char_encode, "Capital: ", "Paris") == (char_encode("Capital:"), [128] + char_encode("aris"))
    assert split_context(char_encode, "ab", " cd") == (char_encode("ab"), char_encode(" cd"))


def reference_loglikelihood(model, context, continuation):
    """log p(continuation | context) by one full pass and a log-softmax, no cache."""
    tokens = torch.tensor(context + continuation)[None]
    logp = model(tokens[:, :-1]).log_softmax(-1)[0]  # (L - 1, V): position t predicts token t + 1
    return sum(logp[len(context) - 1 + i, t].item() for i, t in enumerate(continuation))


def test_score_choices_equals_a_full_pass(tiny):
    item = ChoiceItem("Q: capital of France?\nA:", ("Paris", "Lyon", "Marseille"), 0)
    scores = score_choices(tiny, char_encode, item)
    for choice, ll, n in zip(item.choices, scores.loglikelihoods, scores.tokens):
        ctx, cont = split_context(char_encode, item.context, " " + choice)
        assert n == len(cont)
        assert ll == pytest.approx(reference_loglikelihood(tiny, ctx, cont), rel=1e-6, abs=1e-5)  # float32 sums
    assert scores.chars == (5, 4, 9) and scores.bytes == (5, 4, 9) and scores.gold == 0


def test_a_long_context_keeps_its_last_tokens(tiny):
    item = ChoiceItem("x" * 100 + " the end", ("yes", "no"), 0)
    scores = score_choices(tiny, char_encode, item)
    for choice, ll in zip(item.choices, scores.loglikelihoods):
        ctx, cont = split_context(char_encode, item.context, " " + choice)
        keep = tiny.max_len + 1 - 4  # the longest continuation, " yes", has 4 tokens
        assert ll == pytest.approx(reference_loglikelihood(tiny, ctx[-keep:], cont), rel=1e-6, abs=1e-5)


def test_normalisations_and_predictions_by_hand():
    s = ChoiceScores((-4.0, -6.0, -9.0), tokens=(1, 3, 3), chars=(2, 6, 12), bytes=(2, 6, 18), gold=2)
    assert normalised_scores(s, "sum") == [-4.0, -6.0, -9.0]
    assert normalised_scores(s, "token") == [-4.0, -2.0, -3.0]
    assert normalised_scores(s, "char") == [-2.0, -1.0, -0.75]
    assert normalised_scores(s, "byte") == [-2.0, -1.0, -0.5]
    assert [predictions([s], n)[0] for n in NORMALISATIONS] == [0, 1, 2, 2]
    assert [correct([s], n)[0] for n in NORMALISATIONS] == [0, 0, 1, 1]
    tie = ChoiceScores((-1.0, -1.0), (1, 1), (1, 1), (1, 1), 1)
    assert predictions([tie]) == [0]  # numpy.argmax's rule: the first of equal scores


def test_few_shot_prompt_layout():
    prompt = few_shot_prompt("What is 2 + 2?", [("What is 1 + 1?", "2"), ("What is 3 + 1?", "4")])
    assert prompt == ("Question: What is 1 + 1?\nAnswer: 2\n\nQuestion: What is 3 + 1?\nAnswer: 4\n\n"
                      "Question: What is 2 + 2?\nAnswer:")
    assert few_shot_prompt("x", template="{question} =") == "x ="


def test_answer_normalisation_and_exact_match():
    assert normalise_answer("  The Eiffel   Tower! ") == "eiffel tower"
    assert exact_match("The Eiffel Tower.", "eiffel tower") == 1
    assert exact_match("The Eiffel Tower.", "eiffel tower", normalise=False) == 0
    assert exact_match("Paris", "London") == 0
    assert last_number("23 + 45 = 68.") == "68"
    assert last_number("It is -1,250.5 in total") == "-1250.5"
    assert last_number("no digits") is None


# -- statistics ----------------------------------------------------------------------------------

def test_wilson_interval_equals_scipy():
    stats = pytest.importorskip("scipy.stats")
    for k, n in ((0, 10), (3, 10), (50, 64), (64, 64), (412, 1000)):
        ours = accuracy_interval([1] * k + [0] * (n - k))
        ref = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert (ours.low, ours.high) == pytest.approx((ref.low, ref.high), abs=1e-9)
        assert ours.se == pytest.approx(math.sqrt(k / n * (1 - k / n) / n))


def test_wald_interval_by_hand():
    iv = accuracy_interval([1] * 30 + [0] * 70, method="wald")
    half = 1.959964 * math.sqrt(0.3 * 0.7 / 100)
    assert (iv.low, iv.high) == pytest.approx((0.3 - half, 0.3 + half), abs=1e-6)
    assert accuracy_interval([1] * 5, method="wald").low == 1.0  # Wald collapses at the edge; Wilson does not
    assert accuracy_interval([1] * 5).low < 0.6


@given(st.lists(st.integers(0, 1), min_size=1, max_size=300))
def test_wilson_interval_holds_the_estimate_inside_zero_one(outcomes):
    iv = accuracy_interval(outcomes)
    assert 0.0 <= iv.low <= iv.p <= iv.high <= 1.0


def test_mcnemar_equals_scipy_binomial_test():
    stats = pytest.importorskip("scipy.stats")
    for only_a, only_b in ((0, 0), (3, 9), (10, 10), (1, 20), (40, 25)):
        want = 1.0 if only_a + only_b == 0 else stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
        assert mcnemar_p_value(only_a, only_b) == pytest.approx(want, rel=1e-9)


def test_paired_comparison_counts_and_difference():
    a = [1, 1, 1, 0, 0, 1, 1, 0]
    b = [1, 0, 0, 0, 1, 1, 0, 0]
    c = paired_comparison(a, b)
    assert (c.only_a, c.only_b) == (3, 1)
    assert c.difference.mean == pytest.approx(sum(a) / 8 - sum(b) / 8)
    assert c.p_value == pytest.approx(mcnemar_p_value(3, 1))
    same = paired_comparison(a, a)
    assert same.only_a == same.only_b == 0 and same.p_value == 1.0 and not same.resolved


def test_paired_bootstrap_brackets_the_difference_and_is_seeded():
    rng = random.Random(0)
    a = [int(rng.random() < 0.7) for _ in range(400)]
    b = [x if rng.random() < 0.8 else 1 - x for x in a]
    low, high = paired_bootstrap(a, b, resamples=500, seed=3)
    t = paired_comparison(a, b).difference
    assert low <= t.mean <= high
    assert (low, high) == paired_bootstrap(a, b, resamples=500, seed=3)
    assert abs((high - low) - (t.high - t.low)) < 0.3 * (t.high - t.low)  # bootstrap ~ the t-interval


def test_items_needed_by_hand_and_power_is_its_inverse():
    sd = math.sqrt(0.2 - 0.05 ** 2)  # models that disagree on 20% of items, 5 points apart
    n = items_needed(0.05, sd)
    assert n == math.ceil(((1.959964 + 0.841621) * sd / 0.05) ** 2)
    assert power(n, 0.05, sd) >= 0.8 > power(n - 1, 0.05, sd)


def test_power_matches_a_simulated_paired_test():
    """Draw paired 0/1 outcomes with a true difference of 6 points and 20% disagreement; the share
    of 400 simulated evaluations whose 95% interval excludes 0 is the power the formula predicts."""
    rng, n, hits, runs = random.Random(1), 300, 0, 400
    only_a, only_b = 0.13, 0.07  # P(A alone right), P(B alone right): difference 0.06, disagreement 0.2
    for _ in range(runs):
        a, b = [], []
        for _ in range(n):
            u = rng.random()
            a.append(int(u < only_a) or int(u > 0.6))
            b.append(int(only_a <= u < only_a + only_b) or int(u > 0.6))
        hits += paired_comparison(a, b).resolved
    sd = math.sqrt(0.2 - 0.06 ** 2)
    assert abs(hits / runs - power(n, 0.06, sd)) < 0.08


# -- contamination and calibration ------------------------------------------------------------------

def test_ngram_overlap_by_hand():
    assert words("The cat, the HAT!") == ["the", "cat", "the", "hat"]
    assert ngrams([1, 2, 3, 4], 3) == [(1, 2, 3), (2, 3, 4)] and ngrams([1, 2], 3) == []
    index = ngram_index("a b c d e f", 3)
    assert overlap("x a b c d y", index, 3) == pytest.approx(2 / 4)  # abc, bcd of xab, abc, bcd, cdy
    assert overlap("a b", index, 3) == 0.0
    assert contaminated(["A, b. C d!", "q r s t"], "a b c d e", n=3) == [True, False]
    assert contaminated(["x a b c d y"], "a b c d", n=3, threshold=0.5) == [False]


def test_reliability_and_ece_by_hand():
    conf = [0.95, 0.9, 0.55, 0.52, 0.3]
    right = [1, 0, 1, 1, 0]
    r = reliability(conf, right, bins=2)
    assert r.counts == (1, 4)
    assert r.accuracy[1] == pytest.approx(3 / 4) and r.confidence[1] == pytest.approx((0.95 + 0.9 + 0.55 + 0.52) / 4)
    want = 1 / 5 * abs(0 - 0.3) + 4 / 5 * abs(3 / 4 - 0.73)
    assert expected_calibration_error(conf, right, bins=2) == pytest.approx(want)
    assert reliability([1.0], [1], bins=10).counts[-1] == 1  # confidence 1 falls in the last bin


def test_choice_probabilities_equal_softmax():
    xs = [-1000.0, -1001.5, -999.0]
    want = torch.softmax(torch.tensor(xs, dtype=torch.float64), 0).tolist()
    assert choice_probabilities(xs) == pytest.approx(want, abs=1e-12)


# -- the built evaluation sets ------------------------------------------------------------------------

def test_capital_and_sum_questions_are_right_and_seeded():
    caps = capital_questions()
    assert len(caps) == len(CAPITALS) and caps == capital_questions()
    for q, (country, capital) in zip(caps, CAPITALS):
        assert country in q.question and q.answer == capital and len(set(q.choices)) == 4
    sums = arithmetic_questions(50, seed=2)
    for q in sums:
        a, b = map(int, q.question[len("What is "):-1].split(" + "))
        assert q.answer == str(a + b) and len(set(q.choices)) == 4
        assert len({len(c) for c in q.choices}) > 1  # choices of different lengths
    assert arithmetic_questions(50, seed=2) == sums != arithmetic_questions(50, seed=3)


def test_cloze_questions_remove_the_last_word():
    train, _ = split_paragraphs(load_corpus())
    qs = cloze_questions(train, 30)
    flat = " ".join(train.replace("**", "").split())
    for q in qs:
        assert f"{q.question} {q.answer}." in flat or q.answer.isalpha()
        assert len(q.question.split()) >= 7 and len(set(q.choices)) == 4
    assert sum(f"{q.question} {q.answer}." in flat for q in qs) >= 25  # most sentences are verbatim


def test_to_items_never_shows_an_items_own_answer():
    qs = capital_questions()[:10]
    items = to_items(qs, shots=3, template="q-a")
    for q, item in zip(qs, items):
        assert item.context.count("Q: ") == 4 and item.context.endswith(f"Q: {q.question}\nA:")
        assert f"{q.question}\nA: " not in item.context and item.choices == q.choices


def test_write_lm_eval_task_round_trips(tmp_path):
    items = to_items(capital_questions()[:3])
    yaml = write_lm_eval_task(items, tmp_path, "caps")
    rows = [json.loads(line) for line in (tmp_path / "caps.jsonl").read_text().splitlines()]
    assert [ChoiceItem(r["context"], tuple(r["choices"]), r["gold"]) for r in rows] == items
    assert "output_type: multiple_choice" in yaml.read_text()


# -- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error", [
    (lambda: ChoiceItem("", ("a", "b"), 0), ValueError),
    (lambda: ChoiceItem("q", ("a",), 0), ValueError),
    (lambda: ChoiceItem("q", ("a", "a"), 0), ValueError),
    (lambda: ChoiceItem("q", ("a", "b"), 2), ValueError),
    (lambda: ChoiceItem("q", "ab", 0), TypeError),
    (lambda: ChoiceItem(3, ("a", "b"), 0), TypeError),
    (lambda: Question("q", ("a", ""), 0), ValueError),
    (lambda: split_context("not callable", "a", "b"), TypeError),
    (lambda: split_context(char_encode, "   ", " b"), ValueError),
    (lambda: normalised_scores(ChoiceScores((0.0,), (1,), (1,), (1,), 0), "words"), ValueError),
    (lambda: few_shot_prompt("q", template="no slot"), ValueError),
    (lambda: few_shot_prompt("q", shots=[("only question",)]), ValueError),
    (lambda: exact_match(3, "3"), TypeError),
    (lambda: accuracy_interval([]), ValueError),
    (lambda: accuracy_interval([1, 2]), ValueError),
    (lambda: accuracy_interval([1, 0], confidence=1.0), ValueError),
    (lambda: accuracy_interval([1, 0], method="exact"), ValueError),
    (lambda: accuracy_interval("1010"), TypeError),
    (lambda: paired_comparison([1, 0], [1]), ValueError),
    (lambda: mcnemar_p_value(-1, 2), ValueError),
    (lambda: paired_bootstrap([1, 0], [0, 1], resamples=5), ValueError),
    (lambda: items_needed(0.0, 0.4), ValueError),
    (lambda: items_needed(0.05, 0.4, power=1.0), ValueError),
    (lambda: power(0, 0.05, 0.4), ValueError),
    (lambda: ngrams([1, 2], 0), ValueError),
    (lambda: overlap("a b c", ["a"], 1), TypeError),
    (lambda: overlap("a b c", ngram_index("a b c", 2), 3), ValueError),
    (lambda: contaminated("one string", "corpus"), TypeError),
    (lambda: reliability([0.5, 1.5], [1, 0]), ValueError),
    (lambda: reliability([0.5], [1, 0]), ValueError),
    (lambda: reliability([0.5], [1], bins=0), ValueError),
    (lambda: choice_probabilities([0.0, float("nan")]), ValueError),
    (lambda: arithmetic_questions(0), ValueError),
    (lambda: cloze_questions("Too short.", 5), ValueError),
    (lambda: to_items(capital_questions()[:3], shots=3), ValueError),
    (lambda: to_items(capital_questions()[:3], template="chat"), ValueError),
    (lambda: write_lm_eval_task(to_items(capital_questions()[:1]), "/tmp", "bad name"), ValueError),
])
def test_bad_input_is_refused_by_name(call, error):
    with pytest.raises(error):
        call()


def test_score_choices_refuses_a_non_item(tiny):
    with pytest.raises(TypeError, match="item"):
        score_choices(tiny, char_encode, ("q", ("a", "b"), 0))
