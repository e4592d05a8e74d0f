"""The snapshot format of a path, by its suffix: Zarr written by every process, netCDF by one."""

from pathlib import Path

import pytest

from pgas.errors import PgasError
from pgas.io import formats
from pgas.io.ncstore import Netcdf
from pgas.io.zarrstore import Zarr


def test_each_suffix_names_its_format():
    assert sorted(formats.FORMATS) == [".nc", ".zarr"]
    for suffix, fmt in formats.FORMATS.items():
        assert fmt.suffix == suffix
    assert isinstance(formats.of(Path("/tmp/run.zarr")), Zarr)
    assert isinstance(formats.of("out/run.NC"), Netcdf)  # the suffix in any case
    assert formats.of("run.zarr").parallel and not formats.of("run.nc").parallel


@pytest.mark.parametrize(("path", "suffix"), [("run.h5", ".h5"), ("run", ""), ("a.nc/b", "")])
def test_another_suffix_is_refused_naming_the_path_and_the_fix(path, suffix):
    with pytest.raises(PgasError) as err:
        formats.of(path)
    assert str(err.value) == (
        f"path {path!r} ends in {suffix!r}; snapshots are written as .zarr or .nc: end the "
        f"path with one of them"
    )
    assert type(err.value).__name__ == "OutputPathError"
