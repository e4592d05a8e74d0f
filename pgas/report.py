"""What did the compiler send? Collectives of the optimised program, per step.

:func:`comm_report` compiles a step (or the whole compiled loop) with JAX,
reads the optimised, partitioned HLO and lists every collective: its kind, how
often one device runs it per step, the bytes it sends per step (the operand
size, as the compiled program states it), and its source/target pairs. It sets
that against the ideal halo traffic of the stencil, which pgas knows because it
placed the halo exchanges itself: for every split axis, 2 sides x halo width x
face x itemsize (faces of later axes include the corners of earlier ones,
the two-phase exchange a 9- or 27-point stencil needs). With ``shardy=True`` it
also keeps the Shardy-annotated StableHLO (``sdy.mesh``, ``sdy.sharding``)
that JAX hands to the partitioner.

A step run under :func:`pgas.run` is a ``while`` loop; ``loop=True`` compiles
that loop and counts the collectives inside its body as per-step traffic and the
rest as one-time traffic.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable

import jax

from pgas.errors import PgasError
from pgas.halo import Exchange, record_exchanges
from pgas.loop import step_fn

__all__ = ["Collective", "CommReport", "comm_report", "parse_collectives"]

KINDS = ("collective-permute", "all-gather", "all-reduce", "all-to-all", "reduce-scatter",
         "collective-broadcast")  # fmt: skip
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
          "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}  # fmt: skip
_INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<type>.+?)\s+"
    r"(?P<op>" + "|".join(KINDS) + r")(?P<start>-start)?\((?P<args>.*)$"
)
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLS = re.compile(r"(?:calls|to_apply|body|condition|branch_computations)=\{?([%\w.\-, ]+)\}?")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction of the compiled program.

    Attributes:
        kind: ``collective-permute``, ``all-gather``, ``all-reduce``, ...
        shape: operand type as one device sees it, e.g. ``f32[1,1]``.
        bytes: operand bytes one device sends each time it runs.
        pairs: source->target pairs (collective-permute) or replica groups.
        per_step: True when it runs every step (inside the loop body).
    """

    kind: str
    shape: str
    bytes: int
    pairs: str
    per_step: bool

    @property
    def messages(self) -> int:
        """Messages all devices together send (collective-permute: its pairs, self excluded)."""
        pairs = re.findall(r"\{(\d+),(\d+)\}", self.pairs)
        return sum(a != b for a, b in pairs)


def _array_bytes(text: str) -> tuple[str, int]:
    m = _ARRAY.search(text)
    if not m:
        return text, 0
    dims = [int(d) for d in m.group(2).split(",") if d]
    return m.group(0), _BYTES.get(m.group(1), 4) * math.prod(dims)


def _group_size(args: str) -> int:
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]", args)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=\{\{([\d,]*)\}", args)
    return len(m.group(1).split(",")) if m and m.group(1) else 1


def parse_collectives(hlo: str, loop: bool = False) -> list[Collective]:
    """List the collectives of an optimised HLO module's text.

    Args:
        hlo: ``compiled.as_text()``.
        loop: count collectives inside ``while`` bodies as per step, others not.

    >>> parse_collectives("ENTRY %m () -> f32[1] {\\n  %c = f32[1]{0} collective-permute(%x), "
    ...                   "source_target_pairs={{0,1},{1,0}}\\n}")[0].bytes
    4
    """
    comps: dict[str, list[str]] = {}
    current = None
    for line in hlo.splitlines():
        m = _COMP.match(line)
        if m and not line.startswith(" "):
            current = m.group(1)
            comps[current] = []
        elif current is not None:
            comps[current].append(line)
    in_loop: set[str] = set()
    if loop:
        todo = [
            b
            for lines in comps.values()
            for line in lines
            if " while(" in line
            for b in re.findall(r"body=%?([\w.\-]+)", line)
        ]
        while todo:
            c = todo.pop()
            if c in in_loop or c not in comps:
                continue
            in_loop.add(c)
            for line in comps[c]:
                for group in _CALLS.findall(line):
                    todo += [x.strip().lstrip("%") for x in group.split(",") if x.strip()]
    found = []
    for comp, lines in comps.items():
        for line in lines:
            m = _INSTR.match(line)
            if not m or "-done(" in line:
                continue
            kind, args = m.group("op"), m.group("args")
            shape, size = _array_bytes(m.group("type"))
            if kind == "all-gather" and not m.group("start"):
                size //= max(_group_size(args), 1)  # operand = result / group
            if kind == "reduce-scatter":
                size *= max(_group_size(args), 1)
            pairs = re.search(r"source_target_pairs=(\{[^}]*(?:\}[^}]*)*?\}\})", args)
            groups = re.search(r"replica_groups=(\S+?)(?:,\s|$)", args)
            text = pairs.group(1) if pairs else (groups.group(1) if groups else "")
            found.append(Collective(kind, shape, size, text, (comp in in_loop) or not loop))
    return found


