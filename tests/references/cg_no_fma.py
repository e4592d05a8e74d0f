"""CG on auto and explicit (run_until, and run for NumPy's number of steps), 2x2 devices
(uneven blocks on both axes); run by test_until_backends.py in a process started with
``XLA_FLAGS=--xla_cpu_max_isa=AVX`` (no FMA instructions: XLA rounds every product, as
NumPy). Prints one JSON line: steps, rr and the bytes of x per case."""

import json
import sys
from pathlib import Path

import jax
import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> None:
    sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "mpi_scripts")]
    jax.config.update("jax_enable_x64", True)

    import pgas

    pgas.use_cpu_devices(4)
    import test_until_backends as t
    import until_cases as uc

    from pgas.references import explicit

    out = []
    steps = t.cg_numpy(uc.B, uc.CG_STOP)[1]
    for shape in [(2, 2)]:
        mesh = pgas.make_mesh(("y", "x"), shape=shape, devices=shape[0] * shape[1])
        runs = {"auto": pgas.run_until(t.cg_global, t.cg_state(mesh),
                                       lambda s: s["rr"] < uc.CG_STOP, 200),
                "explicit": explicit.run_until(uc.cg_kernel, t.cg_state(mesh), uc.cg_converged,
                                               200)}  # fmt: skip
        runs = {name: (r.state, r.steps_taken) for name, r in runs.items()}
        runs["explicit.run"] = (explicit.run(uc.cg_kernel, t.cg_state(mesh), steps), steps)
        for name, (state, n) in runs.items():
            out.append({"name": f"{name} {shape}", "steps": n, "rr": float(state["rr"]),
                        "x_bits": np.asarray(state["x"].to_numpy()).tobytes().hex()})  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":  # a script: importing it (pytest's doctest collection) runs nothing
    main()
