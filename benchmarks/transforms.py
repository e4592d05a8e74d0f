"""pgas.run inside JAX: jit against the standalone call, the gradient's time and memory, params.

    python benchmarks/transforms.py [--tiny] [--out benchmarks/results/transforms.json]
    python benchmarks/transforms.py --platform gpu --out DIR/transforms_gpu.json

In one process on 4 virtual CPU devices (heat1d on 2 of them, Life on 4):

- ``jax.jit(lambda u: pgas.run(step, u, n))`` against ``pgas.run(step, u, n)``
  (heat1d 2**20 cells, 2 devices; Life 1024**2, 4 devices), warm, medians of
  calls made in turn (``common.paired_seconds``);
- ``jax.value_and_grad`` of ``sum(run(heat, u, 1000)**2)`` against the jitted
  forward run at the same k (heat1d 2**20 cells, 2 devices), also in turn;
- XLA's memory analysis of the gradient program for 100, 1000 and 10000
  steps, in local blocks per device, against ``2.5 sqrt(steps) + 10``;
- a new ``params`` value: XLA compilations counted (``jax.monitoring``) and
  its run time against a warm run;
- steps that are not affine (``nonlinear``): value-and-grad against the jitted
  forward for a 1-D Burgers step (2**18 cells, 1000 steps, 2 devices), a 2-D
  Gray-Scott step (two fields, 512**2, 500 steps, 2 devices) and, with respect to
  its velocity field (params ``a``, ``b``), a 2-D advection-diffusion step
  (512**2, 500 steps, 2 devices), and the Burgers gradient's memory for 100, 1000
  and 10000 steps.

With ``--platform gpu``, the gradients only (heat1d's and ``nonlinear``'s), on one GPU at
sizes that fill it (2**24 cells in 1-D, 4096**2 in 2-D; the steps as above).

Timings are medians of repeats on a shared machine; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke test)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", help="write the JSON here")
    p.add_argument("--platform", choices=("cpu", "gpu"), default="cpu",
                   help="gpu: the gradients only, on one GPU, at GPU sizes")  # fmt: skip
    a = p.parse_args(argv)
    if a.platform == "gpu":
        os.environ["JAX_PLATFORMS"] = "cuda"
        return gpu(a)
    import jax
    import numpy as np
    from common import machine, median_seconds, paired_seconds

    import pgas

    heat_n, life_n = (2**12, 64) if a.tiny else (2**20, 1024)
    heat_steps, life_steps, grad_steps = (32, 8, 40) if a.tiny else (1000, 100, 1000)
    reps = 2 if a.tiny else a.repeats

    def life(g):
        n = sum(pgas.shift(pgas.shift(g, dy, 0), dx, 1)
                for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0))  # fmt: skip
        g[...] = ((n == 3) | ((g == 1) & (n == 2))).astype("uint8")
        return g

    rng = np.random.default_rng(0)
    x0 = rng.random(heat_n).astype(np.float32)
    b0 = (rng.random((life_n, life_n)) < 0.3).astype(np.uint8)
    mesh2, mesh4 = pgas.make_mesh(("x",), devices=2), pgas.make_mesh(("y", "x"), devices=4)
    cases = {
        "heat1d": (heat, lambda: pgas.from_numpy(x0, mesh2, boundary=pgas.Keep()), heat_steps),
        "life": (life, lambda: pgas.from_numpy(b0, mesh4), life_steps),
    }
    out = {"machine": machine(), "tiny": a.tiny, "jit": {}, "grad": {}, "memory": [], "params": {}}
    for name, (step, make, steps) in cases.items():
        jitted = jax.jit(lambda u, step=step, steps=steps: pgas.run(step, u, steps))
        same = np.array_equal(pgas.run(step, make(), steps).to_numpy(),
                              jitted(make()).to_numpy())  # fmt: skip
        us = [make() for _ in range(reps + 1)]  # the standalone call donates its state
        u = make()

        def alone():
            pgas.run(step, us.pop(), steps).data.block_until_ready()

        def inside():
            jitted(u).data.block_until_ready()

        t = paired_seconds({"alone": alone, "inside": inside}, reps)
        alone, inside = t["alone"], t["inside"]
        out["jit"][name] = {"steps": steps, "standalone_s": alone, "jit_s": inside,
                            "ratio": inside / alone, "bitwise_equal": bool(same)}  # fmt: skip
        print(name, out["jit"][name], flush=True)

    u = cases["heat1d"][1]()
    out["grad"] = affine(heat, u, grad_steps, reps)

    for steps in (100, 1000, 10000):
        row = gradient_memory(lambda u, n=steps: pgas.sum(pgas.run(heat, u, n)), u, steps,
                              heat_n // 2 * 4)  # fmt: skip
        out["memory"].append(row)
        print("memory", row, flush=True)

    out["nonlinear"] = nonlinear(a.tiny, reps, devices=2)

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiles.append(secs)
        if event == "/jax/core/compile/backend_compile_duration" else None
    )  # fmt: skip

    def heat_c(u, c):
        u[1:-1] = (1 - 2 * c) * u[1:-1] + c * (u[:-2] + u[2:])
        return u

    make = cases["heat1d"][1]
    pgas.run(heat_c, make(), heat_steps, params=0.25).data.block_until_ready()
    us = [make() for _ in range(2 * reps)]
    warm = median_seconds(lambda: pgas.run(heat_c, us.pop(), heat_steps, params=0.25)
                       .data.block_until_ready(), reps)  # fmt: skip
    compiles.clear()
    values = iter(np.linspace(0.1, 0.4, reps))
    new = median_seconds(lambda: pgas.run(heat_c, us.pop(), heat_steps, params=float(next(values)))
                      .data.block_until_ready(), reps)  # fmt: skip
    out["params"] = {"steps": heat_steps, "warm_s": warm, "new_value_s": new,
                     "ratio": new / warm, "compilations": len(compiles)}  # fmt: skip
    print("params", out["params"], flush=True)
    return written(out, a.out)


def written(out: dict, path: str | None) -> dict:
    """``out``, written as JSON to ``path`` first if one is given."""
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    return out


def heat(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def affine(step, u, steps: int, reps: int) -> dict:
    """``jax.value_and_grad`` of ``sum(run(step, u, steps)**2)`` against the jitted forward,
    in turn (the transposed loop of an affine step)."""
    import jax
    from common import paired_seconds

    import pgas

    k = pgas.plan.plan(step, u).steps_per_exchange
    fwd = jax.jit(lambda u: pgas.sum(pgas.run(step, u, steps) ** 2))
    vg = jax.jit(jax.value_and_grad(lambda u: pgas.sum(pgas.run(step, u, steps) ** 2)))
    t = paired_seconds({"fwd": lambda: jax.block_until_ready(fwd(u)),
                        "vg": lambda: jax.block_until_ready(vg(u))}, reps)  # fmt: skip
    row = {"steps": steps, "k": k, "forward_s": t["fwd"], "value_and_grad_s": t["vg"],
           "ratio": t["vg"] / t["fwd"]}  # fmt: skip
    print("grad", row, flush=True)
    return row


def gpu(a) -> dict:
    """The gradients on one GPU: heat1d's (affine) and ``nonlinear``'s, at GPU sizes."""
    import jax
    import numpy as np
    from common import machine

    import pgas

    mesh = pgas.make_mesh(("x",), devices=1)
    x0 = np.random.default_rng(0).random(2**12 if a.tiny else 2**24).astype(np.float32)
    u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
    out = {"machine": machine(), "platform": jax.default_backend(), "tiny": a.tiny,
           "grad": affine(heat, u, 40 if a.tiny else 1000, a.repeats),
           "nonlinear": nonlinear(a.tiny, a.repeats, devices=1, n=2**24, side=4096)}  # fmt: skip
    return written(out, a.out)


def gradient_memory(loss, u, steps: int, block: int) -> dict:
    """XLA's memory analysis of ``jax.grad(loss)`` at ``u``, in blocks of ``block`` bytes,
    against ``2.5 sqrt(steps) + 10``."""
    import jax

    m = jax.jit(jax.grad(loss)).lower(u).compile().memory_analysis()
    peak = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
            - m.alias_size_in_bytes)  # fmt: skip
    return {"steps": steps, "blocks": peak / block, "bound": 2.5 * math.sqrt(steps) + 10}


def nonlinear(tiny: bool, reps: int, devices: int, n: int = 2**18, side: int = 512) -> dict:
    """Reverse mode through checkpointed segments (pgas.loop.reverse): of steps that are
    not affine, and with respect to a velocity field in params; value-and-grad against the
    jitted forward, in turn, and the gradient's memory."""
    import jax
    import numpy as np
    from common import paired_seconds

    import pgas

    mesh2 = pgas.make_mesh(("x",), devices=devices)
    mesh_y = pgas.make_mesh(("y",), devices=devices)

    def burgers(u):
        u[1:-1] = (u[1:-1] - 0.2 * u[1:-1] * (u[2:] - u[:-2])
                   + 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2]))  # fmt: skip
        return u

    def gray_scott(s):
        u, v = s["u"], s["v"]

        def lap(a):
            return sum(pgas.shift(a, o, ax) for ax in range(2) for o in (1, -1)) - 4.0 * a

        uvv = u * v * v
        return {"u": (u + 0.1 * lap(u) - uvv + 0.04 * (1.0 - u)).to_array(),
                "v": (v + 0.05 * lap(v) + uvv - 0.1 * v).to_array()}  # fmt: skip

    def advect(q, vel):  # affine in q; the gradient is taken with respect to the velocity
        dx = pgas.shift(q, 1, 0) - pgas.shift(q, -1, 0)
        dy = pgas.shift(q, 1, 1) - pgas.shift(q, -1, 1)
        lap = sum(pgas.shift(q, o, ax) for ax in range(2) for o in (1, -1)) - 4.0 * q
        return (q - 0.1 * (vel["a"] * dx + vel["b"] * dy) + 0.05 * lap).to_array()

    n, side = (2**10, 32) if tiny else (n, side)
    b_steps, g_steps = (20, 10) if tiny else (1000, 500)
    rng = np.random.default_rng(0)
    x = (0.5 + 0.4 * np.sin(np.linspace(0, 2 * np.pi, n))).astype(np.float32)
    u0, v0, a0, b0 = (rng.random((side, side)).astype(np.float32) for _ in range(4))
    q = pgas.from_numpy(u0, mesh_y)
    # name: (loss of what is differentiated, a function making it); the losses score a run
    cases = {
        "burgers1d": (lambda u: pgas.sum(pgas.run(burgers, u, b_steps) ** 2),
                      lambda: pgas.from_numpy(x, mesh2, boundary=pgas.Keep())),
        "gray_scott2d": (lambda s: (lambda r: pgas.sum(r["u"] ** 2) + pgas.sum(r["v"]))(
                             pgas.run(gray_scott, s, g_steps)),
                         lambda: {"u": pgas.from_numpy(u0, mesh_y),
                                  "v": pgas.from_numpy(v0, mesh_y)}),
        "advection2d_velocity": (lambda vel: pgas.sum(pgas.run(advect, q, g_steps,
                                                               params=vel) ** 2),
                                 lambda: {"a": pgas.from_numpy(0.5 + 0.3 * a0, mesh_y),
                                          "b": pgas.from_numpy(0.5 + 0.3 * b0, mesh_y)}),
    }  # fmt: skip
    steps_of = {"burgers1d": b_steps, "gray_scott2d": g_steps, "advection2d_velocity": g_steps}
    out = {"grad": {}, "memory": []}
    for name, (loss, make) in cases.items():
        steps = steps_of[name]
        fwd, vg, s = jax.jit(loss), jax.jit(jax.value_and_grad(loss)), make()
        t = paired_seconds({"fwd": lambda: jax.block_until_ready(fwd(s)),
                            "vg": lambda: jax.block_until_ready(vg(s))}, reps)  # fmt: skip
        out["grad"][name] = {"steps": steps, "forward_s": t["fwd"], "value_and_grad_s": t["vg"],
                             "ratio": t["vg"] / t["fwd"]}  # fmt: skip
        print("nonlinear grad", name, out["grad"][name], flush=True)
    u = cases["burgers1d"][1]()
    for steps in (100,) if tiny else (100, 1000, 10000):
        row = gradient_memory(lambda u, n=steps: pgas.sum(pgas.run(burgers, u, n) ** 2), u,
                              steps, n // devices * 4)  # fmt: skip
        out["memory"].append(row)
        print("nonlinear memory", row, flush=True)
    return out


if __name__ == "__main__":
    main()
