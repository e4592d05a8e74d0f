"""The final field's checksum and diagnostics from blocks, no gather (pgas.app.final)."""

import dataclasses

import numpy as np

from pgas.app.final import decode_field, final_checksum, final_values
from pgas.app.problem import checksum, demo
from pgas.io.output import Output


def _pieces(field, cuts):
    """``(region, block)`` pieces of a 1-D field cut at ``cuts``."""
    edges = [0, *cuts, field.shape[0]]
    return [((slice(a, b),), field[a:b]) for a, b in zip(edges, edges[1:])]


def test_checksum_and_diagnostics_of_uneven_decoded_blocks():
    p = dataclasses.replace(demo(9), decode=lambda v: np.repeat(v, 2, axis=-1), cell_shape=(18,))
    values = np.arange(9, dtype=np.float32)
    whole = np.repeat(values, 2)

    def total(blocks, reduce):
        return {"total": reduce("sum", sum(float(b.sum()) for b in blocks)), "n": len(blocks)}

    got = final_values(p, Output(diagnostics=total), _pieces(values, [2, 7]), None, 1)
    assert got.checksum == checksum(whole)
    assert got.diagnostics == {"total": float(whole.sum()), "n": 3}
    assert final_checksum(p, _pieces(values, [4]), None, 1) == checksum(whole)
    assert final_values(p, None, _pieces(values, [4]), None, 1).diagnostics == {}
    np.testing.assert_array_equal(decode_field(p, values), whole)
    assert decode_field(demo(), values) is values and decode_field(p, None) is None
