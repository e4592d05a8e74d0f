"""pgas.snapshots: snapshots streamed into one Zarr store (or netCDF file) by every process.

In-process tests use meshes of the 8 virtual devices (blocks of unequal length
included); the multi-process tests launch tests/dist_scripts/stream.py under a
real `mpiexec -n P` and compare the store, snapshot by snapshot and bitwise,
with NumPy (the same arithmetic as a single-process run).
"""

import errno
import json
import shutil
import sys

import numpy as np
import pytest
import xarray as xr

import pgas
from pgas.errors import PgasError
from pgas.io import blocks, zarrstore
from pgas.io.blocks import BlockError
from pgas.io.dataset import OutputPathError
from pgas.io.snapshots import (
    SnapshotError,
    SnapshotWriteError,
    SnapshotWriter,
    StoreMismatchError,
    block_chunks,
)

try:
    from .dist_scripts import common
    from .helpers import NEIGHBOURS_2D, heat_numpy, life_numpy
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from dist_scripts import common
    from helpers import NEIGHBOURS_2D, heat_numpy, life_numpy

STREAM = common.SCRIPTS / "stream.py"


def heat_step(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def life_step(g):
    n = sum(pgas.shift(pgas.shift(g, dy, 0), dx, 1) for dy, dx in NEIGHBOURS_2D)
    g[...] = ((n == 3) | ((g == 1) & (n == 2))).astype("uint8")
    return g


def heat_field(devices, n=1001):
    mesh = pgas.make_mesh(("x",), devices=devices)
    return pgas.from_function(lambda i: np.sin(i / 10.0), (n,), mesh, dtype="float32",
                              boundary=pgas.Keep())  # fmt: skip


def open_store(path):
    return xr.open_zarr(path) if str(path).endswith(".zarr") else xr.open_dataset(path)


def stream(path, u, step, times, every, restart_step=None, **kw):
    """Write snapshots at ``times`` of ``u`` advanced by ``step``; returns the NumPy copies."""
    shots = []
    with SnapshotWriter.open(path, name="u", dims=kw.pop("dims", ("x",)), shape=u.shape,
                             dtype=u.dtype, chunks=block_chunks(u.layout.axes),
                             diagnostics=("top",), attrs={"example": "t"},
                             restart_step=restart_step, **kw) as out:  # fmt: skip
        for i, t in enumerate(times):
            if i:  # k = 2: groups of two steps between writes (auto's k, 16 for heat and 7
                # for Life here, is more than the steps between them: its group would be
                # compiled and never run)
                u = pgas.run(step, u, every, steps_per_exchange=2)
            shots.append(u.to_numpy())
            out.write(t, u, {"top": float(shots[-1].max())})
    return shots


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
@pytest.mark.parametrize("devices", [1, 3, 8])
def test_heat_store_equals_numpy_bitwise(tmp_path, suffix, devices):
    path = tmp_path / f"heat{suffix}"
    stream(path, heat_field(devices), heat_step, [0, 4, 8, 12], 4)
    u0 = np.sin(np.arange(1001) / 10.0).astype(np.float32)
    with open_store(path) as ds:
        assert ds["time"].values.tolist() == [0, 4, 8, 12]
        assert ds.attrs["example"] == "t" and ds["u"].dims == ("time", "x")
        for i, t in enumerate([0, 4, 8, 12]):
            assert ds["u"].values[i].tobytes() == heat_numpy(u0, t).tobytes()
        np.testing.assert_array_equal(ds["top"].values, ds["u"].values.max(axis=1))


def test_life_2d_uneven_blocks_share_chunks(tmp_path):
    """30 x 22 over a 4 x 2 mesh: blocks of 8, 8, 7, 7 rows share chunks of 8 (locked)."""
    mesh = pgas.make_mesh(("y", "x"), devices=8)
    init = lambda i, j: ((i * 7 + j * 13 + (i * j) % 5) % 3 == 0).astype(np.uint8)
    g = pgas.from_function(init, (30, 22), mesh, dtype=np.uint8)
    assert [a.lengths for a in g.layout.axes] == [(8, 8, 7, 7), (11, 11)]
    path = tmp_path / "life.zarr"
    stream(path, g, life_step, [0, 3, 6], 3, dims=("y", "x"))
    i, j = np.meshgrid(np.arange(30), np.arange(22), indexing="ij")
    with xr.open_zarr(path) as ds:
        assert ds["u"].dtype == np.uint8 and ds["u"].encoding["chunks"] == (1, 8, 11)
        for k, t in enumerate([0, 3, 6]):
            np.testing.assert_array_equal(ds["u"].values[k], life_numpy(init(i, j), t))
    assert not zarrstore.lock_dir(path).exists()  # removed by close()


def test_no_process_gathers_the_field_for_zarr(tmp_path, monkeypatch):
    """Only the addressable blocks are copied, each of its block's length; no gather."""
    u = heat_field(8, n=1003)
    pieces = blocks.host_blocks(u)
    assert [p[1].size for p in pieces] == list(u.layout.axes[0].lengths)
    assert [p[0][0].start for p in pieces] == list(u.layout.axes[0].offsets)

    def gather(self):
        raise AssertionError("the Zarr writer gathered the field")

    monkeypatch.setattr(pgas.GlobalArray, "to_numpy", gather)
    with SnapshotWriter.open(tmp_path / "g.zarr", name="u", dims=("x",), shape=u.shape,
                             dtype=u.dtype, chunks=block_chunks(u.layout.axes)) as out:  # fmt: skip
        out.write(0, u)
    monkeypatch.undo()
    with xr.open_zarr(tmp_path / "g.zarr") as ds:
        assert ds["u"].values[0].tobytes() == u.to_numpy().tobytes()


def test_numpy_blocks_with_regions_and_decode(tmp_path):
    """The MPI path's form: NumPy blocks + global slices; decode turns bytes into 8 cells."""
    board = (np.arange(5 * 21).reshape(5, 21) % 3 == 0).astype(np.uint8)
    words = np.packbits(board, axis=1, bitorder="little")  # (5, 3): 24 bits for 21 cells
    unpack = lambda w: np.unpackbits(w, axis=1, bitorder="little")
    grid = [pgas.BlockAxis(5, 2), pgas.BlockAxis(3, 2)]  # 3 x 2 blocks of 3|2 rows, 2|1 words
    for path in (tmp_path / "b.zarr", tmp_path / "b.nc"):
        with SnapshotWriter.open(path, name="cells", dims=("y", "x"), shape=board.shape,
                                 dtype="uint8", decode=unpack,
                                 chunks=block_chunks(grid, factor=(1, 8))) as out:  # fmt: skip
            regions = [tuple(slice(a.offset(b), a.offset(b) + a.length(b))
                             for a, b in zip(grid, (by, bx)))
                       for by in range(2) for bx in range(2)]  # fmt: skip
            for t in (0, 1):
                out.write(t, [(r, words[r] ^ t) for r in regions])
        with open_store(path) as ds:
            np.testing.assert_array_equal(ds["cells"].values[0], board)
            np.testing.assert_array_equal(ds["cells"].values[1], unpack(words ^ 1)[:, :21])


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
def test_restart_drops_later_times_and_appends(tmp_path, suffix):
    path = tmp_path / f"r{suffix}"
    stream(path, heat_field(2), heat_step, [0, 5, 10, 15, 20], 5)
    # the run restarts from a checkpoint at step 10, on another device count
    u = pgas.run(heat_step, heat_field(3), 10, steps_per_exchange=2)  # as stream() runs
    stream(path, u, heat_step, [10, 15, 20, 25], 5, restart_step=10)
    u0 = np.sin(np.arange(1001) / 10.0).astype(np.float32)
    with open_store(path) as ds:
        assert ds["time"].values.tolist() == [0, 5, 10, 15, 20, 25]
        for i, t in enumerate(ds["time"].values):
            assert ds["u"].values[i].tobytes() == heat_numpy(u0, int(t)).tobytes()


def test_interrupted_run_keeps_committed_snapshots(tmp_path):
    path = tmp_path / "cut.zarr"
    u = heat_field(3)
    with pytest.raises(KeyboardInterrupt):
        with SnapshotWriter.open(path, name="u", dims=("x",), shape=u.shape, dtype=u.dtype,
                                 chunks=block_chunks(u.layout.axes), diagnostics=("top",),
                                 attrs={"example": "t"}) as out:  # fmt: skip
            for t in (0, 1, 2):
                out.write(t, u, {"top": 1.0})
                u = pgas.run(heat_step, u, 1, steps_per_exchange=2)  # as stream() runs
            raise KeyboardInterrupt
    with xr.open_zarr(path) as ds:  # the last snapshot was written but never committed
        assert ds["time"].values.tolist() == [0, 1]
    stream(path, u, heat_step, [2, 3], 1, restart_step=2)
    with xr.open_zarr(path) as ds:
        assert ds["time"].values.tolist() == [0, 1, 2, 3]


def test_disk_full_is_reported_with_the_path(tmp_path, monkeypatch):
    from pgas.io.zarrstore import ZarrBlocks

    path = tmp_path / "full.zarr"
    calls = []

    def full_disk(self, index, pieces, decode):
        calls.append(index)
        if index == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, index, pieces, decode)

    original = ZarrBlocks.write_pieces
    monkeypatch.setattr(ZarrBlocks, "write_pieces", full_disk)
    u = heat_field(1)
    out = SnapshotWriter.open(path, name="u", dims=("x",), shape=u.shape, dtype=u.dtype)
    for t in (0, 1, 2):
        out.write(t, u)
    with pytest.raises(SnapshotWriteError, match="no space left for .*full.zarr.*free disk"):
        out.close()
    with xr.open_zarr(path) as ds:
        assert ds["time"].values.tolist() == [0, 1]
    with pytest.raises(SnapshotError, match="closed"):
        out.write(3, u)


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
@pytest.mark.parametrize(
    "change, needle",
    [({"shape": (1002,)}, "shape"), ({"dtype": "float64"}, "dtype"),
     ({"attrs": {"example": "life"}}, "example"), ({"name": "v"}, "field 'v'|no field 'v'")],
)  # fmt: skip
def test_restart_on_a_store_of_another_problem(tmp_path, suffix, change, needle):
    path = tmp_path / f"s{suffix}"
    base = dict(name="u", dims=("x",), shape=(1001,), dtype="float32", attrs={"example": "t"})
    with SnapshotWriter.open(path, **base) as out:
        out.write(0, np.zeros(1001, np.float32), region=(slice(0, 1001),))
    with pytest.raises(StoreMismatchError, match=needle) as err:
        SnapshotWriter.open(path, **{**base, **change}, restart_step=0)
    assert str(path) in str(err.value) and "another output path" in str(err.value)
    assert isinstance(err.value, PgasError)


