"""The examples as multi-process jobs: mpiexec runs, checkpoint/restart after SIGKILL, errors.

Multi-process runs start ``mpiexec -n P python examples/.../x.py --backend auto`` (MPICH
from PyPI; one CPU device per process, gloo collectives); the example detects mpiexec
and calls ``pgas.distributed.initialize()``. Their checksums must equal the
single-process run (in this process, conftest's devices) and NumPy, bitwise, and so
must the Zarr stores every process writes its blocks into, snapshot by snapshot (heat1d's
4 processes run it first of two runs, under ``dist_scripts/peak_above.py``: the second is
the peak memory test's case). The restart test kills a 2-process run after its 2nd
checkpoint (the example runs under ``dist_scripts/stop_after_checkpoint.py``, which stops
it there) and restarts it in this process on 3 devices, continuing the same store.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from helpers import fails_with, last_json, load_example

from pgas.app.problem import checksum
from pgas.io import checkpoint

ROOT = Path(__file__).resolve().parents[2]
HEAT = ROOT / "examples" / "heat1d" / "heat1d.py"
LIFE = ROOT / "examples" / "life" / "life.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec; pip install mpich")


H = load_example("heat1d")
L = load_example("life")

HEAT_ARGS = ["--n", "1001", "--steps", "60", "--init", "random", "--seed", "3"]
LIFE_ARGS = ["--size", "37x50", "--density", "0.4", "--seed", "9", "--steps", "30"]


def heat_reference(steps: int = 60) -> np.ndarray:
    u = H.initial(1001, "random", seed=3).astype(np.float32)
    for _ in range(steps):
        u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def life_reference(steps: int = 30) -> np.ndarray:
    b = L.patterns.random_board((37, 50), 0.4, seed=9)
    for _ in range(steps):
        b = L.patterns.life_step_numpy(b)
    return b


def _env(**extra: str) -> dict[str, str]:
    drop = ("PMI", "OMPI_", "PMIX", "HYDRA", "SLURM", "PGAS_", "XLA_FLAGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1", **extra)
    return env


def _mpiexec(n: int, script: Path, *args: str, timeout: float = 120, **env: str):
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, str(script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(**env),
                          cwd=ROOT)  # fmt: skip


# ---- multi-process runs equal the single-process run ------------------------------------
@pytest.fixture(scope="module")
def heat_single(tmp_path_factory) -> tuple[Path, dict]:
    """heat1d on 1 device in this process, a snapshot every 10 steps: its store and its JSON
    (the run both heat1d stores below are compared with). k = 1, the single device's plain
    loop (auto's 16 is more than the 10 steps between snapshots: compiled, never run); the
    runs compared with it group 2 steps (JAX) or auto's choice (MPI) per exchange."""
    single = tmp_path_factory.mktemp("heat1d") / "single.zarr"
    one = H.main([*HEAT_ARGS, "--devices", "1", "--json", "--quiet", "--out", str(single),
                  "--snapshot-every", "10", "--steps-per-exchange", "1"])  # fmt: skip
    return single, one


# heat1d's 4-process run of test_mpiexec_run_equals_single_process (k = 2, of auto's parity:
# auto's 16 on blocks of 250 is more than the 10 steps between snapshots, compiled and never
# run) is also the tiny first case of the peak memory test below: one launch of
# dist_scripts/peak_above.py runs it, then that test's case BIG, in the same processes.
PEAK = Path(__file__).resolve().parents[1] / "dist_scripts" / "peak_above.py"
HEAT_MULTI = [*HEAT_ARGS, "--json", "--quiet", "--snapshot-every", "10", "--distributed",
              "--steps-per-exchange", "2"]  # fmt: skip
# k = 2: the double-buffered loop, two groups (auto, 16, is more than the 4 steps: every
# process would compile its group and never run it)
BIG = ["--n", "32_000_003", "--dtype", "float64", "--init", "gaussian", "--steps", "4", "--quiet",
       "--steps-per-exchange", "2"]  # fmt: skip


def _heat_then_big(n: int, out: Path) -> subprocess.CompletedProcess:
    """mpiexec -n ``n``: heat1d's HEAT_MULTI run (its store ``out``), then BIG, in each process."""
    return _mpiexec(n, PEAK, str(HEAT), *HEAT_MULTI, "--out", str(out), "--", *BIG, timeout=300)


@pytest.fixture(scope="module")
def heat_four(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The 4-process launch of :func:`_heat_then_big`: its result and heat1d's store."""
    out = tmp_path_factory.mktemp("heat1d4") / "heat1d.zarr"
    return _heat_then_big(4, out), out


def _same_store(single: Path, multi: Path, var: str, steps: int) -> None:
    """Two snapshot stores hold the same times and, snapshot by snapshot, bitwise the same field."""
    with xr.open_zarr(single) as a, xr.open_zarr(multi) as b:
        times = list(range(0, steps + 1, 10))
        assert a["time"].values.tolist() == b["time"].values.tolist() == times
        for t in a["time"].values:  # one snapshot at a time (lazy reads)
            np.testing.assert_array_equal(a[var].sel(time=t).values, b[var].sel(time=t).values)
        for name in a.data_vars:
            if name != var:  # global diagnostics: reduced per process, so summed in another order
                np.testing.assert_allclose(a[name].values, b[name].values, rtol=1e-12)


@needs_mpiexec
@pytest.mark.slow
@pytest.mark.parametrize("example", ["heat1d", "life"])
def test_mpiexec_run_equals_single_process(example, tmp_path, request):
    """Every one of 4 processes writes its own blocks of each snapshot into one .zarr store:
    the store equals a single-process run's, snapshot by snapshot and bitwise (2 processes
    write one store in the restart, memory and checkpoint tests below).

    heat1d runs with ``--distributed`` and ``--json --quiet``: its stdout is the JSON line
    alone (gloo's "[Gloo] Rank N is connected ..." lines, written by C++ to file descriptor 1,
    go to stderr); life, found under mpiexec without the flag, adds ``--verbose``: one line
    from process 0."""
    n = 4
    if example == "heat1d":  # HEAT_MULTI, then the peak memory test's case (heat_four)
        args, ref, var = HEAT_ARGS, heat_reference, "u"
        single, one = request.getfixturevalue("heat_single")
        r, multi = request.getfixturevalue("heat_four")
    else:
        args, ref, var = LIFE_ARGS, life_reference, "board"
        single, multi = tmp_path / "single.zarr", tmp_path / "life.zarr"
        # k = 1 on one device (as heat_single); k = 2, of auto's parity, on 4: five groups per
        # snapshot (auto's 8 is a larger group, and 2 single steps, for each process to compile)
        one = L.main([*args, "--devices", "1", "--json", "--quiet", "--out", str(single),
                      "--snapshot-every", "10", "--steps-per-exchange", "1"])  # fmt: skip
        r = _mpiexec(n, LIFE, *args, "--json", "--quiet", "--out", str(multi), "--snapshot-every",
                     "10", "--verbose", "--steps-per-exchange", "2")  # fmt: skip
    steps = int(args[args.index("--steps") + 1])
    assert one["checksum"] == checksum(ref())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 1, r.stdout  # the JSON line from process 0 only
    d = json.loads(lines[0])
    assert d["processes"] == n and d["devices"] == n
    assert d["checksum"] == one["checksum"]
    if example == "heat1d":  # stdout carries only what --json and --quiet promise
        assert r.stdout.strip().splitlines() == lines, r.stdout
    else:
        assert "pgas: 4 process(es), 4 device(s)" in r.stdout  # --verbose, process 0 only
        assert r.stdout.count("pgas: ") == 1
    _same_store(single, multi, var, steps)
    with xr.open_zarr(multi) as ds:
        assert ds.attrs["processes"] == n and ds.attrs["checksum"] == d["checksum"]
        assert ds[var].encoding["chunks"][0] == 1  # one snapshot per chunk
        assert checksum(ds[var].isel(time=-1).values) == d["checksum"]


@needs_mpiexec
@pytest.mark.slow
def test_mpi_backend_unequal_blocks_write_one_store(tmp_path, heat_single):
    """mpiexec -n 3 --backend mpi: 1001 cells in blocks of 334, 334 and 333 (chunks of 334
    straddle two blocks: the writers lock them); the store equals the single-process run's."""
    single, multi = heat_single[0], tmp_path / "mpi.zarr"
    r = _mpiexec(3, HEAT, *HEAT_ARGS, "--backend", "mpi", "--quiet", "--json", "--out",
                 str(multi), "--snapshot-every", "10")  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1])["checksum"] == checksum(heat_reference())
    _same_store(single, multi, "u", 60)
    with xr.open_zarr(multi) as ds:
        assert ds["u"].encoding["chunks"] == (1, 334) and ds.attrs["backend"] == "mpi"


