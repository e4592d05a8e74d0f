"""examples/inverse at a tiny size: gradient descent through pgas.run recovers the field."""

import numpy as np
from helpers import load_example


def test_inverse_recovers_the_initial_field(capsys):
    inverse = load_example("inverse")
    result = inverse.main(["--n", "16", "--steps", "6", "--iters", "30", "--devices", "4",
                           "--noise", "0.001"])  # fmt: skip
    loss = np.asarray(result["loss"])
    assert np.all(np.diff(loss) < 0) and loss[-1] < 0.05 * loss[0]
    assert result["error_recovered"] < 0.75 * result["error_observed"]
    assert "recovered" in capsys.readouterr().out


def test_burgers_inverse_recovers_the_initial_velocity_through_checkpointed_segments(capsys):
    import pytest

    import pgas

    burgers = load_example("inverse", "burgers")
    n, steps = 513, 20
    # a nonlinear step: reverse mode runs it back in checkpointed segments, halo-sized
    u = pgas.from_numpy(burgers.truth(n), pgas.make_mesh(devices=3), boundary=burgers.BOUNDARY)
    back = pgas.comm_report(burgers.burgers, u, gradient=True, steps=steps,
                            params=burgers.courant(n))  # fmt: skip
    assert back.note.startswith("1 on the way back") and "checkpoints" in back.note
    assert back.gathers == 0
    result = burgers.main(["--n", str(n), "--steps", str(steps), "--iters", "12",
                           "--devices", "3", "--noise", "0.001"])  # fmt: skip
    loss = np.asarray(result["loss"])
    assert np.all(np.diff(loss) < 0) and loss[-1] < 0.5 * loss[0]
    assert result["error_recovered"] < 0.75 * result["error_observed"]
    assert "recovered" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        burgers.main(["--steps", "0"])
    assert "--steps 0: give a whole number >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        burgers.main(["--n", "65"])
    assert "--n 65: central differences are unstable" in capsys.readouterr().err
