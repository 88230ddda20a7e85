"""transformer_lib has no import cycle, counting imports inside functions too: every module is
parsed with ``ast`` (nothing is imported), each ``import``/``from ... import`` anywhere in it
becomes an edge to the transformer_lib module it names, and the strongly connected components of
that graph must all be single modules. ``_checks`` is the ground floor: it imports nothing else
from transformer_lib."""
import ast
from pathlib import Path

import transformer_lib

ROOT = Path(transformer_lib.__file__).parent
PACKAGE = "transformer_lib"

# being removed by engineer "core" (issue 39): the fused quantized step and its modules import
# each other; delete this entry when that branch is merged
KNOWN_CYCLES = {frozenset({"transformer_lib.quantization.fused", "transformer_lib.quantization.modules"})}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict:
    """Every module of the package: dotted name -> (path, is_package)."""
    return {module_name(p): (p, p.name == "__init__.py") for p in sorted(ROOT.rglob("*.py"))}


def resolve(name: str, known) -> str | None:
    """The longest prefix of ``name`` that is a module of the package (``a.b.func`` -> ``a.b``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, is_package: bool, known) -> set:
    """The package's modules that ``name`` imports anywhere in its file (top level, functions,
    ``if TYPE_CHECKING`` blocks alike). Importing a package runs its ``__init__``, so a
    ``from .x import y`` counts ``x``'s package chain through ``resolve``; ``from . import y``
    counts ``y`` when ``y`` is a submodule, else the package itself."""
    base = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                source = f"{anchor}.{node.module}" if node.module else anchor
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in known] or [source]
        else:
            continue
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                found = resolve(target, known)
                if found and found != name:
                    out.add(found)
    return out


def import_graph() -> dict:
    known = modules()
    return {name: imports_of(name, path, is_package, known) for name, (path, is_package) in known.items()}


def cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    # the finder itself must be able to fail: a -> b at top level, b -> a inside a function
    graph = {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p.a"}}
    assert cycles(graph) == [frozenset({"p.a", "p.b"})]
    assert cycles({"p.a": {"p.b"}, "p.b": set()}) == []


def test_function_level_imports_are_edges(tmp_path):
    # an import inside a function, a relative one from a sibling, and one under a package
    source = tmp_path / "b.py"
    source.write_text("import os\n\ndef f():\n    from .a import g\n    from transformer_lib import c\n    return g\n")
    known = {"transformer_lib.a", "transformer_lib.b", "transformer_lib.c", "transformer_lib"}
    assert imports_of("transformer_lib.b", source, False, known) == {"transformer_lib.a", "transformer_lib.c"}


def test_no_import_cycle():
    found = [sorted(c) for c in cycles(import_graph()) if c not in KNOWN_CYCLES]
    assert not found, "import cycles in transformer_lib:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_checks_import_nothing_above_them():
    graph = import_graph()
    above = {f"{m} -> {t}" for m, ts in graph.items() if m.startswith("transformer_lib._checks")
             for t in ts if not t.startswith("transformer_lib._checks")}
    assert not above, "transformer_lib._checks must import nothing else from transformer_lib:\n" + "\n".join(sorted(above))
