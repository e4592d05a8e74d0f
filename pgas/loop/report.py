"""What did the compiler send? Collectives of the optimised program, per step.

:func:`comm_report` compiles a step (or the whole compiled loop) with JAX,
reads the optimised, partitioned HLO and lists every collective: its kind, how
often one device runs it per step, the bytes it sends per step (the operand
size, as the compiled program states it), and its source/target pairs. It sets
that against the ideal halo traffic of the stencil, which pgas knows because it
placed the halo exchanges itself: for every split axis, the halo cells of its
two sides (the reach below plus the reach above, :attr:`pgas.loop.plan.Plan.exchanged`:
one side for a one-sided stencil such as upwind) x face x itemsize (faces of
later axes include the filled halo cells, the corners, of earlier ones: the
two-phase exchange a 9- or 27-point stencil needs). With ``shardy=True`` it
also keeps the Shardy-annotated StableHLO (``sdy.mesh``, ``sdy.sharding``)
that JAX hands to the partitioner.

A step run under :func:`pgas.run` is a ``while`` loop; ``loop=True`` compiles
that loop and counts the collectives inside its body as per-step traffic and the
rest as one-time traffic. ``gradient=True`` reports reverse mode's way back through a
run instead (:func:`pgas.loop.derivative.way_back`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable

import jax
import numpy as np

from pgas.errors import PgasError
from pgas.globalview.array import GlobalArray
from pgas.globalview.strided import Transfer, recording_transfers
from pgas.loop.derivative import way_back
from pgas.loop.frames import group_program, read_only, step_fn
from pgas.loop.plan import Plan
from pgas.loop.plan import plan as make_plan
from pgas.loop.scalars import check_state

__all__ = [
    "Collective",
    "CommReport",
    "Exchange",
    "comm_report",
    "compiled_report",
    "exchanges_of",
    "parse_collectives",
]

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
class Exchange:
    """One halo exchange along one axis, as seen by one device.

    Attributes:
        axis: array axis.
        width: halo width (cells per side).
        parts: number of blocks along the axis (devices of its mesh axis).
        slab_cells: cells in one slab ``width`` wide sent in one direction by one device.
        itemsize: bytes per cell.
        sides: cells ``(below, above)`` of the halo filled on each side; ``None``:
            ``width`` on both.
    """

    axis: int
    width: int
    parts: int
    slab_cells: int
    itemsize: int
    sides: tuple[int, int] | None = None

    @property
    def below_above(self) -> tuple[int, int]:
        """Halo cells received below and above each block (:attr:`sides`, default ``width``)."""
        return self.sides or (self.width, self.width)

    @property
    def ideal_bytes(self) -> int:
        """Bytes one device must send per exchange: both sides' slabs (0 on one block).

        >>> Exchange(0, 1, 4, 1, 8).ideal_bytes, Exchange(0, 1, 4, 1, 8, (1, 0)).ideal_bytes
        (16, 8)
        """
        if self.parts == 1:
            return 0
        return sum(self.below_above) * (self.slab_cells // self.width) * self.itemsize


def exchanges_of(layout, halo, itemsize: int) -> list[Exchange]:
    """The exchanges of one field extended by ``halo`` (two-phase: later faces hold corners).

    ``halo``: per axis the cells exchanged on both sides, or a ``(below, above)``
    pair (:attr:`pgas.loop.plan.Plan.exchanged`); a later axis's face then holds
    only the filled halo cells of earlier ones.

    >>> import pgas
    >>> lay = pgas.zeros((8, 8), pgas.make_mesh(("y",), devices=1)).layout
    >>> [e.slab_cells for e in exchanges_of(lay, (1, 1), 1)]
    [8, 10]
    >>> [(e.slab_cells, e.sides) for e in exchanges_of(lay, ((1, 0), (1, 0)), 1)]
    [(8, (1, 0)), (9, (1, 0))]
    """
    pairs = [(h, h) if isinstance(h, (int, np.integer)) else (int(h[0]), int(h[1])) for h in halo]
    out = []
    for axis, (lo, hi) in enumerate(pairs[: layout.ndim]):
        if lo or hi:
            face = math.prod(
                a.block + (sum(pairs[j]) if j < axis else 0)
                for j, a in enumerate(layout.axes) if j != axis
            )  # fmt: skip
            width = max(lo, hi)
            sides = None if lo == hi else (lo, hi)
            out.append(Exchange(axis, width, layout.axes[axis].parts, width * face, itemsize,
                                sides))  # fmt: skip
    return out


@dataclasses.dataclass(frozen=True)
class CommReport:
    """Collectives of a compiled step against the ideal halo traffic.

    Counts and bytes are per device and per physical step: the program
    compiled for the report runs ``steps_per_exchange`` steps per exchange,
    and its collectives are divided by that.

    Attributes:
        name: the step's name.
        mesh: mesh axis sizes.
        collectives: every collective found (``per_step`` tells which run per exchange).
        exchanges: the halo exchanges pgas placed, once per ``steps_per_exchange`` steps.
        steps_per_exchange: ``k``, physical steps per exchange.
        note: why ``k`` is lower than asked for, if it is.
        stablehlo: Shardy-annotated StableHLO text, when asked for.
    """

    name: str
    mesh: dict
    collectives: tuple[Collective, ...]
    exchanges: tuple[Exchange, ...]
    steps_per_exchange: int = 1
    note: str = ""
    stablehlo: str | None = None

    @property
    def per_step(self) -> tuple[Collective, ...]:
        """The collectives that run once per exchange (inside the compiled loop)."""
        return tuple(c for c in self.collectives if c.per_step)

    def per_exchange(self, kind: str) -> int:
        """How many collectives of ``kind`` one device runs per exchange."""
        return sum(c.kind == kind for c in self.per_step)

    def count(self, kind: str) -> float:
        """Collectives of ``kind`` one device runs per physical step."""
        return self.per_exchange(kind) / self.steps_per_exchange

    def bytes(self, kind: str | None = None) -> float:
        """Bytes one device sends per physical step (all kinds, or one)."""
        total = sum(c.bytes for c in self.per_step if kind in (None, c.kind))
        return total / self.steps_per_exchange

    @property
    def messages_total(self) -> float:
        """Halo messages all devices together send per physical step (as MPI counts them)."""
        msgs = sum(c.messages for c in self.per_step if c.kind == "collective-permute")
        return msgs / self.steps_per_exchange

    @property
    def bytes_total(self) -> float:
        """Halo bytes all devices together send per physical step."""
        total = sum(c.messages * c.bytes for c in self.per_step if c.kind == "collective-permute")
        return total / self.steps_per_exchange

    @property
    def ideal_bytes(self) -> float:
        """Bytes per device per physical step of the ideal halo exchange."""
        return sum(e.ideal_bytes for e in self.exchanges) / self.steps_per_exchange

    @property
    def ratio(self) -> float:
        """Collective-permute bytes over ideal halo bytes (1.00 is ideal)."""
        ideal = self.ideal_bytes
        actual = self.bytes("collective-permute")
        return actual / ideal if ideal else (1.0 if actual == 0 else math.inf)

    @property
    def gathers(self) -> int:
        """Collectives that move whole arrays rather than halos, per exchange."""
        return sum(self.per_exchange(k) for k in ("all-gather", "all-to-all", "reduce-scatter"))

    def to_dict(self) -> dict:
        """Per kind counts and bytes per physical step and per exchange (JSON-ready).

        >>> CommReport("s", {}, (), ()).to_dict()["ideal_halo_bytes_per_step"]
        0.0
        """
        out = {k: {"count_per_step": self.count(k), "bytes_per_step": self.bytes(k),
                   "count_per_exchange": self.per_exchange(k)} for k in KINDS}  # fmt: skip
        out["steps_per_exchange"] = self.steps_per_exchange
        out["steps_per_exchange_note"] = self.note
        out["ideal_halo_bytes_per_step"] = float(self.ideal_bytes)
        out["halo_ratio"] = None if math.isinf(self.ratio) else round(self.ratio, 4)
        out["messages_per_step"] = self.messages_total
        out["halo_bytes_per_step_all_devices"] = self.bytes_total
        return out

    def __str__(self) -> str:
        k = self.steps_per_exchange
        lines = [f"communication of {self.name!r} on mesh {self.mesh}, {k} step(s) per exchange"
                 f" (per device, per exchange)"]  # fmt: skip
        if self.note:
            lines.append(f"  steps_per_exchange {self.note}")
        lines.append(f"  {'collective':<20} {'bytes':>10}  {'operand':<16} pairs")
        for c in self.per_step:
            pairs = c.pairs if len(c.pairs) <= 60 else c.pairs[:57] + "..."
            lines.append(f"  {c.kind:<20} {c.bytes:>10}  {c.shape:<16} {pairs}")
        once = [c for c in self.collectives if not c.per_step]
        if once:
            lines.append(f"  once per run (outside the loop): {len(once)} collective(s), "
                         f"{sum(c.bytes for c in once)} bytes")  # fmt: skip
        counts = Counter(c.kind for c in self.per_step)
        lines.append("  per physical step: " + ", ".join(
            f"{counts.get(kind, 0) / k:g} {kind}" for kind in KINDS))  # fmt: skip
        ideal = " + ".join(
            f"{_cells(e)}x{e.slab_cells // e.width}x{e.itemsize}B (axis {e.axis})"
            for e in self.exchanges if e.parts > 1
        ) or "0"  # fmt: skip
        per = f"/{k}" if k > 1 else ""
        lines.append(f"  halo bytes per step {self.bytes('collective-permute'):g}; ideal "
                     f"{self.ideal_bytes:g} = ({ideal}){per}; ratio {self.ratio:.2f}")  # fmt: skip
        if self.gathers:
            lines.append(f"  WARNING: {self.gathers} whole-array collective(s) per exchange")
        return "\n".join(lines)


def _moved(t: Transfer) -> Exchange:
    """A strided copy's cells moved across one axis, as the exchange that receives them."""
    width = max(t.sides)
    return Exchange(t.axis, width, t.parts, width * t.face, t.itemsize,
                    None if t.sides[0] == t.sides[1] else t.sides)  # fmt: skip


