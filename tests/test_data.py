"""transformer_lib.data: the shipped corpora and the functions that build and split them."""
from __future__ import annotations

import pytest
import torch

from transformer_lib import data
from transformer_lib.data.classification import SPAM_LABELS, load_spam

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
