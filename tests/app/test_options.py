"""Run options: the shared command line, checked once into a frozen record."""

import argparse
import dataclasses

import pytest

from pgas.app import options
from pgas.app.options import RunOptions, from_args, make_parser


def _parser():
    return make_parser("Demo.\n\nMore.", steps=100, dtypes=("float32", "float64"), plots="pics")


def _opts(*argv, snapshots=10, suffixes=(".png",)):
    ap = _parser()
    args = ap.parse_args(list(argv))
    before = dict(vars(args))
    opts = from_args(ap, args, script="ex/demo.py", plot_suffixes=suffixes, snapshots=snapshots)
    assert vars(args) == before  # the Namespace is never changed
    return opts


def test_defaults_and_record_is_frozen():
    opts = _opts()
    assert opts.backend == "auto" and opts.platform == "auto" and opts.steps == 100
    assert opts.steps_per_exchange == "auto" and opts.snapshot_every is None
    assert opts.checkpoint == "out/demo.ckpt" and not opts.checkpointing and not opts.quiet
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.steps = 3


def test_values_are_carried_over(tmp_path):
    out = tmp_path / "d.nc"
    opts = _opts("--backend", "explicit", "--platform", "cpu", "--devices", "3", "--steps",
                 "1_000", "--steps-per-exchange", "8", "--dtype", "float64", "--out", str(out),
                 "--checkpoint-every", "500", "--json", "--quiet")  # fmt: skip
    assert (opts.backend, opts.platform, opts.devices, opts.steps) == ("explicit", "cpu", 3, 1000)
    assert opts.steps_per_exchange == 8 and opts.dtype == "float64" and opts.json and opts.quiet
    assert opts.checkpoint == str(tmp_path / "d.ckpt") and opts.checkpointing
    # default snapshots with --out: at most 10, dividing both --steps and --checkpoint-every
    assert opts.snapshot_every == 100


def test_steps_per_exchange_type():
    assert options.steps_per_exchange("AUTO") == "auto"
    assert options.steps_per_exchange("1_6") == 16
    for bad in ("0", "-2", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="K >= 1 or auto"):
            options.steps_per_exchange(bad)


def test_whole_numbers():
    assert options.positive_int("1_000_003") == 1000003
    assert options.non_negative_int("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="positive"):
        options.positive_int("0")
    with pytest.raises(argparse.ArgumentTypeError, match="not a whole number"):
        options.non_negative_int("two")


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["--steps-per-exchange", "0"], ["--steps-per-exchange", "K >= 1 or auto"]),
        (["--platform", "tpu"], ["--platform", "auto", "cpu", "gpu"]),
        (["--steps", "10", "--snapshot-every", "3"], ["does not divide", "--steps 12"]),
        (["--snapshot-every", "4", "--checkpoint-every", "6"], ["multiple of --snapshot-every 4"]),
        (["--backend", "mpi", "--restart"], ["--backend auto and explicit only"]),
        (["--backend", "mpi", "--compare"], ["--compare runs all three backends"]),
        (["--plot", "a.jpg"], ["--plot 'a.jpg'", ".png"]),
    ],
)
def test_errors_exit_2_with_the_fix(argv, needles, capsys):
    with pytest.raises(SystemExit) as exc:
        _opts(*argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, (needle, err)


def test_default_every():
    assert options.default_every(1000, 64) == 20
    assert options.default_every(0, 64) == 1
    assert options.default_every(7, 3) == 7  # a prime: one snapshot at the end


def test_or_exit_names_specific_errors(capsys):
    import pgas

    ap = argparse.ArgumentParser(prog="demo")
    assert options.or_exit(ap, lambda: 5) == 5

    def fail():
        raise pgas.DeviceCountError("--devices 9: too many")

    with pytest.raises(SystemExit) as exc:
        options.or_exit(ap, fail)
    assert exc.value.code == 2
    assert "demo: error: DeviceCountError: --devices 9: too many" in capsys.readouterr().err


def test_record_can_be_built_directly():
    opts = RunOptions(backend="mpi", steps=5, steps_per_exchange=2)
    assert dataclasses.replace(opts, steps=6).steps == 6 and opts.steps == 5
