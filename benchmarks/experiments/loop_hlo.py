"""Deterministic view of the compiled programs of pgas.run (auto) and pgas.explicit.run.

Compiles the exact programs the two entry points run (pgas.loop._program and
pgas.explicit._program) and prints, for the while body: op counts, every full-size
op (fusion / copy / concatenate) with its shape and operands, and memory_analysis().
No timing.

usage: python loop_hlo.py DEVICES heat|heat64|life LOG2CELLS [--dump DIR]
"""

import os
import re
import sys
from collections import Counter

D = int(sys.argv[1])
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={D}"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import pgas  # noqa: E402
import pgas.explicit as X  # noqa: E402
import pgas.loop as L  # noqa: E402

KIND, LOG = sys.argv[2], int(sys.argv[3])
DUMP = sys.argv[sys.argv.index("--dump") + 1] if "--dump" in sys.argv else None
if KIND == "heat64":
    jax.config.update("jax_enable_x64", True)


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import example_stencils  # noqa: E402

heat, heat_k = example_stencils("heat1d")  # the shipped stencils
life, life_k = example_stencils("life")


def make():
    if KIND == "life":
        mesh = pgas.make_mesh(("y", "x"), shape=pgas.dims_create(D, 2), devices=D)
        s = 2 ** (LOG // 2)
        return pgas.from_function(
            lambda i, j: ((i * 7 + j * 13) % 3 == 0).astype(np.uint8), (s, s), mesh, dtype=np.uint8
        )
    mesh = pgas.make_mesh(("x",), devices=D)
    dt = np.float64 if KIND == "heat64" else np.float32
    return pgas.from_function(
        lambda i: np.sin(i / 10.0), (2**LOG,), mesh, boundary=pgas.Keep(), dtype=dt
    )


def report(name, compiled, block_bytes):
    txt = compiled.as_text()
    if DUMP:
        os.makedirs(DUMP, exist_ok=True)
        open(os.path.join(DUMP, f"{KIND}_{name}_D{D}.hlo.txt"), "w").write(txt)
    body_name = re.findall(r"body=(%[\w.\-]+)", txt)[-1]
    body = re.search(r"\n" + re.escape(body_name) + r" \(.*?\n}", txt, re.S).group(0)
    ops = Counter(re.findall(r"= \S+ ([a-z\-]+)\(", body))
    print(f"{KIND} {name} D={D} 2**{LOG} cells: while body {dict(ops)}")
    for line in body.splitlines():
        if re.search(r" (fusion|copy|concatenate)\(", line):
            print("    " + re.sub(r", (metadata|backend_config)=.*", "", line.strip())[:200])
    m = compiled.memory_analysis()
    peak = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
    peak -= m.alias_size_in_bytes
    print(
        f"    memory: arg {m.argument_size_in_bytes} out {m.output_size_in_bytes} "
        f"temp {m.temp_size_in_bytes} alias {m.alias_size_in_bytes} "
        f"-> peak/block {peak / block_bytes:.2f}"
    )


u = make()
block = int(np.prod(u.layout.local_shape)) * u.data.dtype.itemsize
auto = L._program(life if KIND == "life" else heat, None, None)
report("auto", auto.lower(u, jnp.int32(4)).compile(), block)
if KIND == "life":
    prog = X._program(life_k, u.layout, (1, 1), None)
else:
    prog = X._program(heat_k, u.layout, (1,), ((1, -1, None),))
report("explicit", prog.lower(u.data, jnp.int32(4)).compile(), block)