def _cells(e: Exchange) -> str:
    """How many halo cells an exchange's ideal counts: ``2x1`` for both sides, ``(1+0)`` one."""
    lo, hi = e.below_above
    return f"2x{e.width}" if lo == hi else f"({lo}+{hi})"


def compiled_report(
    fn: Callable,
    args: tuple,
    *,
    name: str,
    mesh: dict,
    exchanges,
    steps_per_exchange: int = 1,
    note: str = "",
    loop: bool = False,
    shardy: bool = False,
) -> CommReport:
    """Compile ``fn(*args)`` and report its collectives (the engine of every ``comm_report``).

    ``fn`` runs ``steps_per_exchange`` physical steps per exchange (per loop
    iteration when ``loop`` is set: then only the loop body counts). The cells its
    strided slices move (:mod:`pgas.globalview.strided`) count as ideal traffic too.
    """
    with recording_transfers() as moved:
        lowered = jax.jit(fn).lower(*args)
    hlo = lowered.compile().as_text()
    return CommReport(
        name=name, mesh=mesh, collectives=tuple(parse_collectives(hlo, loop=loop)),
        exchanges=(*exchanges, *map(_moved, moved)), steps_per_exchange=steps_per_exchange,
        note=note,
        stablehlo=lowered.as_text() if shardy else None,
    )  # fmt: skip


