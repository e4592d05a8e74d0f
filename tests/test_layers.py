"""The package's layering, read from its imports: each layer imports only the layers below.

``pgas._aliases.LAYERS`` lists the layers bottom first; ``pgas.errors``,
``pgas._version`` and ``pgas._aliases`` are the base every layer may use. Imports
inside functions count too. Nothing inside a layer imports the package face
(``import pgas``) or a short path (``pgas.mpi``): the layout stays visible.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import pgas
from pgas import _aliases

PACKAGE = Path(pgas.__file__).parent
BASE = {"pgas.errors", "pgas._version", "pgas._aliases"}
LAYERS = _aliases.LAYERS


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int | None:
    """0 for the base, i + 1 for layer ``LAYERS[i]``, None for the face."""
    if module in BASE:
        return 0
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1]) + 1
    return None


def _imports(path: Path):
    """``(line, module)`` for every pgas module ``path`` imports, wherever in the file."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "pgas" or a.name.startswith("pgas."):
                    yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "pgas":
                for a in node.names:  # from pgas import X: a module of the face, or the face
                    yield node.lineno, f"pgas.{a.name}" if _is_module(f"pgas.{a.name}") else "pgas"
            elif node.module.startswith("pgas."):
                yield node.lineno, node.module


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if _layer(_name(p)) is not None)


def test_every_module_sits_in_a_layer():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "_aliases.py", "_version.py", "errors.py"]
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        LAYERS
    )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _name(p))
def test_a_module_imports_only_its_layer_and_those_below(path):
    me = _name(path)
    mine = _layer(me)
    for line, imported in _imports(path):
        where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}"
        assert imported != "pgas", f"{where}: the package face; import the module itself"
        assert _aliases.resolve(imported) is None, (
            f"{where}: a short path; use {_aliases.resolve(imported)}"
        )
        theirs = _layer(imported)
        assert theirs is not None, f"{where}: not in a layer"
        assert theirs <= mine, (
            f"{where}: layer {LAYERS[theirs - 1]} sits above {LAYERS[mine - 1] if mine else 'base'}"
        )


def test_the_checker_sees_a_violation(tmp_path):
    """The test above can fail: an upward import inside a function is found."""
    bad = tmp_path / "probe.py"
    bad.write_text(
        "import numpy\n\ndef f():\n    from pgas.app.runner import run\n    import pgas\n"
    )
    assert [m for _, m in _imports(bad)] == ["pgas.app.runner", "pgas"]
    assert _layer("pgas.app.runner") > _layer("pgas.grid.mesh") > _layer("pgas.errors")


def test_short_paths_name_the_same_modules():
    import pgas.checkpoint
    import pgas.mpi.loop
    from pgas.plan import plan

    from pgas import explicit

    assert pgas.mpi.loop is importlib.import_module("pgas.references.mpi.loop")
    assert pgas.checkpoint.__name__ == "pgas.io.checkpoint"
    assert explicit is importlib.import_module("pgas.references.explicit")
    assert plan is importlib.import_module("pgas.loop.plan").plan
    for short, full in _aliases.MOVED.items():
        assert getattr(pgas, short) is importlib.import_module(full), short


def test_layers_are_attributes_after_a_plain_import():
    for layer in LAYERS:
        assert getattr(pgas, layer).__name__ == f"pgas.{layer}"
    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        pgas.nonesuch  # noqa: B018


# ---- rooms: size, circles, private names, mirrored tests (issue 36) ------------------------
LIMIT = 500  # lines a module may have: past it, split it by concern
TESTS = Path(__file__).resolve().parent


def _targets(path: Path):
    """The pgas modules ``path`` imports, anywhere in it, a ``from package import module``
    naming the module itself."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("pgas"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("pgas"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    yield sub if _is_module(sub) else node.module


def _graph() -> dict[str, set[str]]:
    """Module -> the pgas modules it imports (the face and package files left out)."""
    modules = {_name(p): p for p in MODULES if p.name != "__init__.py"}
    graph = {}
    for me, path in modules.items():
        names = {_aliases.resolve(t) or t for t in _targets(path)}
        graph[me] = {t for t in names if t in modules and t != me}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, once each (Tarjan's strongly connected components of two or more)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _private_imports(path: Path):
    """``(line, what)`` for every private name ``path`` takes from another pgas module:
    ``from pgas.x import _y`` or ``module._y`` on a pgas module it imported."""
    tree = ast.parse(path.read_text())
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pgas"):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    yield node.lineno, f"{node.module}.{a.name}"
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("pgas"):
                    aliases[a.asname or a.name.split(".")[0]] = a.asname and a.name or "pgas"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _is_module(aliases[node.value.id])):  # fmt: skip
            yield node.lineno, f"{aliases[node.value.id]}.{node.attr}"


def _mirror(path: Path) -> list[Path]:
    """The test files that mirror module ``path``: ``pgas/a/b.py`` -> ``tests/a/test_b.py``;
    a module of a subpackage may be tested per module or by its package's file
    (``pgas/io/checkpoint/reader.py`` -> ``tests/io/checkpoint/test_reader.py`` or
    ``tests/io/test_checkpoint.py``)."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    own = TESTS.joinpath(*rel.parts[:-1], f"test_{rel.parts[-1]}.py")
    if len(rel.parts) > 2:
        return [own, TESTS.joinpath(*rel.parts[:-2], f"test_{rel.parts[-2]}.py")]
    return [own]


SOURCES = [p for p in MODULES if p.name != "__init__.py"]
TESTED = [p for p in SOURCES if not p.name.startswith("_")]  # _aliases, _version: the base


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: _name(p))
def test_a_module_has_at_most_500_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= LIMIT, f"{path.relative_to(PACKAGE.parent)} has {lines} lines; split it"


def test_no_import_circles():
    assert _circles(_graph()) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: _name(p))
def test_no_private_name_from_another_module(path):
    taken = list(_private_imports(path))
    assert taken == [], f"{path.relative_to(PACKAGE.parent)} takes private names: {taken}"


@pytest.mark.parametrize("path", TESTED, ids=lambda p: _name(p))
def test_every_module_has_a_mirrored_test_file(path):
    mirrors = _mirror(path)
    assert any(m.exists() for m in mirrors), (
        f"no test file: create {mirrors[0].relative_to(TESTS.parent)}"
    )


def test_the_room_checkers_see_violations(tmp_path):
    """The checks above can fail: a circle, a private name and a missing mirror are found."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    probe = tmp_path / "probe.py"
    probe.write_text("from pgas.loop.timeloop import _tie, run\nimport pgas.loop.plan as p\n"
                     "def f():\n    return p._CACHE\n")  # fmt: skip
    assert [w for _, w in _private_imports(probe)] == ["pgas.loop.timeloop._tie",
                                                        "pgas.loop.plan._CACHE"]  # fmt: skip
    assert (
        _mirror(PACKAGE / "io" / "checkpoint" / "reader.py")[1]
        == TESTS / "io" / "test_checkpoint.py"
    )


def test_test_files_have_distinct_names():
    """pytest imports test files by their base name (no packages under tests/): two files of
    one name in two folders stop the whole run at collection."""
    from collections import Counter

    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
