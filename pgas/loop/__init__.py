"""Layer 4, loop: compiled time loops with deep halos, their plans and their communication.

Contract: :func:`~pgas.loop.timeloop.run` runs a step as one XLA program
(:func:`~pgas.loop.programs.program`; inside a caller's trace inlined,
:mod:`~pgas.loop.traced`, with its derivative, :mod:`~pgas.loop.derivative`);
:func:`~pgas.loop.until.run_until` iterates one to convergence as one ``while``
loop; a state holds fields and scalars (:mod:`~pgas.loop.scalars`);
:func:`~pgas.loop.plan.plan` decides once how a step is compiled (its reach,
``k`` steps per exchange, buffering) and says why; :mod:`~pgas.loop.frames`
builds the extended blocks a group of sub-steps reads (on the CPU carried in two
buffers, :mod:`~pgas.loop.buffers`);
:func:`~pgas.loop.report.comm_report` counts the collectives of the compiled
program against the ideal halo bytes.
"""

from pgas.loop.programs import Program, program
from pgas.loop.timeloop import compiled, run
from pgas.loop.until import Until, run_until

__all__ = ["run", "run_until", "Until", "program", "Program", "compiled"]