@needs_mpiexec
@pytest.mark.slow
def test_peak_memory_does_not_grow_with_snapshots(tmp_path):
    """mpiexec -n 2, heat on 8_000_003 float32 cells (a 32 MB field, 16 MB blocks) streamed to
    .zarr with 3, then in the same processes with 17 snapshots: every process's peak RSS grows
    by less than three fields over the first run's (stacking the 14 extra snapshots in memory,
    as before, would add 448 MB). Measured peaks vary by up to about 50 MB from run to run
    (allocator, threads), with no trend: 820, 873 and 836 MB on process 0 for 33, 17 and 3
    snapshots, each in a process of its own."""
    field = 8_000_003 * 4 // 1024  # kB
    # k = 2: the double-buffered loop, in groups that fit between snapshots (auto, 16, is
    # more than 2 steps: every process would compile its group and never run it)
    runs = [["--n", "8_000_003", "--steps", "32", "--quiet", "--snapshot-every", str(every),
             "--out", str(tmp_path / f"{every}.zarr"), "--steps-per-exchange", "2"]
            for every in (16, 2)]  # fmt: skip
    r = _mpiexec(2, PEAK, str(HEAT), *runs[0], "--", *runs[1], timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = re.findall(r"PEAK_ABOVE (\d+) (\d+) (\d+)", r.stderr)  # ranks' lines may interleave
    peaks = {int(rank): (int(first), int(both)) for rank, first, both in rows}
    assert sorted(peaks) == [0, 1], r.stderr[-3000:]
    for rank, (first, both) in peaks.items():
        assert both - first < 3 * field, (rank, peaks, field)
    for every in (16, 2):
        with xr.open_zarr(tmp_path / f"{every}.zarr") as ds:
            assert ds.sizes["time"] == 32 // every + 1


@needs_mpiexec
@pytest.mark.slow
def test_peak_memory_per_process_falls_and_does_not_hold_the_field(tmp_path, heat_four):
    """heat1d on 32_000_003 float64 cells (a 244 MiB field) under mpiexec -n 1 and -n 4, each
    process running a tiny case first (JAX, gloo, compiled programs: the 1001-cell run of
    test_mpiexec_run_equals_single_process, whose 4-process launch this is), then this one.

    - Each of the 4 processes peaks above its tiny case by less than the field (4 of its
      blocks). Measured: 2.3-2.7 blocks (state, loop buffers, warm-up on the state itself);
      a process that built, warmed up on or gathered a second copy of its blocks and its
      loop's would be near or above it.
    - Each of the 4 processes peaks at least half a field below the single process. A
      process that held the whole field once (a gather for the checksum, an initial
      condition built whole) would not (pgas 0.3.0: 1205 MiB on 1 process, 1269-1300 MiB on
      each of 4, for 16_000_003 cells).
    """
    field = 32_000_003 * 8 // 1024  # kB
    peaks = {}
    for n in (1, 4):
        r = _heat_then_big(1, tmp_path / "one.zarr") if n == 1 else heat_four[0]
        assert r.returncode == 0, r.stderr[-3000:]
        rows = re.findall(r"PEAK_ABOVE (\d+) (\d+) (\d+)", r.stderr)  # ranks' lines interleave
        peaks[n] = {int(rank): (int(tiny), int(peak)) for rank, tiny, peak in rows}
        assert sorted(peaks[n]) == list(range(n)), r.stderr[-3000:]
    single = peaks[1][0][1]
    for rank, (tiny, peak) in peaks[4].items():
        assert peak - tiny < field, (rank, peaks, field)
        assert peak < single - field // 2, (rank, peaks, field)


# ---- checkpoint / restart ---------------------------------------------------------------
@needs_mpiexec
@pytest.mark.slow
def test_sigkill_after_second_checkpoint_then_restart_elsewhere(tmp_path, capsys):
    """2 processes, snapshots and checkpoints every 10 steps, SIGKILLed after the checkpoint of
    step 20; the store then opens and holds the snapshots committed before. Restarted on 1
    process with 3 devices, the run continues the store: every time once, bitwise, and the
    final field equals an uninterrupted run."""
    ck, out, log = tmp_path / "heat.ckpt", tmp_path / "heat.zarr", tmp_path / "run.log"
    stop = (Path(__file__).resolve().parents[1] / "dist_scripts") / "stop_after_checkpoint.py"
    # checkpoints at steps 0 (before the store is created), 10 and 20: stop after the third;
    # k = 2, of auto's parity (auto's 16 is more than a chunk: compiled, never run)
    k = ["--steps-per-exchange", "2"]
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, str(stop), "3", str(HEAT), *HEAT_ARGS, "--json",
           "--quiet", "--checkpoint-every", "10", "--restart", "--checkpoint", str(ck),
           "--out", str(out), "--snapshot-every", "10", *k]  # fmt: skip
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=_env(),
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=ROOT)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "SLEEPING" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    text = log.read_text()
    assert "no checkpoint" in text and "SLEEPING after checkpoint 3 (step 20)" in text
    assert checkpoint.latest(ck) == 20
    with xr.open_zarr(out) as ds:  # killed: the snapshots before the checkpoint, committed
        kept = ds["time"].values.tolist()
        assert kept == [0, 10], kept
        for t in kept:
            np.testing.assert_array_equal(ds["u"].sel(time=t).values, heat_reference(t))

    H.main([*HEAT_ARGS, "--devices", "3", "--json", "--quiet", "--checkpoint-every", "10",
            "--restart", "--checkpoint", str(ck), "--out", str(out),
            "--snapshot-every", "10", *k])  # fmt: skip
    captured = capsys.readouterr()
    d = last_json(captured.out)
    assert "restart: from step 20" in captured.err
    assert d["start_step"] == 20 and d["processes"] == 1 and d["devices"] == 3
    assert d["checksum"] == checksum(heat_reference())
    assert checkpoint.latest(ck) == 60
    with xr.open_zarr(out) as ds:  # continued: no time twice, none missing
        assert ds["time"].values.tolist() == [0, 10, 20, 30, 40, 50, 60]
        assert ds.attrs["start_step"] == 20 and ds.attrs["processes"] == 1
        for t in ds["time"].values:
            np.testing.assert_array_equal(ds["u"].sel(time=t).values, heat_reference(t))
        assert checksum(ds["u"].values[-1]) == d["checksum"]


