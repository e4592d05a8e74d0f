"""Run an example script, stopping for good after its N-th checkpoint (a test kills it there).

    python stop_after_checkpoint.py N path/to/example.py [example options ...]

Patches ``pgas.checkpoint.save`` (the runner looks it up at each call): after the
N-th save returns, the process prints ``SLEEPING after checkpoint N (step S)`` to
stderr and sleeps, so the test's SIGKILL lands at a known step.
"""

import runpy
import sys
import time

import pgas.io.checkpoint


def main() -> None:
    stop_after, script = int(sys.argv[1]), sys.argv[2]
    real_save = pgas.checkpoint.save
    saved = 0

    def save(path, state, *, step, **kwargs):
        nonlocal saved
        out = real_save(path, state, step=step, **kwargs)
        saved += 1
        if saved == stop_after:
            print(f"SLEEPING after checkpoint {saved} (step {step})", file=sys.stderr, flush=True)
            time.sleep(3600)
        return out

    pgas.checkpoint.save = save
    sys.argv = [script, *sys.argv[3:]]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
