"""pgas.checkpoint: round trip, atomicity, restart after SIGKILL with another process count.

Every restart is compared bitwise with NumPy loops of the same arithmetic
(uninterrupted runs); mismatched and damaged checkpoints must raise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dist_scripts"))
import common  # noqa: E402
import simulate  # noqa: E402

import pgas  # noqa: E402
from pgas import checkpoint  # noqa: E402

META = {"stencil": "heat", "dtype": "float32", "boundary": "keep", "seed": 0}


def heat_state(devices: int, n: int = 101, dtype=np.float32):
    mesh = pgas.make_mesh(("x",), devices=devices)
    return {"u": pgas.from_function(lambda i: np.cos(i / 7.0) + i, (n,), mesh, dtype=dtype,
                                    boundary=pgas.Keep())}  # fmt: skip


def test_round_trip_bitwise_across_layouts(tmp_path):
    state = simulate.initial_state()  # 8 devices in the test process (conftest)
    # k = 2: groups run (auto's k, 7 here and 8 on 3 devices, would run none in 7 and 5
    # steps: an odd k runs its groups in pairs)
    state = pgas.run(simulate.step, state, steps=7, steps_per_exchange=2)
    before = {k: v.to_numpy() for k, v in state.items()}
    version = checkpoint.save(tmp_path / "ck", state, step=7, meta=simulate.META)
    assert (version / "manifest.json").exists() and checkpoint.latest(tmp_path / "ck") == 7
    # read back on 3 devices (other block boundaries, other padding)
    m1, m2 = pgas.make_mesh(("x",), devices=3), pgas.make_mesh(("y", "x"), devices=3)
    like = {"heat": pgas.zeros((simulate.HEAT_N,), m1, boundary=pgas.Keep()),
            "life": pgas.zeros(simulate.LIFE_SHAPE, m2, dtype=np.uint8)}  # fmt: skip
    got, step = checkpoint.load(tmp_path / "ck", like, meta=simulate.META)
    assert step == 7 and got["heat"].layout.mesh.size == 3
    for k in before:
        assert got[k].dtype == before[k].dtype
        assert got[k].to_numpy().tobytes() == before[k].tobytes()
    # and the restored state runs on: 7 + 5 steps equals the NumPy loop
    got = pgas.run(simulate.step, got, steps=5, steps_per_exchange=2)
    assert got["heat"].to_numpy().tobytes() == common.heat_reference(12).tobytes()
    np.testing.assert_array_equal(got["life"].to_numpy(), common.life_reference(12))


def test_single_array_and_keep(tmp_path):
    u = heat_state(2)["u"]
    for s in (1, 2, 3):
        checkpoint.save(tmp_path, u, step=s, meta=META, keep=2)
    versions = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("step-"))
    assert [v[:14] for v in versions] == ["step-000000002", "step-000000003"]
    v, step = checkpoint.load(tmp_path, heat_state(4)["u"], meta=META)
    assert step == 3 and v.to_numpy().tobytes() == u.to_numpy().tobytes()


def test_crash_before_commit_keeps_previous_checkpoint(tmp_path, monkeypatch):
    old = heat_state(2)
    checkpoint.save(tmp_path, old, step=10, meta=META)
    mesh = pgas.make_mesh(("x",), devices=2)
    new = {"u": pgas.from_function(lambda i: -i, (101,), mesh, boundary=pgas.Keep())}

    def crash(*args, **kwargs):  # killed after the manifest, before the rename
        raise OSError("simulated crash")

    monkeypatch.setattr(checkpoint.writer, "_commit", crash)  # the last phase of save
    with pytest.raises(checkpoint.CheckpointError, match="simulated crash"):
        checkpoint.save(tmp_path, new, step=20, meta=META)
    assert (tmp_path / ".tmp-step-000000020" / "manifest.json").exists()  # debris, complete
    assert checkpoint.latest(tmp_path) == 10
    got, step = checkpoint.load(tmp_path, heat_state(1), meta=META)
    assert step == 10 and got["u"].to_numpy().tobytes() == old["u"].to_numpy().tobytes()
    monkeypatch.undo()
    checkpoint.save(tmp_path, new, step=20, meta=META)  # the next save cleans up
    assert checkpoint.latest(tmp_path) == 20
    assert sorted(p.name[:14] for p in tmp_path.iterdir()) == ["LATEST", "step-000000020"]


def test_mismatches_are_named(tmp_path):
    checkpoint.save(tmp_path, heat_state(2), step=5, meta=META)
    with pytest.raises(checkpoint.CheckpointMismatchError, match=r"meta\['seed'\] expected 1"):
        checkpoint.load(tmp_path, heat_state(2), meta={**META, "seed": 1})
    with pytest.raises(checkpoint.CheckpointMismatchError, match=r"meta\['extra'\]"):
        checkpoint.load(tmp_path, heat_state(2), meta={**META, "extra": True})
    with pytest.raises(checkpoint.CheckpointMismatchError, match=r"shape \(101,\).*\(102,\)"):
        checkpoint.load(tmp_path, heat_state(2, n=102), meta=META)
    with pytest.raises(checkpoint.CheckpointMismatchError, match="dtype float32.*int32"):
        checkpoint.load(tmp_path, heat_state(2, dtype=np.int32), meta=META)
    with pytest.raises(checkpoint.CheckpointMismatchError, match="fields"):
        checkpoint.load(tmp_path, {"v": heat_state(2)["u"]}, meta=META)


def _version(root: Path) -> Path:
    return root / (root / "LATEST").read_text().strip()


@pytest.mark.parametrize("damage", ["no_manifest", "bad_manifest", "no_block", "flipped_byte",
                                    "no_latest", "dropped_block_entry"])  # fmt: skip
def test_corrupt_checkpoint_raises(tmp_path, damage):
    checkpoint.save(tmp_path, heat_state(2), step=5, meta=META)
    v = _version(tmp_path)
    block = sorted((v / "f0").glob("*.npy"))[-1]
    if damage == "no_manifest":
        (v / "manifest.json").unlink()
    elif damage == "bad_manifest":
        (v / "manifest.json").write_text('{"format": "pgas-checkpoint", "step": ')
    elif damage == "no_block":
        block.unlink()
    elif damage == "flipped_byte":
        raw = bytearray(block.read_bytes())
        raw[-1] ^= 0xFF
        block.write_bytes(bytes(raw))
    elif damage == "no_latest":
        (tmp_path / "LATEST").unlink()
    elif damage == "dropped_block_entry":
        m = json.loads((v / "manifest.json").read_text())
        m["fields"][0]["blocks"].pop()
        (v / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(checkpoint.CorruptCheckpointError) as err:
        checkpoint.load(tmp_path, heat_state(2), meta=META)
    assert str(tmp_path) in str(err.value)
    if damage in ("no_manifest", "bad_manifest", "no_latest"):
        assert checkpoint.latest(tmp_path) is None


def test_bad_arguments(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="step = -1"):
        checkpoint.save(tmp_path, heat_state(1), step=-1, meta=META)
    with pytest.raises(checkpoint.CheckpointError, match="GlobalArray"):
        checkpoint.save(tmp_path, {"u": np.zeros(3)}, step=0, meta=META)
    assert checkpoint.latest(tmp_path / "nothing") is None


@pytest.mark.skipif(not common.MPIEXEC.exists(), reason="no mpiexec (pip install mpich)")
def test_sigkill_then_restart_with_other_process_counts(tmp_path):
    """2 processes checkpoint every 10 steps and are SIGKILLed after step 20; restarts on
    1 process (8 devices, in this process) and on 4 processes equal an uninterrupted run."""
    # 27 steps: the 7 left after the checkpoint of step 20 run in this process (8 devices,
    # k = 2) by the program of test_round_trip_bitwise_across_layouts's first 7 steps
    steps, ck, log = 27, tmp_path / "ck", tmp_path / "run.log"
    cmd = [str(common.MPIEXEC), "-n", "2", sys.executable, str(common.SIMULATE),
           str(tmp_path / "never.npz"), "--steps", str(steps), "--ckpt", str(ck), "--every", "10",
           "--sleep-after", "2"]  # fmt: skip
    common.kill_after(cmd, log, "SLEEPING", 120)
    assert "CHECKPOINT 20" in log.read_text() and f"CHECKPOINT {steps}" not in log.read_text()
    assert checkpoint.latest(ck) == 20
    assert not (tmp_path / "never.npz").exists()
    heat, life = common.heat_reference(steps), common.life_reference(steps)

    # restart in this process: 1 process, 8 devices
    state, done = checkpoint.load(ck, simulate.initial_state(), meta=simulate.META)
    assert done == 20
    # k = 2, as there: groups run (auto's k, 7, odd, runs its groups in pairs: none in 7 steps)
    state = pgas.run(simulate.step, state, steps=steps - done, steps_per_exchange=2)
    assert state["heat"].to_numpy().tobytes() == heat.tobytes()
    np.testing.assert_array_equal(state["life"].to_numpy(), life)

    # restart on 4 processes (Life on a 2x2 mesh); also the start-up checks of
    # tests/runtime/test_distributed.py's 2-process run, for 4
    out = tmp_path / "restart4.npz"
    r = common.mpiexec(4, str(common.SIMULATE), str(out), "--steps", str(steps), "--ckpt",
                       str(ck), "--every", "10", "--restart", timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "RESTART from step 20 on 4 process(es)" in r.stdout
    assert "pgas: 4 process(es), 4 device(s)" in r.stdout  # verbose=True on process 0
    assert r.stdout.count("pgas: ") == 1  # printed once
    res = np.load(out)
    assert int(res["processes"]) == 4 and int(res["devices"]) == 4
    assert str(res["method"]) == "mpi4py"
    assert res["heat"].dtype == np.float32 and res["life"].dtype == np.uint8
    assert res["heat"].tobytes() == heat.tobytes()
    np.testing.assert_array_equal(res["life"], life)
    assert checkpoint.latest(ck) == steps
