"""examples/inverse at a tiny size: gradient descent through pgas.run recovers the field,
the initial velocity of a Burgers flow and its viscosity (a parameter of the step)."""

import numpy as np
import pytest
from helpers import fails_with, last_json, load_example


def test_inverse_recovers_the_initial_field(capsys):
    inverse = load_example("inverse")
    result = inverse.main(["--n", "16", "--steps", "6", "--iters", "30", "--devices", "4",
                           "--noise", "0.001"])  # fmt: skip
    loss = np.asarray(result["loss"])
    assert np.all(np.diff(loss) < 0) and loss[-1] < 0.05 * loss[0]
    assert result["error_recovered"] < 0.75 * result["error_observed"]
    assert "recovered" in capsys.readouterr().out


def test_burgers_inverse_recovers_the_initial_velocity_through_checkpointed_segments(capsys):
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


def test_viscosity_recovered_the_same_on_1_and_3_devices_its_gradient_central_differences(capsys):
    import pgas
    from pgas.loop.derivative import reverse_of
    from pgas.loop.programs import program

    viscosity = load_example("inverse", "viscosity")
    n, steps = viscosity.burgers.SMALLEST, 100
    argv = ["--n", str(n), "--steps", str(steps), "--iters", "10", "--noise", "0.001"]
    one = viscosity.main(argv + ["--devices", "1"])
    three = viscosity.main(argv + ["--devices", "3", "--json"])  # uneven blocks: 126, 126, 125
    loss = np.asarray(one["loss"])
    assert np.all(np.diff(loss) < 0) and loss[-1] < 0.01 * loss[0]
    assert one["error"][0] == pytest.approx(2.0) and one["error"][-1] < 0.04
    for key in ("nu", "loss", "gradient"):
        np.testing.assert_allclose(three[key], one[key], rtol=1e-10)
    out = capsys.readouterr().out
    assert "relative error of the viscosity 2.000 ->" in out
    assert last_json(out)["nu_recovered"] == three["nu"][-1]
    # the gradient with respect to nu (through params on 3 devices, the viscosity's
    # cotangent summed across blocks) against central differences of the misfit, in float64
    c, r = viscosity.grid(n, 3.0)
    u0 = pgas.from_numpy(viscosity.burgers.truth(n), pgas.make_mesh(("x",), devices=3),
                         boundary=viscosity.burgers.BOUNDARY)  # fmt: skip
    step, d = viscosity.stepper(c), 3.0 * viscosity.NU * r  # the checkpointed way back, params
    plan = pgas.plan.plan(step, u0, 1, params=d)
    loop = program(step, 1, plan.widths, None, None, takes_params=True).inline
    assert reverse_of(step, steps, plan, (), loop, u0, d, True).with_params

    def misfit(nu):
        out = viscosity.forward(float(np.log(nu)), u0, steps, c, r).to_numpy()
        return 0.5 * np.sum((out - three["observed"]) ** 2)

    for nu, d_theta in zip(three["nu"][:2], three["gradient"][:2]):  # at 3 nu and after a step
        eps = 1e-5 * nu
        central = (misfit(nu + eps) - misfit(nu - eps)) / (2 * eps)
        assert central > 0 and d_theta / nu == pytest.approx(central, rel=1e-6)


def test_viscosity_bad_inputs_name_the_flag_the_value_and_the_fix(capsys):
    viscosity = load_example("inverse", "viscosity")
    fails_with(viscosity.main, ["--start", "0.5"], capsys, "--start 0.5:", "above 1")
    fails_with(viscosity.main, ["--rate", "2"], capsys, "--rate 2.0:", "0 < rate < 2")
    fails_with(viscosity.main, ["--noise", "-1"], capsys, "--noise -1.0:", "give 0 or more")
    fails_with(viscosity.main, ["--n", "65"], capsys, "--n 65: central differences",
               f"--n {viscosity.burgers.SMALLEST} or more")  # fmt: skip
