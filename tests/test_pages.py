"""The user guide runs as written: README.md and the pages under docs/.

Every ``python`` block runs, a page's blocks in order in one namespace, as a
reader would (conftest: 8 CPU devices, 64-bit JAX; in a temporary directory);
a ``text`` block after "prints" is what the block before it printed. Every
command of an ``sh`` or ``console`` block is checked without running it: a
script's flags by its own argument parser (``main(argv)`` stopped right after
it parsed them), ``pgas`` by the CLI's, ``make`` targets and variables against
the Makefile, pip extras against pyproject.toml, job scripts by their files.
Every relative link resolves (files, and anchors to headings and labels), and
README.md stays at most 250 lines.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import re
import shlex
import sys
import tomllib
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
from docutils.nodes import make_id
from helpers import load_example

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.rst"))
GUIDE = [p for p in PAGES if "automodule::" not in p.read_text() or p.stem == "index"]
ALL = [README, *PAGES]
# Launchers and the options they take before the command they start (they are checked,
# never run).
LAUNCHERS = {"mpiexec": {"-n", "-np"}}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ---- reading blocks -------------------------------------------------------------------------
def blocks(path: Path) -> list[tuple[str, str, str]]:
    """``(language, code, prose before it)`` of every code block, in order."""
    text = path.read_text()
    if path.suffix == ".md":
        found = re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)
        spans = [(m.start(), m.end(), m.group(1) or "text", m.group(2)) for m in found]
    else:
        spans = []
        lines = text.split("\n")
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line) + 1)
        i = 0
        while i < len(lines):
            m = re.match(r"^(\s*)\.\. code-block:: *(\w+)\s*$", lines[i])
            if not m:
                i += 1
                continue
            start, indent, j = i, len(m.group(1)), i + 1
            while j < len(lines) and re.match(r"^\s+:\w[\w-]*:", lines[j]):
                j += 1  # options
            body = []
            while j < len(lines) and (not lines[j].strip() or
                                      len(lines[j]) - len(lines[j].lstrip()) > indent):  # fmt: skip
                body.append(lines[j])
                j += 1
            while body and not body[-1].strip():
                body.pop()
            width = min(len(b) - len(b.lstrip()) for b in body if b.strip())
            code = "\n".join(b[width:] for b in body).strip("\n") + "\n"
            spans.append((offsets[start], offsets[j], m.group(2), code))
            i = j
    out, last = [], 0
    for start, end, lang, code in spans:
        out.append((lang, code, text[last:start]))
        last = end
    return out


def test_blocks_are_found():
    """The reader of this file finds what the pages hold (else the tests below check nothing)."""
    langs = Counter(lang for path in ALL for lang, _, _ in blocks(path))
    assert langs["python"] >= 15 and langs["sh"] >= 5 and langs["console"] >= 1
    assert set(langs) <= {"python", "sh", "console", "text"}, langs
    tour = [code for lang, code, _ in blocks(ROOT / "docs" / "tutorial.rst") if lang == "python"]
    assert "pgas.run(step, u, steps=1000)" in tour[1]
    assert blocks(README)[0][0] == "sh" and "make demo" in blocks(README)[0][1]


# ---- python blocks --------------------------------------------------------------------------
def _write_store():
    """output.rst reads out/heat1d.zarr, which its command writes; here a small one (k = 1:
    auto's 16, more than the 10 steps between snapshots, would compile a group never run)."""
    Path("out").mkdir()
    argv = ["--n", "10_003", "--steps", "100", "--snapshot-every", "10", "--quiet",
            "--steps-per-exchange", "1", "--out", "out/heat1d.zarr"]  # fmt: skip
    load_example("heat1d").main(argv)


BEFORE = {"docs/output.rst": _write_store}
RUNS = [p for p in ALL if any(lang == "python" for lang, _, _ in blocks(p))]


def run_page(path: Path, name: str) -> None:
    """Run the page's python blocks in order in one namespace; check what they print."""
    namespace: dict = {"__name__": "__page__"}
    printed = ""
    for n, (lang, code, prose) in enumerate(blocks(path)):
        if lang == "text" and prose.strip().endswith("prints"):
            want = Counter(line.rstrip() for line in code.splitlines())
            got = Counter(line.rstrip() for line in printed.splitlines())
            assert not want - got, f"{name} block {n - 1} printed\n{printed}"
        if lang != "python":
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{name}, block {n}", "exec"), namespace)
        printed = out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("path", RUNS, ids=[rel(p) for p in RUNS])
def test_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if rel(path) in BEFORE:
        BEFORE[rel(path)]()
    run_page(path, rel(path))


def test_page_runner_can_fail(tmp_path):
    page = tmp_path / "page.rst"
    block = ".. code-block:: {}\n\n   {}\n\n"
    page.write_text(block.format("python", "x = 2") + block.format("python", "print(x + 1, 7)")
                    + "prints\n\n" + block.format("text", "3 7"))  # fmt: skip
    run_page(page, "page")
    page.write_text(page.read_text().replace("3 7", "4 7"))
    with pytest.raises(AssertionError, match="printed"):
        run_page(page, "page")
    page.write_text(block.format("python", "print(y)"))
    with pytest.raises(NameError):
        run_page(page, "page")


# ---- commands -------------------------------------------------------------------------------
class _Parsed(Exception):
    pass


def parse_only(main, argv: list[str]) -> argparse.Namespace:
    """What ``main(argv)`` parses from ``argv``, stopping it right there (a bad flag exits 2)."""
    original = argparse.ArgumentParser.parse_args

    def parse(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse):
        try:
            main(argv)
        except _Parsed as done:
            return done.args[0]
    raise AssertionError(f"main({argv}) returned without parsing its arguments")


def _script_main(script: str):
    path = ROOT / script
    assert path.is_file(), f"{script} does not exist"
    if path.parent.parent.name == "examples" and path.stem == path.parent.name:
        return load_example(path.stem).main
    key = "pgas_pages_" + re.sub(r"\W", "_", script)
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key].main


