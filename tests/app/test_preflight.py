"""What process 0 decides before a run writes anything (pgas.app.preflight)."""

import pytest

from pgas.app.checkpointing import Checkpointer
from pgas.app.options import RunOptions
from pgas.app.platform import Session
from pgas.app.preflight import decide, group_of
from pgas.errors import PgasError

ALONE = group_of(Session(), None)


def test_an_existing_out_is_refused_unless_overwrite(tmp_path):
    out = tmp_path / "run.nc"
    assert decide(RunOptions(out=str(out)), None, ALONE) == {"resume": None}  # absent: fine
    out.write_text("user notes\n")
    with pytest.raises(PgasError, match=r"run.nc exists; .* pass --overwrite to replace it"):
        decide(RunOptions(out=str(out)), None, ALONE)
    assert decide(RunOptions(out=str(out), overwrite=True), None, ALONE) == {"resume": None}
    assert out.read_text() == "user notes\n"  # deciding replaces nothing
    with pytest.raises(PgasError, match=r"--out: .* suffix '.csv'"):
        decide(RunOptions(out=str(tmp_path / "run.csv")), None, ALONE)


def test_a_restart_without_a_checkpoint_names_the_ones_beside(tmp_path):
    out, ck1, ck11 = tmp_path / "run.nc", tmp_path / "ck1", tmp_path / "ck11"
    out.write_text("a store\n")
    ck1.mkdir()
    (ck1 / "LATEST").write_text("v1\n")
    opts = RunOptions(out=str(out), checkpoint=str(ck11), restart=True)
    with pytest.raises(PgasError, match=rf"--restart refused: .* next to it: {ck1}\. Give"):
        decide(opts, Checkpointer(opts, 0, {}), ALONE)


def test_a_new_run_replaces_a_checkpoint_directory_only_with_overwrite(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "old").write_text("x")
    opts = RunOptions(checkpoint=str(ck), checkpoint_every=4)
    with pytest.raises(PgasError, match=r"ck holds files of an earlier run; pass --restart"):
        decide(opts, Checkpointer(opts, 0, {}), ALONE)
    assert (ck / "old").exists()
    opts = RunOptions(checkpoint=str(ck), checkpoint_every=4, overwrite=True)
    decide(opts, Checkpointer(opts, 0, {}), ALONE)
    assert not ck.exists() and list(tmp_path.iterdir()) == []  # moved aside, then removed
