"""The examples end to end: every backend, the Dataset, the pictures, the JSON line, the errors.

The JAX backends run in this process (conftest: 8 CPU devices) by calling the
examples' ``main(argv)``; ``--backend mpi`` runs under ``mpiexec -n 2`` (one
launch runs both examples' ``main``, each checked bitwise against NumPy),
``--compare`` in this process (its mpi row under ``mpiexec -n 2``), and one
subprocess checks the message of ``--backend mpi`` without mpiexec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import xarray as xr
from helpers import fails_with, heat_numpy, last_json, load_example

import pgas
import pgas.app.runner
from pgas.app.problem import checksum

# Start JAX now with conftest's 8 devices: the examples' --devices N then picks N of them
# instead of restarting JAX with N (which they do when run as scripts).
assert len(jax.devices()) == 8

ROOT = Path(__file__).resolve().parents[2]
HEAT = ROOT / "examples" / "heat1d" / "heat1d.py"
LIFE = ROOT / "examples" / "life" / "life.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"


H = load_example("heat1d")
L = load_example("life")
P = L.patterns

# Most heat runs below share one configuration (HEAT2: 101 cells on 2 devices; chunks of 10
# steps where a run has snapshots or checkpoints), so they share their compiled programs.
# k = 2, of auto's parity: auto's 16 on blocks of 51 and 50 is more than a chunk (compiled,
# never run); how auto chooses is tests/loop/test_choice.py's subject.
HEAT2 = ["--devices", "2", "--n", "101", "--steps-per-exchange", "2"]
# Likewise the life runs but the end-to-end ones (a pattern, the summary line, another
# problem's store): 16 x 16 cells on 4 devices, k = 2, chunks of an even length.
LIFE4 = ["--devices", "4", "--size", "16x16", "--steps-per-exchange", "2"]


def _env() -> dict[str, str]:
    drop = ("PMI", "OMPI_", "PMIX", "HYDRA", "SLURM", "XLA_FLAGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["JAX_PLATFORMS"] = "cpu"
    return env


def numpy_life(b, steps):
    for _ in range(steps):
        b = P.life_step_numpy(b)
    return b


def _check_common(d: dict, ds: xr.Dataset, backend: str, steps: int, shape) -> None:
    for key in ("backend", "devices", "processes", "mesh", "shape", "steps", "seconds",
                "cell_updates_per_second", "checksum", "comm"):  # fmt: skip
        assert key in d, key
    assert d["backend"] == backend and d["steps"] == steps and d["shape"] == list(shape)
    assert ds.attrs["backend"] == backend and ds.attrs["steps"] == steps
    for key in ("mesh", "devices", "processes", "dtype", "pgas_version", "jax_version",
                "platform", "device_kind", "steps_per_exchange"):  # fmt: skip
        assert key in ds.attrs, key
    assert d["platform"] == ds.attrs["platform"] == "cpu" and d["device_kind"]
    assert ds.attrs["device_kind"] == d["device_kind"]
    assert d["steps_per_exchange"] == ds.attrs["steps_per_exchange"] >= 1
    assert isinstance(d["steps_per_exchange_note"], str)
    assert ds.attrs["pgas_version"] == pgas.__version__
    assert json.loads(ds.attrs["mesh"]) == d["mesh"]
    assert int(ds["time"][0]) == 0 and int(ds["time"][-1]) == steps


# ---- heat1d ---------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["auto", "explicit"])
def test_heat1d_end_to_end_jax(backend, tmp_path, capsys):
    out, png = tmp_path / "heat.nc", tmp_path / "heat.png"
    H.main(["--backend", backend, *HEAT2, "--steps", "30", "--init", "gaussian",
            "--snapshot-every", "10", "--out", str(out), "--plot", str(png), "--json"])  # fmt: skip
    d = last_json(capsys.readouterr().out)
    u0 = H.initial(101, "gaussian").astype(np.float32)
    assert d["checksum"] == checksum(heat_numpy(u0, 30))
    assert d["devices"] == 2 and d["processes"] == 1 and d["mesh"] == {"x": 2}
    k = d["steps_per_exchange"]
    assert d["comm"]["collective-permute"]["count_per_exchange"] == 2
    assert d["comm"]["collective-permute"]["count_per_step"] == 2 / k
    assert d["comm"]["all-gather"]["count_per_step"] == 0
    assert {"max", "mean", "l2"} <= set(d)
    with xr.open_dataset(out) as ds:
        _check_common(d, ds, backend, 30, (101,))
        assert ds["u"].dims == ("time", "x") and ds["u"].shape == (4, 101)
        assert ds["u"].dtype == np.float32 and ds["time"].values.tolist() == [0, 10, 20, 30]
        assert ds["max"].dims == ("time",) and ds["l2"].shape == (4,)
        np.testing.assert_array_equal(ds["u"].values[0], u0)
        assert float(ds["mean"][-1]) == pytest.approx(d["mean"])
    assert png.stat().st_size > 1000


# ---- --backend mpi: both examples in one mpiexec -n 2 launch -----------------------------------
# Each process runs heat1d's main, then life's (each as its script does, with the options below);
# what each process prints to its stdout (file descriptor 1) while an example runs goes to a
# file of that example and process: the tests read each example's output, every process's, as
# the launch's stdout (one launch, one interpreter, MPI and import per process instead of two).
_BOTH = """
import os, runpy, sys
rank = os.environ.get("PMI_RANK", "0")  # the launcher's rank (MPICH's Hydra)
out, rest = sys.argv[1], sys.argv[2:]
cut = rest.index("--")
for name, script, *argv in (rest[:cut], rest[cut + 1 :]):
    sys.stdout.flush()
    fd = os.open(os.path.join(out, f"{name}.{rank}.stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.close(fd)
    runpy.run_path(script, run_name="example")["main"](argv)
    sys.stdout.flush()
"""


@pytest.fixture(scope="module")
def mpi_runs(tmp_path_factory) -> dict:
    """``mpiexec -n 2``: heat1d, then life, with ``--backend mpi`` in the same two processes:
    ``{name: (returncode, stdout of both processes, stderr, output folder)}``."""
    tmp = tmp_path_factory.mktemp("mpi_runs")
    heat = ["--backend", "mpi", "--n", "1001", "--steps", "100", "--init", "random", "--seed",
            "3", "--dtype", "float64", "--steps-per-exchange", "4", "--snapshot-every", "20",
            "--out", str(tmp / "heat.nc"), "--plot", str(tmp / "heat.png"), "--json",
            "--quiet"]  # fmt: skip
    # 12 steps, a snapshot after each (the GIF's frames)
    life = ["--backend", "mpi", "--size", "37x50", "--pattern", "random", "--density", "0.4",
            "--seed", "9", "--steps", "12", "--out", str(tmp / "life.nc"), "--plot",
            str(tmp / "life.gif"), "--json"]  # fmt: skip
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, "-c", _BOTH, str(tmp), "heat1d", str(HEAT),
           *heat, "--", "life", str(LIFE), *life]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_env())
    runs = {}
    for name in ("heat1d", "life"):
        files = [tmp / f"{name}.{rank}.stdout" for rank in (0, 1)]
        stdout = "".join(f.read_text() for f in files if f.exists())
        runs[name] = (proc.returncode, stdout, proc.stderr, tmp)
    return runs


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to python")
def test_heat1d_end_to_end_mpi(mpi_runs):
    returncode, stdout, stderr, tmp = mpi_runs["heat1d"]
    out, png = tmp / "heat.nc", tmp / "heat.png"
    assert returncode == 0, stderr
    lines = [x for x in stdout.splitlines() if x.strip()]
    assert len(lines) == 1  # --quiet, and only rank 0 prints
    d = json.loads(lines[0])
    assert d["checksum"] == checksum(heat_numpy(H.initial(1001, "random", seed=3), 100))
    assert d["processes"] == 2 and d["mesh"] == {"x": 2}
    # groups of 4 steps end on the snapshot steps (every 20): one exchange, 2 messages, per group
    assert d["steps_per_exchange"] == 4 and d["comm"]["messages_per_step"] == 2 / 4
    with xr.open_dataset(out) as ds:
        _check_common(d, ds, "mpi", 100, (1001,))
        assert ds["u"].dims == ("time", "x") and ds["u"].dtype == np.float64
        assert len(ds["time"]) > 2
    assert png.stat().st_size > 1000


# ---- life -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["auto", "explicit"])
def test_life_end_to_end_jax(backend, tmp_path, capsys):
    out, gif, png = tmp_path / "life.zarr", tmp_path / "life.gif", tmp_path / "life.png"
    H_, W_ = 40, 56
    # k = 2, of auto's parity: auto's 8 is more than the 4 steps between snapshots
    L.main(["--backend", backend, "--devices", "4", "--size", f"{H_}x{W_}", "--pattern", "random",
            "--density", "0.3", "--seed", "4", "--steps", "24", "--snapshot-every", "4",
            "--steps-per-exchange", "2", "--out", str(out), "--plot", str(gif), "--plot",
            str(png), "--json"])  # fmt: skip
    d = last_json(capsys.readouterr().out)
    b0 = P.random_board((H_, W_), 0.3, seed=4)
    final = numpy_life(b0, 24)
    assert d["checksum"] == checksum(final) and d["population"] == int(final.sum())
    assert d["mesh"] == {"y": 2, "x": 2}
    assert d["comm"]["collective-permute"]["count_per_exchange"] == 4  # rows, then columns
    with xr.open_dataset(out, engine="zarr") as ds:
        _check_common(d, ds, backend, 24, (H_, W_))
        assert ds["board"].dims == ("time", "y", "x") and ds["board"].shape == (7, H_, W_)
        assert ds["population"].values.tolist() == [
            int(numpy_life(b0, t).sum()) for t in range(0, 25, 4)
        ]
    assert gif.read_bytes()[:3] == b"GIF" and png.stat().st_size > 500


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to python")
def test_life_end_to_end_mpi(mpi_runs):
    returncode, stdout, stderr, tmp = mpi_runs["life"]
    out, gif = tmp / "life.nc", tmp / "life.gif"
    assert returncode == 0, stderr
    d = last_json(stdout)
    final = numpy_life(P.random_board((37, 50), 0.4, seed=9), 12)
    assert d["checksum"] == checksum(final) and d["population"] == int(final.sum())
    assert d["processes"] == 2 and d["mesh"] == {"y": 2, "x": 1}
    assert stdout.count('"backend"') == 1  # rank 0 only
    with xr.open_dataset(out) as ds:
        _check_common(d, ds, "mpi", 12, (37, 50))
        assert ds["board"].dims == ("time", "y", "x") and ds["board"].dtype == np.uint8
        assert int(ds["population"][-1]) == d["population"]
    assert gif.read_bytes()[:3] == b"GIF"


def test_life_pattern_at_position(capsys):
    L.main([*LIFE4, "--pattern", "glider", "--at", "11,12", "--steps", "64", "--json",
            "--quiet"])  # fmt: skip
    d = last_json(capsys.readouterr().out)
    b0 = P.place((16, 16), P.load_pattern("glider"), at=(11, 12))
    assert d["checksum"] == checksum(b0) and d["population"] == 5  # once round the torus


# ---- --compare and the launcher message (subprocesses) --------------------------------------
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to python")
def test_heat1d_compare_prints_a_table_with_equal_checksums(capsys):
    # in this process (the script as a process: test_heat1d_end_to_end_mpi); its mpi row runs
    # under mpiexec -n 2 (run_mpi). HEAT2 (below): the JAX rows reuse the programs of the
    # streamed-output tests.
    H.main([*HEAT2, "--steps", "20", "--compare", "--quiet", "--json"])
    stdout = capsys.readouterr().out
    rows = [x.split() for x in stdout.splitlines() if x.split()[:1] in (["auto"],
            ["explicit"], ["mpi"])]  # fmt: skip
    assert [r[0] for r in rows] == ["auto", "explicit", "mpi"]
    assert all(r[-1] == "yes" for r in rows)
    assert all(r[1] == "cpu" and r[2] == "2" and int(r[3]) >= 1 for r in rows)  # platform, k
    assert "messages and bytes per physical step" in stdout
    assert len({r[-2] for r in rows}) == 1
    assert last_json(stdout)["backend"] == "auto"


@pytest.mark.parametrize("backend", ["auto", "explicit"])
def test_steps_per_exchange_is_bitwise_and_reported(backend, capsys):
    base = ["--backend", backend, "--devices", "4", "--n", "23", "--steps", "30", "--json",
            "--quiet"]  # fmt: skip
    H.main([*base, "--steps-per-exchange", "1"])
    one = last_json(capsys.readouterr().out)
    assert one["steps_per_exchange"] == 1 and one["steps_per_exchange_note"] == ""
    # (a k run as asked, not lowered, is reported on both backends by test_cli.py's
    # test_compare_json_in_process, k = 2)
    H.main([*base, "--steps-per-exchange", "64"])  # blocks of 6, 6, 6, 5 cells: lowered to 5
    low = last_json(capsys.readouterr().out)
    assert low["steps_per_exchange"] == 5 and "lowered from 64 to 5" in low[
        "steps_per_exchange_note"]  # fmt: skip
    assert low["checksum"] == one["checksum"]
    u0 = H.initial(23, "random").astype(np.float32)
    assert one["checksum"] == checksum(heat_numpy(u0, 30))


def test_summary_names_platform_device_and_k(capsys):
    L.main([*LIFE4, "--steps", "4"])
    first = capsys.readouterr().out.splitlines()[0]
    assert "4 cpu device(s) [" in first and "k = 2" in first


def test_mpi_backend_without_mpiexec_says_how_to_launch():
    cmd = [sys.executable, str(LIFE), "--backend", "mpi", "--steps", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 2
    assert "mpiexec -n" in proc.stderr and "--backend mpi" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---- errors: exit code 2 and a message with the fix -----------------------------------------


def test_unknown_pattern(capsys):
    fails_with(L.main, ["--pattern", "glidr"], capsys, "unknown pattern 'glidr'", "glider")


def test_malformed_rle_names_line_and_reason(tmp_path, capsys):
    bad = tmp_path / "bad.rle"
    bad.write_text("#N bad\nx = 3, y = 3\nbo$2bo$3o\n7o!\n")
    fails_with(L.main, ["--pattern", str(bad)], capsys, "line 4", "longer than")
    bad.write_text("x = 3 y 3\nbo$2bo$3o!\n")
    fails_with(L.main, ["--pattern", str(bad)], capsys, "line 1", "header")


def test_pattern_that_does_not_fit(capsys):
    fails_with(L.main, ["--size", "20x20", "--pattern", "gosper"], capsys, "does not fit",
           "at least")  # fmt: skip
    fails_with(L.main, ["--size", "20x20", "--pattern", "glider", "--at", "19,0"], capsys,
           "does not fit")  # fmt: skip


def test_sizes_must_be_positive(capsys):
    fails_with(L.main, ["--size", "0x5"], capsys, "--size", "positive")
    fails_with(L.main, ["--size", "abc"], capsys, "HxW")
    fails_with(H.main, ["--n", "0"], capsys, "--n", "positive")
    fails_with(H.main, ["--n", "-5"], capsys, "--n")
    fails_with(H.main, ["--steps", "-1"], capsys, "--steps")


def test_unwritable_out_is_checked_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pgas.runner, "run", lambda *a: pytest.fail("ran before --out check"))
    fails_with(H.main, ["--out", str(tmp_path / "missing" / "h.nc")], capsys, "does not exist",
           "mkdir")  # fmt: skip
    fails_with(H.main, ["--out", str(tmp_path / "h.csv")], capsys, ".nc", ".zarr")
    (tmp_path / "dir.nc").mkdir()
    fails_with(L.main, ["--out", str(tmp_path / "dir.nc")], capsys, "directory")
    fails_with(L.main, ["--plot", str(tmp_path / "b.jpg")], capsys, ".png or .gif")


def test_unknown_dtype_or_backend(capsys):
    fails_with(H.main, ["--dtype", "float16"], capsys, "--dtype", "float32", "float64")
    fails_with(L.main, ["--dtype", "float32"], capsys, "--dtype", "uint8")
    fails_with(H.main, ["--backend", "cuda"], capsys, "--backend", "auto", "explicit", "mpi")


def test_snapshot_every_must_divide_steps(capsys):
    fails_with(H.main, ["--steps", "10", "--snapshot-every", "3"], capsys, "does not divide",
           "--steps 12")  # fmt: skip


def test_mpi_run_snapshots_and_callback_in_one_process():
    from pgas.references import mpi

    seen = []
    u0 = H.initial(33, "random", seed=1)
    r = mpi.run(
        H.kernel, lambda i: u0[i], (33,), "float64", 12, 1, pgas.Keep(), (slice(1, -1),),
        snapshot_every=4, chunk=8, callback=lambda n, b: seen.append((n, b.shape)),
    )  # fmt: skip
    assert r.snapshot_steps == (0, 4, 8, 12) and r.snapshots.shape == (4, 33)
    for k, t in enumerate(r.snapshot_steps):
        np.testing.assert_array_equal(r.snapshots[k], heat_numpy(u0, t))
    np.testing.assert_array_equal(r.field, r.snapshots[-1])
    assert seen == [(8, (33,)), (12, (33,))]  # after each chunk, and at the end
    with pytest.raises(pgas.PgasError, match="does not divide"):
        mpi.run(H.kernel, lambda i: u0[i], (33,), "float64", 10, 1, pgas.Keep(), snapshot_every=4)


# ---- streamed output: pictures without --out, a store of another problem ------------------
def test_plot_without_out_draws_from_a_scratch_store_then_removes_it(tmp_path, capsys):
    png = tmp_path / "heat.png"
    d = H.main([*HEAT2, "--steps", "20", "--snapshot-every", "10", "--plot", str(png), "--json",
                "--quiet"])  # fmt: skip
    assert d["written"] == [str(png)] and png.stat().st_size > 1000
    assert not Path(pgas.runner.scratch_store(str(png))).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heat.png"]


def test_restart_into_a_store_of_another_problem_is_refused(tmp_path, capsys):
    ck, life, heat = tmp_path / "heat.ckpt", tmp_path / "life.zarr", tmp_path / "heat.zarr"
    base = [*HEAT2, "--quiet", "--checkpoint", str(ck)]
    H.main([*base, "--steps", "20", "--checkpoint-every", "10", "--out", str(heat),
            "--snapshot-every", "10"])  # fmt: skip
    L.main([*LIFE4, "--steps", "4", "--snapshot-every", "2", "--out", str(life), "--quiet"])
    fails_with(H.main, [*base, "--steps", "30", "--restart", "--out", str(life)], capsys,
               "StoreMismatchError", str(life), "choose another output path")  # fmt: skip
    with xr.open_zarr(life) as ds:  # left as it was
        assert ds["time"].values.tolist() == [0, 2, 4] and "board" in ds
    H.main([*base, "--steps", "30", "--restart", "--out", str(heat), "--snapshot-every", "10"])
    with xr.open_zarr(heat) as ds:  # the right store: continued from the checkpoint at 20
        assert ds["time"].values.tolist() == [0, 10, 20, 30]


def test_a_failed_run_writes_a_final_checkpoint_and_restarts_from_it(tmp_path, capsys,
                                                                     monkeypatch):  # fmt: skip
    """A snapshot write fails at step 30 (checkpoints every 20): the CLI saves the state of
    step 30 before it exits, and --restart continues from there with every snapshot once."""
    from pgas.io import checkpoint
    from pgas.io.output import Stream

    out, ck = tmp_path / "h.zarr", tmp_path / "ck"
    args = [*HEAT2, "--steps", "40", "--snapshot-every", "10", "--checkpoint-every", "20",
            "--out", str(out), "--checkpoint", str(ck), "--quiet"]  # fmt: skip
    write = Stream.write

    def failing(self, step, field, region=None):
        if step == 30:
            raise OSError(28, "No space left on device")
        return write(self, step, field, region)

    monkeypatch.setattr(Stream, "write", failing)
    with pytest.raises(OSError, match="No space left") as caught:
        H.main(args)
    assert caught.value.pgas_step == 30 and checkpoint.latest(ck) == 30
    assert "state after step 30 was saved" in capsys.readouterr().err
    monkeypatch.setattr(Stream, "write", write)
    H.main([*args, "--restart", "--json"])
    d = last_json(capsys.readouterr().out)
    u0 = H.initial(101).astype(np.float32)
    assert d["checksum"] == checksum(heat_numpy(u0, 40))
    with xr.open_zarr(out) as ds:
        assert ds["time"].values.tolist() == list(range(0, 41, 10))


def test_output_never_makes_a_run_report_more_throughput(tmp_path, capsys, monkeypatch):
    """The same run without and with output, each snapshot hand-over made 0.2 s slower:
    the run with output reports the wall time it took (output waits included, and said
    apart), so its throughput is never the higher one. It used to subtract the waits."""
    import time as clock

    from pgas.io.snapshots import SnapshotWriter

    base = [*HEAT2, "--steps", "50", "--json"]  # 6 snapshots: 0, 10, ..., 50
    H.main([*base, "--snapshot-every", "10"])
    plain = last_json(capsys.readouterr().out)
    write = SnapshotWriter.write

    def slow(self, *args, **kwargs):  # as a slow file system: the writer is still busy
        clock.sleep(0.2)
        return write(self, *args, **kwargs)

    monkeypatch.setattr(SnapshotWriter, "write", slow)
    H.main([*base, "--snapshot-every", "10", "--out", str(tmp_path / "h.zarr")])
    out = last_json(capsys.readouterr().out)
    assert out["output_wait_seconds"] >= 5 * 0.2 and plain["output_wait_seconds"] == 0
    assert out["seconds"] >= out["output_wait_seconds"]
    assert out["compute_seconds"] == pytest.approx(out["seconds"] - out["output_wait_seconds"])
    assert out["cell_updates_per_second"] == pytest.approx(101 * 50 / out["seconds"])
    assert out["cell_updates_per_second"] < plain["cell_updates_per_second"]
    H.main([*base[:-1], "--snapshot-every", "10", "--out", str(tmp_path / "h2.zarr")])
    assert "waiting for output" in capsys.readouterr().out


# ---- outputs never destroy what the user did not ask to replace --------------------------------
def test_an_existing_out_is_kept_unless_overwrite(tmp_path, capsys):
    notes = tmp_path / "notes.nc"
    notes.write_text("user notes\n")
    fails_with(H.main, [*HEAT2, "--steps", "10", "--out", str(notes)], capsys,
               str(notes), "exists", "--overwrite")  # fmt: skip
    assert notes.read_text() == "user notes\n"
    store = tmp_path / "life.zarr"  # another problem's store
    L.main([*LIFE4, "--steps", "4", "--snapshot-every", "2", "--out", str(store), "--quiet"])
    fails_with(H.main, [*HEAT2, "--steps", "10", "--out", str(store)], capsys,
               "exists", "--overwrite")  # fmt: skip
    with xr.open_zarr(store) as ds:
        assert ds.attrs["example"] == "life"
    H.main([*HEAT2, "--steps", "10", "--snapshot-every", "10", "--out", str(store), "--overwrite",
            "--quiet"])  # fmt: skip
    with xr.open_zarr(store) as ds:
        assert ds.attrs["example"] == "heat1d"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".old")]  # old one removed


def test_restart_with_a_mistyped_checkpoint_keeps_the_store(tmp_path, capsys):
    """The requeue line with ck11 for ck1: refused, naming both paths and the checkpoint
    directories next to the store, instead of starting over and recreating the store."""
    out, ck1, ck11 = tmp_path / "run.zarr", tmp_path / "ck1", tmp_path / "ck11"
    first = [*HEAT2, "--out", str(out), "--checkpoint", str(ck1), "--snapshot-every", "10",
             "--checkpoint-every", "10", "--steps", "20", "--quiet"]  # fmt: skip
    H.main(first)
    with xr.open_zarr(out) as ds:
        times = ds["time"].values.tolist()
    err = fails_with(H.main, [*HEAT2, "--restart", "--checkpoint", str(ck11), "--out",
                              str(out), "--snapshot-every", "10", "--steps", "40"], capsys,
                     "--restart refused", str(out), str(ck11), str(ck1),
                     "--overwrite")  # fmt: skip
    assert "starting from step 0" not in err
    with xr.open_zarr(out) as ds:
        assert ds["time"].values.tolist() == times
    # the right directory continues the store
    H.main([*HEAT2, "--restart", "--checkpoint", str(ck1), "--out", str(out), "--snapshot-every",
            "10", "--checkpoint-every", "10", "--steps", "40", "--quiet"])  # fmt: skip
    with xr.open_zarr(out) as ds:
        assert (
            ds["time"].values.tolist()[-1] == 40 and len(set(ds["time"].values)) == ds.sizes["time"]
        )


def test_a_new_run_does_not_replace_an_earlier_runs_checkpoint(tmp_path, capsys):
    ck = tmp_path / "ck"
    args = [*HEAT2, "--steps", "20", "--checkpoint", str(ck), "--checkpoint-every", "10",
            "--quiet"]  # fmt: skip
    H.main(args)
    fails_with(H.main, args, capsys, str(ck), "checkpoint of step 20", "--restart",
               "--overwrite")  # fmt: skip
    H.main([*args, "--overwrite"])
    from pgas.io import checkpoint

    assert checkpoint.latest(ck) == 20