def _factory_takes(source: str, keys: list[str]) -> None:
    """``path.py:factory`` exists and takes every ``--set KEY``."""
    file, _, name = source.partition(":")
    tree = ast.parse((ROOT / file).read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    assert set(keys) <= params, f"{source} takes {sorted(params)}, not {keys}"


def check_command(argv: list[str]) -> None:
    """Check one command of a page without running it (AssertionError or SystemExit if bad)."""
    name = Path(argv[0]).name
    if name in LAUNCHERS:
        i = 1
        while argv[i].startswith("-"):
            assert argv[i] in LAUNCHERS[name], argv
            i += 2
        return check_command(argv[i:])
    if name.startswith("python"):
        parse_only(_script_main(argv[1]), argv[2:])
    elif name == "pgas":
        from pgas.app import cli

        args = parse_only(cli.main, argv[1:])
        _factory_takes(args.source, [kv.partition("=")[0] for kv in args.set])
    elif name == "make":
        makefile = (ROOT / "Makefile").read_text()
        for arg in argv[1:]:
            var, eq, _ = arg.partition("=")
            pattern = rf"^{re.escape(var)} \?=" if eq else rf"^{re.escape(arg)}:"
            assert re.search(pattern, makefile, re.M), f"make {arg}: not in the Makefile"
    elif name == "pip":
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        for arg in argv[2:]:
            for extra in re.findall(r"\[(.*)\]", arg):
                assert extra in extras["optional-dependencies"], f"no extra {extra!r}"
    elif name == "sbatch":
        assert (ROOT / argv[1]).is_file(), f"{argv[1]} does not exist"
    elif name != "mkdir":
        raise AssertionError(f"a page runs {argv[0]!r}: teach tests/test_pages.py to check it")


def commands(lang: str, code: str) -> list[list[str]]:
    """The commands of an ``sh`` block, or the ``$`` lines of a ``console`` block."""
    lines = code.replace("\\\n", " ").splitlines()
    if lang == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    return [argv for line in lines if (argv := shlex.split(line, comments=True))]


SHELLS = [p for p in ALL if any(lang in ("sh", "console") for lang, _, _ in blocks(p))]


@pytest.mark.parametrize("path", SHELLS, ids=[rel(p) for p in SHELLS])
def test_commands_are_accepted(path):
    checked = 0
    for lang, code, _ in blocks(path):
        if lang in ("sh", "console"):
            for argv in commands(lang, code):
                check_command(argv)
                checked += 1
    assert checked


def test_command_check_can_fail():
    heat = ["python", "examples/heat1d/heat1d.py"]
    check_command([*heat, "--n", "1_000_003", "--steps", "2000"])
    with pytest.raises(SystemExit):
        check_command([*heat, "--no-such-flag"])
    with pytest.raises(SystemExit):
        check_command([".venv/bin/pgas", "compare", "x.py:problem", "--nsteps", "3"])
    with pytest.raises(AssertionError, match="takes"):
        check_command(["pgas", "compare", "examples/heat1d/heat1d.py:problem", "--set", "m=1"])
    with pytest.raises(AssertionError, match="not in the Makefile"):
        check_command(["make", "demo", "DEMO_GPUS=1"])
    with pytest.raises(AssertionError, match="no extra"):
        check_command(["pip", "install", "-e", ".[rocm]"])
    with pytest.raises(AssertionError, match="teach"):
        check_command(["rm", "-rf", "out"])


# ---- links ----------------------------------------------------------------------------------
def github_slug(title: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    if path.suffix == ".md":
        return {github_slug(t.replace("`", "")) for t in re.findall(r"^#+ (.*)$", text, re.M)}
    lines = text.split("\n")
    titles = [lines[i - 1] for i in range(1, len(lines))
              if re.fullmatch(r"([=\-~^])\1{2,}", lines[i]) and lines[i - 1].strip()]  # fmt: skip
    return {make_id(t.replace("``", "")) for t in titles} | labels(path)


def labels(path: Path) -> set[str]:
    return set(re.findall(r"^\.\. _([\w-]+):$", path.read_text(), re.M))


def links(path: Path) -> list[str]:
    """The relative targets a page links to (no URLs)."""
    text = path.read_text()
    if path.suffix == ".md":
        found = re.findall(r"\]\(([^)\s]+)\)", text)
    else:
        found = re.findall(r"`[^`<]*<([^>`]+)>`__?", text)
        found += re.findall(r"^\s*\.\. (?:image|figure):: (\S+)", text, re.M)
    return [t for t in found if not re.match(r"\w+:", t)]


@pytest.mark.parametrize("path", ALL, ids=[rel(p) for p in ALL])
def test_relative_links_resolve(path):
    for target in links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{rel(path)} links to {target}: no such file"
        if anchor and dest.suffix in (".md", ".rst"):
            assert anchor in anchors(dest), f"{rel(path)} links to {target}: no such heading"
    if path.suffix == ".rst":
        every = set().union(*(labels(p) for p in PAGES))
        for role, target in re.findall(r":(doc|ref):`(?:[^`<]*<)?([^`>]+)>?`", path.read_text()):
            ok = (path.parent / f"{target}.rst").exists() if role == "doc" else target in every
            assert ok, f"{rel(path)}: :{role}:`{target}` does not resolve"


def test_link_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n[ok](#a-page) [gone](missing.rst) [bad](#nowhere)\n")
    assert links(page) == ["#a-page", "missing.rst", "#nowhere"]
    assert anchors(page) == {"a-page"}
    deep = ROOT / "docs" / "explanation.rst"
    assert {"deep-halos-k-steps-per-exchange", "deep-halos", "the-plan"} <= anchors(deep)
    assert github_slug("What a run overwrites, and how --restart decides") == (
        "what-a-run-overwrites-and-how---restart-decides"
    )


# ---- the pages and the README ---------------------------------------------------------------
def test_every_page_is_in_the_index():
    index = (ROOT / "docs" / "index.rst").read_text()
    listed = set(re.findall(r"^   (\w+)$", index, re.M))
    assert {p.stem for p in PAGES} - {"index"} == listed


def test_readme_is_short_and_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the rest belongs in docs/"
    assert lines[:3] == ["# pgas", "", "```sh"]
    assert lines[3].startswith("make demo ") and lines[4].startswith("make test ")
    assert lines[5] == "```"
    for page in GUIDE:
        if page.stem != "index":
            assert f"(docs/{page.name}" in README.read_text(), f"README does not link {page.name}"
