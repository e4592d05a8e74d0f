"""The snapshot store's identity check: another problem's store is refused, naming the path."""

from pathlib import Path

import numpy as np
import pytest

from pgas.io.store import StoreMismatchError, StoreSpec, check_identity


def _spec(**kw):
    base = dict(path=Path("/tmp/run.zarr"), name="u", dims=("x",), shape=(10,),
                dtype=np.dtype("float32"), chunks=(5,), diagnostics=(), attrs={"example": "heat"},
                coords={})  # fmt: skip
    return StoreSpec(**{**base, **kw})


def test_same_problem_passes_and_another_is_refused():
    spec = _spec()
    check_identity(spec, "u", ("x",), (10,), "float32", {"example": "heat"})
    with pytest.raises(StoreMismatchError, match=r"run.zarr holds another problem: shape"):
        check_identity(spec, "u", ("x",), (12,), "float32", {"example": "heat"})
    with pytest.raises(StoreMismatchError, match="example 'life'"):
        check_identity(spec, "u", ("x",), (10,), "float32", {"example": "life"})
