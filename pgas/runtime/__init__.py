"""Layer 1, runtime: processes and devices, before any array exists.

Contract: starting JAX's distributed runtime under ``mpiexec``, Slurm ``srun``
or one process (:mod:`~pgas.runtime.distributed`), detecting the launcher
(:mod:`~pgas.runtime.launcher`), asking for virtual CPU devices
(:mod:`~pgas.runtime.devices`), and the processes of a run as one
(:mod:`~pgas.runtime.group`: decisions made once on process 0 and shared),
and ending every process when one fails (:mod:`~pgas.runtime.failure`).
Imports nothing from pgas but :mod:`pgas.errors`.
"""
