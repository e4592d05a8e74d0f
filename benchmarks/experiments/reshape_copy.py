"""Does the blocks-form reshape inside the loop body cause the per-step full copy?

Carry (N,) and reshape to (1, N) inside the body (as pgas.run + Layout.to_blocks do) vs
carry (1, N) (as the explicit shard_map path does). Count copies in the while body.
"""

import re
import sys

sys.argv = sys.argv[:1] + ["20", "2"]
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heat_variants as hv  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402


def body_ops(prog, x):
    txt = prog.lower(x, jnp.int32(2)).compile().as_text()
    name = re.findall(r"body=(%\S+?),", txt)[-1]
    b = re.search(r"\n" + re.escape(name) + r" \(.*?\n}", txt, re.S).group(0)
    return {k: len(re.findall(r"= \S+ " + k + r"\(", b)) for k in ("fusion", "copy", "concatenate")}


for name in ("concat", "split", "padshift_or"):
    step = hv.VARIANTS[name]
    flat = jax.jit(
        lambda x, n, s=step: lax.fori_loop(0, n, lambda i, y: s(y.reshape(1, -1)).reshape(-1), x),
        donate_argnums=0,
    )
    blocks = hv.loop1(step)
    print(
        f"{name:12s} carry (N,) + reshape in body: {body_ops(flat, jnp.zeros(hv.N, jnp.float32))}   "
        f"carry (1, N): {body_ops(blocks, jnp.zeros((1, hv.N), jnp.float32))}"
    )

# The fix proposed for pgas/loop.py: carry the state in blocks form across the loop; the body's
# from_blocks/to_blocks reshapes then cancel (XLA simplifies reshape(reshape(x)) to x).
for name in ("concat", "padshift_or"):
    step = hv.VARIANTS[name]
    carry_blocks = jax.jit(
        lambda x, n, s=step: lax.fori_loop(
            0,
            n,
            lambda i, y: s(y.reshape(-1).reshape(1, -1)).reshape(-1).reshape(1, -1),
            x.reshape(1, -1),
        ).reshape(-1),
        donate_argnums=0,
    )
    print(
        f"{name:12s} (N,) in/out, loop carried in blocks form: {body_ops(carry_blocks, jnp.zeros(hv.N, jnp.float32))}"
    )
