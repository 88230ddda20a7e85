"""Every work a chapter's further reading names resolves to one entry of book/references.bib,
and every entry is cited somewhere (a chapter, or the References page)."""
import re

import pytest

from bookkit import build_book as book
from bookkit.conventions import CHAPTERS, chapter_files

BIB = (book.BOOK / "references.bib").read_text(encoding="utf8")
KEYS = re.findall(r"^@\w+\{([^,\s]+),", BIB, re.M)
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def further_reading(md: str) -> str:
    m = re.search(r"^## Further reading\n(.*?)(?=^## |\Z)", md, re.S | re.M)
    return m.group(0) if m else ""


def items(section: str) -> list[str]:
    body = section.split("\n", 1)[1] if "\n" in section else ""
    return [i.strip() for i in re.split(r"\n(?=[-*] )", body.strip()) if i.strip().startswith(("-", "*"))]


def is_a_work(item: str) -> bool:
    """A paper or a book: an author and a year, not a pointer to the library, a chapter or a tool."""
    head = item[:200]
    return bool(re.search(r"\((?:19|20)\d\d\)|\*[^*]+\*[^\n]*\b(?:19|20)\d\d\b", head)) \
        and not re.match(r"[-*]\s+(`|Chapter|Next|Previous|In this book)", item)


def cited_keys(text: str) -> set[str]:
    return {k.strip() for group in CITE.findall(text) for k in group.split(",")}


def test_every_entry_once():
    assert len(KEYS) == len(set(KEYS)), sorted({k for k in KEYS if KEYS.count(k) > 1})
    titles = [re.sub(r"\W", "", t).lower() for t in re.findall(r"^\s*title\s*=\s*\{(.*)\},?$", BIB, re.M)]
    assert len(titles) == len(set(titles)), "two entries for one work"


@pytest.mark.parametrize("md", chapter_files(CHAPTERS, ".md"), ids=lambda p: p.stem)
def test_every_work_in_further_reading_resolves(md):
    keys = book.bib_keys()
    linked, _ = book.link_further_reading(further_reading(md.read_text()), keys, False)
    missing = [i[:100] for i in items(linked) if is_a_work(i) and not CITE.search(i)]
    assert not missing, f"{md.name}: works with no entry in book/references.bib: {missing}"
    for key in cited_keys(linked):
        assert key in KEYS, f"{md.name} cites {key}, which book/references.bib lacks"


def test_every_entry_is_cited():
    keys = book.bib_keys()
    cited = cited_keys((book.BOOK / "references.md").read_text())
    for md in chapter_files(CHAPTERS, ".md"):
        text = md.read_text()
        cited |= cited_keys(text) | cited_keys(book.link_further_reading(further_reading(text), keys, False)[0])
    uncited = [k for k in KEYS if k not in cited]
    assert not uncited, f"entries of book/references.bib no page cites: {uncited}"



@pytest.mark.parametrize("md", chapter_files(CHAPTERS, ".md"), ids=lambda p: p.stem)
def test_a_work_in_further_reading_links_to_its_own_entry(md):
    """A work named with its title, "A. Author et al., *Title* (2020)" or "Author et al. (2020),
    *Title*", links to the entry of that title: a first author with two works in one year (L. Liu
    et al. 2020; H. Wang et al. 2022; DeepSeek-AI 2024; Chen et al. 2023) must not send the reader
    to the other work. Titles are compared as sets of words
    (the chapter's may be shortened, or write $O(n^2)$ where the entry has LaTeX)."""
    keys = book.bib_keys()
    titles = {key: k[1] for k, key in keys.items() if k[0] == "title"}  # key -> its title, as words
    linked, _ = book.link_further_reading(further_reading(md.read_text()), keys, False)
    pairs = []  # (the title the chapter gives, the key it links to)
    for item in items(linked):
        pairs += [(t, k) for k, t in re.findall(r"\{cite:yearpar\}`([^`]+)`,?\s*\*([^*]+)\*", item)]
        initials = book._INITIALS_ITEM.match(item)
        cited = re.search(r"\{cite:year\}`([^`]+)`", item)
        if initials and cited:
            pairs.append((re.search(r"\*([^*]+)\*", item).group(1), cited.group(1)))
    wrong = []
    for title, key in pairs:
        said, entry = book._plain_title(title), titles[key]
        if not (set(said.split()) <= set(entry.split()) or set(entry.split()) <= set(said.split())):
            wrong.append(f"{said!r} -> {key} ({entry!r})")
    assert not wrong, f"{md.name}: further-reading items linked to another work: {wrong}"
