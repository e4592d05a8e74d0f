"""A field too large for its devices' memory is refused before it is allocated: host memory
(what this process can get, under a cgroup's limit too) and an accelerator's bytes limit; the
runner counts the buffers of a run. A field larger than memory used to be killed without a
word."""

import types

import numpy as np
import pytest

import pgas
from pgas.app import runner
from pgas.app.options import RunOptions
from pgas.app.problem import demo
from pgas.errors import FieldTooLargeError
from pgas.runtime import capacity


def test_a_field_too_large_for_memory_is_refused_before_it_is_allocated():
    """128 TiB over 8 CPU devices: 16 TiB a device, more than any host here has."""
    mesh = pgas.make_mesh(("x",), devices=8)
    n = 2**45
    makers = [
        lambda: pgas.zeros((n,), mesh),
        lambda: pgas.full((n,), 1.0, mesh),
        lambda: pgas.from_function(lambda i: i, (n,), mesh),
        lambda: pgas.from_numpy(np.broadcast_to(np.float32(0), (n,)), mesh),  # no memory
    ]
    for make in makers:
        with pytest.raises(FieldTooLargeError) as err:
            make()
        text = str(err.value)
        assert f"the field ({n},) (float32) needs 16384.00 GiB per device" in text, text
        assert "8 CPU device(s)" in text and "GiB" in text.split("but it can get")[1]
        assert "run on more nodes" in text and "make the field smaller" in text
        assert isinstance(err.value, MemoryError)


def test_the_runner_counts_the_buffers_of_a_run(monkeypatch):
    """With room for 1.5 states: the state alone is built, a run (2 buffers) is refused."""
    mesh = runner.mesh_for(demo(), 2)
    one = sum(s.data.nbytes for s in runner.build(demo(), mesh).data.addressable_shards)
    monkeypatch.setattr(capacity, "SMALL", 0)
    monkeypatch.setattr(capacity, "host_available", lambda: one * 3 // 2)
    runner.build(demo(), mesh)  # one buffer fits
    with pytest.raises(FieldTooLargeError, match=r"the demo field .* \(2 buffers of its"):
        runner.run(demo(), RunOptions(steps=2, devices=2))
    monkeypatch.setenv("PGAS_MEMORY_CHECK", "0")
    assert runner.run(demo(), RunOptions(steps=2, devices=2)).steps == 2


def test_an_accelerator_is_compared_with_its_bytes_limit():
    gpu = types.SimpleNamespace(platform="gpu", id=3, device_kind="H100",
                                memory_stats=lambda: {"bytes_limit": 2**30})  # fmt: skip
    capacity.check_fits((2**28,), "float32", [gpu])  # exactly its memory
    with pytest.raises(
        FieldTooLargeError,
        match=r"2.00 GiB per device .* but gpu:3 \(H100\) "
        r"holds 1.00 GiB; spread it over more devices .* or store it in float32",
    ):
        capacity.check_fits((2**27,), "float64", [gpu], buffers=2)


def test_a_cgroup_limit_caps_the_memory_a_process_can_get(tmp_path):
    """Slurm jobs and containers: the room under the cgroup's limit, page cache counted free;
    the least of the cgroup and its parents (v2 and v1)."""
    v2 = tmp_path / "v2"
    (v2 / "job" / "step").mkdir(parents=True)
    for where, limit, used, cache in [("job", "3221225472", "2147483648", "0"),
                                      ("job/step", "max", "1073741824", "0")]:  # fmt: skip
        (v2 / where / "memory.max").write_text(limit + "\n")
        (v2 / where / "memory.current").write_text(used + "\n")
        (v2 / where / "memory.stat").write_text(f"anon 5\nfile {cache}\n")
    (v2 / "job" / "memory.stat").write_text("file 536870912\n")
    me = tmp_path / "cgroup"
    me.write_text("0::/job/step\n")
    assert capacity._cgroup_room(v2, str(me)) == 3 * 2**30 - 2 * 2**30 + 2**29
    v1 = tmp_path / "v1" / "memory" / "slurm"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("1073741824\n")
    (v1 / "memory.usage_in_bytes").write_text("1073741824\n")
    (v1 / "memory.stat").write_text("cache 1\ntotal_cache 268435456\n")
    me.write_text("4:memory:/slurm\n0::/\n")
    assert capacity._cgroup_room(tmp_path / "v1", str(me)) == 2**28
    me.write_text("0::/\n")
    assert capacity._cgroup_room(tmp_path / "none", str(me)) is None


def test_nothing_small_is_checked_and_the_check_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(capacity, "host_available", lambda: 0)  # no memory left at all
    cpu = types.SimpleNamespace(platform="cpu", id=0, device_kind="cpu")
    capacity.check_fits((capacity.SMALL // 8 - 1,), "float64", [cpu])  # under SMALL bytes
    with pytest.raises(FieldTooLargeError, match=r"\(float64\) needs 0.06 GiB per device"):
        capacity.check_fits((capacity.SMALL // 8,), "float64", [cpu])
    monkeypatch.setenv("PGAS_MEMORY_CHECK", "0")
    capacity.check_fits((capacity.SMALL // 8,), "float64", [cpu])


def test_device_memory_is_the_bytes_limit_of_an_accelerator():
    stats = lambda: {"bytes_limit": 2**34}  # noqa: E731
    assert (
        capacity.device_memory(types.SimpleNamespace(platform="gpu", memory_stats=stats)) == 2**34
    )
    assert capacity.device_memory(types.SimpleNamespace(platform="gpu", memory_stats=dict)) is None
    assert capacity.device_memory(types.SimpleNamespace(platform="cpu")) is None
    assert capacity.gib(3 * 2**29) == "1.50 GiB"
