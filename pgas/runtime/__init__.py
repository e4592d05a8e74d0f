"""Layer 1, runtime: processes and devices, before any array exists.

Contract: starting JAX's distributed runtime under ``mpiexec``, Slurm ``srun``
or one process (:mod:`~pgas.runtime.distributed`; its settings and the start
each launcher asks for: :mod:`~pgas.runtime.startup`), detecting the launcher
(:mod:`~pgas.runtime.launcher`), asking for virtual CPU devices
(:mod:`~pgas.runtime.devices`), and the processes of a run as one
(:mod:`~pgas.runtime.group`: decisions made once on process 0 and shared),
ending every process when one fails (:mod:`~pgas.runtime.failure`), and giving
freed field-sized buffers back to the system (:mod:`~pgas.runtime.memory`).
Imports nothing from pgas but :mod:`pgas.errors`.
"""