def test_bad_inputs_are_named(tmp_path):
    ok = dict(name="u", dims=("x",), shape=(4,), dtype="float32")
    with pytest.raises(OutputPathError, match="suffix"):
        SnapshotWriter.open(tmp_path / "a.h5", **ok)
    with pytest.raises(OutputPathError, match="does not exist"):
        SnapshotWriter.open(tmp_path / "missing" / "a.zarr", **ok)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputPathError, match="not a directory"):
        SnapshotWriter.open(tmp_path / "file" / "a.zarr", **ok)
    with pytest.raises(SnapshotError, match="dims"):
        SnapshotWriter.open(tmp_path / "a.zarr", **{**ok, "dims": ("time",)})
    with pytest.raises(SnapshotError, match="chunks"):
        SnapshotWriter.open(tmp_path / "a.zarr", **ok, chunks=(0,))
    with SnapshotWriter.open(tmp_path / "a.zarr", **ok, diagnostics=("m",)) as out:
        with pytest.raises(SnapshotError, match="diagnostics"):
            out.write(0, np.zeros(4, np.float32), {"n": 1}, region=(slice(0, 4),))
        with pytest.raises(SnapshotError, match="region="):
            out.write(0, np.zeros(4, np.float32), {"m": 1})
        out.write(5, np.zeros(4, np.float32), {"m": 1}, region=(slice(0, 4),))
        with pytest.raises(SnapshotError, match="increasing step order"):
            out.write(5, np.zeros(4, np.float32), {"m": 1}, region=(slice(0, 4),))
        with pytest.raises(BlockError, match="decode"):
            blocks.decode_piece(((slice(0, 2),), np.zeros(2)), lambda b: b[:1], (4,))


