"""Test set-up: 8 virtual CPU devices (stand-ins for GPUs) and 64-bit JAX.

The device count is fixed once JAX starts, so it is set here, before any test
imports JAX; meshes of 1, 2, 3, 4, 6 and 8 devices use subsets.
"""

import os
import re
import shutil
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache per test run, shared by both xdist workers (they inherit
# the controller's environment) and every process the tests launch: the examples and the MPI
# scripts compile the same programs again and again, and load them instead (about 0.6 s of a
# 2 s heat1d launch). The cache is keyed by the program and XLA's flags, so a run under other
# flags (no FMA) compiles its own; it is removed when the run ends.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="pgas-tests-jax-cache-")
_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"]
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# Launches run more MPI ranks than CI has cores (3 or 4 on 2): a rank waiting for a message
# yields its core with nanosleep instead of sched_yield, so the waiting ranks spin less on the
# cores the others need (MPICH's heavy yield; the same messages and bits). Every process the
# tests launch inherits it; a 4-rank stencil launch took 4.6-4.9 s of CPU against 8.0-8.7 s.
os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
import jax  # noqa: E402
import pytest  # noqa: E402

import pgas  # noqa: E402

pgas.use_cpu_devices(8)
jax.config.update("jax_enable_x64", True)
jax.devices()  # start the backend now: in-process runs of the examples cannot change the count


def _durations(name: str):
    """The durations of JAX's monitoring event ``name`` while the test runs."""
    seen = []

    def listen(event, secs, **kwargs):
        if event == name:
            seen.append(secs)

    jax.monitoring.register_event_duration_secs_listener(listen)
    yield seen
    jax.monitoring.unregister_event_duration_listener(listen)


@pytest.fixture
def compiles():
    """The XLA compilations of this test so far (their durations), from JAX's monitoring."""
    yield from _durations("/jax/core/compile/backend_compile_duration")


@pytest.fixture
def lowerings():
    """The programs this test lowered to XLA so far (compiled, or loaded from the persistent
    cache, which ``compiles`` does not see)."""
    yield from _durations("/jax/core/compile/jaxpr_to_mlir_module_duration")


@pytest.fixture(scope="session")
def cluster():
    """The local Slurm of scripts/local-slurm, started once for every test that submits jobs
    (tests/slurm_cluster.py; skipped where it cannot start): its environment."""
    import slurm_cluster  # tests/ is on sys.path (pyproject's pythonpath)

    yield from slurm_cluster.running_cluster()


def pytest_report_header(config):
    import mpi4py
    from mpi4py import MPI

    return [
        f"pgas {pgas.__version__}, jax {jax.__version__}, {len(jax.devices())} "
        f"{jax.devices()[0].platform} devices, python {sys.version.split()[0]}",
        f"mpi4py {mpi4py.__version__}, MPI: {MPI.Get_library_version().splitlines()[0]}",
    ]


# Under pytest-xdist (``make test`` runs two workers), every test that launches processes
# (mpiexec, srun, Slurm, subprocesses) runs on one worker, one at a time (``--dist
# loadgroup``): two multi-process runs never compete for the cores, ports or a Slurm
# cluster, while the in-process tests run beside them on both workers. A test launches
# when its source, or that of a module-level function or fixture it names (at any
# depth), matches; a test whose source cannot be found counts as launching. A test marked
# ``one_process`` starts a single process of its own (Sphinx, a script under other XLA flags):
# no launcher, no ports, so it runs on either worker like the in-process tests.
_LAUNCHES = re.compile(
    r"subprocess|mpiexec|MPIEXEC|srun|slurm|kill_after|run_example|run_mpi|compare\("
)


_LINE = re.compile(r"[^\r\n]*(?:\r\n|[\r\n])|[^\r\n]+\Z")  # lines as Python's parser splits


def _segment(lines: list[str], node) -> str:
    """``ast.get_source_segment`` of ``node`` from the file's ``lines`` (offsets in UTF-8)."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return lines[first].encode()[node.col_offset : node.end_col_offset].decode()
    head = lines[first].encode()[node.col_offset :].decode()
    tail = lines[last].encode()[: node.end_col_offset].decode()
    return head + "".join(lines[first + 1 : last]) + tail


def _launching(path) -> tuple[set[str], bool, set[str]]:
    """A test module's functions that launch processes, whether the module does, and the
    names of all its functions."""
    import ast

    text = path.read_text(errors="replace")
    lines = _LINE.findall(text)  # once: ast.get_source_segment splits the whole file per call
    sources = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sources[node.name] = sources.get(node.name, "") + _segment(lines, node)
    found = {name for name, src in sources.items() if _LAUNCHES.search(src)}
    grown = True
    while grown:
        named = {name for name, src in sources.items() if name not in found
                 and any(re.search(rf"\b{re.escape(f)}\b", src) for f in found)}  # fmt: skip
        found |= named
        grown = bool(named)
    return found, bool(_LAUNCHES.search(text)), set(sources)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group into the nodeid
def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("xdist"):
        return
    modules: dict[str, tuple] = {}
    for item in items:
        path = str(item.path)
        if path not in modules:
            modules[path] = _launching(item.path) if path.endswith(".py") else (set(), True, set())
        found, module, known = modules[path]
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        if item.get_closest_marker("one_process"):
            continue
        if name in found or (name not in known and module):
            item.add_marker(pytest.mark.xdist_group("processes"))


def pytest_runtest_setup(item):
    """Under ``--dist loadgroup`` a grouped test must carry its group in its node id, which is
    how pytest-xdist schedules a group on one worker; fail it, saying why, if it does not."""
    if (
        "PYTEST_XDIST_WORKER" in os.environ
        and item.config.getvalue("loadgroup")
        and item.get_closest_marker("xdist_group")
        and "@" not in item.nodeid
    ):
        pytest.fail(
            "pytest-xdist did not group this test, which launches processes: such tests would "
            "run on both workers at once. pyproject.toml pins a pytest whose node ids "
            "pytest-xdist can group; reinstall with make test",
            pytrace=False,
        )


def pytest_sessionfinish(session, exitstatus):
    if "PYTEST_XDIST_WORKER" not in os.environ and "pgas-tests-jax-cache-" in _CACHE:
        shutil.rmtree(_CACHE, ignore_errors=True)  # the controller's, after every worker
