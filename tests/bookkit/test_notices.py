"""Licences: the code's (MIT), the prose's (CC BY 4.0) and a notice for everything shipped from
others (THIRD-PARTY-NOTICES.md), carried by the web book, the PDF's pages and `make dist`."""
import fnmatch
import json
import re
import tomllib
import zipfile
from pathlib import Path

from bookkit import build_book, dist, slides
from bookkit.conventions import ROOT
from bookkit.explainer import build as explainer

NOTICES = (ROOT / "THIRD-PARTY-NOTICES.md").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DATA = ROOT / "transformer_lib" / "data"


def shipped_data_files() -> list[Path]:
    """Every data file under transformer_lib/data (not its code or its READMEs)."""
    return sorted(p for p in DATA.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")
                  and p.name != "README.md" and "__pycache__" not in p.parts)


def test_code_and_prose_licences_name_the_holder():
    code = (ROOT / "LICENSE").read_text()
    assert code.startswith("MIT License") and "The Transformers, Interactively authors" in code
    prose = (ROOT / "LICENSE-CONTENT.md").read_text()
    assert "CC BY 4.0" in prose and "creativecommons.org/licenses/by/4.0" in prose and "Why CC BY 4.0" in prose
    assert PYPROJECT["project"]["license"] == "MIT"
    assert {"LICENSE", "THIRD-PARTY-NOTICES.md"} <= set(PYPROJECT["project"]["license-files"])


def test_every_shipped_data_file_has_a_notice():
    missing = [str(p.relative_to(ROOT)) for p in shipped_data_files() if p.name not in NOTICES]
    assert not missing, f"THIRD-PARTY-NOTICES.md says nothing about {missing}"


def test_every_shipped_data_file_is_package_data():
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["transformer_lib"]
    for p in shipped_data_files():
        rel = str(p.relative_to(ROOT / "transformer_lib"))
        assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), f"{rel} is not in pyproject's package-data"


def test_every_pretrained_package_and_web_asset_has_a_notice():
    for package in PYPROJECT["tool"]["transformer_lib"]["pretrained_no_deps"]:
        assert f"`{package}`" in NOTICES, package
    for name, version in json.loads((explainer.HERE / "package.json").read_text())["dependencies"].items():
        assert f"{name} {version}" in NOTICES, name
    assert f"mathjax@{build_book.MATHJAX_VERSION}" in NOTICES
    for pinned in (slides.REVEAL, slides.MATHJAX):
        assert f"`{pinned}`" in NOTICES or f"({pinned})" in NOTICES or pinned in NOTICES, pinned
    for model in ("SmolLM2", "MiniLM", "LoRA adapter", "SpamAssassin"):
        assert model in NOTICES
    for section in re.split(r"\n### ", NOTICES)[1:]:
        if not section.startswith(("The project's own", "Not shipped")):
            assert "**Licence" in section or "Licences" in section, section.splitlines()[0]


def test_every_chapter_that_loads_a_model_is_in_its_notice():
    """A chapter that loads MiniLM or SmolLM2 is named in that model's "Used by" line."""
    for heading, loader in (("### all-MiniLM-L6-v2", "load_minilm"), ("### SmolLM2", "load_smollm2")):
        section = NOTICES[NOTICES.index(heading):]
        section = section[:section.index("\n### ", 1)]
        used_by = section.split("**Used by:**", 1)[1].split("\n- **", 1)[0]
        listed = {int(n) for n in re.findall(r"\b\d+\b", used_by)}
        loading = {int(p.name[:2]) for p in sorted((ROOT / "chapters").glob("[0-9][0-9]-*.md"))
                   if loader in p.read_text(encoding="utf8")}
        assert loading, loader
        assert loading <= listed, f"{heading[4:]}'s notice does not name chapters {sorted(loading - listed)}"


def test_static_file_check_catches_an_unknown_asset():
    assert build_book.has_notice("vendor/fontawesome/webfonts/fa-solid-900.woff2")
    assert build_book.has_notice("mystnb.11b39860.css")
    assert not build_book.has_notice("someone-elses-widget.js")


def test_licences_travel_with_the_site_and_the_bundle(tmp_path):
    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text("<html></html>")
    build_book.copy_licences(html)
    assert {p.name for p in html.iterdir()} >= {"LICENSE.txt", "LICENSE-CONTENT.md", "THIRD-PARTY-NOTICES.md"}
    pdf = tmp_path / "book.pdf"
    pdf.write_bytes(b"%PDF-1.4")
    out = dist.write_zip(html, pdf, tmp_path / "dist")
    names = set(zipfile.ZipFile(out).namelist())
    top = out.stem
    for name in build_book.LICENCE_FILES + ("CHANGELOG.md", "book.pdf"):
        assert f"{top}/{name}" in names, name
    assert "licences" in build_book._load_yaml(build_book.BOOK / "parts.yml")["parts"][-1]["files"]
