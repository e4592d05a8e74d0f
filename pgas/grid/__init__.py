"""Layer 2, grid: how a global index space is laid over devices. Descriptions, no arrays.

Contract: frozen descriptions that every backend shares, the JAX paths and the
NumPy/MPI path alike: the block distribution of an axis
(:mod:`~pgas.grid.decomposition`), boundary conditions and their ghost-cell
rules (:mod:`~pgas.grid.boundary`), named device meshes
(:mod:`~pgas.grid.mesh`), an array's layout (:mod:`~pgas.grid.layout`), the
shape of a deep-halo schedule (:mod:`~pgas.grid.schedule`) and the cells a
strided slice picks and moves (:mod:`~pgas.grid.strides`).
"""
