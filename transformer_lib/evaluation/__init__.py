"""Evaluation: is model A really better than model B? (chapter 30, "Evaluating a language model").

* :mod:`.scoring` -- the two ways to score a model on a task: the log-likelihood of each choice
  (raw, or per token, character or byte: lm-evaluation-harness's ``acc``, ``acc_norm``,
  ``acc_bytes``) and generation checked by a verifier (exact match, answer normalisation);
  few-shot prompts.
* :mod:`.statistics` -- an accuracy's standard error and interval (Wilson), a paired comparison
  of two models on the same items (mean difference with its interval, McNemar's exact test, a
  paired bootstrap), and how many items a difference needs (power).
* :mod:`.contamination` -- word n-gram overlap between evaluation items and a training corpus.
* :mod:`.calibration` -- choice probabilities, the reliability diagram and the expected
  calibration error.
* :mod:`.items` -- the evaluation sets the book builds (capitals, sums, cloze sentences of its own
  prose) and their export as a local lm-evaluation-harness task.
"""
from .calibration import Reliability, choice_probabilities, expected_calibration_error, reliability
from .contamination import contaminated, ngram_index, ngrams, overlap, words
from .items import (CAPITALS, TEMPLATES, Question, arithmetic_questions, capital_questions, cloze_questions, to_items,
                    write_lm_eval_task)
from .scoring import (NORMALISATIONS, ChoiceItem, ChoiceScores, correct, exact_match, few_shot_prompt, last_number,
                      normalise_answer, normalised_scores, predictions, score_choices, score_items, split_context)
from .statistics import (AccuracyInterval, PairedComparison, accuracy_interval, items_needed, mcnemar_p_value,
                         paired_bootstrap, paired_comparison, power)

__all__ = ["Reliability", "choice_probabilities", "expected_calibration_error", "reliability", "contaminated",
           "ngram_index", "ngrams", "overlap", "words", "CAPITALS", "TEMPLATES", "Question", "arithmetic_questions",
           "capital_questions", "cloze_questions", "to_items", "write_lm_eval_task", "NORMALISATIONS", "ChoiceItem",
           "ChoiceScores", "correct", "exact_match", "few_shot_prompt", "last_number", "normalise_answer",
           "normalised_scores", "predictions", "score_choices", "score_items", "split_context", "AccuracyInterval",
           "PairedComparison", "accuracy_interval", "items_needed", "mcnemar_p_value", "paired_bootstrap",
           "paired_comparison", "power"]
