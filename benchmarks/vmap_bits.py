"""Which forms of one run give the same bits: standalone, jit, vmap over params, NumPy.

    python benchmarks/vmap_bits.py                                  # FMA as XLA chooses
    XLA_FLAGS=--xla_cpu_max_isa=AVX python benchmarks/vmap_bits.py  # no FMA instructions

The heat1d step ``(1 - 2 c) * u[1:-1] + c * (u[:-2] + u[2:])`` with 8 values of
the scalar param ``c``, 20 steps, 2 CPU devices, in float32 (1024 cells) and
float64 (50 cells). For each dtype it prints how many of the 8 values give the
standalone call's bits under ``jax.jit`` and under ``jax.vmap``, and how many
standalone calls give NumPy's. See benchmarks/README.md, "vmap over params".
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main() -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import pgas

    pgas.use_cpu_devices(2)
    jax.config.update("jax_enable_x64", True)
    mesh = pgas.make_mesh(("x",), devices=2)

    def heat_c(u, c):
        u[1:-1] = (1 - 2 * c) * u[1:-1] + c * (u[:-2] + u[2:])
        return u

    out = {}
    for dtype, n in ((np.float32, 2**10), (np.float64, 50)):
        x0 = np.random.default_rng(0).random(n).astype(dtype)
        u = pgas.from_numpy(x0, mesh, boundary=pgas.Keep())
        cs, steps = jnp.linspace(0.05, 0.4, 8, dtype=dtype), 20
        alone = [np.asarray(pgas.run(heat_c, u, steps, params=c).data) for c in cs]
        one = jax.jit(lambda c: pgas.run(heat_c, u, steps, params=c).data)
        batch = jax.jit(jax.vmap(lambda c: pgas.run(heat_c, u, steps, params=c).data))(cs)
        numpy = []
        for c in np.asarray(cs):
            x = x0.copy()
            for _ in range(steps):
                x[1:-1] = (1 - 2 * c) * x[1:-1] + c * (x[:-2] + x[2:])
            numpy.append(x)

        def same(forms):
            return sum(bool(np.array_equal(a, b)) for a, b in zip(forms, alone))

        out[np.dtype(dtype).name] = {"jit": same([one(c) for c in cs]), "vmap": same(batch),
                                     "numpy": same(numpy), "of": len(cs)}  # fmt: skip
    print(os.environ.get("XLA_FLAGS", ""), out)
    return out


if __name__ == "__main__":
    main()
