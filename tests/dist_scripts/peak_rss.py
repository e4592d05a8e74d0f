"""Run an example script, then print this process's peak resident memory.

    python peak_rss.py path/to/example.py [example options ...]

The last stderr line is ``PEAK_RSS <process> <kB>`` (``ru_maxrss``; the process is the
launcher's rank, ``PMI_RANK`` under mpiexec).
"""

import os
import resource
import runpy
import sys


def main() -> None:
    script = sys.argv[1]
    sys.argv = [script, *sys.argv[2:]]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rank = os.environ.get("PMI_RANK", "0")
        print(f"PEAK_RSS {rank} {peak}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
