"""use_cpu_devices: the same count again is harmless; another count once JAX runs, or a count
that is not a whole number >= 1, is refused with the fix."""

import jax
import pytest

from pgas.errors import DeviceCountError
from pgas.runtime.devices import use_cpu_devices


def _started() -> int:
    """JAX's CPU device count, its backend started first (so no call below can change it)."""
    return len(jax.devices("cpu"))


def test_the_count_jax_runs_with_is_harmless():
    have = _started()
    use_cpu_devices(have)
    assert len(jax.devices("cpu")) == have


def test_another_count_once_jax_runs_names_the_fix():
    have = _started()
    with pytest.raises(DeviceCountError) as err:
        use_cpu_devices(have + 1)
    text = str(err.value)
    assert text.startswith(f"use_cpu_devices({have + 1}): JAX has already started with {have}")
    assert f"XLA_FLAGS=--xla_force_host_platform_device_count={have + 1}" in text
    assert len(jax.devices("cpu")) == have  # nothing changed


@pytest.mark.parametrize("bad", [0, -2, True, 2.0, "4", None])
def test_a_count_that_is_not_a_whole_number_of_devices(bad):
    with pytest.raises(DeviceCountError, match=rf"^count = {bad!r}: ask for a whole number"):
        use_cpu_devices(bad)
