"""pgas.report.parse_collectives on canned HLO text: kinds, bytes, pairs, loop body vs outside."""

from __future__ import annotations

from pgas.loop.report import parse_collectives

# The shape of what XLA CPU prints for a compiled pgas.run loop on 4 devices: two halo
# permutes in the while body (one synchronous, one async start/done pair), an all-gather
# and an all-reduce outside it, and a reduction computation that is not a collective.
HLO = """\
HloModule jit_fn, entry_computation_layout={(f32[1000]{0})->f32[1000]{0}}

%fused_computation (param_0: f32[1,250], param_1: f32[1,1]) -> f32[1,250] {
  %param_0 = f32[1,250]{1,0} parameter(0)
  ROOT %add = f32[1,250]{1,0} add(f32[1,250]{1,0} %param_0, f32[1,250]{1,0} %param_0)
}

%body.7 (p.1: (s32[], f32[1,250])) -> (s32[], f32[1,250]) {
  %p.1 = (s32[], f32[1,250]{1,0}) parameter(0)
  %gte.1 = f32[1,250]{1,0} get-tuple-element((s32[], f32[1,250]{1,0}) %p.1), index=1
  %slice.1 = f32[1,1]{1,0} slice(f32[1,250]{1,0} %gte.1), slice={[0:1], [249:250]}
  %collective-permute.1 = f32[1,1]{1,0} collective-permute(f32[1,1]{1,0} %slice.1), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3}}
  %collective-permute-start.2 = (f32[1,1]{1,0}, f32[1,1]{1,0}) collective-permute-start(f32[1,1]{1,0} %slice.1), channel_id=2, source_target_pairs={{1,0},{2,1},{3,2}}
  %collective-permute-done.2 = f32[1,1]{1,0} collective-permute-done((f32[1,1]{1,0}, f32[1,1]{1,0}) %collective-permute-start.2)
  %fusion.1 = f32[1,250]{1,0} fusion(f32[1,250]{1,0} %gte.1, f32[1,1]{1,0} %collective-permute.1), kind=kLoop, calls=%fused_computation
  ROOT %tuple.1 = (s32[], f32[1,250]{1,0}) tuple(s32[] %i, f32[1,250]{1,0} %fusion.1)
}

%cond.7 (p.2: (s32[], f32[1,250])) -> pred[] {
  %p.2 = (s32[], f32[1,250]{1,0}) parameter(0)
  ROOT %lt = pred[] compare(s32[] %a, s32[] %b), direction=LT
}

%sum.3 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.9 = f32[] add(f32[] %x, f32[] %y)
}

ENTRY %main.9 (Arg_0.1: f32[1000]) -> f32[1000] {
  %Arg_0.1 = f32[1000]{0} parameter(0)
  %all-gather.4 = f32[1000]{0} all-gather(f32[250]{0} %Arg_0.1), channel_id=3, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true
  %while.1 = (s32[], f32[1,250]{1,0}) while((s32[], f32[1,250]{1,0}) %tuple.0), condition=%cond.7, body=%body.7
  %all-reduce.5 = f64[2]{0} all-reduce(f64[2]{0} %r), channel_id=4, replica_groups={{0,1,2,3}}, to_apply=%sum.3
  ROOT %copy = f32[1000]{0} copy(f32[1000]{0} %all-gather.4)
}
"""  # noqa: E501 - HLO lines as XLA prints them


def test_kinds_bytes_and_pairs():
    found = parse_collectives(HLO)
    assert [c.kind for c in found] == [
        "collective-permute",
        "collective-permute",
        "all-gather",
        "all-reduce",
    ]
    up, down, gather, reduce = found
    assert (up.shape, up.bytes) == ("f32[1,1]", 4)
    assert up.pairs == "{{0,1},{1,2},{2,3}}" and up.messages == 3
    assert (down.shape, down.bytes, down.messages) == ("f32[1,1]", 4, 3)  # the -start form
    assert gather.bytes == 1000  # operand: 4000 B of result over a group of 4
    assert (reduce.shape, reduce.bytes) == ("f64[2]", 16)
    assert all(c.per_step for c in found)  # loop=False: everything counts


def test_loop_body_vs_outside():
    found = parse_collectives(HLO, loop=True)
    per_step = {(c.kind, c.per_step) for c in found}
    assert per_step == {
        ("collective-permute", True),
        ("all-gather", False),
        ("all-reduce", False),
    }
    assert sum(c.per_step for c in found) == 2


def test_self_pairs_are_not_messages():
    hlo = (
        "ENTRY %m () -> u8[2,3] {\n"
        "  %c = u8[2,3]{1,0} collective-permute(%x), source_target_pairs={{0,0},{1,1},{0,1}}\n"
        "}\n"
    )
    (c,) = parse_collectives(hlo)
    assert (c.bytes, c.messages) == (6, 1)


def test_no_collectives():
    assert parse_collectives("ENTRY %m () -> f32[] {\n  ROOT %c = f32[] constant(0)\n}\n") == []


