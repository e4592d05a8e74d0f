"""pgas.mpi under real ``mpiexec`` (MPICH from PyPI), checked bitwise against NumPy.

Each rank count is launched once (``tests/mpi_scripts/stencil_cases.py`` runs
every case of that launch); the single-process references are computed here.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "mpi_scripts" / "stencil_cases.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
sys.path.insert(0, str(SCRIPT.parent))
import stencil_cases as sc  # noqa: E402

if not MPIEXEC.exists():
    pytest.skip(f"no mpiexec next to {sys.executable}; pip install mpich", allow_module_level=True)

# one rank (no messages); two (uneven blocks, the same rank on both sides of a periodic axis);
# four (ranks between two others, 2-D and 3-D dims); three ranks take the paths of two and
# four (tests/references/test_until_backends.py launches three)
RANKS = (1, 2, 4)
# steps per exchange every run case is run with: 1 and "auto" (deep halos: 16, or lowered to
# the blocks, 2 to 8, in every case); the heat cases also with 3 (more groups per run, a part
# group at the end and at each snapshot or chunk step)
KS = (1, "auto")
HEAT_KS = (1, "auto", 3)


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PMI", "OMPI_", "PMIX", "HYDRA", "SLURM"))
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def cases_for(p: int) -> list[dict]:
    """The cases of the launch with ``p`` ranks."""
    cases = [
        dict(
            name="heat_f32_keep",
            kernel="heat",
            shape=[1001],
            dtype="float32",
            steps=60,
            halo=1,
            boundary="keep",
        ),
        dict(
            name="heat_f64_keep",
            kernel="heat",
            shape=[1001],
            dtype="float64",
            steps=60,
            halo=1,
            boundary="keep",
        ),
        dict(
            name="heat_f32_zero_steps",
            kernel="heat",
            shape=[1001],
            dtype="float32",
            steps=0,
            halo=1,
            boundary="keep",
        ),
        dict(
            name="heat_dirichlet_neumann",
            kernel="heat",
            shape=[1001],
            dtype="float64",
            steps=40,
            halo=1,
            boundary=[[{"dirichlet": 0.25}, "neumann"]],
        ),
        dict(
            name="heat_region_half",
            kernel="heat",
            shape=[1001],
            dtype="float64",
            steps=40,
            halo=1,
            boundary="neumann",
            region=[[3, 500]],
        ),
        dict(
            name="life_torus",
            kernel="life",
            shape=[37, 53],
            dtype="uint8",
            steps=30,
            halo=1,
            boundary="periodic",
        ),
        dict(
            name="lap3d_dirichlet_neumann_keep",
            kernel="lap3d",
            shape=[9, 10, 11],
            dtype="float64",
            steps=20,
            halo=1,
            boundary=[[{"dirichlet": 1.0}, "neumann"], "neumann", [{"dirichlet": 0.0}, "keep"]],
        ),
        dict(
            name="lap3d_mixed_periodic",
            kernel="lap3d",
            shape=[9, 10, 11],
            dtype="float32",
            steps=20,
            halo=1,
            boundary=["periodic", {"dirichlet": 0.5}, "periodic"],
        ),
        dict(
            name="wide_neumann_dirichlet",
            kernel="wide",
            shape=[203],
            dtype="float64",
            steps=30,
            halo=2,
            boundary=[["neumann", {"dirichlet": 1.0}]],
        ),
        dict(
            name="wide_periodic",
            kernel="wide",
            shape=[203],
            dtype="float64",
            steps=30,
            halo=2,
            boundary="periodic",
        ),
        dict(
            name="wide_keep",
            kernel="wide",
            shape=[203],
            dtype="float32",
            steps=30,
            halo=2,
            boundary="keep",
        ),
        dict(
            name="aniso_region",
            kernel="aniso",
            shape=[23, 19],
            dtype="float64",
            steps=15,
            halo=[2, 1],
            boundary=["periodic", [{"dirichlet": 2.0}, "keep"]],
            region=[[1, None], [None, -2]],
        ),
        # halos per side: one-sided kernels exchange the side they read only
        dict(
            name="upwind_dirichlet",
            kernel="upwind",
            shape=[203],
            dtype="float64",
            steps=30,
            halo=[[1, 0]],
            boundary={"dirichlet": 0.0},
            region=[[1, None]],
        ),
        dict(
            name="downwind_periodic",
            kernel="downwind",
            shape=[203],
            dtype="float64",
            steps=30,
            halo=[[0, 1]],
            boundary="periodic",
        ),
        dict(
            name="two_below_neumann",
            kernel="two_below",
            shape=[203],
            dtype="float64",
            steps=30,
            halo=[[2, 0]],
            boundary="neumann",
            region=[[2, None]],
        ),
        dict(
            name="upwind2d_dirichlet",
            kernel="upwind2d",
            shape=[23, 19],
            dtype="float64",
            steps=15,
            halo=[[1, 0], [1, 0]],
            boundary={"dirichlet": 1.0},
            region=[[1, None], [1, None]],
        ),
    ]
    cases.append(
        dict(
            name="heat_snapshots_chunks",
            kernel="heat",
            shape=[101],
            dtype="float64",
            steps=60,
            halo=1,
            boundary=[["neumann", {"dirichlet": 0.5}]],
            snapshot_every=10,
            chunk=20,
        )
    )
    cases = [dict(c, ks=list(HEAT_KS if c["kernel"] == "heat" else KS)) for c in cases]
    for c in cases:
        if c["name"] == "wide_keep":
            c["ks"] = [*c["ks"], 1000]  # lowered to fit the smallest block
    if p > 1:
        for dims in ([1, p], [p, 1]):
            cases.append(dict(cases[5], name=f"life_torus_dims_{dims[0]}x{dims[1]}", dims=dims))
        cases.append(dict(cases[6], name=f"lap3d_dims_1x1x{p}", dims=[1, 1, p]))
        cases.append(dict(cases[7], name=f"lap3d_periodic_dims_1x{p}x1", dims=[1, p, 1]))
    return cases + [dict(name="errors", kind="errors"), dict(name="reduce", kind="reduce")]


@functools.cache
def launch(p: int) -> tuple[dict, dict]:
    """Run every case with ``p`` ranks once; return (fields, meta)."""
    with tempfile.TemporaryDirectory(prefix=f"pgas_mpi_{p}_") as out:
        cases_file = os.path.join(out, "cases.json")
        with open(cases_file, "w") as f:
            json.dump(cases_for(p), f)
        proc = subprocess.run(
            [str(MPIEXEC), "-n", str(p), sys.executable, str(SCRIPT), cases_file, out],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, f"mpiexec -n {p} failed:\n{proc.stdout}\n{proc.stderr}"
        with np.load(os.path.join(out, "fields.npz")) as z:
            fields = {k: z[k] for k in z.files}
        with open(os.path.join(out, "meta.json")) as f:
            meta = json.load(f)
    assert meta["size"] == meta["world"] == p  # check_world(p) passes under a matching mpiexec
    return fields, meta["cases"]


# ---------------------------------------------------------------- references


def _faces(spec, ndim):
    """JSON boundary spec -> one (low, high) pair of specs per axis."""
    if not isinstance(spec, list):
        spec = [spec] * ndim
    return [tuple(s) if isinstance(s, list) else (s, s) for s in spec]


def _sides(case: dict) -> list[tuple[int, int]]:
    """The case's halo as (below, above) per axis."""
    nd = len(case["shape"])
    halo = case["halo"] if isinstance(case["halo"], list) else [case["halo"]] * nd
    return [tuple(h) if isinstance(h, list) else (h, h) for h in halo]


