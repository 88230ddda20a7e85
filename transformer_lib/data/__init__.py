"""Text corpora that ship with the library (chapters 15 and 16); nothing is downloaded.

``book_prose.txt`` is the English prose of this book's own first chapters and appendix A as they
stood when it was frozen (today's chapters 0-10 and 12-14, numbered 0-13 then; CC BY 4.0, like all
of the book's prose: LICENSE-CONTENT.md; the code is MIT): the Markdown text with code cells, YAML
headers, display math and HTML comments removed. It is a frozen snapshot, so the numbers of chapters 15 and 16 do not
move when a chapter is edited; ``python -m transformer_lib.data`` rebuilds it from the chapters.
"""
from __future__ import annotations

import re
from pathlib import Path

from .._checks.data import check_chapters_dir, check_checkpoint_path, check_paragraph_split
from .._checks import check_str

__all__ = ["CORPUS_PATH", "GPT_CHECKPOINT", "load_corpus", "extract_prose", "build_corpus", "split_paragraphs",
           "load_gpt_checkpoint"]

CORPUS_PATH = Path(__file__).with_name("book_prose.txt")
_SKIP = ("15-", "16-", "17-")  # the language-model chapters themselves are not in their own corpus


def load_corpus() -> str:
    """The book-prose corpus as one string."""
    return CORPUS_PATH.read_text(encoding="utf-8")


def extract_prose(markdown: str) -> str:
    """The prose of one MyST chapter: no front matter, code cells, fenced blocks, $$ math or
    HTML comments; runs of blank lines collapsed."""
    check_str("markdown", markdown, " (a chapter's MyST source)")
    text = re.sub(r"\A---\n.*?\n---\n", "", markdown, flags=re.S)  # YAML header
    text = re.sub(r"^(`{3,}|~{3,}).*?^\1\s*$", "", text, flags=re.S | re.M)  # fenced blocks / code cells
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)  # display math
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"


def build_corpus(chapters_dir: str | Path) -> str:
    """Concatenate the prose of every chapter (in file order), separated by blank lines."""
    check_chapters_dir(chapters_dir)
    paths = sorted(p for p in Path(chapters_dir).glob("*.md")
                   if re.match(r"(\d\d|[A-Z])-", p.name) and not p.name.startswith(_SKIP))
    return "\n".join(extract_prose(p.read_text(encoding="utf-8")) for p in paths)



def split_paragraphs(text: str, val_every: int = 10) -> tuple[str, str]:
    """Train/validation split by paragraph: every ``val_every``-th paragraph (blank-line
    separated) goes to validation. Interleaving keeps both parts from every chapter, so the
    validation text is new prose of the same kind, not a different topic."""
    check_paragraph_split(text, val_every)
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    check_paragraph_split(text, val_every, len(paragraphs))
    train = [p for i, p in enumerate(paragraphs) if i % val_every != val_every - 1]
    val = [p for i, p in enumerate(paragraphs) if i % val_every == val_every - 1]
    return "\n\n".join(train) + "\n", "\n\n".join(val) + "\n"


GPT_CHECKPOINT = Path(__file__).with_name("book_gpt.pt")


def load_gpt_checkpoint(path: str | Path = GPT_CHECKPOINT):
    """The small GPT trained on the book's prose by ``benchmarks/train_gpt.py`` (chapter 16).

    Returns ``(model, tokenizer, info)``: a float32 ``DecoderOnlyLM`` in eval mode, its
    :class:`~transformer_lib.tokenization.BPETokenizer`, and the run's settings and curves.
    """
    import torch

    from ..model import DecoderOnlyLM
    from ..tokenization import BPETokenizer

    path = check_checkpoint_path(path)
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = DecoderOnlyLM(**saved["config"])
    model.load_state_dict({k: v.float() for k, v in saved["state_dict"].items()})
    return model.eval(), BPETokenizer.from_json(saved["tokenizer"]), saved["info"]
