"""Every term a chapter defines in bold has a glossary entry that links to a chapter defining it.

A chapter defines a term in bold, for this test, in one of three forms (read from the chapters'
MyST sources, code cells left out):

- a bold term followed by its source: ``**RoPE** (Su et al., 2021).``, ``**The logit lens**
  {cite}`...```, ``**Global tokens** (Longformer).``: a named method introduced with its paper;
- a bold term followed by its formula: ``its **entropy** $H(a) = ...$``;
- the bold lead-in of a paragraph of the chapter's ``## The math`` section, the section that
  defines the chapter's objects: ``**The KV cache.** In a causal decoder ...``. Lead-ins that
  are a step of the argument rather than a term are not terms: questions and claims (``**Why
  one pass equals $n$ passes.**``, ``**Shifts are rotations.**``, ``**Bytes, not FLOPs.**``),
  anything with a comma or math in it, and the generic labels in ``ARGUMENT_LABELS``.

The chapters' key points carry no bold terms (their emphasis is italics on a word of a
sentence), so they add nothing to this list today; a bold term added to a key point would be
caught by the first two forms only if it comes with a source or a formula.

A glossary entry covers a term when the entry's name, or one of its forms in parentheses
(``BPE (byte-pair encoding)``), equals the term or one is a whole-word part of the other
(``Roofline`` covers ``The roofline of decoding``, ``Sliding-window attention`` covers ``Sliding
window``), after lower-casing, reading hyphens as spaces and dropping a leading "the" and a
plural "s"; and the entry links to a chapter that defines the term.
"""
from __future__ import annotations

import re

import pytest

from bookkit.conventions import ROOT

CHAPTERS = sorted((ROOT / "chapters").glob("[0-9A-Z]*-*.md"))
GLOSSARY = ROOT / "book" / "glossary.md"

# Lead-ins of "The math" paragraphs that name a step of the derivation, not a term of the book.
ARGUMENT_LABELS = {
    "order", "cost", "parameters", "parameter count", "memory", "merging", "sampling", "attention",
    "padding", "two conventions", "fully masked rows", "per token", "the crossover", "causal tiles",
    "the recurrence", "embeddings", "one layer (post-ln)", "a head's map", "pattern scores", "the head",
    "the scores", "the loss", "the objective", "the closed form", "an answer's log-probability",
    "parameters against flops", "what each choice trains",
}
CLAIM = re.compile(r"^(why|what|how|when|a trap|one|two)\b|\b(is|are|equals|sees|not)\b|[,$?]", re.I)
CITED = re.compile(r"\*\*([^*\n]+?)\*\*\s*(?:\((?:[^()]*\d{4}[^()]*|[A-Z][A-Za-z0-9-]+)\)|\{cite\})")
FORMULA = re.compile(r"\*\*([^*\n]*?[^.:*\n])\*\*\s*\$[^$]*=")  # an inline term, not a "**Lead-in.**"
LEAD_IN = re.compile(r"(?m)^(?:- |\d+\. )?\*\*([^*\n]+?)\*\*")


