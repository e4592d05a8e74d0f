"""Where the reverse pass's time goes: value-and-grad against the forward, by k and remat.

    python benchmarks/reverse_pass.py [--n 262144] [--steps 256] [--fence]

heat1d on 2 CPU devices, ``loss = sum(run(heat, u, steps) ** 2)``, jitted. For k = 1
and 16, ``remat_every`` "auto" and None, and both reverse passes it prints the forward
and value-and-grad CPU times (``time.process_time``, all threads; steadier than wall
time on a shared machine) and their ratio. The reverse passes: ``transposed``, the
transposed step through the deep-halo loop (:mod:`pgas.loop.adjoint`, what pgas runs
for this affine step), and ``jax``, JAX's transpose of the single-step loop (what pgas
runs for any other step; forced here by declaring the step not transposable), whose
gradients must agree.
``--fence`` also runs each form with a fence on the cotangent of every sub-step's
output: an identity whose backward passes the cotangent through a ``lax.cond`` XLA
cannot remove, so the cotangent is materialised once per sub-step (an experiment:
the ``optimization_barrier`` it replaces is removed by XLA's CPU pipeline), and checks
that each form's gradient is bitwise the same with and without it.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2**18)
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--fence", action="store_true")
    a = p.parse_args(argv)
    import jax
    import numpy as np

    import pgas
    import pgas.loop.adjoint as adjoint
    import pgas.loop.frames as frames

    pgas.use_cpu_devices(2)

    @jax.custom_vjp
    def fence(x):
        return x

    def fence_bwd(_, ct):  # the other branch is never taken: it keeps the cond in the program
        first = ct.reshape(-1)[0]
        return (jax.lax.cond(first == first, lambda c: c, lambda c: -c, ct),)

    fence.defvjp(lambda x: (x, None), fence_bwd)
    place = frames._place

    def heat(u):
        u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
        return u

    x0 = np.random.default_rng(0).random(a.n).astype(np.float32)
    u = pgas.from_numpy(x0, pgas.make_mesh(("x",), devices=2), boundary=pgas.Keep())

    def cpu_seconds(f):
        jax.block_until_ready(f(u))
        times = []
        for _ in range(a.repeats):
            t = time.process_time()
            jax.block_until_ready(f(u))
            times.append(time.process_time() - t)
        return float(np.median(times))

    rows, grads, passes = [], [], {}
    transposable = adjoint.transposable
    for fenced, reverse, k, remat in itertools.product(
        (False, True) if a.fence else (False,), ("transposed", "jax"), (1, 16), ("auto", None)
    ):
        frames._place = (lambda *args: fence(place(*args))) if fenced else place
        adjoint.transposable = transposable if reverse == "transposed" else (lambda *x: False)

        def loss(u, k=k, remat=remat):
            return pgas.sum(pgas.run(heat, u, a.steps, steps_per_exchange=k,
                                     remat_every=remat) ** 2)  # fmt: skip

        fwd, vg = jax.jit(loss), jax.jit(jax.value_and_grad(loss))
        grads.append(np.asarray(vg(u)[1].data))
        passes.setdefault(reverse, []).append(grads[-1])
        row = {"reverse": reverse, "k": k, "remat_every": remat, "fence": fenced,
               "forward_s": cpu_seconds(fwd), "value_and_grad_s": cpu_seconds(vg)}  # fmt: skip
        row["ratio"] = row["value_and_grad_s"] / row["forward_s"]
        rows.append(row)
        print(row, flush=True)
    frames._place, adjoint.transposable = place, transposable
    far = max(float(np.max(np.abs(g - h) / np.maximum(np.abs(h), 1e-30)))
              for g, h in zip(passes["transposed"], passes["jax"]))  # fmt: skip
    print(f"largest relative difference of the two reverse passes' gradients: {far:.2e}")
    if a.fence:  # the fence changes no value: each form's gradient with and without it
        half = len(grads) // 2
        same = all(np.array_equal(g, h) for g, h in zip(grads[:half], grads[half:]))
        print("gradients bitwise equal with and without the fence:", same)
    return rows


if __name__ == "__main__":
    main()
