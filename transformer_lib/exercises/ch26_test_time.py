"""Chapter 26 (Reasoning at test time) exercises: parsing a response's final answer, majority
voting, and the unbiased pass@k. Each checker compares with the library's public functions
(:mod:`transformer_lib.reasoning`)."""
from ..reasoning import majority_vote, parse_answer, pass_at_k
from ._core import NotYet, compare_number_cases, exercise, require_function

_RESPONSES = ["824$", "824$$$", "824", "8+4$", "$", "01$", "8246$", "824$123$", "0$", "9999$", "7=$", ""]


@exercise("reasoning.parse_answer", call="parse(text)",
          hint="keep what comes before the first '$' (no '$': no answer, None); it must be digits only, written "
               "units first, so reverse them before int(...)")
def _check_parse(answer):
    require_function(answer)
    for text in _RESPONSES:
        got, want = answer(text), parse_answer(text)
        if got != want or type(got) is not type(want):
            raise NotYet(f"response {text!r}: you return {got!r}" + (
                "; a response that never ends, or holds anything but digits before its end, has no answer (None)"
                if want is None else ""))
    return f"right on all {len(_RESPONSES)} responses (unfinished and malformed ones included)."


_VOTES = [[3, None, 5, 5, None, None], [7, 3, 3, 7], [5, 2, 5, 2], [None, None], [12], [1, 2, 3, 2, 1, 1], [4, 9, 9, 4, 4, 9, 9]]


@exercise("reasoning.majority_vote", call="vote(answers)",
          hint="count the answers that are not None; return the most frequent; a tie goes to the answer that "
               "appeared first (collections.Counter.most_common keeps first-seen order); None if nothing to count")
def _check_vote(answer):
    require_function(answer)
    for n, votes in enumerate(_VOTES, 1):
        got, want = answer(list(votes)), majority_vote(votes)
        if got != want:
            raise NotYet(f"votes #{n} {votes}: you return {got!r}")
    return f"right on all {len(_VOTES)} lists of votes (ties and empty votes included)."


_PASS_CASES = [(10, 0, 1), (10, 3, 1), (10, 3, 2), (10, 3, 8), (10, 10, 5), (200, 37, 50), (500, 2, 100), (5, 4, 2)]


@exercise("reasoning.pass_at_k", call="passk(n, c, k)",
          hint="1 - C(n - c, k) / C(n, k): the chance that k samples drawn without replacement from the n, c of "
               "them right, are all wrong, subtracted from 1. math.comb works; so does the product of "
               "(1 - k / i) for i from n - c + 1 to n")
def _check_pass(answer):
    return compare_number_cases(answer, _PASS_CASES, pass_at_k, what="your pass@k", rtol=1e-9, atol=1e-12,
                                wrong=lambda _, got, want, n, c, k: f"n={n}, c={c}, k={k}: your pass@k is too "
                                                                   f"{'high' if got > want else 'low'}",
                                summary="cases (n up to 500).")