# --------------------------------------------------------------------------
# Several processes under mpiexec
# --------------------------------------------------------------------------


class _Rank1:
    """A fake communicator as process 1 of 2 sees it: process 0 finishes creating the store
    while process 1 waits in the first collective (``allgather``)."""

    rank, size = 1, 2

    def __init__(self, finish):
        self.finish, self.calls = finish, 0

    def allgather(self, item):
        self.calls += 1
        if self.calls == 1:
            self.finish()
        return [(None, 0), item]


def test_other_processes_never_look_at_a_half_made_store(tmp_path):
    """Process 0 has begun the store (a directory, no metadata yet) when process 1 opens
    the writer: process 1 must not judge the path itself (it used to refuse it as 'not a
    Zarr store' and leave process 0 waiting in a collective); it waits for process 0."""
    path = tmp_path / "run.zarr"
    path.mkdir()  # what process 1 could see of process 0's work in progress
    kw = dict(name="u", dims=("x",), shape=(6,), dtype="float32", diagnostics=("max",))

    def finish():  # process 0 completes the store
        shutil.rmtree(path)
        SnapshotWriter.open(path, **kw).close()

    comm = _Rank1(finish)
    writer = SnapshotWriter.open(path, comm=comm, **kw)
    assert comm.calls == 1 and (path / "zarr.json").exists()
    writer.close()


