"""Layer 5, references: the same problem written by hand, to check and to compare against.

Contract: :mod:`~pgas.references.explicit` runs a local kernel on blocks with
halo cells, exchanged by ``lax.ppermute`` under ``shard_map``;
:mod:`~pgas.references.mpi` runs it on NumPy blocks with mpi4py ``Sendrecv``
under ``mpiexec``. Both give the global-view result bit for bit.
"""
