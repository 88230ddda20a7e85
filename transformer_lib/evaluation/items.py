"""The evaluation sets of chapter 30, built by the book from seeded code (nothing is downloaded).

* :func:`capital_questions` -- "What is the capital of Kenya?" with four capitals to choose from
  (public facts, written for this book).
* :func:`arithmetic_questions` -- "What is 23 + 45?" with four numbers: the sum and three
  near misses of other lengths (one digit more or fewer), so the normalisation matters.
* :func:`cloze_questions` -- a sentence of the book's own prose (``transformer_lib/data``, CC BY
  4.0) with its last word missing and four words of the corpus to choose from. The training
  split is text chapter 16's GPT was trained on, the validation split text it never saw: the
  pair is the chapter's contamination experiment.

A question is a :class:`Question` (text, choices, gold); :func:`to_items` lays questions out as
prompts (a template, k solved examples in front) and returns
:class:`~transformer_lib.evaluation.scoring.ChoiceItem` s. :func:`write_lm_eval_task` writes
items as a local lm-evaluation-harness task (a JSONL file and its YAML), which is how the tests
hold the library's scores against lm-eval's.
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from .._checks import check_choice, check_int, check_str
from .._checks.evaluation import check_choice_item
from .scoring import ChoiceItem, few_shot_prompt

__all__ = ["Question", "CAPITALS", "TEMPLATES", "capital_questions", "arithmetic_questions", "cloze_questions",
           "to_items", "write_lm_eval_task"]

# Written for this book: countries and their capitals (public facts).
CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Russia", "Moscow"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"), ("Poland", "Warsaw"), ("Austria", "Vienna"), ("Kenya", "Nairobi"), ("Peru", "Lima"),
    ("Cuba", "Havana"), ("Chile", "Santiago"), ("Thailand", "Bangkok"), ("Belgium", "Brussels"),
    ("Denmark", "Copenhagen"), ("Hungary", "Budapest"), ("Mexico", "Mexico City"), ("Argentina", "Buenos Aires"),
    ("South Korea", "Seoul"), ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Vietnam", "Hanoi"),
    ("Australia", "Canberra"), ("Brazil", "Brasilia"), ("Colombia", "Bogota"), ("Venezuela", "Caracas"),
    ("Netherlands", "Amsterdam"), ("Switzerland", "Bern"), ("Czech Republic", "Prague"), ("Romania", "Bucharest"),
    ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"), ("Croatia", "Zagreb"), ("Ukraine", "Kyiv"),
    ("Morocco", "Rabat"), ("Nigeria", "Abuja"), ("Ethiopia", "Addis Ababa"), ("Ghana", "Accra"),
    ("Senegal", "Dakar"), ("Indonesia", "Jakarta"), ("Philippines", "Manila"), ("Malaysia", "Kuala Lumpur"),
    ("Pakistan", "Islamabad"), ("Bangladesh", "Dhaka"), ("Nepal", "Kathmandu"), ("Iraq", "Baghdad"),
    ("Saudi Arabia", "Riyadh"), ("Jordan", "Amman"), ("New Zealand", "Wellington"), ("Iceland", "Reykjavik"),
    ("Lebanon", "Beirut"), ("Syria", "Damascus"), ("Uruguay", "Montevideo"), ("Ecuador", "Quito"),
]

# Prompt layouts for the same questions: the format is part of the evaluation.
TEMPLATES = {"qa": "Question: {question}\nAnswer:", "q-a": "Q: {question}\nA:", "plain": "{question}"}


@dataclass(frozen=True)
class Question:
    """A question, its choices (answer texts) and the index of the right one."""
    question: str
    choices: tuple[str, ...]
    gold: int

    def __post_init__(self):
        check_choice_item(self.question, self.choices, self.gold)
        object.__setattr__(self, "choices", tuple(self.choices))

    @property
    def answer(self) -> str:
        return self.choices[self.gold]


def _shuffled(rng: random.Random, right: str, wrong) -> tuple[tuple[str, ...], int]:
    choices = [right, *wrong]
    rng.shuffle(choices)
    return tuple(choices), choices.index(right)


def capital_questions(seed: int = 0) -> list[Question]:
    """One question per country of :data:`CAPITALS`: its capital and three other capitals."""
    check_int("seed", seed, 0)
    rng = random.Random(seed)
    capitals = [c for _, c in CAPITALS]
    out = []
    for country, capital in CAPITALS:
        wrong = rng.sample([c for c in capitals if c != capital], 3)
        out.append(Question(f"What is the capital of {country}?", *_shuffled(rng, capital, wrong)))
    return out


def arithmetic_questions(count: int = 100, seed: int = 0) -> list[Question]:
    """``count`` sums of two numbers from 2 to 99 (all different problems). The wrong choices are
    the sum plus or minus 1 or 10 and a number with one digit more or one fewer, so the choices
    differ in length: the raw sum of log-probabilities favours the shorter ones."""
    check_int("count", count, 1, 2000)
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < count:
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        s = a + b
        near = [s + d for d in (-10, -1, 1, 10) if s + d > 0 and s + d != s]
        other_length = [int(str(s)[:-1]) if s >= 10 else s * 10 + rng.randint(1, 9), s * 10 + rng.randint(0, 9)]
        wrong = rng.sample(near, 2) + [rng.choice(other_length)]
        if len({s, *wrong}) < 4:
            continue
        out.append(Question(f"What is {a} + {b}?", *_shuffled(rng, str(s), [str(w) for w in wrong])))
    return out


def cloze_questions(text: str, count: int = 100, seed: int = 0, min_words: int = 8) -> list[Question]:
    """``count`` sentences of ``text`` with their last word removed (a word of 4 or more letters)
    and four words to choose from: that word and three other words of ``text`` of 4 or more
    letters, drawn at random. Sentences are taken in a seeded random order, each at most once."""
    check_str("text", text)
    check_int("count", count)
    check_int("min_words", min_words, 2)
    text = re.sub(r"\{[a-z]+\}`[^`]*`", "", text)  # MyST roles: {cite}`key`
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text.replace("**", ""))  # links and bold: their words
    sentences = []
    for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
        m = re.fullmatch(r"(.+?) ([A-Za-z]{4,})\.", s)
        if m and len(s.split()) >= min_words and not re.search(r"[`$\\|#]", s):  # no code, math or tables
            sentences.append((m.group(1), m.group(2)))
    vocabulary = sorted({w for w in re.findall(r"\b[a-z]{4,}\b", text)})
    rng = random.Random(seed)
    rng.shuffle(sentences)
    if len(sentences) < count:
        raise ValueError(f"count: text has {len(sentences)} usable sentences, asked for {count}")
    out = []
    for prefix, word in sentences[:count]:
        wrong = rng.sample([w for w in vocabulary if w != word.lower()], 3)
        out.append(Question(prefix, *_shuffled(rng, word, wrong)))
    return out


def to_items(questions, shots: int = 0, template: str = "qa", seed: int = 0) -> list[ChoiceItem]:
    """Prompts for ``questions``: ``template`` (a key of :data:`TEMPLATES`) with ``shots`` solved
    examples in front, drawn (seeded) from the *other* questions of the list, so no item shows
    its own answer."""
    questions = list(questions)
    check_int("shots", shots, 0, max(0, len(questions) - 1))
    check_choice("template", template, tuple(TEMPLATES))
    if not all(isinstance(q, Question) for q in questions):
        raise TypeError("questions must be a list of Question")
    rng, layout = random.Random(seed), TEMPLATES[template]
    items = []
    for i, q in enumerate(questions):
        others = rng.sample([j for j in range(len(questions)) if j != i], shots)
        examples = [(questions[j].question, questions[j].answer) for j in others]
        items.append(ChoiceItem(few_shot_prompt(q.question, examples, layout), q.choices, q.gold))
    return items


def write_lm_eval_task(items, folder, name: str) -> Path:
    """Write ``items`` as a local lm-evaluation-harness task: ``folder/name.jsonl`` (one item a
    line) and ``folder/name.yaml`` (multiple choice, read by the ``json`` builder from that file:
    no hub, no download). Returns the YAML's path; pass ``folder`` to lm-eval's
    ``TaskManager(include_path=...)``."""
    check_str("name", name)
    if not re.fullmatch(r"[A-Za-z0-9_]+", name):
        raise ValueError(f"name must be letters, digits and underscores, got {name!r}")
    items = list(items)
    if not items or not all(isinstance(i, ChoiceItem) for i in items):
        raise TypeError("items must be a non-empty list of ChoiceItem")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps({"context": i.context, "choices": list(i.choices), "gold": i.gold}) + "\n"
                            for i in items), encoding="utf-8")
    yaml = folder / f"{name}.yaml"
    yaml.write_text("\n".join([
        f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:", f"    test: {json.dumps(str(data.resolve()))}",
        "test_split: test", "output_type: multiple_choice", "doc_to_text: context", "doc_to_choice: choices",
        "doc_to_target: gold", 'target_delimiter: " "', "metric_list:",
        *[f"  - metric: {m}\n    aggregation: mean\n    higher_is_better: true" for m in ("acc", "acc_norm", "acc_bytes")],
        ""]), encoding="utf-8")
    return yaml