needs_mpiexec = pytest.mark.skipif(not common.MPIEXEC.exists(), reason="no mpiexec")
PEAK_N = 4_000_003  # test_peak_memory_is_flat_in_the_number_of_snapshots: a 16 MB field


def expected_heat(times, n=1001):
    u0 = np.sin(np.arange(n) / 10.0).astype(np.float32)
    return [heat_numpy(u0, t) for t in times]


def assert_store(path, times, n=1001):
    with open_store(path) as ds:
        assert ds["time"].values.tolist() == times
        for i, want in enumerate(expected_heat(times, n)):
            assert ds["u"].values[i].tobytes() == want.tobytes(), (path, times[i])


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """One ``mpiexec -n 2`` launch of stream.py (JAX path, 1 device per process) whose runs
    follow one another in the same two processes: the store of
    test_processes_write_one_store_equal_to_numpy, the two runs of
    test_peak_memory_is_flat_in_the_number_of_snapshots, then the run that is SIGKILLed after
    the write of step 25 (last: the kill ends the launch), restarted in
    test_sigkill_then_restart_on_other_process_count. Its folder."""
    tmp = tmp_path_factory.mktemp("two_processes")
    written = [str(tmp / "run.zarr"), "--every", "5", "--snapshots", "4", "--also",
               str(tmp / "run.nc"), "--comm"]  # fmt: skip
    memory = [[str(tmp / f"m{count}.zarr"), "--n", str(PEAK_N), "--every", "2", "--snapshots",
               str(count), "--stats", str(tmp / f"stats{count}")]
              for count in (2, 16)]  # fmt: skip
    # MALLOC_*: see test_peak_memory_is_flat_in_the_number_of_snapshots (-genv: every process)
    cmd = [str(common.MPIEXEC), "-genv", "MALLOC_ARENA_MAX", "1", "-genv",
           "MALLOC_MMAP_THRESHOLD_", "1048576", "-n", "2", sys.executable, str(STREAM),
           *written, "--", *memory[0], "--", *memory[1], "--", *killed_run(tmp),
           "--sleep-after", "6"]  # fmt: skip
    common.kill_after(cmd, tmp / "run.log", "SLEEPING after the write of step 25", 300)
    shutil.copytree(tmp / "k.zarr", tmp / "killed.zarr")  # as the kill left it: the restart
    return tmp  # appends to k.zarr


def killed_run(tmp) -> list[str]:
    """The arguments of the run that is killed (with --sleep-after) and restarted."""
    return [str(tmp / "k.zarr"), "--every", "5", "--snapshots", "8", "--ckpt", str(tmp / "ck"),
            "--ckpt-every", "10"]  # fmt: skip


