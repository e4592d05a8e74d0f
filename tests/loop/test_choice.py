"""The steps per exchange: the request, the model behind "auto" and the block-size cap."""

import pytest

import pgas
from pgas.loop.choice import (
    AUTO,
    SMALL_BLOCK,
    Choice,
    check_steps_per_exchange,
    choose_steps_per_exchange,
    model,
)


def test_model_and_choices():
    assert model((2**22,), (1,), "cpu") == 16 and model((4096, 4096), (1, 1), "cpu") == 1
    assert model((4096, 4096), (1, 1), "cpu", double=True) == 4
    assert model((64, 64), (1, 1), "cpu") == 8 and model((2**25,), (1,), "gpu") == 2


def test_small_blocks_cost_their_synchronisation():
    side = int(SMALL_BLOCK**0.5)  # 256 x 256 = SMALL_BLOCK cells: small; one row more: not
    assert model((side, side), (1, 1), "cpu") == 8 and model((side + 1, side), (1, 1), "cpu") == 1
    assert model((SMALL_BLOCK,), (1,), "cpu") == 16 == model((SMALL_BLOCK + 1,), (1,), "cpu")
    assert model((side, side, 1), (1, 0, 0), "cpu") == 16  # a reach along one axis: 1-D


def test_gpu_model_amortises_the_iteration():
    """On a GPU small blocks run many steps per loop iteration; large ones weigh bytes."""
    assert model((1001,), (1,), "gpu") == 32 and model((1024, 1024), (1, 1), "gpu") == 16
    assert model((8192, 8192), (1, 1), "gpu") == 16 and model((2**26,), (1,), "gpu") == 2
    assert model((2**24,), (1,), "gpu") == 16
    assert choose_steps_per_exchange("auto", (20,), (1,), "gpu").steps_per_exchange == 20


def test_choices():
    assert choose_steps_per_exchange("auto", (10,), (1,)) == Choice(10, "auto")
    assert choose_steps_per_exchange("auto", (10, 10), (0, 0)).steps_per_exchange == 1
    lowered = choose_steps_per_exchange(12, (10,), (2,))
    assert lowered.steps_per_exchange == 5 and "lowered from 12 to 5" in lowered.note
    assert choose_steps_per_exchange(7, (10, 100), (0, 3)) == Choice(7, 7)  # 100 // 3 = 33 fit
    widest = choose_steps_per_exchange(9, (1, 100), (2, 1))  # a block narrower than the reach
    assert widest.steps_per_exchange == 1 and "on axis 0" in widest.note


def test_check_steps_per_exchange():
    assert check_steps_per_exchange(AUTO) == "auto" and check_steps_per_exchange(3) == 3
    with pytest.raises(pgas.PgasError, match=r"^k = 0: .*, or 'auto'$"):
        check_steps_per_exchange(0, "k")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "fast"])
def test_bad_requests(bad):
    with pytest.raises(pgas.PgasError, match="steps_per_exchange"):
        choose_steps_per_exchange(bad, (10,), (1,))
