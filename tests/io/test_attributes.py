"""Attribute values made safe for every netCDF and Zarr writer (pgas.io.attributes)."""

import json
import os

import numpy as np

from pgas.io import dataset
from pgas.io.attributes import netcdf_safe_attrs


def test_netcdf_safe_attrs():
    safe = netcdf_safe_attrs(
        {
            "flag": True,
            "np_flag": np.bool_(False),
            "n": np.int64(3),
            "big": 2**70,
            "dt": np.float32(0.25),
            "shape": (256, 512),
            "bc": {"x": ["periodic", None]},
            "none": None,
            "arr": np.array([1.0, 2.0]),
            "mask": np.array([True, False]),
            "path": os.path,
            7: "key",
        }
    )
    assert safe["flag"] == 1 and type(safe["flag"]) is int
    assert safe["np_flag"] == 0 and type(safe["np_flag"]) is int
    assert safe["n"] == 3 and type(safe["n"]) is int
    assert safe["big"] == str(2**70)
    assert safe["dt"] == 0.25 and type(safe["dt"]) is float
    assert json.loads(safe["shape"]) == [256, 512]
    assert json.loads(safe["bc"]) == {"x": ["periodic", None]}
    assert safe["none"] == "null"
    np.testing.assert_array_equal(safe["arr"], [1.0, 2.0])
    assert safe["mask"].dtype == np.int8
    assert isinstance(safe["path"], str)
    assert safe["7"] == "key"


def test_the_dataset_writes_safe_attributes_and_offers_the_function():
    ds = dataset.to_dataset(np.zeros((1, 2)), [0], attrs={"mesh": (2, 1), "ok": True})
    assert ds.attrs == {"mesh": "[2, 1]", "ok": 1}
    assert dataset.netcdf_safe_attrs is netcdf_safe_attrs
