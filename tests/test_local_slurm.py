"""A real (local) Slurm runs a multi-process JAX job across two nodes.

Starts scripts/local-slurm (installing Debian's Slurm if needed), submits a
2 nodes x 1 task batch job whose tasks call `jax.distributed.initialize()`
(auto-detected from Slurm), sum a global array sharded over the 2 processes'
devices, and checks the sum and that both nodes took part (2 nodes x 2 tasks, with
pgas: tests/examples/test_examples_slurm.py).
"""

import shlex
import sys
import textwrap
import time

import numpy as np
import pytest

try:
    from . import slurm_cluster
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import slurm_cluster

# Runs in every task.  argv[1] is the directory to write results to.
JOB_CODE = textwrap.dedent("""
    import os, socket, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 1)
    jax.distributed.initialize()  # Slurm is detected from SLURM_* variables

    out, rank = sys.argv[1], jax.process_index()
    with open(os.path.join(out, f"task-{rank}.txt"), "w") as f:
        f.write(f"{socket.gethostname()} {os.environ['SLURM_PROCID']} "
                f"{jax.process_count()} {jax.device_count()} "
                f"{jax.local_device_count()}\\n")

    data = np.arange(1024, dtype=np.float32) * 0.25  # exact in any order
    mesh = Mesh(np.array(jax.devices()), ("x",))
    x = jax.make_array_from_callback(
        data.shape, NamedSharding(mesh, P("x")), lambda idx: data[idx])
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x)
    value = float(total)  # replicated: every process can read it
    if rank == 0:
        with open(os.path.join(out, "result.tmp"), "w") as f:
            f.write(repr(value))
        os.replace(os.path.join(out, "result.tmp"), os.path.join(out, "result.txt"))
    jax.distributed.shutdown()
""")


@pytest.mark.slow
def test_jax_job_spans_two_nodes(cluster, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(
        "\n".join(
            [
                "#!/bin/bash",
                "#SBATCH --job-name=pgas-jax-smoke",
                "#SBATCH --nodes=2",
                "#SBATCH --ntasks-per-node=1",
                "#SBATCH --time=00:05:00",
                f"#SBATCH --output={tmp_path}/slurm-%j.out",
                "set -e",
                f"srun --mpi=pmi2 {shlex.quote(sys.executable)} -c {shlex.quote(JOB_CODE)} "
                f"{shlex.quote(str(tmp_path))}",
            ]
        )
        + "\n"
    )
    t0 = time.monotonic()
    job_id, state = slurm_cluster.submit_and_wait(script, timeout=180, env=cluster, cwd=tmp_path)
    elapsed = time.monotonic() - t0
    output = (
        (tmp_path / f"slurm-{job_id}.out").read_text(errors="replace")
        if (tmp_path / f"slurm-{job_id}.out").exists()
        else "(no output file)"
    )
    print(f"job {job_id}: {state} {elapsed:.1f} s from submit to done")
    assert state == "COMPLETED", f"job {job_id} ended {state}:\n{output}"

    tasks = sorted(tmp_path.glob("task-*.txt"))
    assert len(tasks) == 2, output
    rows = [t.read_text().split() for t in tasks]
    hosts = [row[0] for row in rows]
    assert sorted(hosts) == ["n1", "n2"], rows
    assert sorted(int(row[1]) for row in rows) == [0, 1]
    assert all(row[2:] == ["2", "2", "1"] for row in rows), rows  # procs, devs, local

    data = np.arange(1024, dtype=np.float32) * 0.25
    result = float((tmp_path / "result.txt").read_text())
    assert result == float(np.sum(data)), (result, output)


def _daemons_of(conf: str) -> dict[int, str]:
    """{pid: comm} of the Slurm/munge daemons whose environment names `conf`."""
    from pathlib import Path

    found = {}
    for entry in Path("/proc").iterdir():
        try:
            comm = (entry / "comm").read_text().strip()
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if comm.startswith(("slurm", "munge")) and f"SLURM_CONF={conf}".encode() in env:
            found[int(entry.name)] = comm
    return found


@pytest.mark.slow
def test_stop_returns_when_the_daemons_are_gone(tmp_path):
    """A cluster of its own (state dir, ports) with a running job; after `stop` returns,
    no daemon is left in the process table, not even as a zombie."""
    import os
    import subprocess

    reason = slurm_cluster.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    import shutil
    import tempfile
    from pathlib import Path

    state = Path(tempfile.mkdtemp(prefix="pgas-slurm-stop-", dir="/tmp"))  # munged reads it
    state.chmod(0o755)
    env = dict(os.environ, PGAS_SLURM_DIR=str(state), PGAS_SLURM_PORT=str(7300 + os.getpid() % 400))
    run = lambda *a: subprocess.run([str(slurm_cluster.SCRIPT), *a], env=env, capture_output=True,
                                    text=True, timeout=120)  # fmt: skip
    started = run("start", "--nodes", "1")
    assert started.returncode == 0, started.stderr
    conf = str(state / "etc" / "slurm.conf")
    try:
        job = tmp_path / "job.sh"
        job.write_text("#!/bin/bash\nsrun sleep 60\n")
        jid = slurm_cluster.submit(job, dict(slurm_cluster.cluster_env(env), SLURM_CONF=conf),
                                   cwd=tmp_path, args=("-o", str(tmp_path / "out")))  # fmt: skip
        deadline = time.monotonic() + 60
        while "slurmstepd" not in _daemons_of(conf).values() and time.monotonic() < deadline:
            time.sleep(0.1)
        before = _daemons_of(conf)
        assert {"slurmctld", "slurmd", "slurmstepd"} <= set(before.values()), (jid, before)
    finally:
        stopped = run("stop")
    shutil.rmtree(state, ignore_errors=True)
    assert stopped.returncode == 0, stopped.stderr
    left = [pid for pid in before if os.path.exists(f"/proc/{pid}")]
    assert left == [], (left, stopped.stderr)
    assert "daemon process(es) are gone" in stopped.stderr
