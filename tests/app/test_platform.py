"""Platform selection: JAX's platform and devices, their errors, the mpi launcher check.

Tests run on conftest's 8 CPU devices (JAX has started): the GPU cases are the
errors a CPU-only machine gives, and a faked GPU device for the device-count
message; one subprocess checks the example's exit code 2 without a traceback.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from helpers import fails_with, load_example

import pgas
from pgas.app import platform
from pgas.app.options import RunOptions

H = load_example("heat1d")
HEAT = Path(__file__).resolve().parents[2] / "examples" / "heat1d" / "heat1d.py"


@pytest.fixture
def keep_platforms():
    """Put JAX's platform setting back after a test changed it."""
    before = jax.config.jax_platforms
    yield
    jax.config.update("jax_platforms", before)


def fake_gpu(monkeypatch):
    kind = {"platform": "gpu", "device_kind": "NVIDIA H100 80GB HBM3"}
    monkeypatch.setattr(platform, "describe", lambda: dict(kind))


def test_describe_names_cpu():
    assert platform.describe() == {"platform": "cpu", "device_kind": jax.devices()[0].device_kind}


def test_select_picks_from_started_devices(keep_platforms):
    platform.select("auto", 4)
    platform.select("cpu", 8)
    platform.select("auto", None)


def test_too_many_devices_on_cpu():
    with pytest.raises(pgas.DeviceCountError, match="--devices 9: JAX started with 8 CPU"):
        platform.select("auto", 9)


def test_too_many_gpus_names_the_cpu_fix(monkeypatch):
    fake_gpu(monkeypatch)
    with pytest.raises(pgas.DeviceCountError) as err:
        platform.select("auto", 9)
    msg = str(err.value)
    assert "--devices 9" in msg and "NVIDIA H100" in msg and "--devices 8 or fewer" in msg
    assert "--platform cpu for 9 virtual CPU devices" in msg


def test_gpu_without_gpu(keep_platforms):
    with pytest.raises(pgas.DeviceCountError, match=r"--platform gpu: .*\.\[cuda\]"):
        platform.select("gpu", None)


def test_gpu_lets_jax_pick_the_gpu_plugin(keep_platforms, monkeypatch):
    """JAX's "gpu" means CUDA and ROCm and fails without both plugins (seen on an H100)."""
    fake_gpu(monkeypatch)
    jax.config.update("jax_platforms", "cpu")
    platform.select("gpu", None)
    assert jax.config.jax_platforms in (None, "")


def test_unknown_platform():
    with pytest.raises(pgas.PgasError, match="platform = 'tpu': choose auto, cpu or gpu"):
        platform.select("tpu", None)


def test_start_reports_the_session(monkeypatch):
    s = platform.start(RunOptions(devices=2, dtype="float64"), "demo.py")
    assert (s.rank, s.processes, s.multiprocess, s.platform) == (0, 1, False, "cpu")
    fake_gpu(monkeypatch)
    assert platform.start(RunOptions(devices=1), "demo.py").device_kind.startswith("NVIDIA")


def test_only_a_process_of_a_multiprocess_job_shares_one_heap(monkeypatch):
    from pgas.references import mpi
    from pgas.runtime import memory

    calls = []
    monkeypatch.setattr(memory, "share_one_heap", lambda: calls.append(True))
    monkeypatch.setattr(memory, "return_freed_buffers", lambda: True)  # this process's own
    platform.start(RunOptions(devices=2), "demo.py")
    assert calls == []  # one process: glibc's default heaps, which compile faster
    monkeypatch.setattr(mpi, "launched", lambda: False)
    with pytest.raises(pgas.PgasError):  # an mpi run outside a launcher: refused after
        platform.start(RunOptions(backend="mpi"), "demo.py")
    assert calls == [True]


def test_start_mpi_without_launcher_says_how(monkeypatch):
    from pgas.references import mpi

    monkeypatch.setattr(mpi, "launched", lambda: False)
    with pytest.raises(pgas.PgasError, match=r"mpiexec -n 4 .*demo\.py --backend mpi"):
        platform.start(RunOptions(backend="mpi"), "demo.py")


def test_example_stops_on_too_many_gpus(monkeypatch, capsys):
    fake_gpu(monkeypatch)
    fails_with(H.main, ["--devices", "9", "--steps", "2"], capsys, "DeviceCountError",
               "--platform cpu for 9 virtual CPU devices")  # fmt: skip


@pytest.mark.one_process
def test_platform_gpu_on_a_cpu_machine_exits_2_without_traceback():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "XLA_FLAGS"))}
    env.pop("JAX_PLATFORMS", None)
    env.update(CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="")  # a GPU machine acts as one without
    proc = subprocess.run([sys.executable, str(HEAT), "--platform", "gpu", "--steps", "2"],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--platform gpu" in proc.stderr and ".[cuda]" in proc.stderr
    # no traceback through pgas or the example (on a GPU machine with its GPUs hidden, JAX
    # itself may log its CUDA plugin's failure with a traceback before pgas's error)
    ours = (str(Path(pgas.__file__).parent), str(HEAT.parent))
    frames = re.findall(r'File "([^"]+)"', proc.stderr)
    assert not [f for f in frames if f.startswith(ours)], proc.stderr
