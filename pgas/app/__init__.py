"""Layer 7, app: problems, backends, the runner, the command line.

Contract: a :class:`~pgas.app.problem.Problem` bundles a step, its local
kernel and initial condition; a backend (auto, explicit, mpi) makes one plan
for it and runs that plan; :func:`~pgas.app.runner.run` does the rest the same
for every problem (state, warm-up, timing, snapshots, checkpoints) and returns
one :class:`~pgas.app.results.Result` (an iterative problem, with a ``converged``
test, runs until it holds: :mod:`~pgas.app.iterate`); :mod:`~pgas.app.compare` and
:mod:`~pgas.app.cli` put a problem on every backend side by side.
"""
