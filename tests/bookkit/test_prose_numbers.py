"""Every number the prose states is printed by the chapter.

For each chapter, every number with two or more significant digits in its Markdown cells must
appear in that chapter's executed outputs (stream, text/plain, text/html, text/markdown), allowing
the rounding the prose uses: "0.99" in the text matches 0.987 printed, "26" matches 26.3, "72%"
matches 0.72 or 72.1%. What the test does not read as a stated measurement: code spans and code
blocks, chapter/section/figure references, years in citations, arXiv ids, software versions, link
targets, MyST roles and the "Further reading" list. A number that the chapter's own code uses as a
literal (a setting such as "150 steps" or "270 noise columns", visible in the cell that uses it) is
a setting, not a measurement, and counts as stated by the code. What remains and is not printed
must be a definitional constant listed in ALLOWED below with a reason (a model size from a paper,
a formula's constant ...). Adding a measured number to ALLOWED is exactly what this test exists to
prevent.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from bookkit.conventions import chapter_files, chapter_label

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = chapter_files(ROOT / "chapters")

# number, as written: 1,234,567 | 12.5 | .5 | 3.7e-19 | 1e-5 ; followed optionally by % or x
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?|\.\d+)(?:[eE]([-+−]?\d+))?(%?)(?![\w.]*\d)")
SCALE_AFTER = re.compile(r"\s?(k|K|M|B|thousand|million|billion)\b")
_CODE_BLOCK = re.compile(r"```.*?```|~~~.*?~~~", re.S)
_CODE_SPAN = re.compile(r"``.+?``|`[^`\n]+`")
_ROLE = re.compile(r"\{[a-z:-]+\}`[^`]*`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_HEADING_NUMBER = re.compile(r"^#+\s*\d+(\.\d+)*\.?\s", re.M)
_REFERENCE = re.compile(r"\b(?:[Cc]hapters?|[Ss]ections?|[Ff]igures?|[Tt]ables?|[Ee]xercises?|[Pp]arts?|[Ss]teps?|"
                        r"[Ss]essions?|[Aa]ppendix|DL\d*|ML\d*|[Ll]ines?|[Ee]q\.?|[Ee]quation)\s+"
                        r"\d+(?:\.\d+)*(?:\s*(?:,|and|or|to|-|–)\s*\d+(?:\.\d+)*)*")
_ARXIV = re.compile(r"(?:arXiv:?\s*|abs/)\d{4}\.\d{4,5}(?:v\d+)?", re.I)
_VERSION = re.compile(r"\b(?:Python|torch|PyTorch|transformers|tokenizers|nbgrader|JupyterHub|JupyterLab|"
                      r"Jupyter Book|numpy|scikit-learn|version)\s*(?:>=|<=|==)?\s*\d+(?:\.\d+)+", re.I)
_FURTHER_READING = re.compile(r"^#+\s*Further reading.*?(?=^#\s|\Z)", re.M | re.S)
_YEAR = re.compile(r"\b(?:19[5-9]\d|20[0-3]\d)[a-z]?\b")

# Definitional constants: (chapter label NN or L, number as written) -> why it need not be printed.
ALLOWED: dict[tuple[str, str], str] = {
    ("*", "10000"): "the sinusoidal/RoPE base of Vaswani et al. (2017), a definition",
    ("*", "10,000"): "the sinusoidal/RoPE base of Vaswani et al. (2017), a definition",
    ("*", "512"): "d_model of the base Transformer (Vaswani et al. 2017), a model setting",
    ("*", "2048"): "d_ff of the base Transformer (Vaswani et al. 2017), a model setting",
    ("*", "64"): "head size d_k = 512 / 8 of the base Transformer, a model setting",
    ("*", "16"): "a power-of-two size used as a setting, not a measurement",
    ("*", "32"): "a power-of-two size used as a setting, not a measurement",
    ("*", "128"): "a power-of-two size used as a setting, not a measurement",
    ("*", "256"): "a power-of-two size used as a setting (or the 256 byte values), not a measurement",
    ("*", "1024"): "a power-of-two size used as a setting, not a measurement",
    ("*", "4096"): "a power-of-two size used as a setting, not a measurement",
    ("*", "8192"): "a power-of-two size used as a setting, not a measurement",
    ("*", "16384"): "a power-of-two size used as a setting, not a measurement",
    ("*", "16,384"): "a power-of-two size used as a setting, not a measurement",
    ("*", "32768"): "a power-of-two size used as a setting, not a measurement",
    ("*", "32,768"): "a power-of-two size used as a setting, not a measurement",
    ("*", "60"): "the chapter time budget (60 s on two cores), a rule of the book",
    ("*", "12"): "BERT-base/MiniLM's 12 heads and the 12 months/sessions kind of count, a setting",
    ("*", "1e-5"): "the parity tolerance the library's tests use, a stated standard",
    ("*", "1e-6"): "a stated tolerance, a standard rather than a measurement",
    ("05", "768"): "GPT-2's width (Radford et al. 2019), a model setting quoted for scale",
    ("10", "12288"): "GPT-3 175B's width (Brown et al. 2020), a model setting quoted in an exercise",
    ("13", "37,000"): "the base Transformer's shared BPE vocabulary size from the paper, a setting",
    ("14", "1536"): "MiniLM's published d_ff, part of its configuration",
    ("A", "96"): "the 96/4 class ratio the data set is built with, a setting",
}


def _allowed(chapter: str, token: str) -> bool:
    return ("*", token) in ALLOWED or (chapter_label(chapter), token) in ALLOWED


def _value(digits: str, exponent: str) -> float:
    value = float(digits.replace(",", ""))
    return value * 10 ** int(exponent.replace("−", "-")) if exponent else value


def significant_digits(digits: str) -> int:
    plain = digits.replace(",", "").lstrip("0")
    if "." in plain:
        return len(plain.replace(".", "").lstrip("0"))
    return len(plain.rstrip("0"))


def prose_numbers(markdown: str) -> list[tuple[str, list]]:
    """(as written, the ways it may be printed) for every stated number with >= 2 significant digits."""
    text = _FURTHER_READING.sub(" ", markdown)
    text = _CODE_BLOCK.sub(" ", text)
    text = _ARXIV.sub(" ", text)
    text = _VERSION.sub(" ", text)
    text = _ROLE.sub(" ", text)
    text = _CODE_SPAN.sub(" ", text)
    text = _LINK_TARGET.sub("]", text)
    text = _HEADING_NUMBER.sub("# ", text)
    text = _REFERENCE.sub(" ", text)
    text = _YEAR.sub(" ", text)
    found = []
    for m in NUMBER.finditer(text):
        digits, exponent, percent = m.groups()
        if significant_digits(digits) < 2:
            continue
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        scale = SCALE_AFTER.match(text, m.end())
        found.append((m.group(0), targets(_value(digits, exponent), decimals, bool(percent), exponent,
                                          scale.group(1) if scale else None)))
    return found


def output_numbers(nb: dict) -> list[float]:
    values = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")]
            for mime in ("text/plain", "text/html", "text/markdown", "text/latex"):
                texts.append(out.get("data", {}).get(mime, ""))
            for t in texts:
                t = "".join(t) if isinstance(t, list) else t
                t = re.sub(r"<[^>]+>", " ", t)
                for m in NUMBER.finditer(t):
                    values.append(_value(m.group(1), m.group(2)))
    return values


_SCALE = {"k": 1e3, "K": 1e3, "thousand": 1e3, "M": 1e6, "million": 1e6, "B": 1e9, "billion": 1e9}


def targets(value: float, decimals: int, percent: bool, exponent: str | None, scale: str | None):
    """(value, half a unit of the last written digit) for each way the number may be printed."""
    if exponent:  # 3.7e-19: the same digits at that exponent
        return [(value, 0.5 * 10 ** (int(exponent.replace("−", "-")) - decimals))]
    half = 0.5 * 10 ** -decimals
    out = [(value, half)]
    if percent:
        out.append((value / 100, half / 100))
    if scale:
        out.append((value * _SCALE[scale], half * _SCALE[scale]))
    return out


def printed(candidates, outputs: list[float]) -> bool:
    return any(abs(o - t) <= tol * (1 + 1e-9) for t, tol in candidates for o in outputs)


def missing_numbers(ipynb: Path) -> list[str]:
    nb = json.loads(ipynb.read_text())
    prose = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                      for c in nb["cells"] if c["cell_type"] == "markdown")
    outputs = output_numbers(nb)
    code_literals = {m.group(0).replace(",", "") for c in nb["cells"] if c["cell_type"] == "code"
                     for m in NUMBER.finditer("".join(c["source"]) if isinstance(c["source"], list) else c["source"])}
    missing = []
    for written, candidates in prose_numbers(prose):
        token = written.rstrip("%")
        if _allowed(ipynb.name, token) or _allowed(ipynb.name, written) or token.replace(",", "") in code_literals:
            continue
        if not printed(candidates, outputs):
            missing.append(written)
    return sorted(set(missing), key=missing.index)


def test_the_reader_of_the_test_sees_numbers_as_written():
    found = dict(prose_numbers("It takes 0.35 of the weight, about 26 to 1, 72% of 1,000 tokens; see chapter 10 "
                               "and `d_model=512`; 3.7e-19 is tiny; (Vaswani et al., 2017); one 5; 44.1M weights."))
    assert list(found) == ["0.35", "26", "72%", "3.7e-19", "44.1"]
    assert printed(found["0.35"], [0.3512]) and not printed(found["0.35"], [0.36])
    assert printed(found["72%"], [0.7204]) and printed(found["26"], [26.3]) and not printed(found["26"], [24.0])
    assert printed(found["3.7e-19"], [3.74e-19]) and not printed(found["3.7e-19"], [3.7e-18])
    assert printed(found["44.1"], [44_140_544]) and not printed(found["44.1"], [44_250_000])


@pytest.mark.parametrize("ipynb", CHAPTERS, ids=lambda p: p.stem)
def test_every_number_in_the_prose_is_printed(ipynb):
    missing = missing_numbers(ipynb)
    assert not missing, (f"{ipynb.name}: the prose states {missing}, which no output of the chapter prints "
                         "(print it next to the claim, or reword)")
