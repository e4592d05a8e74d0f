"""Can two carried buffers in turn remove the per-step copy of a shifted-read step? (HLO only)

loop2_live: carry (a, b), body (a, b) -> (step(step(a)), step(a)), both returned from the jit,
so XLA cannot drop b; step = the one-fusion pad-shift step of heat_variants.
"""

import os
import re
import sys

sys.argv = sys.argv[:1] + ["20", "2"]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax
import jax.numpy as jnp
from jax import lax

import heat_variants as hv


def ops(prog, *args):
    txt = prog.lower(*args).compile().as_text()
    name = re.findall(r"body=(%\S+?),", txt)[-1]
    b = re.search(r"\n" + re.escape(name) + r" \(.*?\n}", txt, re.S).group(0)
    return {k: len(re.findall(r"= \S+ " + k + r"\(", b)) for k in ("fusion", "copy")}


for name in ("padshift", "padshift_or"):
    s = hv.VARIANTS[name]

    def body(i, ab, s=s):
        a, _ = ab
        b = s(a)
        return s(b), b

    live = jax.jit(lambda a, b, n: lax.fori_loop(0, n // 2, body, (a, b)), donate_argnums=(0, 1))
    x = jnp.zeros((1, hv.N), jnp.float32)
    print(name, "two live buffers:", ops(live, x, x, jnp.int32(2)))

if os.environ.get("TIME"):
    import time

    import numpy as np

    for log in (24, 26):
        N = 2**log
        hv.N = N  # the variants read the global size
        u0 = np.sin(np.arange(N) / 10.0).astype(np.float32)
        res = {}
        for rnd in range(2):
            for name, mk in (
                ("padshift 1 buffer", "one"),
                ("padshift 2 live buffers", "two"),
                ("concat (stock-like)", "concat"),
            ):
                s = hv.v_padshift if mk != "concat" else hv.v_concat
                if mk == "two":

                    def body(i, ab, s=s):
                        a, _ = ab
                        b = s(a)
                        return s(b), b

                    prog = jax.jit(
                        lambda a, b, n: lax.fori_loop(0, n // 2, body, (a, b)),
                        donate_argnums=(0, 1),
                    )
                    st = (jnp.asarray(u0).reshape(1, N), jnp.asarray(u0).reshape(1, N))
                    run = lambda st, n: prog(st[0], st[1], jnp.int32(n))
                else:
                    p1 = hv.loop1(s)
                    st = jnp.asarray(u0).reshape(1, N)
                    run = lambda st, n, p1=p1: p1(st, jnp.int32(n))
                st = run(st, 2)
                jax.block_until_ready(st)
                ts = []
                for _ in range(4):
                    t = time.perf_counter()
                    st = run(st, 20)
                    jax.block_until_ready(st)
                    ts.append(time.perf_counter() - t)
                res.setdefault(name, []).append(N * 20 / min(ts) / 1e9)
        ref = hv.ref(u0, 4)
        out2 = np.asarray(
            prog(jnp.asarray(u0).reshape(1, N), jnp.asarray(u0).reshape(1, N), jnp.int32(4))[0]
        )[0]
        print(f"2**{log}: two-buffer result bitwise equal to NumPy: {np.array_equal(out2, ref)}")
        for k, v in res.items():
            print(f"  2**{log} {k:26s} best-of-4 per round: {[round(x, 3) for x in v]} G cell/s")