def _pad(u, axis, width, lo, hi):
    below, above = width if isinstance(width, tuple) else (width, width)
    if below == above == 0:
        return u
    if lo == "periodic":
        return np.pad(
            u, [(below, above) if b == axis else (0, 0) for b in range(u.ndim)], mode="wrap"
        )
    for spec, pw in ((lo, (below, 0)), (hi, (0, above))):
        w = [pw if b == axis else (0, 0) for b in range(u.ndim)]
        if isinstance(spec, dict):
            u = np.pad(u, w, mode="constant", constant_values=spec["dirichlet"])
        else:  # neumann, keep: mirror
            u = np.pad(u, w, mode="symmetric")
    return u


def reference(case: dict) -> np.ndarray:
    """Single-process NumPy loop: pad by the boundary, same kernel, masked update."""
    shape, steps = tuple(case["shape"]), case["steps"]
    u = np.asarray(
        sc.INITS[case["kernel"]](*np.meshgrid(*map(np.arange, shape), indexing="ij"))
    ).astype(case["dtype"])
    sides = _sides(case)
    halo = [max(p) for p in sides]  # a Keep face keeps the larger side
    faces = _faces(case["boundary"], len(shape))
    mask = np.zeros(shape, bool)
    region = case.get("region") or [[None, None]] * len(shape)
    mask[tuple(slice(*r) for r in region)] = True
    for a, (lo, hi) in enumerate(faces):
        idx = [slice(None)] * len(shape)
        if lo == "keep":
            idx[a] = slice(0, halo[a])
            mask[tuple(idx)] = False
        if hi == "keep":
            idx[a] = slice(shape[a] - halo[a], None)
            mask[tuple(idx)] = False
    for _ in range(steps):
        p = u
        for a, (lo, hi) in enumerate(faces):
            p = _pad(p, a, sides[a], lo, hi)
        new = sc.KERNELS[case["kernel"]](p)
        u = u.copy()
        u[mask] = new[mask]
    return u


