"""How a process's webhook senders are shared between organizations."""

from __future__ import annotations

from speechbatch.runner.deliveries import SenderShares


def _holding(shares: SenderShares, organization_id: int, senders: int) -> None:
    for _ in range(senders):
        shares.take(organization_id)


def test_one_organization_alone_holds_at_most_half_the_senders() -> None:
    shares = SenderShares(10)
    _holding(shares, 1, 4)
    assert shares.full() == []
    shares.take(1)
    assert shares.full() == [1]


def test_the_share_shrinks_as_more_organizations_send() -> None:
    shares = SenderShares(10)
    _holding(shares, 1, 3)
    _holding(shares, 2, 1)
    assert shares.full() == [1]  # 10 // (2 + 1) = 3
    _holding(shares, 3, 1)
    assert shares.full() == [1]  # 10 // 4 = 2: organization 1 still over it
    shares.give_back(1)
    shares.give_back(1)
    assert shares.full() == []


def test_a_single_sender_is_each_organizations_share() -> None:
    shares = SenderShares(1)
    assert shares.full() == []
    shares.take(7)
    assert shares.full() == [7]
    shares.give_back(7)
    assert shares.full() == []
