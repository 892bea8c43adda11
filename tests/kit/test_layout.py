"""The package shape holds: no import cycles among emq_model, emq_live and emq_kit; the
pure model imports neither shell; the client does not import the kit; and no library
module imports the command line (emq_kit.cli), which only maps the library's typed
errors to exit codes (the pytest plugin is no exception: it calls the library); the
machine is imported only by what runs it. The graph is read from the source with
``ast``: every import counts, at module level, inside a function or under ``if
TYPE_CHECKING:`` (an annotation names a dependency as much as a call does)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("emq_model", "emq_live", "emq_kit")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = modules()


def _resolve(name: str) -> str | None:
    """The project module ``name`` names, or its nearest project package."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(module: str) -> set[str]:
    """The project modules ``module`` imports."""
    path = MODULES[module]
    tree = ast.parse(path.read_text("utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(filter(None, (_resolve(a.name) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                target = _resolve(f"{base}.{alias.name}") if f"{base}.{alias.name}" in MODULES else _resolve(base)
                if target:
                    found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(module)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first walk (each reported once, from where it closes)."""
    found, state = [], dict.fromkeys(graph, 0)  # 0 unseen, 1 on the stack, 2 done
    stack: list[str] = []

    def walk(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state[n] == 1:
                found.append(stack[stack.index(n):] + [n])
            elif state[n] == 0:
                walk(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if state[m] == 0:
            walk(m)
    return found


def test_the_walk_sees_the_packages() -> None:
    # A walk that found nothing would pass every check below.
    assert {"emq_kit.check.machine", "emq_kit.cli", "emq_live.client", "emq_model.model"} <= set(GRAPH)
    assert "emq_kit.check.machine" in GRAPH["emq_kit.check.run"]
    assert "emq_kit.check.live" in GRAPH["emq_kit.check.target"]  # an import inside a function counts
    assert "emq_kit.check.clock" in GRAPH["emq_kit.layouts"]  # and one under TYPE_CHECKING


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_no_import_cycles() -> None:
    assert cycles(GRAPH) == []


def test_only_what_runs_the_machine_imports_it() -> None:
    """The values a step comes to live in emq_kit/check/step.py (and tally, focus,
    pools): a trace, a report or a port's client reads them without the machine. The
    bullmq machine shares the four-set one's base (emq_kit/check/base.py), not the
    four-set machine itself."""
    runners = {"emq_kit.check.run", "emq_kit.trace.replay", "emq_kit.layouts.echomq"}
    assert {m for m, imported in GRAPH.items() if "emq_kit.check.machine" in imported} == runners
    machines = {"emq_kit.check.machine", "emq_kit.layouts.bullmq"}
    assert {m for m, imported in GRAPH.items() if "emq_kit.check.base" in imported} == machines


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if not m.startswith("emq_kit.cli")))
def test_library_code_never_imports_the_cli(module: str) -> None:
    """Every module but the command line's own, the pytest plugin included: it calls the
    library (``emq_kit.check``, ``emq_kit.replay``) as the command line does."""
    assert not {m for m in GRAPH[module] if m == "emq_kit.cli" or m.startswith("emq_kit.cli.")}


def test_the_layers_point_one_way() -> None:
    for module, deps in GRAPH.items():
        if module.startswith("emq_model"):
            assert all(d.startswith("emq_model") for d in deps), (module, deps)
        if module.startswith("emq_live"):
            assert not any(d.startswith("emq_kit") for d in deps), (module, deps)


def test_every_package_and_data_file_is_installed() -> None:
    """pyproject.toml lists packages by hand: a subpackage or data file missing from it
    works in the editable install and is absent from the wheel."""
    import fnmatch
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    listed = set(config["packages"])
    data = config["package-data"]
    for package in PACKAGES:
        for init in (ROOT / package).rglob("__init__.py"):
            directory = init.parent
            name = ".".join(directory.relative_to(ROOT).parts)
            assert name in listed, f"{name} is not in pyproject.toml's packages"
            for path in directory.iterdir():
                if path.is_file() and path.suffix not in (".py", ".pyc"):
                    assert any(fnmatch.fnmatch(path.name, p) for p in data.get(name, [])), \
                        f"{path.relative_to(ROOT)} is not in pyproject.toml's package-data"
