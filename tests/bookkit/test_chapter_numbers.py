"""Chapter numbers come from one place, the file names (``bookkit.conventions.chapter_heading``):
every title, every sidebar entry and every "chapter N" reference must agree with the file it means.

The book once had two chapter 11s (files 12-14 and 18 were titled "11."-"14."), so that "Chapter 14
looks at all 72 heads" pointed at a page titled "14. Appendix: Random forests". These tests read
the sources only (milliseconds); the sidebar is the table of contents built from book/parts.yml,
whose entries Jupyter Book labels with each page's title.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bookkit import build_book as book
from bookkit.conventions import BOOK, CHAPTERS, ROOT, chapter_files, chapter_heading, chapter_label, is_appendix

MD = chapter_files(CHAPTERS, ".md")
TEXTS = MD + sorted(BOOK.glob("*.md")) + [ROOT / "README.md"]
LIBRARY = sorted((ROOT / "transformer_lib").rglob("*.py"))

# "chapter 8", "chapters 2-4, 10, 12 and 13", "Chapters 3 (heads), 5 ..." (a number list after the word)
REFERENCE = re.compile(r"\b[Cc]hapters?\s+(\d+(?:\s*(?:,|and|or|-|–|to)\s*\d+)*)")
APPENDIX_REF = re.compile(r"\b[Aa]ppendix\s+([A-Z])\b")
# "chapter 11 ("Exact attention in linear memory")" or "(chapter 8, "Dilated attention")": a quoted
# title or section heading of that chapter
QUOTED = re.compile(r"\b[Cc]hapter\s+(\d+)(?:'s)?\s*(?:\(|,)\s*[\"“]([^\"”]+)[\"”]")
LINK = re.compile(r"\[([^\]]*)\]\((?:\./)?(?:(?:\.\./)?chapters/)?((?:\d\d|[A-Z])-[a-z0-9-]+)\.(?:md|ipynb)(?:#[^)\s]*)?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)
FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1\s*$", re.S | re.M)


def _planned() -> dict[str, str]:
    """label -> stem of every chapter the book lists (some may still be being written)."""
    return {chapter_label(s): s for s in book.planned_chapters()}


def _numbers(group: str) -> list[int]:
    """The chapter numbers of a reference list; a range "2-4" stands for 2, 3, 4."""
    out: list[int] = []
    for piece in re.split(r"\s*(?:,|and|or)\s*", group):
        ends = [int(x) for x in re.split(r"\s*(?:-|–|to)\s*", piece) if x]
        out += list(range(ends[0], ends[-1] + 1)) if len(ends) == 2 else ends
    return out


def _title(md: Path) -> str:
    return HEADING.search(FENCE.sub("", md.read_text(encoding="utf8"))).group(1)


def _headings(md: Path) -> set[str]:
    """A chapter's title without its number, and the text of all its headings."""
    text = FENCE.sub("", md.read_text(encoding="utf8"))
    heads = {h.strip() for h in HEADING.findall(text)}
    title = _title(md)
    return heads | {title.split(". ", 1)[1] if ". " in title else title}


def _prose(path: Path) -> str:
    text = path.read_text(encoding="utf8")
    return text if path.suffix == ".py" else FENCE.sub(lambda m: m.group(0) if "{" in m.group(1) else "", text)


# -- the rules, tested on small made-up inputs first (each must be able to fail) ---------------------

def test_reference_parsing_reads_lists_and_ranges():
    found = [_numbers(m.group(1)) for m in REFERENCE.finditer(
        "see chapter 8, chapters 2-4, 10 and 12; Chapters 3 (heads)")]
    assert found == [[8], [2, 3, 4, 10, 12], [3]]
    assert [m.groups() for m in QUOTED.finditer('chapter 11 ("Exact attention"), (chapter 8, "Dilated attention")')] \
        == [("11", "Exact attention"), ("8", "Dilated attention")]
    assert LINK.findall("[chapter 14](14-attention-heads.md#x) and [the appendix](../chapters/A-random-forests.ipynb)") \
        == [("chapter 14", "14-attention-heads"), ("the appendix", "A-random-forests")]