def test_restart_continues_across_backends_and_meshes(tmp_path, capsys):
    first, second = "explicit", "auto"
    ck = tmp_path / "life.ckpt"
    # k = 2, of auto's parity: auto's 8 is more than the first run's chunks of 4 steps
    base = [*LIFE_ARGS, "--checkpoint", str(ck), "--json", "--quiet", "--steps-per-exchange", "2"]
    L.main(
        [*base, "--steps", "12", "--backend", first, "--devices", "4", "--checkpoint-every", "4"]
    )
    assert last_json(capsys.readouterr().out)["checksum"] == checksum(life_reference(12))
    assert checkpoint.latest(ck) == 12
    L.main([*base, "--steps", "30", "--backend", second, "--devices", "2",
            "--checkpoint-every", "6", "--restart"])  # fmt: skip
    d = last_json(capsys.readouterr().out)
    assert d["start_step"] == 12 and d["checksum"] == checksum(life_reference(30))
    assert checkpoint.latest(ck) == 30


# 2 devices and k = 2, of auto's parity (auto's 16 is more than the second test's chunks of
# 10 steps: compiled, never run): one program for both tests below
HEAT_2 = ["--devices", "2", "--steps-per-exchange", "2"]


def test_restart_without_checkpoint_starts_fresh(tmp_path, capsys):
    ck = tmp_path / "none.ckpt"
    H.main([*HEAT_ARGS, *HEAT_2, "--json", "--quiet", "--restart", "--checkpoint", str(ck),
            "--checkpoint-every", "30"])  # fmt: skip
    d = last_json(capsys.readouterr().out)
    assert d["start_step"] == 0 and d["checksum"] == checksum(heat_reference())
    assert checkpoint.latest(ck) == 60


