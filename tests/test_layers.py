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
