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
