"""transformer_lib.data: the shipped corpora and data sets (chapter 20's spam split: disjoint, stable,
stratified, built the same every time) and the functions that build and split them."""
from __future__ import annotations

import csv
import hashlib

import pytest
import torch

from transformer_lib import data
from transformer_lib.data.classification import SPAM_LABELS, SPAM_PATH, load_spam

CHAPTER = """---
jupytext: {formats: md:myst}
---
# Title

Some prose with $x$ inline.

```{code-cell} ipython3
secret_code = 1
```

$$
a = b
$$

<!-- a note to authors -->



More prose.
"""


def test_extract_prose_keeps_only_the_prose():
    assert data.extract_prose(CHAPTER) == "# Title\n\nSome prose with $x$ inline.\n\nMore prose.\n"
    with pytest.raises(TypeError, match="markdown"):
        data.extract_prose(b"bytes")


def test_build_corpus_takes_chapters_in_order_and_skips_the_language_model_ones(tmp_path):
    for name, text in [("02-b.md", "Second."), ("01-a.md", "First."), ("A-appendix.md", "Appendix."),
                       ("15-tokenization.md", "Skipped."), ("notes.md", "Not a chapter.")]:
        (tmp_path / name).write_text(text)
    assert data.build_corpus(tmp_path) == "First.\n\nSecond.\n\nAppendix.\n"
    with pytest.raises(ValueError, match="chapters_dir"):
        data.build_corpus(tmp_path / "missing")
    with pytest.raises(TypeError, match="chapters_dir"):
        data.build_corpus(3)


def test_the_shipped_corpus_is_prose_without_code():
    text = data.load_corpus()
    assert len(text) > 100_000 and "```" not in text and "{code-cell}" not in text and "$$" not in text


def test_split_paragraphs_sends_every_nth_paragraph_to_validation():
    text = "\n\n".join(f"p{i}" for i in range(25))
    train, val = data.split_paragraphs(text, val_every=5)
    assert val == "p4\n\np9\n\np14\n\np19\n\np24\n"
    assert train.split("\n\n")[:4] == ["p0", "p1", "p2", "p3"] and len(train.split("\n\n")) == 20
    with pytest.raises(ValueError, match="val_every"):
        data.split_paragraphs(text, val_every=1)
    with pytest.raises(ValueError, match="val_every"):
        data.split_paragraphs(text, val_every=True)
    with pytest.raises(ValueError, match="paragraphs"):
        data.split_paragraphs("one\n\ntwo", val_every=3)
    with pytest.raises(TypeError, match="text"):
        data.split_paragraphs(["p0"])


def test_spam_splits_are_labelled_and_disjoint():
    splits = {name: load_spam(name) for name in ("train", "validation", "test")}
    for split in splits.values():
        assert len(split) == len(split.labels) > 0 and split.labels.dtype == torch.long
        assert set(split.labels.unique().tolist()) == {0, 1} == set(range(len(SPAM_LABELS)))
    assert not set(splits["train"].texts) & set(splits["test"].texts)
    with pytest.raises(ValueError, match="split"):
        load_spam("dev")
    with pytest.raises(TypeError, match="split"):
        load_spam(0)


def test_the_book_gpt_loads_in_eval_mode_with_its_tokenizer():
    model, tok, info = data.load_gpt_checkpoint()
    assert not model.training and isinstance(info, dict)
    ids = torch.tensor([tok.encode("The attention weights")])
    logits = model(ids)
    assert logits.shape == (1, ids.shape[1], len(tok)) and logits.isfinite().all()


# -- the spam data set of chapter 20: its split and its build script -------------------------------

def test_the_split_is_disjoint_complete_and_stratified():
    parts = {s: load_spam(s) for s in ("train", "validation", "test")}
    assert {s: len(p) for s, p in parts.items()} == {"train": 3510, "validation": 1170, "test": 1170}
    texts = [set(p.texts) for p in parts.values()]
    assert not (texts[0] & texts[1]) and not (texts[0] & texts[2]) and not (texts[1] & texts[2])
    with SPAM_PATH.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert len(rows) == sum(len(p) for p in parts.values())  # every row is in exactly one split
    shares = [p.labels.float().mean().item() for p in parts.values()]
    assert max(shares) - min(shares) < 0.01 and 0.2 < shares[0] < 0.4  # same share of spam everywhere
    assert all(set(p.labels.tolist()) == {0, 1} for p in parts.values())


# The stored file's fingerprint: chapter 20's numbers are on this split; a change must be deliberate.
MESSAGES_SHA256 = "d14678e1a06c747f795b6f8215eacbe0511bd37c55dabe72b5b8711ef328db1e"


def test_the_split_is_stable_across_loads_and_the_file_is_the_stored_one():
    a, b = load_spam("test"), load_spam("test")
    assert a.texts == b.texts and torch.equal(a.labels, b.labels)
    assert hashlib.sha256(SPAM_PATH.read_bytes()).hexdigest() == MESSAGES_SHA256


def _fake_package(root, n):
    import json

    for group in ("easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"):
        (root / "data" / group).mkdir(parents=True)
        for i in range(n):
            raw = f"Subject: {group} message {i}\nFrom: a@b.c\n\nBody number {i} of {group}, <b>bold</b>.\n"
            (root / "data" / group / f"{i:05d}.json").write_text(json.dumps({"text": raw}))


def test_the_build_script_draws_the_same_stratified_split_every_time(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("spam_build", SPAM_PATH.with_name("build.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    _fake_package(tmp_path, 10)
    first, second = build.build(tmp_path), build.build(tmp_path)
    assert first == second and len(first) == 50
    counts = {(s, y): sum(1 for r in first if r[:2] == (s, y)) for s in ("train", "validation", "test") for y in (0, 1)}
    assert counts == {("train", 0): 18, ("validation", 0): 6, ("test", 0): 6,
                      ("train", 1): 12, ("validation", 1): 4, ("test", 1): 4}
    assert first[0][2].startswith(("easy", "hard", "spam")) and "Subject" not in first[0][2] and "<b>" in first[0][2]
