"""No silent conversions: bool(), NumPy arrays, int/float/len, NumPy scalars on either side,
integral parameters. Each case was a silent wrong answer or an odd refusal in pgas 0.3.0."""

import operator

import jax.numpy as jnp
import numpy as np
import pytest

import pgas
from pgas.errors import ConversionError, PgasError


def field(dtype="float32", n=50):
    mesh = pgas.make_mesh(("x",), devices=4)
    return pgas.from_function(lambda i: (i % 11) * 1.0, (n,), mesh, dtype=dtype)


@pytest.mark.parametrize("expr", ["u > 5", "u > 50", "u[1:-1] == u[2:]", "u"])
def test_bool_raises_and_points_to_any_and_all(expr):
    u = field()
    value = eval(expr, {"u": u})
    with pytest.raises(ConversionError, match="pgas.any") as caught:
        bool(value)
    assert isinstance(caught.value, TypeError)  # as JAX's TracerBoolConversionError


def test_any_and_all_are_one_reduction():
    u = field()  # values 0..10
    assert bool(pgas.any(u > 5)) and not bool(pgas.any(u > 50))
    assert bool(pgas.all(u >= 0)) and not bool(pgas.all(u > 0))
    assert bool(pgas.any(u > 9)) and bool(pgas.all((u > -1).to_array()))


def test_numpy_conversion_gives_the_numbers_or_a_clear_error():
    u = field()
    np.testing.assert_array_equal(np.asarray(u), u.to_numpy())
    assert np.asarray(u, dtype=np.float64).dtype == np.float64
    with pytest.raises(ConversionError, match="to_array"):
        np.asarray(u[1:-1] + 1)


def test_int_float_len_as_numpy():
    u = field()
    assert len(u) == 50 and len(u[1:-1]) == 48
    one = pgas.from_numpy(np.array([3.5]), pgas.make_mesh(devices=1))
    assert float(one) == 3.5 and int(one) == 3
    for convert in (int, float):
        with pytest.raises(ConversionError, match="only one cell"):
            convert(u)
        with pytest.raises(ConversionError, match="reduce it"):
            convert(u[1:-1])


# every operator of a View is the same _binary wrapper (pgas/globalview/view.py): one of each
# kind of promotion, each on either side: a commutative one, ordered ones (a swapped order would
# show in the values), true division (integers to floats), a power (an integer power), an
# ordering comparison (reflected: 0.5 < u is u > 0.5) and equality (bool results)
OPS = [operator.add, operator.sub, operator.truediv, operator.pow, operator.lt,
       operator.eq]  # fmt: skip


@pytest.mark.parametrize("op", OPS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("scalar", [np.float32(0.5), np.float64(0.5), np.int32(2), 0.5, 2],
                         ids=["f32", "f64", "i32", "py-float", "py-int"])  # fmt: skip
def test_numpy_scalars_on_either_side_follow_jax_promotion(op, scalar):
    u = field()
    a = u.to_numpy()[1:-1]
    for left, right, ref in ((scalar, u[1:-1], (scalar, jnp.asarray(a))),
                             (u[1:-1], scalar, (jnp.asarray(a), scalar))):  # fmt: skip
        v = op(left, right)
        assert isinstance(v, pgas.View)
        expected = op(*ref)  # JAX's rule: NumPy scalars are typed, Python scalars weak
        assert v.dtype == expected.dtype, (op, scalar, v.dtype, expected.dtype)
        u2 = field(str(expected.dtype) if expected.dtype != np.bool_ else "float32")
        if expected.dtype != np.bool_:
            u2[1:-1] = v
            np.testing.assert_array_equal(u2.to_numpy()[1:-1], np.asarray(expected))


def test_float32_coefficients_from_numpy_stay_float32():
    u = field()
    ref = u.to_numpy()
    u[1:-1] = np.float32(0.5) * u[1:-1] + np.float32(0.25) * (u[:-2] + u[2:])
    want = np.float32(0.5) * ref[1:-1] + np.float32(0.25) * (ref[:-2] + ref[2:])
    assert u.dtype == np.float32
    np.testing.assert_array_equal(u.to_numpy()[1:-1], want)


def heat(u):
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    return u


@pytest.mark.parametrize("name", ["steps", "chunk", "snapshot_every", "steps_per_exchange"])
def test_integer_parameters_take_any_integral_value_and_refuse_bools(name):
    u = field()
    # k = 4 in every case, the steps_per_exchange case's value (auto's k = 12 on blocks of 13
    # and 12 exceeds the 4 steps: its group would be compiled and never run)
    kw = {"steps": 4, "steps_per_exchange": 4, name: np.int64(4)}
    out = pgas.run(heat, u, **kw)
    out = out[0] if isinstance(out, tuple) else out
    want = pgas.run(heat, u, 4, steps_per_exchange=4).to_numpy()
    np.testing.assert_array_equal(out.to_numpy(), want)
    for bad in (True, np.True_, 4.0, "4"):
        with pytest.raises(PgasError, match=name):
            pgas.run(heat, u, **{"steps": 4, name: bad})
