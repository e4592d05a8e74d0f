"""``python -m pgas``: the ``pgas`` command (:mod:`pgas.app.cli`)."""

from pgas.app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
