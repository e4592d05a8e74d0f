"""Run an example twice in this process, a first run then a second, and print the peaks.

    python peak_above.py path/to/example.py FIRST_OPTIONS -- SECOND_OPTIONS

The first run pays for what the second does not add (JAX, the imports, gloo, compiled
programs: a tiny case; or the same case with fewer snapshots); the last stderr line is
``PEAK_ABOVE <process> <kB after the first> <kB after both>`` (``VmHWM``; the process is
the launcher's rank, ``PMI_RANK`` under mpiexec).
"""

import os
import runpy
import sys


def hwm_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def main() -> None:
    script, rest = sys.argv[1], sys.argv[2:]
    cut = rest.index("--")
    example = runpy.run_path(script, run_name="example")
    example["main"](rest[:cut])
    first = hwm_kb()
    example["main"](rest[cut + 1 :])
    rank = os.environ.get("PMI_RANK", "0")
    print(f"PEAK_ABOVE {rank} {first} {hwm_kb()}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
