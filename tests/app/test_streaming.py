"""When a run snapshots, where to, what it says, and the stream's closing (pgas.app.streaming)."""

from types import SimpleNamespace

import pytest

from pgas.app.backends import get
from pgas.app.options import RunOptions
from pgas.app.problem import demo
from pgas.app.streaming import closed_after, run_attrs, scratch_store, snapshot_every


def test_a_run_snapshots_only_what_it_writes_or_draws():
    assert snapshot_every(RunOptions(snapshot_every=4)) is None
    assert snapshot_every(RunOptions(snapshot_every=4, out="a.zarr")) == 4
    assert snapshot_every(RunOptions(snapshot_every=4, plot=("a.png",))) == 4
    assert snapshot_every(RunOptions(out="a.zarr")) is None
    assert scratch_store("out/a.png") == "out/a.png.snapshots.zarr"


class Stream:
    def __init__(self):
        self.calls = []

    def close(self):
        self.calls.append("close")

    def abort(self):
        self.calls.append("abort")


def test_the_stream_is_closed_after_the_run_and_aborted_on_an_error():
    ok, bad = Stream(), Stream()
    with closed_after(ok):
        assert ok.calls == []
    with pytest.raises(KeyboardInterrupt), closed_after(bad):
        raise KeyboardInterrupt
    assert ok.calls == ["close"] and bad.calls == ["abort"]


def test_run_attrs_say_what_ran():
    plan = SimpleNamespace(steps_per_exchange=4, note="lowered from 8 to 4")
    a = run_attrs(demo(), RunOptions(dtype="float32", snapshot_every=2), get("explicit"),
                  "cpu", "cpu", 4, 2, {"x": 4}, plan, 6)  # fmt: skip
    assert a["title"] == "pgas example demo" and a["backend"] == "explicit"
    assert (a["devices"], a["processes"], a["mesh"], a["start_step"]) == (4, 2, {"x": 4}, 6)
    assert a["steps_per_exchange"] == 4 and a["steps_per_exchange_note"] == plan.note
    assert a["snapshot_every"] == 2 and a["dtype"] == "float32" and "pgas_version" in a