def heat_seed(u: np.ndarray, steps: int) -> np.ndarray:
    """The seed program, literally."""
    u = u.copy()
    for _ in range(steps):
        u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def life_roll(u: np.ndarray, steps: int) -> np.ndarray:
    for _ in range(steps):
        n = sum(
            np.roll(np.roll(u, di, 0), dj, 1)
            for di in (-1, 0, 1)
            for dj in (-1, 0, 1)
            if (di, dj) != (0, 0)
        )
        u = ((n == 3) | ((u == 1) & (n == 2))).astype(np.uint8)
    return u


def group_sizes(case: dict, k: int) -> list[int]:
    """Steps per exchange of each exchange: groups of k, cut at snapshot/chunk steps."""
    stops = sorted(
        {case["steps"]}
        | {
            s
            for n in (case.get("snapshot_every"), case.get("chunk"))
            if n
            for s in range(n, case["steps"], n)
        }
    )
    sizes, done = [], 0
    for stop in stops if case["steps"] else []:
        while done < stop:
            sizes.append(min(k, stop - done))
            done += sizes[-1]
    return sizes


def expected_counts(case: dict, dims: list[int], k: int = 1) -> tuple[list, list]:
    """Messages and bytes each rank sends per physical step, k steps per exchange."""
    msgs, nbytes = [0.0] * math.prod(dims), [0.0] * math.prod(dims)
    sides = _sides(case)
    for g in group_sizes(case, k):
        m, b = exchange_counts(dict(case, halo=[[g * lo, g * hi] for lo, hi in sides]), dims)
        msgs = [x + y for x, y in zip(msgs, m)]
        nbytes = [x + y for x, y in zip(nbytes, b)]
    per = max(case["steps"], 1)
    return [m / per for m in msgs], [b / per for b in nbytes]


