"""The prose's claims are checked by the chapters, and the prose speaks to readers.

* Every chapter has claim cells (tag ``claim``, calling ``transformer_lib.evidence.claim``); the
  static book removes them and keeps everything else.
* A claim fails when its premise does: for one chapter of each part, a cell that overturns the
  premise (swaps the compared results, or deletes what the sentence needs) is put just before a
  claim cell, the chapter is run up to that cell, and the run must stop with a ``ClaimError``.
* No reader-facing page talks about the project's own process (targets met, bars, CI, issues).
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from bookkit.conventions import CLAIM, REMOVE_CELL, chapter_files, execute_notebook, tags_of

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = chapter_files(ROOT / "chapters")
# chapter 0 explains how to use the book and states no result of its own
WITH_RESULTS = [p for p in CHAPTERS if not p.name.startswith("00-")]


def _claim_cells(nb) -> list[int]:
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and CLAIM in tags_of(c)]


@pytest.mark.parametrize("path", WITH_RESULTS, ids=lambda p: p.stem)
def test_every_chapter_checks_its_claims(path):
    nb = nbformat.read(str(path), as_version=4)
    cells = _claim_cells(nb)
    assert cells, f"{path.name}: no cell tagged {CLAIM!r} checks what the prose concludes"
    for i in cells:
        assert "claim(" in nb.cells[i].source, f"{path.name} cell {i}: a {CLAIM!r} cell that calls no claim()"
        errors = [o for o in nb.cells[i].get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{path.name} cell {i}: a claim failed when the chapter was executed"


def test_the_book_removes_claim_cells_and_keeps_the_rest():
    from bookkit.build_book import book_notebook
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": [CLAIM]}),
        nbformat.v4.new_code_cell("print(x)")])
    book = book_notebook(nbformat.from_dict(nb), set(), set(), keys={})
    assert REMOVE_CELL in tags_of(book["cells"][0])
    assert REMOVE_CELL not in tags_of(book["cells"][1])


# -- a claim fails when its premise does ----------------------------------------------------------
# (chapter stem, which claim cell (0 = the first), code run just before it that overturns its premise)
# One chapter per part of the book; each premise is the one the named claim cell reads.
INVERSIONS: list[tuple[str, int, str]] = [
    # Attention: one untrained query attends evenly, so no word gets a majority of the weight
    ("01-attention", 0, "word_weights = torch.full_like(word_weights, 1 / word_weights.shape[-1]); "
                        "majority = int((word_weights.max(dim=-1).values > 0.5).sum())"),
    # Building blocks: the untrained control's word-order gap made equal to the trained one's
    ("05-positional-encoding", 0, "word_gap[False] = dict(word_gap[True])"),
    # Efficient attention: one band's score count off by one from the exact formula
    ("08-sparse-attention", 0, "counts[0] = (counts[0][0] + 1, counts[0][1])"),
    # The whole model: parallel and step-by-step decoding differ by far more than float32 rounding
    ("13-encoder-vs-decoder", 0, "diff = 1e-3"),
    # Language models: the two initialisations' starting losses swapped
    ("16-training-a-gpt", 0, "initial[None], initial[0.02] = initial[0.02], initial[None]"),
    # Scale: the bandwidth ceiling read from float32's own (slower) read instead of the fastest one
    ("19-quantized-decoding", 0, 'bandwidth = results["head_gemv"]["float32"]["GB_per_s"]'),
    # Adapting a pretrained model: each text's hand computation swapped with another text's
    ("20-fine-tuning", 0, "by_hand = by_hand.flip(0)"),
    # Inside the model: the corrupted prompt's top token made the clean one
    ("24-circuits", 0, "top1 = s_ids.clone()"),
    # Current open models: the unbalanced router's loss lifted above the uniform router's k
    ("25-mixture-of-experts", 0, "aux_of['unbalanced, narrow choices'] = aux_of['uniform'] + 0.1"),
    # Reasoning: greedy accuracies turned upside down
    ("26-reasoning-at-test-time", 0, "greedy_acc = {d: 1 - v for d, v in greedy_acc.items()}"),
    # Measuring a model: SmolLM2's capital answers replaced by a guesser's (one in four right)
    ("30-evaluation", 0, "interval = accuracy_interval([int(i % 4 == 0) for i in range(64)])"),
    # Serving many users: each row's cached lengths taken one longer than the mask was built for
    ("28-serving-many-users", 0, "lengths = [n + 1 for n in lengths]"),
    # Appendix: the simulated split scores doubled away from the formula's
    ("A-random-forests", 0, "grid = {key: (2 * sim, formula) for key, (sim, formula) in grid.items()}"),
]


@pytest.mark.parametrize("stem, which, code", INVERSIONS, ids=[f"{s}-{w}" for s, w, _ in INVERSIONS])
def test_a_claim_fails_when_its_premise_is_overturned(stem, which, code, tmp_path):
    from nbclient.exceptions import CellExecutionError
    nb = nbformat.read(str(ROOT / "chapters" / f"{stem}.ipynb"), as_version=4)
    at = _claim_cells(nb)[which]
    nb.cells = nb.cells[:at] + [nbformat.v4.new_code_cell(code)] + [nb.cells[at]]
    with pytest.raises(CellExecutionError, match="ClaimError"):  # the claim's own error, not another cell's
        execute_notebook(nb, ROOT / "chapters", timeout=300, widgets=False)
    # without the inversion the same cells run clean: nbval runs the whole chapter in this tier


# -- reader-facing text speaks to readers ---------------------------------------------------------
# Phrases of the project's own process. A requirement a reader should learn ("a useful quantizer
# must keep ...") is teaching and stays; "target met", "the speed bar", "the book's CI" are not.
PROCESS_TALK = re.compile("|".join([
    r"\btargets? (?:is |was |are |were )?(?:not )?(?:met|missed)\b",
    r"\(target[:\s]",
    r"\b(?:meets?|met|miss(?:es|ed)?|clears?|cleared|reach(?:es|ed)?|passe[sd]) (?:its|the|our|this|that|each|every|both) "
    r"(?:\w+ )?(?:bar|target|goal)s?\b",
    r"\b(?:speed|quality|memory|accuracy|perplexity|agreement|int[48]) (?:bar|goal)s?\b",
    r"\bgoals? set\b",
    r"\bbook'?s CI\b",
    r"\bno GPU was available\b",
    r"\bissues? \d+\b",            # the project's own issues ("nbclient issue #312" cites another project's)
]), re.I)
READER_PAGES = ([*sorted((ROOT / "chapters").glob("*.md"))]
                + [p for p in sorted((ROOT / "book").glob("*.md")) if p.name != "authoring.md"]
                + [ROOT / "README.md"])
# docstrings and comments a reader is sent to ("see transformer_lib/quantization/fused.py")
LIBRARY = sorted((ROOT / "transformer_lib").rglob("*.py"))


def _hits(text: str) -> list[str]:
    return [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}" for m in PROCESS_TALK.finditer(text)]


@pytest.mark.parametrize("path", READER_PAGES, ids=lambda p: p.name)
def test_no_process_talk_in_reader_pages(path):
    hits = _hits(path.read_text())
    assert not hits, f"{path.relative_to(ROOT)} speaks of the project's process to a reader: {hits}"


def test_no_issue_numbers_in_the_library():
    hits = {str(p.relative_to(ROOT)): h for p in LIBRARY if (h := [x for x in _hits(p.read_text()) if "issue" in x.lower()])}
    assert not hits, f"issue numbers in the library a reader reads: {hits}"


@pytest.mark.parametrize("text", ["the int8 target is met", "(target: below 1/20)", "misses the speed bar",
                                  "clears its bar", "goals set for this chapter", "the book's CI runs",
                                  "No GPU was available for this chapter", "see issue 41"])
def test_the_process_pattern_catches(text):
    assert PROCESS_TALK.search(text)


@pytest.mark.parametrize("text", ["the bars below show the row", "a target token", "the target distribution",
                                  "stacked bars of the multiply-adds", "a useful quantizer must keep perplexity"])
def test_the_process_pattern_lets_teaching_through(text):
    assert not PROCESS_TALK.search(text)