def comm_report(
    step: Callable,
    *state,
    loop: bool = False,
    shardy: bool = False,
    steps_per_exchange: int | str = "auto",
    plan: Plan | None = None,
    params=None,
    gradient: bool = False,
    steps: int | None = None,
) -> CommReport:
    """Compile ``step`` as :func:`pgas.run` does and report the collectives per step.

    One exchange of a halo ``k`` times the step's reach, then ``k`` steps
    (``k = steps_per_exchange``, chosen by :func:`pgas.plan.plan` for
    ``"auto"``); counts and bytes are divided by ``k``.

    Args:
        step: a global-view step function as given to :func:`pgas.run`.
        *state: its state (one argument; several are passed as a tuple to a
            step that takes and returns them all).
        loop: compile the compiled loop (a ``fori_loop`` of such groups) and count
            only its body; collectives outside it are one-time traffic.
        shardy: keep the Shardy-annotated StableHLO in ``report.stablehlo``.
        steps_per_exchange: ``k`` or ``"auto"``.
        plan: report this plan (as :func:`pgas.run`'s ``plan=``) instead of making one.
        params: as :func:`pgas.run`'s ``params=`` (``step(state, params)``); its
            read-only fields are exchanged once per run, as in the loop, so that
            exchange is not counted per step.
        gradient: report reverse mode through ``pgas.run(step, state, steps)`` instead: one
            piece of its way back as ``jax.grad`` runs it (:func:`pgas.loop.derivative.way_back`:
            ``k`` transposed steps, or a checkpointed segment's recomputed step and adjoint
            step), per physical step, its schedule in ``note``.
        steps: the run's step count (with ``gradient``; it sets the schedule).

    >>> import numpy as np, pgas
    >>> u = pgas.from_numpy(np.zeros(8, np.float32), pgas.make_mesh(devices=1))
    >>> def heat(u):
    ...     u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    ...     return u
    >>> pgas.comm_report(heat, u).count("all-gather")
    0.0
    """

    fn, s = (step, state[0]) if len(state) == 1 else ((lambda t, *p: step(*t, *p)), tuple(state))
    check_state(s, "comm_report state")  # GlobalArrays (pgas.from_numpy) and 0-d scalars
    if gradient:
        if loop:
            raise PgasError("loop=True with gradient=True: a gradient's report compiles one "
                            "piece of the way back, not a loop; leave loop out")  # fmt: skip
        back, arrays = way_back(fn, s, steps, params, steps_per_exchange, plan), _arrays(s)
        return compiled_report(
            back.fn, back.args, name=f"gradient of {getattr(step, '__name__', 'step')}",
            mesh=dict(arrays[0].layout.mesh.shape), steps_per_exchange=back.k,
            exchanges=[e for a in arrays for h in back.halos
                       for e in exchanges_of(a.layout, h, a.dtype.itemsize)],
            note=back.note, shardy=shardy,
        )  # fmt: skip
    if not _is_step(fn, s, params):  # e.g. a reduction: compiled as it is, one call = one step
        mesh = _arrays(s)[0].layout.mesh if _arrays(s) else None
        return compiled_report(lambda t: fn(t), (s,), name=getattr(step, "__name__", "fn"),
                               mesh=dict(mesh.shape) if mesh else {}, exchanges=(),
                               shardy=shardy)  # fmt: skip
    how = plan or make_plan(fn, s, steps_per_exchange, params=params)
    k = how.steps_per_exchange
    fields, inputs = how.frames.get("fields"), how.frames.get("inputs")
    held = jax.jit(lambda p: read_only(p, how.widths, k, inputs))(params) \
        if params is not None else None  # fmt: skip

    def group(t, p):
        return group_program(fn, how.widths, k, p, how.sides, fields)(t)

    if loop:
        prog = lambda t, n, p: jax.lax.fori_loop(0, n, lambda i, x: group(x, p), t)  # noqa: E731
        args = (s, jax.numpy.int32(2), held)  # a traced trip count, as in pgas.run
    else:
        prog, args = group, (s, held)
    arrays = _arrays(s)
    each = fields if fields is not None and k == 1 else [how.exchanged] * len(arrays)
    exchanges = [e for a, f in zip(arrays, each)
                 for e in exchanges_of(a.layout, f, a.dtype.itemsize)]  # fmt: skip
    return compiled_report(
        prog, args, name=getattr(step, "__name__", "step"),
        mesh=dict(arrays[0].layout.mesh.shape) if arrays else {}, exchanges=exchanges,
        steps_per_exchange=k, note=how.note, loop=loop, shardy=shardy,
    )  # fmt: skip


def _is_step(fn: Callable, state, params=None) -> bool:
    """Whether ``fn`` maps the state to a state of the same structure (a time step)."""

    def structure(x):
        leaf = lambda y: isinstance(y, GlobalArray)  # noqa: E731
        return jax.tree.structure(x, is_leaf=leaf), [
            y if not leaf(y) else GlobalArray for y in jax.tree.leaves(x, leaf)
        ]

    (s_def, s_types), (o_def, o_types) = (
        structure(state),
        structure(jax.eval_shape(lambda s, p: step_fn(fn, p)(s), state, params)),
    )
    return s_def == o_def and all(
        t is GlobalArray or getattr(t, "ndim", None) == 0 for t in s_types + o_types
    )  # fields and scalars


def _arrays(state) -> list:
    return [x for x in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, GlobalArray))
            if isinstance(x, GlobalArray)]  # fmt: skip