@dataclasses.dataclass(frozen=True)
class CommReport:
    """Collectives of a compiled step against the ideal halo traffic.

    Attributes:
        name: the step's name.
        mesh: mesh axis sizes.
        collectives: every collective found (``per_step`` tells which run per step).
        exchanges: the halo exchanges pgas placed in one step.
        stablehlo: Shardy-annotated StableHLO text, when asked for.
    """

    name: str
    mesh: dict
    collectives: tuple[Collective, ...]
    exchanges: tuple[Exchange, ...]
    stablehlo: str | None = None

    @property
    def per_step(self) -> tuple[Collective, ...]:
        return tuple(c for c in self.collectives if c.per_step)

    def count(self, kind: str) -> int:
        """How many collectives of ``kind`` one device runs per step."""
        return sum(c.kind == kind for c in self.per_step)

    def bytes(self, kind: str | None = None) -> int:
        """Bytes one device sends per step (all kinds, or one)."""
        return sum(c.bytes for c in self.per_step if kind in (None, c.kind))

    @property
    def messages_total(self) -> int:
        """Halo messages all devices together send per step (as MPI would count them)."""
        return sum(c.messages for c in self.per_step if c.kind == "collective-permute")

    @property
    def bytes_total(self) -> int:
        """Halo bytes all devices together send per step."""
        return sum(c.messages * c.bytes for c in self.per_step if c.kind == "collective-permute")

    @property
    def ideal_bytes(self) -> int:
        """Bytes per device per step of the ideal halo exchange."""
        return sum(e.ideal_bytes for e in self.exchanges)

    @property
    def ratio(self) -> float:
        """Collective-permute bytes over ideal halo bytes (1.00 is ideal)."""
        ideal = self.ideal_bytes
        actual = self.bytes("collective-permute")
        return actual / ideal if ideal else (1.0 if actual == 0 else math.inf)

    @property
    def gathers(self) -> int:
        """Collectives that move whole arrays rather than halos, per step."""
        return sum(self.count(k) for k in ("all-gather", "all-to-all", "reduce-scatter"))

    def to_dict(self) -> dict:
        """Per kind ``count_per_step`` and ``bytes_per_step``, plus the ideal (JSON-ready).

        >>> CommReport("s", {}, (), ()).to_dict()["ideal_halo_bytes_per_step"]
        0
        """
        out = {k: {"count_per_step": self.count(k), "bytes_per_step": self.bytes(k)} for k in KINDS}
        out["ideal_halo_bytes_per_step"] = self.ideal_bytes
        out["halo_ratio"] = None if math.isinf(self.ratio) else round(self.ratio, 4)
        return out

    def __str__(self) -> str:
        lines = [f"communication of {self.name!r} on mesh {self.mesh} (per device, per step)"]
        lines.append(f"  {'collective':<20} {'bytes':>10}  {'operand':<16} pairs")
        for c in self.per_step:
            pairs = c.pairs if len(c.pairs) <= 60 else c.pairs[:57] + "..."
            lines.append(f"  {c.kind:<20} {c.bytes:>10}  {c.shape:<16} {pairs}")
        once = [c for c in self.collectives if not c.per_step]
        if once:
            lines.append(f"  once per run (outside the loop): {len(once)} collective(s), "
                         f"{sum(c.bytes for c in once)} bytes")  # fmt: skip
        counts = Counter(c.kind for c in self.per_step)
        lines.append("  per step: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in KINDS))
        ideal = " + ".join(
            f"2x{e.width}x{e.slab_cells // e.width}x{e.itemsize}B (axis {e.axis})"
            for e in self.exchanges if e.parts > 1
        ) or "0"  # fmt: skip
        lines.append(f"  halo bytes {self.bytes('collective-permute')}; ideal {self.ideal_bytes}"
                     f" = {ideal}; ratio {self.ratio:.2f}")  # fmt: skip
        if self.gathers:
            lines.append(f"  WARNING: {self.gathers} whole-array collective(s) per step")
        return "\n".join(lines)


def comm_report(
    step: Callable,
    *state,
    loop: bool = False,
    shardy: bool = False,
    steps_per_exchange: int | str = 1,
) -> CommReport:
    """Compile ``step(*state)`` and report the collectives one device runs per step.

    Args:
        step: a step function as given to :func:`pgas.run` (or any function of
            global arrays).
        *state: its arguments (global arrays or pytrees of them).
        loop: compile the step inside a ``fori_loop`` as :func:`pgas.run` does,
            and count only the loop body as per step.
        shardy: keep the Shardy-annotated StableHLO in ``report.stablehlo``.
        steps_per_exchange: physical steps per halo exchange (``k``, or ``"auto"``);
            counts are per physical step.

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(8, np.float32), pgas.make_mesh(devices=1))
    >>> def heat(u):
    ...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    ...     return u
    >>> pgas.comm_report(heat, u).count("all-gather")
    0
    """
    body = step_fn(step)
    if loop:
        if len(state) != 1:
            raise PgasError(
                f"loop=True compiles pgas.run's loop, whose step takes one state; got "
                f"{len(state)} arguments: pack them in a tuple or dict"
            )
        fn = lambda s, n: jax.lax.fori_loop(0, n, lambda i, x: body(x), s)  # noqa: E731
        args = (*state, jax.numpy.int32(2))  # a traced trip count, as in pgas.run
    else:
        fn, args = (lambda *s: body(*s)), state  # a fresh function: never a cached trace
    with record_exchanges() as log:
        lowered = jax.jit(fn).lower(*args)
    hlo = lowered.compile().as_text()
    meshes = [leaf.layout.mesh for leaf in _arrays(state)]
    return CommReport(
        name=getattr(step, "__name__", "step"),
        mesh=dict(meshes[0].shape) if meshes else {},
        collectives=tuple(parse_collectives(hlo, loop=loop)),
        exchanges=tuple(log.exchanges),
        stablehlo=lowered.as_text() if shardy else None,
    )


def _arrays(state) -> list:
    from pgas.array import GlobalArray

    return [x for x in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray))
            if isinstance(x, GlobalArray)]  # fmt: skip
