"""Answers for the checkers of transformer_lib/exercises/ch26_test_time.py: the reference solution,
right answers written differently, and wrong answers each checker must reject (test data:
nothing here is importable from the package a student uses)."""
import math
import re
from collections import Counter


def parse_reference(text):
    if "$" not in text:
        return None
    head = text.split("$", 1)[0]
    return int(head[::-1]) if re.fullmatch(r"[0-9]+", head) else None


def _parse_loop(text):
    digits = ""
    for ch in text:
        if ch == "$":
            return int(digits[::-1]) if digits else None
        if not ch.isdigit():
            return None
        digits += ch
    return None


def _parse_not_reversed(text):
    head = text.split("$", 1)[0] if "$" in text else None
    return int(head) if head and head.isdigit() else None


def _parse_no_end_needed(text):
    head = text.split("$", 1)[0]
    return int(head[::-1]) if head.isdigit() else None


def _parse_last_answer(text):
    parts = [p for p in text.split("$") if p.isdigit()]
    return int(parts[-1][::-1]) if "$" in text and parts else None


def _parse_digits_anywhere(text):
    if "$" not in text:
        return None
    digits = re.sub(r"\D", "", text.split("$", 1)[0])
    return int(digits[::-1]) if digits else None


def _parse_zero_default(text):
    value = parse_reference(text)
    return 0 if value is None else value


def vote_reference(answers):
    votes = Counter(a for a in answers if a is not None)
    return votes.most_common(1)[0][0] if votes else None


def _vote_loop(answers):
    counts, order = {}, []
    for a in answers:
        if a is None:
            continue
        if a not in counts:
            order.append(a)
        counts[a] = counts.get(a, 0) + 1
    return max(order, key=lambda a: (counts[a], -order.index(a))) if order else None


def _vote_counts_none(answers):
    return Counter(answers).most_common(1)[0][0]


def _vote_first(answers):
    return next((a for a in answers if a is not None), None)


def _vote_last_tie(answers):
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return None
    top = max(votes.values())
    return [a for a in answers if votes.get(a) == top][-1]


def _vote_smallest_tie(answers):
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return None
    top = max(votes.values())
    return min(a for a in votes if votes[a] == top)


def passk_reference(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _passk_product(n, c, k):
    if n - c < k:
        return 1.0
    p = 1.0
    for i in range(n - c + 1, n + 1):
        p *= 1 - k / i
    return 1 - p


def _passk_naive(n, c, k):  # with replacement: biased
    return 1 - (1 - c / n) ** k


def _passk_mean(n, c, k):
    return c / n


def _passk_swapped(n, c, k):  # the same number: C(n-c, k) / C(n, k) = C(n-k, c) / C(n, c)
    return 1.0 - math.comb(n - k, c) / math.comb(n, c) if n - k >= c else 1.0


def _passk_off_by_one(n, c, k):
    return 1.0 - math.comb(n - c, k - 1) / math.comb(n, k - 1)


def _passk_complement(n, c, k):
    return math.comb(n - c, k) / math.comb(n, k)


ANSWERS = {
    "reasoning.parse_answer": {
        "solution": lambda: parse_reference,
        "alternatives": lambda: [_parse_loop],
        "wrong": lambda: [_parse_not_reversed, _parse_no_end_needed, _parse_last_answer, _parse_digits_anywhere,
                          _parse_zero_default],
    },
    "reasoning.majority_vote": {
        "solution": lambda: vote_reference,
        "alternatives": lambda: [_vote_loop],
        "wrong": lambda: [_vote_counts_none, _vote_first, _vote_last_tie, _vote_smallest_tie],
    },
    "reasoning.pass_at_k": {
        "solution": lambda: passk_reference,
        "alternatives": lambda: [_passk_product, _passk_swapped],
        "wrong": lambda: [_passk_naive, _passk_mean, _passk_off_by_one, _passk_complement],
    },
}
