"""TARDIS's fixed sparse address rows (also ARMIN+TARDIS-addr's): every memory cell gets its
own row, a clear ConfigError where the sizes cannot give that, and the same rows as the plain
random draw wherever that draw had no repeats."""

import math

import pytest
import torch

from mannlab.errors import ConfigError
from mannlab.models import build_model
from mannlab.models.tardis import distinct_address_rows, smallest_address_size, sparse_addresses


def plain_draw(slots, size, nonzeros, seed=0):
    """The draw without the repeat check: the reference for rows that need no redraw."""
    gen = torch.Generator().manual_seed(seed)
    rank = torch.rand(slots, size, generator=gen).argsort(-1).argsort(-1)
    signs = torch.randint(0, 2, (slots, size), generator=gen) * 2.0 - 1.0
    return torch.where(rank < nonzeros, signs, torch.zeros(())) / nonzeros**0.5


def distinct(rows):
    return len(set(map(tuple, rows.tolist())))


def check_sparse(a, nonzeros):
    assert ((a != 0).sum(-1) == nonzeros).all()
    assert torch.allclose(a[a != 0].abs(), torch.full_like(a[a != 0], nonzeros**-0.5))


@pytest.mark.parametrize("slots, size, nonzeros, plain", [(16, 4, 2, 13), (50, 6, 3, 42)])
def test_recipe_sizes_give_every_cell_its_own_row(slots, size, nonzeros, plain):
    """The copy/recall recipes' 16 x 4 and the Table 1 recipes' 50 x 6: the plain draw
    repeats rows there."""
    assert distinct(plain_draw(slots, size, nonzeros)) == plain
    a = sparse_addresses(slots, size, nonzeros)
    assert distinct(a) == slots
    check_sparse(a, nonzeros)


def test_rows_distinct_across_sizes_up_to_every_possible_row():
    for size in range(1, 9):
        for nonzeros in range(1, size + 1):
            possible = distinct_address_rows(size, nonzeros)
            for slots in sorted({1, min(possible, 40), min(possible, 200)}):
                a = sparse_addresses(slots, size, nonzeros, seed=slots)
                assert a.shape == (slots, size) and distinct(a) == slots, (slots, size, nonzeros)
                check_sparse(a, nonzeros)


def test_possible_rows_count_positions_and_signs():
    assert distinct_address_rows(4, 2) == math.comb(4, 2) * 4 == 24
    assert distinct_address_rows(6, 3) == 160
    assert distinct(sparse_addresses(24, 4, 2)) == 24  # all of them: the count is reachable
    assert smallest_address_size(32) == 5  # C(5, 2) * 4 = 40
    assert smallest_address_size(32, nonzeros=1) == 16  # 2 * 16 = 32


def test_more_slots_than_possible_rows_is_a_config_error():
    message = (
        r"32 memory slots need 32 different address rows, but address_size=4 at "
        r"nonzeros=2 has only 24 .*address_size >= 5 at nonzeros=2; nonzeros in \[3\]"
    )
    with pytest.raises(ConfigError, match=message):
        sparse_addresses(32, 4, 2)
    with pytest.raises(ConfigError, match="has only 24"):
        build_model("tardis", 3, 2, hidden_size=8, memory_slots=32, address_size=4)
    with pytest.raises(ConfigError, match="has only 2 "):
        build_model("armin", 3, 2, hidden_size=6, memory_slots=4, read="tardis", address_size=1)


def test_armin_default_address_size_is_large_enough_for_its_slots():
    """d_r / 5 is 1 feature at d_r = 6: two rows only, so the default grows to 2 (4 rows)."""
    model = build_model("armin", 3, 2, hidden_size=6, memory_slots=4, read="tardis")
    assert model.cell.address.shape == (4, 2) and distinct(model.cell.address) == 4
    wide = build_model("armin", 3, 2, hidden_size=8, memory_slots=50, memory_width=32, read="tardis")
    assert wide.cell.address.shape == (50, 6)  # the Table 1 size: d_r / 5 suffices


def test_deterministic_per_seed():
    for seed in (0, 1, 7):
        assert torch.equal(sparse_addresses(50, 6, 3, seed), sparse_addresses(50, 6, 3, seed))
    assert not torch.equal(sparse_addresses(50, 6, 3, 0), sparse_addresses(50, 6, 3, 1))


def test_rows_of_a_draw_without_repeats_are_unchanged():
    """The PTB recipe's 20 x 8 at 4 nonzeros: the plain draw has no repeats, so models
    built on those addresses keep them bit for bit."""
    plain = plain_draw(20, 8, 4)
    assert distinct(plain) == 20
    assert torch.equal(sparse_addresses(20, 8, 4), plain)


def test_only_the_later_repeats_are_redrawn():
    plain, a = plain_draw(16, 4, 2), sparse_addresses(16, 4, 2)
    first = {}
    for i, row in enumerate(map(tuple, plain.tolist())):
        first.setdefault(row, i)
    kept = sorted(first.values())
    assert len(kept) == 13
    assert torch.equal(a[kept], plain[kept])
