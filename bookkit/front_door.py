"""The front door from one source: book/parts.yml and the chapters' own titles.

    python -m bookkit.front_door     # prints README.md's chapter table (paste it under "## Chapters")

README.md's chapter table, book/index.md's map of the parts and the course guide's 12-session
table all name every chapter of book/parts.yml; tests/bookkit/test_front_door.py fails when one
of them misses a chapter or a part, or when README's table differs from ``readme_table()``.
"""
from __future__ import annotations

import re

from . import build_book
from .conventions import CHAPTERS, chapter_label

__all__ = ["chapters_by_part", "chapter_title", "readme_table"]


def chapters_by_part(parts: dict | None = None) -> list[tuple[str, list[str]]]:
    """[(part caption, [chapter stem, ...]), ...] in book order; parts without a chapter are left out.

    A chapter listed in parts.yml counts once its .md exists, as in build_book (chapters land one by one).
    """
    parts = parts or build_book._load_yaml(build_book.BOOK / "parts.yml")
    out = []
    for p in parts["parts"]:
        stems = [f.split("/", 1)[1] for f in p["files"]
                 if f.startswith("chapters/") and (CHAPTERS / f"{f.split('/', 1)[1]}.md").exists()]
        if stems:
            out.append((p["caption"], stems))
    return out


def chapter_title(stem: str) -> str:
    """The chapter's heading without its number: "Masking" for 04-masking."""
    for line in (CHAPTERS / f"{stem}.md").read_text().splitlines():
        if line.startswith("# "):
            return re.sub(r"^(?:Appendix [A-Z]\.|\d+\.)\s*", "", line[2:]).strip()
    raise ValueError(f"chapters/{stem}.md has no '# N. Title' heading")


def readme_table(parts: dict | None = None) -> str:
    rows = ["| # | Chapter | Part |", "|---|---------|------|"]
    for caption, stems in chapters_by_part(parts):
        for stem in stems:
            label = chapter_label(stem)
            rows.append(f"| {int(label) if label.isdigit() else label} | {chapter_title(stem)} | {caption} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(readme_table())
