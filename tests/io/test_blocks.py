"""Host blocks of a global array: global slices, no padding, one copy per block."""

import numpy as np

import pgas
from pgas.io.blocks import block_chunks, host_blocks


def test_uneven_blocks_map_to_global_slices():
    x = np.arange(10.0)
    u = pgas.from_numpy(x, pgas.make_mesh(("x",), devices=4))  # 3, 3, 2, 2 cells
    pieces = host_blocks(u)
    assert [p[0][0] for p in pieces] == [slice(0, 3), slice(3, 6), slice(6, 8), slice(8, 10)]
    for region, block in pieces:
        np.testing.assert_array_equal(block, x[region])
    assert block_chunks(u.layout.axes) == (3,)
