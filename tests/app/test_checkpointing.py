"""Checkpoints of a run: saved between chunks, restored, refused (pgas.app.checkpointing)."""

import dataclasses

import numpy as np
import pytest
from helpers import heat_problem, heat_reference

from pgas.app import runner
from pgas.app.checkpointing import Checkpointer, final_checkpoint, restore
from pgas.app.options import RunOptions
from pgas.app.platform import Session
from pgas.errors import PgasError
from pgas.io import checkpoint

# one compiled program; k = 4, a group in every chunk of 4 steps (auto's 16, more than a chunk,
# would be compiled and never run), the restart's too
FIRST = dict(backend="explicit", steps=8, devices=2, checkpoint_every=4, steps_per_exchange=4)


def test_checkpoints_between_chunks_and_restart(tmp_path):
    ck = str(tmp_path / "ck")
    opts = RunOptions(**FIRST, checkpoint=ck)
    runner.run(heat_problem(), opts)
    assert checkpoint.latest(ck) == 8
    more = dataclasses.replace(opts, backend="auto", steps=12, restart=True, devices=4)
    r = runner.run(heat_problem(), more, gather=True)
    assert r.start_step == 8 and checkpoint.latest(ck) == 12
    np.testing.assert_array_equal(r.field, heat_reference(203, 12))


def test_restart_in_an_empty_directory_starts_fresh(tmp_path):
    (tmp_path / "ck").mkdir()
    opts = RunOptions(**FIRST, checkpoint=str(tmp_path / "ck"), restart=True)
    r = runner.run(heat_problem(), opts, gather=True)
    assert r.start_step == 0 and checkpoint.latest(tmp_path / "ck") == 8
    np.testing.assert_array_equal(r.field, heat_reference(203, 8))


class At(Checkpointer):
    """A checkpointer whose checkpoint is at ``step`` (nothing on disk)."""

    def __init__(self, opts, step):
        super().__init__(opts, 0, {})
        self.step = step

    def restore(self, like, point):
        return like, self.step


def test_restore_refuses_what_the_options_cannot_continue():
    opts = RunOptions(steps=20, snapshot_every=4, checkpoint="ck", restart=True)
    assert restore(None, opts, At(opts, 12), "u", {"resume": "ck/v"}) == ("u", 12)
    with pytest.raises(PgasError, match="at step 24, beyond --steps 20; give --steps >= 24"):
        restore(None, opts, At(opts, 24), "u", {"resume": "ck/v"})
    with pytest.raises(PgasError, match="--snapshot-every 4 does not divide the 10 remaining"):
        restore(None, opts, At(opts, 10), "u", {"resume": "ck/v"})
    fresh = dataclasses.replace(opts, restart=False)  # no --restart: step 0, nothing loaded
    assert restore(None, fresh, At(fresh, 12), "u", {"resume": None}) == ("u", 0)


def test_a_failed_run_saves_the_state_it_completed(tmp_path, capsys):
    from pgas.app.state import build, mesh_for

    p = heat_problem()
    state = build(p, mesh_for(p, 2))
    ck = Checkpointer(RunOptions(checkpoint=str(tmp_path / "ck"), checkpoint_every=10), 0, {})
    err = RuntimeError("device lost")
    err.pgas_state, err.pgas_step = state, 3
    final_checkpoint(err, ck, None, 5, Session())
    assert checkpoint.latest(ck.path) == 8
    assert "saved to" in err.__notes__[0] and "--restart continues it" in err.__notes__[0]
    assert "after step 8" in capsys.readouterr().err
    again = RuntimeError("in another process")  # a multi-process run saves nothing
    again.pgas_state, again.pgas_step = state, 4
    final_checkpoint(again, ck, None, 5, Session(multiprocess=True))
    assert checkpoint.latest(ck.path) == 8 and not hasattr(again, "__notes__")
