"""Layer 3, global view: the sharded global array and the lowering of its slices.

Contract: :class:`~pgas.globalview.array.GlobalArray` is a JAX pytree over a
mesh; slicing gives lazy views (:mod:`~pgas.globalview.view`), and an
assignment is lowered (:mod:`~pgas.globalview.lower`) to one halo exchange
per array and axis (:mod:`~pgas.globalview.halo`; several fields' slabs in one
message, :mod:`~pgas.globalview.messages`) plus masked local arithmetic, which
Shardy compiles to halo-sized collective-permutes, never an all-gather. A slice
with a step (``u[::2]``) reads the picked cells into a new array and writes them
(:mod:`~pgas.globalview.strided`). Reductions (:mod:`~pgas.globalview.reduce`)
are one all-reduce of a scalar; a reproducible sum
(:mod:`~pgas.globalview.reprosum`, the same bits on every decomposition and
backend) two.
"""