def test_another_problems_or_corrupt_checkpoint_is_refused(tmp_path, capsys):
    ck = tmp_path / "heat.ckpt"
    H.main([*HEAT_ARGS, "--steps", "20", *HEAT_2, "--quiet", "--checkpoint", str(ck),
            "--checkpoint-every", "10"])  # fmt: skip
    assert checkpoint.latest(ck) == 20
    restart = ["--quiet", "--restart", "--checkpoint", str(ck)]
    fails_with(H.main, [*HEAT_ARGS, "--seed", "4", *restart], capsys, "--restart refused",
           "another problem", "meta['seed'] expected 4")  # fmt: skip
    fails_with(H.main, [*HEAT_ARGS, "--init", "sine", *restart], capsys, "meta['init']")
    fails_with(H.main, [*HEAT_ARGS, "--n", "1002", *restart], capsys, "shape (1001,)", "(1002,)")
    fails_with(H.main, [*HEAT_ARGS, "--dtype", "float64", *restart], capsys, "dtype float32")
    fails_with(L.main, [*LIFE_ARGS, *restart], capsys, "shape (1001,)", "(37, 50)")
    fails_with(H.main, [*HEAT_ARGS, "--steps", "10", *restart], capsys, "beyond --steps 10")
    version = ck / (ck / "LATEST").read_text().strip()
    block = sorted((version / "f0").glob("*.npy"))[0]
    raw = bytearray(block.read_bytes())
    raw[-1] ^= 0xFF
    block.write_bytes(bytes(raw))
    fails_with(H.main, [*HEAT_ARGS, *restart], capsys, "damaged")
    (version / "manifest.json").unlink()
    fails_with(H.main, [*HEAT_ARGS, *restart], capsys, "incomplete")


def test_mpi_backend_cannot_checkpoint(capsys):
    fails_with(H.main, ["--backend", "mpi", "--checkpoint-every", "10"], capsys,
           "--backend auto and explicit only")  # fmt: skip
    fails_with(L.main, ["--snapshot-every", "4", "--steps", "24", "--checkpoint-every", "6"],
           capsys, "multiple of --snapshot-every 4")  # fmt: skip


@needs_mpiexec
def test_process_count_mismatch_exits_with_message():
    t0 = time.monotonic()
    r = _mpiexec(2, HEAT, *HEAT_ARGS, "--quiet", timeout=60, PGAS_NUM_PROCESSES="3")
    assert r.returncode != 0
    assert "ProcessCountError" in r.stderr and "PGAS_NUM_PROCESSES" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60