def test_headings_are_numbered_from_the_file_name():
    assert chapter_heading("chapters/12-transformer-architecture.md") == "12."
    assert chapter_heading("A-random-forests.ipynb") == "Appendix A."
    assert is_appendix("A-random-forests.md") and not is_appendix("08-sparse-attention.md")
    with pytest.raises(ValueError, match="path"):
        chapter_heading("notation.md")


# -- titles and the sidebar ---------------------------------------------------------------------------

@pytest.mark.parametrize("md", MD, ids=lambda p: p.stem)
def test_title_carries_the_number_of_its_file(md):
    title = _title(md)
    assert title.startswith(chapter_heading(md) + " "), f"{md.name}: title {title!r} should start with " \
                                                         f"{chapter_heading(md)!r} (the file's number)"
    ipynb = md.with_suffix(".ipynb")
    if ipynb.exists():
        cells = json.loads(ipynb.read_text(encoding="utf8"))["cells"]
        first = next(c for c in cells if c["cell_type"] == "markdown")
        source = "".join(first["source"]) if isinstance(first["source"], list) else first["source"]
        assert HEADING.search(source).group(1) == title, f"{ipynb.name}: its title differs from the .md's"


def test_sidebar_lists_each_number_once_and_in_order():
    """The sidebar shows the titles of the parts.yml entries: one chapter per number, numbers in
    order, the appendices (lettered) last and in the part "Appendix"."""
    stems = book.planned_chapters()
    titles = [_title(CHAPTERS / f"{s}.md") for s in stems if (CHAPTERS / f"{s}.md").exists()]
    prefixes = [t.split(" ", 1)[0] if not t.startswith("Appendix") else " ".join(t.split(" ", 2)[:2]) for t in titles]
    assert len(prefixes) == len(set(prefixes)), f"two chapters share a number: {prefixes}"
    parts = book._load_yaml(BOOK / "parts.yml")["parts"]
    for part in parts:
        for f in part["files"]:
            if f.startswith("chapters/"):
                assert is_appendix(f) == (part["caption"] == "Appendix"), f"{f} is in the part {part['caption']!r}"


# -- references in the text ---------------------------------------------------------------------------

def _references(path: Path):
    text = _prose(path)
    for m in REFERENCE.finditer(text):
        for n in _numbers(m.group(1)):
            yield f"{n:02d}", m.group(0)
    for m in APPENDIX_REF.finditer(text):
        yield m.group(1), m.group(0)


@pytest.mark.parametrize("path", TEXTS + LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_chapter_reference_names_a_chapter_of_the_book(path):
    planned = _planned()
    wrong = sorted({ref for label, ref in _references(path) if label not in planned})
    assert not wrong, f"{path.name}: {wrong} name no chapter listed in book/parts.yml"


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_link_that_says_chapter_n_goes_to_file_n(path):
    planned = set(_planned().values())
    for text, stem in LINK.findall(_prose(path)):
        assert stem in planned, f"{path.name}: link to {stem}, which book/parts.yml does not list"
        said = [f"{n:02d}" for m in REFERENCE.finditer(text) for n in _numbers(m.group(1))]
        said += APPENDIX_REF.findall(text)
        assert all(s == chapter_label(stem) for s in said), f"{path.name}: [{text}] links to {stem}"


@pytest.mark.parametrize("path", TEXTS + LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_quoted_section_after_chapter_n_is_in_chapter_n(path):
    planned = _planned()
    for number, quoted in QUOTED.findall(_prose(path)):
        stem = planned.get(f"{int(number):02d}")
        if stem is None or not (CHAPTERS / f"{stem}.md").exists():
            continue  # the previous test reports a missing chapter
        heads = _headings(CHAPTERS / f"{stem}.md")
        quoted = " ".join(quoted.split())
        assert any(quoted == h or h.startswith(quoted) for h in heads), \
            f"{path.name}: chapter {number} has no title or section {quoted!r}"