# ---- comm_report(gradient=True): the way back of a run (issue 33, item 5) ------------------
def _burgers(u):
    u[1:-1] = u[1:-1] - 0.2 * u[1:-1] * (u[2:] - u[:-2]) + 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2])
    return u


def _heat(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


def test_gradient_report_counts_the_way_back_per_physical_step_against_its_ideal():
    import numpy as np

    import pgas
    from pgas.loop.reverse import schedule

    u = pgas.from_numpy(
        np.linspace(0.0, 1.0, 40), pgas.make_mesh(devices=3), boundary=pgas.Keep()
    )  # fmt: skip  (14 + 14 + 12 cells)
    forward = pgas.comm_report(_burgers, u)
    nonlinear = pgas.comm_report(_burgers, u, gradient=True, steps=100)
    # checkpointed: the step recomputed (its halo, one cell a side) and the adjoint step (the
    # cotangent's halo, the reach mirrored): the ideal is two one-cell exchanges per step
    assert nonlinear.name == "gradient of _burgers" and nonlinear.steps_per_exchange == 1
    assert nonlinear.note == "1 on the way back: " + schedule(100, forward.steps_per_exchange).note
    assert nonlinear.ideal_bytes == 2 * 2 * 8
    assert nonlinear.gathers == 0 and nonlinear.count("all-reduce") == 0
    permutes = [c for c in nonlinear.per_step if c.kind == "collective-permute"]
    assert permutes and all(c.bytes <= 2 * 8 for c in permutes)  # halo-sized: the frames
    # the state exchanged once a step (the recompute keeps the slabs the adjoint step's
    # frame needs), the cotangent once: two exchanges of two permutes each
    assert nonlinear.count("collective-permute") == 4
    assert nonlinear.ratio >= 1.0
    # affine: the transposed step's loop, deep halos as the forward's (k steps per exchange)
    affine = pgas.comm_report(_heat, u, gradient=True, steps=100)
    k = affine.steps_per_exchange
    assert k > 1 and affine.note.startswith(f"{k} on the way back")
    assert affine.count("collective-permute") == 2 / k and affine.ratio == 1.0
    assert affine.gathers == 0
    # the forward's plan, as pgas.run's plan=: one step per exchange back too
    single = pgas.comm_report(_heat, u, gradient=True, steps=100, plan=pgas.plan.plan(_heat, u, 1))
    assert single.steps_per_exchange == 1 and single.count("collective-permute") == 2


def _reaction(s):
    import pgas

    u, v = s["u"], s["v"]
    lap_u = sum(pgas.shift(u, o, ax) for ax in range(2) for o in (1, -1)) - 4.0 * u
    lap_v = sum(pgas.shift(v, o, ax) for ax in range(2) for o in (1, -1)) - 4.0 * v
    return {"u": (u + 0.1 * lap_u - u * v * v).to_array(),
            "v": (v + 0.05 * lap_v + u * v * v).to_array()}  # fmt: skip


def test_two_fields_send_their_slabs_together_on_the_way_back():
    import numpy as np

    import pgas

    mesh = pgas.make_mesh(("y", "x"), shape=(2, 2), devices=4)
    rng = np.random.default_rng(6)
    s = {name: pgas.from_numpy(rng.random((24, 20)), mesh) for name in ("u", "v")}
    forward = pgas.comm_report(_reaction, s)
    k = forward.steps_per_exchange
    # forward: each field its own messages, as the CPU's double-buffered loop refills them
    # in place: 8 per k steps, the ideal bytes
    assert k > 1 and forward.count("collective-permute") == 8 / k and forward.ratio == 1.0
    back = pgas.comm_report(_reaction, s, gradient=True, steps=20)
    # a step back: the state's frame and the cotangent's, each one message per side and split
    # axis for both fields (one a field: 16)
    assert back.steps_per_exchange == 1 and back.count("collective-permute") == 8
    assert back.gathers == 0 and back.ratio >= 1.0


def test_gradient_report_bad_inputs_say_what_to_give():
    import numpy as np
    import pytest

    import pgas

    mesh = pgas.make_mesh(devices=2)
    u = pgas.from_numpy(np.linspace(0.0, 1.0, 16), mesh, boundary=pgas.Keep())
    for steps in (None, 0, 2.5):
        with pytest.raises(pgas.PgasError, match=rf"steps = {steps}: .*steps=1000"):
            pgas.comm_report(_burgers, u, gradient=True, steps=steps)
    with pytest.raises(pgas.PgasError, match="loop=True with gradient=True: .*leave loop out"):
        pgas.comm_report(_burgers, u, gradient=True, steps=10, loop=True)
    mirrored = pgas.from_numpy(np.linspace(0.0, 1.0, 16), mesh, boundary=pgas.Neumann())
    with pytest.raises(pgas.PgasError, match="JAX's derivative of the loop.*jax.grad"):
        pgas.comm_report(_burgers, mirrored, gradient=True, steps=10)
