"""A labelled text corpus that ships with the library: SpamAssassin e-mails, ham or spam (chapter 20).

``spam_assassin/messages.tsv`` holds 5,850 real e-mails reduced to one short line each (subject,
then the start of the body), labelled 0 = ham, 1 = spam, with a train / validation / test split that
was drawn once, before anything was looked at, and is stored with the data (see the README beside
it for the source, the PDDL-1.0 / CC0-1.0 licence and how it was built). Nothing is downloaded.

    from transformer_lib.data.classification import load_spam
    train = load_spam("train")       # TextSplit(texts=[...3510], labels=tensor([...]))
    train.texts[0], train.labels[0]
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import torch

from .._checks import check_choice

__all__ = ["SPAM_PATH", "SPAM_LABELS", "TextSplit", "load_spam"]

SPAM_PATH = Path(__file__).with_name("spam_assassin") / "messages.tsv"
SPAM_LABELS = ("ham", "spam")  # label 0, label 1


@dataclass(frozen=True)
class TextSplit:
    """One split of a labelled corpus: ``texts`` (N strings) and ``labels`` (N,) int64."""
    texts: list[str]
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.texts)


def load_spam(split: str) -> TextSplit:
    """The ``"train"``, ``"validation"`` or ``"test"`` split of the SpamAssassin corpus, in file order."""
    check_choice("split", split, ("train", "validation", "test"))
    texts, labels = [], []
    with SPAM_PATH.open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if row["split"] == split:
                texts.append(row["text"])
                labels.append(int(row["label"]))
    return TextSplit(texts, torch.tensor(labels, dtype=torch.long))
