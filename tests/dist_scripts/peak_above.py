"""Run an example twice in this process, tiny then at a given size, and print the peaks.

    python peak_above.py path/to/example.py TINY_OPTIONS -- OPTIONS

The tiny run pays for what does not depend on the size (JAX, the imports, gloo, compiled
programs); the last stderr line is ``PEAK_ABOVE <process> <kB after tiny> <kB after both>``
(``VmHWM``; the process is the launcher's rank, ``PMI_RANK`` under mpiexec).
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
    tiny = hwm_kb()
    example["main"](rest[cut + 1 :])
    rank = os.environ.get("PMI_RANK", "0")
    print(f"PEAK_ABOVE {rank} {tiny} {hwm_kb()}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