def exchange_counts(case: dict, dims: list[int]) -> tuple[list[int], list[int]]:
    """Messages and bytes each rank sends in one exchange under the two-phase scheme."""
    shape = case["shape"]
    nd = len(shape)
    sides = _sides(case)
    periodic = [lo == "periodic" for lo, _ in _faces(case["boundary"], nd)]
    item = np.dtype(case["dtype"]).itemsize
    msgs, nbytes = [], []
    for coords in np.ndindex(*dims):
        n = [s // d + (c < s % d) for s, d, c in zip(shape, dims, coords)]
        m = b = 0
        for a in range(nd):
            if sides[a] == (0, 0) or dims[a] == 1:
                continue
            cross = math.prod(n[k] + sum(sides[k]) if k < a else n[k] for k in range(nd) if k != a)
            below, above = sides[a]
            # down: the first `above` cells fill the lower rank's high ghosts; up: the last `below`
            for exists, width in ((periodic[a] or coords[a] > 0, above),
                                  (periodic[a] or coords[a] < dims[a] - 1, below)):  # fmt: skip
                m += exists * (width > 0)
                b += exists * width * cross * item
        msgs.append(m)
        nbytes.append(b)
    return msgs, nbytes


# -------------------------------------------------------------------- tests

RUN_CASES = [
    (p, c, k) for p in RANKS for c in cases_for(p) if c.get("kind", "run") == "run" for k in c["ks"]
]


def chosen_k(case: dict, k, dims: list[int]) -> int:
    """The k pgas.plan picks for this case (independent of the run)."""
    from pgas.loop.plan import choose_steps_per_exchange

    halo = [max(p) for p in _sides(case)]
    blocks = [n // d for n, d in zip(case["shape"], dims)]
    return choose_steps_per_exchange(k, blocks, halo)


@pytest.mark.parametrize(
    "p,case,k", RUN_CASES, ids=[f"n{p}-{c['name']}-k{k}" for p, c, k in RUN_CASES]
)
def test_bitwise_equal_to_numpy(p, case, k):
    fields, meta = launch(p)
    got = fields[f"{case['name']}@{k}"]
    want = reference(case)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert got.tobytes() == want.tobytes()
    assert got.tobytes() == fields[f"{case['name']}@1"].tobytes()  # deep halos: same bits
    if case["kernel"] == "heat" and case["boundary"] == "keep":
        assert got.tobytes() == heat_seed(reference(dict(case, steps=0)), case["steps"]).tobytes()
    if case["kernel"] == "life":
        assert got.tobytes() == life_roll(reference(dict(case, steps=0)), case["steps"]).tobytes()
    info = meta[f"{case['name']}@{k}"]
    if case.get("dims"):
        assert info["dims"] == case["dims"]
    choice = chosen_k(case, k, info["dims"])
    assert info["steps_per_exchange"] == choice.steps_per_exchange
    assert info["note"] == choice.note
    msgs, nbytes = expected_counts(case, info["dims"], choice.steps_per_exchange)
    assert info["rank_messages_per_step"] == pytest.approx(msgs, rel=1e-12)
    assert info["rank_bytes_per_step"] == pytest.approx(nbytes, rel=1e-12)
    assert info["messages_per_step"] == pytest.approx(sum(msgs), rel=1e-12)
    assert info["bytes_per_step"] == pytest.approx(sum(nbytes), rel=1e-12)


@pytest.mark.parametrize("p", RANKS)
def test_snapshots_and_callbacks_at_any_k(p):
    fields, meta = launch(p)
    case = next(c for c in cases_for(p) if c["name"] == "heat_snapshots_chunks")
    for k in case["ks"]:
        info = meta[f"heat_snapshots_chunks@{k}"]
        assert info["snapshot_steps"] == [0, 10, 20, 30, 40, 50, 60]
        snaps = fields[f"heat_snapshots_chunks@{k}/snapshots"]
        for s, snap in zip(info["snapshot_steps"], snaps):
            assert snap.tobytes() == reference(dict(case, steps=s)).tobytes(), (k, s)
        assert [c[0] for c in info["callbacks"]] == [20, 40, 60]
        assert info["callbacks"] == meta["heat_snapshots_chunks@1"]["callbacks"]


def test_deep_halo_messages_fall_by_k():
    """Hard-coded: 4 ranks, heat on 1001 cells, 60 steps: 6 messages per exchange."""
    meta = launch(4)[1]
    assert meta["heat_f32_keep@1"]["messages_per_step"] == 6
    assert meta["heat_f32_keep@3"]["messages_per_step"] == 6 / 3  # 20 exchanges
    assert meta["heat_f32_keep@3"]["bytes_per_step"] == 24.0  # 3 cells wide, every 3 steps
    # auto: k = 16 (250-cell blocks), 3 exchanges of 16 cells and one of 12 in 60 steps
    assert meta["heat_f32_keep@auto"]["steps_per_exchange"] == 16
    assert meta["heat_f32_keep@auto"]["messages_per_step"] == 6 * 4 / 60
    assert meta["heat_f32_keep@auto"]["bytes_per_step"] == 6 * 4 * (3 * 16 + 12) / 60
    lowered = meta["wide_keep@1000"]  # 203 cells over 4 ranks: 50-cell blocks, halo 2
    assert lowered["steps_per_exchange"] == 25
    assert "lowered from 1000 to 25" in lowered["note"]


def test_counts_by_hand():
    """Hard-coded figures, independent of expected_counts()."""
    heat4 = launch(4)[1]["heat_f32_keep@1"]
    assert heat4["messages_per_step"] == 6 and heat4["bytes_per_step"] == 24
    assert heat4["rank_messages_per_step"] == [1, 2, 2, 1]
    assert heat4["rank_bytes_per_step"] == [4, 8, 8, 4]
    life4 = launch(4)[1]["life_torus@1"]  # dims (2, 2), blocks (19, 18) x (27, 26), uint8
    assert life4["dims"] == [2, 2]
    assert life4["rank_messages_per_step"] == [4, 4, 4, 4]
    assert life4["rank_bytes_per_step"] == [
        2 * 27 + 2 * 21,
        2 * 26 + 2 * 21,
        2 * 27 + 2 * 20,
        2 * 26 + 2 * 20,
    ]
    life2 = launch(2)[1]["life_torus_dims_1x2@1"]  # axis 0 copied locally; 2 ranks, both sides
    assert life2["rank_messages_per_step"] == [2, 2]
    assert life2["rank_bytes_per_step"] == [2 * 39, 2 * 39]
    # halos per side, 4 ranks: one message per rank and split axis, up (down for downwind)
    meta4 = launch(4)[1]
    assert meta4["upwind_dirichlet@1"]["rank_messages_per_step"] == [1, 1, 1, 0]
    assert meta4["upwind_dirichlet@1"]["rank_bytes_per_step"] == [8, 8, 8, 0]
    assert meta4["two_below_neumann@1"]["rank_bytes_per_step"] == [16, 16, 16, 0]
    assert meta4["downwind_periodic@1"]["rank_messages_per_step"] == [1, 1, 1, 1]
    assert meta4["downwind_periodic@1"]["rank_bytes_per_step"] == [8, 8, 8, 8]
    up2d = meta4["upwind2d_dirichlet@1"]  # dims (2, 2): blocks (12, 11) x (10, 9), float64
    assert up2d["dims"] == [2, 2]
    assert up2d["rank_messages_per_step"] == [2, 1, 1, 0]
    assert up2d["rank_bytes_per_step"] == [8 * 10 + 8 * (12 + 1), 8 * 9, 8 * (11 + 1), 0]
    for name, info in launch(1)[1].items():
        if "messages_per_step" in info:
            assert info["messages_per_step"] == 0 and info["bytes_per_step"] == 0, name


@pytest.mark.parametrize("p", RANKS)
def test_errors(p):
    errors = launch(p)[1]["errors"]
    want = {
        "dims_mismatch": "DeviceCountError",
        "halo_too_wide": "HaloError",
        "periodic_mismatch": "LayoutError",
        "bad_ext_shape": "ShapeMismatchError",
        "bad_op": "PgasError",
    }
    if p > 1:
        want["too_few_cells"] = "LayoutError"
    else:
        want.update(region_step="IndexingError", kernel_shape="ShapeMismatchError")
    assert {k: v[0] for k, v in errors.items()} == want
    assert f"dims = ({p + 1}, 1)" in errors["dims_mismatch"][1]
    assert "mpiexec -n" in errors["dims_mismatch"][1]
    assert "halo[0] = 2" in errors["halo_too_wide"][1]
    assert "periods" in errors["periodic_mismatch"][1]
    if p > 1:
        assert f"global_shape[0] = {p - 1} cells" in errors["too_few_cells"][1]


@pytest.mark.parametrize("p", RANKS)
def test_allreduce(p):
    red = launch(p)[1]["reduce"]
    assert red == {
        "sum": [p * (p + 1) / 2, "float32"],
        "min": [1.0, "float32"],
        "max": [float(p), "float32"],
    }


def test_exception_on_one_rank_ends_the_run(tmp_path):
    cases = tmp_path / "cases.json"
    cases.write_text(
        json.dumps(
            [
                dict(
                    name="fail",
                    kind="fail",
                    kernel="heat",
                    shape=[101],
                    dtype="float64",
                    steps=50,
                    halo=1,
                    boundary="keep",
                )
            ]
        )
    )
    start = time.monotonic()
    proc = subprocess.run(
        [str(MPIEXEC), "-n", "2", sys.executable, str(SCRIPT), str(cases), str(tmp_path)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert time.monotonic() - start < 30
    assert proc.returncode != 0
    assert "rank 1 of 2 failed" in proc.stderr
    assert "deliberate failure on rank 1 at step 3" in proc.stderr
    assert not (tmp_path / "meta.json").exists()


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(**env), capture_output=True, text=True, timeout=60
    )


def test_require_launcher():
    code = (
        "import sys; sys.argv = ['heat.py', '--n', '64']\n"
        "from pgas.references.mpi import require_launcher\n"
        "require_launcher(1)\n"
        "require_launcher(4)\n"
    )
    proc = _python(code)
    assert proc.returncode != 0
    assert "DeviceCountError" in proc.stderr
    assert "started without an MPI launcher" in proc.stderr
    assert "mpiexec -n 4 python heat.py --n 64" in proc.stderr
    proc = _python(code, OMPI_COMM_WORLD_SIZE="4")  # another MPI library's mpiexec
    assert proc.returncode != 0
    assert "another MPI library" in proc.stderr and str(MPIEXEC) in proc.stderr
    # check_world's message, as pgas.mpi.run gives it (test_mismatched_mpi_library_is_named)
    assert "launcher started 4 (OMPI_COMM_WORLD_SIZE=4)" in proc.stderr
    assert "COMM_WORLD has 1 rank(s)" in proc.stderr
    assert "python -m mpi4py --mpi-library" in proc.stderr


# OMPI_COMM_WORLD_SIZE: test_require_launcher, the same check_world (pgas.mpi.run and
# require_launcher both call it; it reads the size from either variable)
@pytest.mark.parametrize("var", ["PMI_SIZE"])
def test_mismatched_mpi_library_is_named(var):
    """A launcher that announced 4 ranks, but mpi4py's library sees a 1-rank world."""
    code = (
        "from pgas import mpi\n"
        "heat = lambda e: 0.5 * e[1:-1] + 0.25 * (e[:-2] + e[2:])\n"
        "mpi.run(heat, lambda x: x * 1.0, (16,), 'float64', 2, 1, mpi_boundary)\n"
    ).replace("mpi_boundary", "__import__('pgas').Keep()")
    proc = _python(code, **{var: "4", "PMI_RANK": "0"})
    assert proc.returncode != 0
    assert "DeviceCountError" in proc.stderr
    assert f"launcher started 4 ({var}=4)" in proc.stderr
    assert "COMM_WORLD has 1 rank(s)" in proc.stderr
    assert "python -m mpi4py --mpi-library" in proc.stderr and str(MPIEXEC) in proc.stderr


def test_check_world_without_a_launcher():
    """No launcher: one rank is fine, an expected count of more is refused (one process)."""
    proc = _python("from pgas import mpi; print(mpi.check_world(), flush=True)\n"
                   "mpi.check_world(expected=3)")  # fmt: skip
    assert proc.stdout.strip() == "1", proc.stderr  # the first call returned
    assert proc.returncode != 0
    assert "expected_ranks = 3" in proc.stderr and "without an MPI launcher" in proc.stderr


def test_import_error_without_mpi4py():
    proc = _python("import sys; sys.modules['mpi4py'] = None\nimport pgas.mpi")
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr and "pip install mpi4py mpich" in proc.stderr
