"""The API reference builds from the docstrings with no warning (``make docs``)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.one_process
@pytest.mark.slow
def test_docs_build_with_warnings_as_errors(tmp_path):
    out = tmp_path / "html"
    r = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
                        str(ROOT / "docs"), str(out)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    index = (out / "index.html").read_text()
    for layer in ("runtime", "grid", "globalview", "loop", "references", "io", "app"):
        assert f'href="{layer}.html"' in index
    assert "choose_steps_per_exchange" in (out / "loop.html").read_text()