@pytest.fixture(scope="module")
def four_processes(two_processes):
    """One ``mpiexec -n 4`` launch: the restart of the killed run from its checkpoint of
    step 20, then the NumPy + mpi4py run of test_mpi_backend_writes_blocks_with_regions.
    The folder and the launch's result."""
    tmp = two_processes
    r = common.mpiexec(4, str(STREAM), *killed_run(tmp), "--restart", "--",
                       str(tmp / "m.zarr"), "--backend", "mpi", "--also", str(tmp / "m.nc"),
                       timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return tmp, r


@needs_mpiexec
@pytest.mark.slow
def test_processes_write_one_store_equal_to_numpy(two_processes):
    """JAX path (1 device per process), 2 processes, into .zarr and .nc (through MPI). Four
    processes write into one store in the restart below; one process (1 device) in
    test_heat_store_equals_numpy_bitwise, and under mpiexec -n 1 in
    tests/examples/test_examples_distributed.py."""
    path, processes = two_processes / "run.zarr", 2
    assert_store(path, [0, 5, 10, 15])
    with xr.open_zarr(path) as ds:
        assert ds.attrs["processes"] == processes
    assert_store(two_processes / "run.nc", [0, 5, 10, 15])


@needs_mpiexec
@pytest.mark.slow
def test_mpi_backend_writes_blocks_with_regions(four_processes):
    """NumPy + mpi4py on 4 ranks (blocks 251, 250, 250, 250: two of them between two others)
    into one .zarr and one .nc."""
    tmp, _ = four_processes
    for name in ("m.zarr", "m.nc"):
        assert_store(tmp / name, [0, 5, 10, 15, 20, 25])


@needs_mpiexec
@pytest.mark.slow
def test_sigkill_then_restart_on_other_process_count(two_processes, four_processes):
    """2 processes are SIGKILLed after the write of step 25 (checkpoints at 0, 10, 20);
    4 processes restart from step 20: the store has every step once, bitwise."""
    # 25 was written, not committed; 20 is committed in the background while 25 is written
    times = xr.open_zarr(two_processes / "killed.zarr")["time"].values.tolist()
    assert times in ([0, 5, 10, 15], [0, 5, 10, 15, 20]), times
    assert_store(two_processes / "killed.zarr", times)  # it opens, holds what was committed
    _, r = four_processes
    assert "RESTART from step 20 on 4 process(es)" in r.stdout
    assert_store(two_processes / "k.zarr", [0, 5, 10, 15, 20, 25, 30, 35])


@needs_mpiexec
@pytest.mark.slow
def test_peak_memory_is_flat_in_the_number_of_snapshots(two_processes):
    """A 16 MB field on 2 processes: 16 snapshots after 2 add less than 3 fields
    (48 MB) to the peak RSS of every process; holding each snapshot's block would add 14
    blocks (112 MB), gathering them 14 fields. MALLOC_ARENA_MAX=1 keeps glibc's
    per-thread arenas (a fixed cost, not growth) out of the comparison, and a fixed
    MALLOC_MMAP_THRESHOLD_ gives every buffer over 1 MB back to the system when freed,
    so the peak RSS counts live memory, not what glibc's heap keeps for later."""
    n, field = PEAK_N, PEAK_N * 4
    # the run of 2 snapshots, then in the same processes the run of 16 (the peak RSS of the
    # second is at least the first's; with buffers over 1 MB given back, each snapshot's
    # block held would raise it as above); the small run before them (1001 cells) peaks
    # below both
    tmp = two_processes
    peaks = {count: [json.loads((tmp / f"stats{count}.{k}.json").read_text())
                     for k in range(2)] for count in (2, 16)}  # fmt: skip
    for a, b in zip(peaks[2], peaks[16]):
        grew = (b["rss_kib"] - a["rss_kib"]) * 1024
        print(f"process {a['rank']}: peak RSS {a['rss_kib']} -> {b['rss_kib']} KiB, NumPy "
              f"peak {a['traced_peak']} -> {b['traced_peak']} B")  # fmt: skip
        assert grew < 3 * field, (a, b)
        # what NumPy allocated while streaming: flat too (one block more at most: 14 blocks
        # more if the blocks of every snapshot were kept)
        assert b["traced_peak"] < a["traced_peak"] + field, (a, b)
    with xr.open_zarr(tmp / "m16.zarr") as ds:
        assert ds.sizes["time"] == 16
        assert ds["u"][15].values.tobytes() == expected_heat([30], n)[0].tobytes()
