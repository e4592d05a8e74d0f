"""The result record, the comparison table and the summary line."""

import json

import numpy as np
import pytest

from pgas.app.results import Result, format_table, summary_line


def _result(**kw):
    base = dict(backend="auto", devices=4, processes=1, mesh={"x": 4}, shape=(1000,), steps=100,
                seconds=0.5, checksum="0123456789abcdef" * 4)  # fmt: skip
    return Result(**{**base, **kw})


def test_rate_counts_only_the_steps_run():
    assert _result().cell_updates_per_second == pytest.approx(1000 * 100 / 0.5)
    assert _result(start_step=60).cell_updates_per_second == pytest.approx(1000 * 40 / 0.5)
    assert np.isnan(_result(seconds=0.0).cell_updates_per_second)


def test_dict_round_trip_is_json_and_leaves_arrays_out():
    r = _result(field=np.arange(3), steps_per_exchange=4, steps_per_exchange_note="lowered")
    d = json.loads(json.dumps(r.to_dict()))
    assert "field" not in d and "snapshots" not in d and d["shape"] == [1000]
    assert d["steps_per_exchange"] == 4 and d["platform"] == "cpu"
    back = Result.from_dict(d, field=np.arange(3))
    assert back == r and back.field.tolist() == [0, 1, 2]


def test_table_per_physical_step_k_and_platform():
    rows = [
        _result(messages_per_step=2.0, bytes_per_step=8.0, ideal_bytes_per_step=8),
        _result(backend="explicit", messages_per_step=0.25, bytes_per_step=1.0,
                steps_per_exchange=8, platform="gpu", device_kind="NVIDIA H100"),
        _result(backend="mpi", processes=4, checksum="f" * 64, steps_per_exchange_note="why"),
    ]  # fmt: skip
    lines = format_table(rows).splitlines()
    assert lines[0].split()[:4] == ["backend", "platform", "devices/ranks", "k"]
    auto, expl, mpi = (line.split() for line in lines[1:4])
    assert auto[3] == "1" and auto[6:9] == ["2.0", "8.0", "8"] and auto[-1] == "yes"
    assert expl[1] == "gpu" and expl[3] == "8" and expl[6:8] == ["0.25", "1.0"]
    assert mpi[2] == "4" and mpi[-1] == "NO" and mpi[8] == "-"
    assert "  devices gpu: NVIDIA H100" in lines and "  k mpi: why" in lines


def test_summary_line_names_platform_kind_and_k():
    d = dict(_result(steps_per_exchange=4, device_kind="NVIDIA H100").to_dict(), example="demo",
             dtype="float32")  # fmt: skip
    line = summary_line(d)
    assert line.startswith("demo (1000,) float32: 100 steps on auto (4 cpu device(s) [NVIDIA H100]")
    assert "k = 4" in line and "\n" not in line
    assert summary_line(dict(d, steps_per_exchange_note="lowered")).endswith("\n  k lowered")


def test_table_of_an_iterative_problem_shows_the_steps_taken():
    done = Result("auto", 2, 1, {"x": 2}, (8,), 48, 0.5, "ab" * 8, converged=True, check_every=16)
    cut = Result("mpi", 2, 2, {"x": 2}, (8,), 100, 0.5, "cd" * 8, converged=False,
                 check_every=16)  # fmt: skip
    lines = format_table([done, cut]).splitlines()
    assert lines[0].split()[-3:] == ["steps", "checksum", "equal"]
    assert lines[1].split()[-3:] == ["48", "abababababababab", "yes"]
    assert lines[2].split()[-3:] == ["100!", "cdcdcdcdcdcdcdcd", "NO"]
    assert "tested every 16 steps" in lines[-1]
    assert "steps" not in format_table([Result("auto", 1, 1, {"x": 1}, (8,), 4, 1.0, "ab")])
