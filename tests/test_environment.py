"""environment.yml (conda / Binder) names the same packages as pyproject.toml, and installs the package."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_matches_pyproject():
    project = _pyproject()["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {_name(r) for r in extra}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["name"] and "conda-forge" in env["channels"]
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1 and "pip" in conda
    assert any(d.startswith("python") for d in conda)
    pip = pip_sections[0]
    assert "-e ." in pip, "environment.yml must install the library itself"
    named = {_name(r) for r in pip if not r.startswith("-")}
    assert named == wanted, f"only in pyproject: {wanted - named}; only in environment.yml: {named - wanted}"


def test_no_deps_packages_installed_by_make_and_postbuild():
    no_deps = _pyproject()["tool"]["transformer_lib"]["pretrained_no_deps"]
    makefile, postbuild = (ROOT / "Makefile").read_text(), (ROOT / "postBuild").read_text()
    for package in no_deps:
        assert re.search(rf"--no-deps\s+{package}", makefile)
        assert re.search(rf"--no-deps\s+{package}", postbuild)


def test_version_and_self_check():
    out = subprocess.run([sys.executable, "-m", "transformer_lib"], capture_output=True, text=True, check=True).stdout
    assert re.search(r"transformer_lib \d+\.\d+\.\d+ \| torch .* \| device (cpu|cuda|mps)", out)
    assert "self-check OK" in out