def _prose(text: str) -> str:
    """A chapter's Markdown without its YAML header and code cells."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    return re.sub(r"(?ms)^(`{3,}).*?^\1\s*$", "", text)


def _math_section(prose: str) -> str:
    m = re.search(r"(?m)^## The math\s*$", prose)
    if not m:
        return ""
    end = re.search(r"(?m)^## ", prose[m.end():])
    return prose[m.end(): m.end() + end.start() if end else None]


def _clean(term: str) -> str:
    return term.strip().rstrip(".:").strip()


def defined_terms(text: str) -> set[str]:
    """The terms a chapter's source defines in bold (see the module's docstring)."""
    prose = _prose(text)
    terms = {_clean(t) for t in CITED.findall(prose) + FORMULA.findall(prose)}
    for lead in LEAD_IN.findall(_math_section(prose)):
        lead = _clean(lead)
        if ":" in lead:  # "Memory: ZeRO" defines ZeRO
            lead = lead.split(":", 1)[1].strip()
        if lead.lower() in ARGUMENT_LABELS or CLAIM.search(lead) or lead.lower().startswith("exercise"):
            continue
        terms.add(lead)
    return terms


def _norm(name: str) -> str:
    name = re.sub(r"[\s-]+", " ", name.lower().strip().rstrip("."))
    name = re.sub(r"^the ", "", name)
    return " ".join(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
                    for w in name.split(" "))


def _forms(name: str) -> set[str]:
    """An entry's or a term's names: 'BPE (byte-pair encoding)' is also 'BPE' and 'byte-pair encoding'."""
    forms = {name}
    m = re.match(r"^(.*?)\s*\(([^()]+)\)\s*$", name)
    if m:
        forms |= {m.group(1), m.group(2)}
    forms |= {part for f in list(forms) for part in re.split(r"\s+and\s+", f)} if " and " in name else set()
    return {_norm(f) for f in forms if f.strip()}


def glossary_entries(source: str) -> dict[str, set[str]]:
    """Entry name -> the chapter stems its definition links to."""
    block = source[source.index("```{glossary}"):]
    entries = {}
    for m in re.finditer(r"(?m)^(\S[^\n]*)\n((?:  [^\n]*\n?)+)", block):
        if m.group(1).startswith("```"):
            continue
        entries[m.group(1).strip()] = set(re.findall(r"\]\(chapters/([0-9A-Z]+-[a-z0-9-]+)\.ipynb", m.group(2)))
    return entries


def _covers(entry: str, term: str) -> bool:
    term_forms = _forms(term)
    for e in _forms(entry):
        for t in term_forms:
            if e == t or re.search(rf"(?<!\w){re.escape(e)}(?!\w)", t) or re.search(rf"(?<!\w){re.escape(t)}(?!\w)", e):
                return True
    return False


def missing_entries(chapters: dict[str, str], glossary: str) -> list[str]:
    entries = glossary_entries(glossary)
    definers: dict[str, set[str]] = {}
    for stem, text in chapters.items():
        for term in defined_terms(text):
            definers.setdefault(term, set()).add(stem)
    missing = []
    for term, stems in sorted(definers.items()):
        if not any(_covers(name, term) and links & stems for name, links in entries.items()):
            missing.append(f"{term!r} (defined in {', '.join(sorted(stems))})")
    return missing


def test_the_rule_reads_definitions_not_labels():
    text = ("---\njupytext: {}\n---\n# T\n\nIts **entropy** $H(a) = -\\sum a \\ln a$ runs from 0.\n\n"
            "## The math\n\n**The KV cache.** In a decoder ...\n\n**Cost.** Count ...\n\n"
            "**Why one pass equals $n$ passes.** Row ...\n\n**Shifts are rotations.** By ...\n\n"
            "**RoPE** (Su et al., 2021). Rotate ...\n\n**Memory: ZeRO.** Training ...\n\n"
            "```{code-cell}\nprint('**Not a term.** x')\n```\n\n## Experiments\n\n**Teacher forcing.** later\n\n"
            "1. **The max.** $m = \\max_j s_j$ ...\n")
    assert defined_terms(text) == {"entropy", "The KV cache", "RoPE", "ZeRO"}


def test_an_entry_covers_a_term_by_name_or_form():
    assert _covers("KV cache", "The KV cache")
    assert _covers("BPE (byte-pair encoding)", "byte-pair encoding")
    assert _covers("Roofline", "The roofline of decoding")
    assert _covers("Majority voting", "Majority voting (self-consistency)")
    assert _covers("Sliding-window attention", "Sliding window")
    assert not _covers("Attention weights", "Grouped-query attention")
    glossary = "```{glossary}\nKV cache\n  Keys. See [G](chapters/17-generating-text.ipynb).\n```\n"
    chapter = "# T\n\n## The math\n\n**The KV cache.** In ...\n"
    assert missing_entries({"17-generating-text": chapter}, glossary) == []
    assert missing_entries({"19-quantized-decoding": chapter}, glossary) == [
        "'The KV cache' (defined in 19-quantized-decoding)"], "an entry must link to a chapter that defines it"


def test_every_bold_definition_has_a_glossary_entry_linking_to_its_chapter():
    chapters = {p.stem: p.read_text(encoding="utf8") for p in CHAPTERS}
    missing = missing_entries(chapters, GLOSSARY.read_text(encoding="utf8"))
    assert not missing, ("terms the chapters define in bold with no glossary entry linking to their chapter "
                         f"(book/glossary.md): {'; '.join(missing)}")


def test_notation_lists_reused_letters_for_every_later_part():
    """book/notation.md has a "### <part> (chapters a-b)" table of reused letters for every chapter
    after the first four parts (the core the main tables describe), the appendix excepted."""
    from bookkit.front_door import chapters_by_part
    notation = (ROOT / "book" / "notation.md").read_text(encoding="utf8")
    reused = notation[notation.index("## Letters reused in later parts"):]
    covered = set()
    for a, b in re.findall(r"(?m)^### [^\n]*\(chapters? (\d+)(?:-(\d+))?\)\s*$", reused):
        covered |= set(range(int(a), int(b or a) + 1))
    parts = chapters_by_part()
    core_end = [caption for caption, _ in parts].index("The whole model")
    later = {int(stem[:2]) for caption, stems in parts[core_end + 1:] for stem in stems if stem[:2].isdigit()}
    assert later, "no chapters after the core"
    assert not later - covered, f"book/notation.md has no reused-letter table for chapters {sorted(later - covered)}"


# Terms a chapter's short answer, key points or summary names without bold (so the rule above does
# not read them), which a reader will look up. Add a chapter's own when it lands.
KEY_TERMS = {
    "16-training-a-gpt": ["perplexity"],
    "17-generating-text": ["KV cache", "top-p"],
    "19-quantized-decoding": ["GPTQ", "roofline"],
    "21-lora-instruction-tuning": ["LoRA"],
    "22-preference-tuning": ["DPO", "RLHF"],
    "23-induction-heads": ["induction head"],
    "24-circuits": ["logit lens", "activation patching"],
    "25-mixture-of-experts": ["MoE", "MLA", "routing", "load-balancing loss"],
    "26-reasoning-at-test-time": ["test-time compute", "pass@k", "majority voting", "verifier", "best-of-k",
                                  "scratchpad"],
    "27-rl-verifiable-rewards": ["GRPO", "RLVR", "reward hacking", "group advantage", "REINFORCE"],
    "28-serving-many-users": ["continuous batching", "static batching", "paged KV cache", "block table",
                              "copy-on-write", "time to first token", "TTFT", "ragged batch"],
    "29-speculative-decoding": ["speculative decoding", "acceptance rate", "draft model", "prompt lookup decoding"],
    "30-evaluation": ["contamination", "calibration", "Wilson interval", "McNemar's test", "paired comparison",
                      "power", "Bonferroni correction", "few-shot prompt"],
    "31-scaling-laws": ["scaling law", "IsoFLOP curve", "compute-optimal allocation", "entropy rate"],
}


@pytest.mark.parametrize("stem", sorted(KEY_TERMS))
def test_key_terms_have_entries_linking_to_their_chapter(stem):
    if not (ROOT / "chapters" / f"{stem}.md").exists():
        pytest.skip(f"{stem} is not written yet")
    entries = glossary_entries(GLOSSARY.read_text(encoding="utf8"))
    missing = [term for term in KEY_TERMS[stem]
               if not any(_covers(name, term) and stem in links for name, links in entries.items())]
    assert not missing, f"book/glossary.md has no entry linking to {stem} for {missing}"


def test_every_glossary_anchor_names_a_heading_of_its_chapter():
    """A link ``chapters/NN-x.ipynb#anchor`` resolves in the built book only if the anchor is
    MyST's slug of one of that chapter's headings (``myst_heading_anchors: 3``: levels 1-3). The
    slug drops punctuation rather than hyphenating it (``the prompt's layout`` ->
    ``the-prompts-layout``), which the HTML's own ids do not show; the book tier's link test
    catches a wrong anchor only after a full build, this one reads the sources."""
    from myst_parser.mdit_to_docutils.base import default_slugify

    text = GLOSSARY.read_text(encoding="utf8")
    links = re.findall(r"\]\(chapters/([0-9A-Z]+-[a-z0-9-]+)\.ipynb#([^)\s]+)\)", text)
    assert links, "the glossary links to no chapter section"
    bad = []
    for stem, anchor in links:
        source = ROOT / "chapters" / f"{stem}.md"
        if not source.exists():
            continue  # a chapter not written yet; the front-door tests own that case
        headings = re.findall(r"^#{1,3} (.+?)\s*$", _prose(source.read_text(encoding="utf8")), re.M)
        if anchor not in {default_slugify(h) for h in headings}:
            bad.append(f"{stem}#{anchor}")
    assert not bad, f"glossary anchors that name no heading of their chapter: {bad}"
