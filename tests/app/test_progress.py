"""Chunks between handovers, and the progress bar they advance (pgas.app.progress)."""

from pgas.app.progress import Progress, chunk_length


def test_chunk_length():
    assert chunk_length(100, None, False) is None
    assert chunk_length(100, None, True) == 5
    assert chunk_length(100, 10, False) == 20
    assert chunk_length(100, 50, True) == 50


def test_no_bar_when_quiet_or_not_rank_0():
    """No terminal here (pytest captures stdout) and quiet or rank 1: no bar, steps counted."""
    for quiet, rank in ((True, 0), (False, 1), (False, 0)):
        bar = Progress(10, quiet, rank, "demo")
        assert not bar.on
        bar(4)
        bar(8)
        assert bar.done == 8
        bar.close()
