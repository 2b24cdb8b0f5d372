"""How a process's webhook senders are shared between organizations and their webhooks."""

from __future__ import annotations

import itertools

from speechbatch.runner.deliveries import SenderShares

_webhooks = itertools.count(1000)


def _holding(shares: SenderShares, organization_id: int, senders: int) -> None:
    """``senders`` more held by the organization, each for a webhook of its own."""
    for _ in range(senders):
        shares.take(organization_id, next(_webhooks))


def test_one_organization_alone_holds_at_most_half_the_senders() -> None:
    shares = SenderShares(10)
    _holding(shares, 1, 4)
    assert shares.full().organizations == []
    _holding(shares, 1, 1)
    assert shares.full().organizations == [1]


def test_the_share_shrinks_as_more_organizations_send() -> None:
    shares = SenderShares(10)
    shares.take(1, 11)
    shares.take(1, 12)
    shares.take(1, 13)
    _holding(shares, 2, 1)
    assert shares.full().organizations == [1]  # 10 // (2 + 1) = 3
    _holding(shares, 3, 1)
    assert shares.full().organizations == [1]  # 10 // 4 = 2: organization 1 still over it
    shares.give_back(1, 11)
    shares.give_back(1, 12)
    assert shares.full().organizations == []


def test_a_webhook_holds_one_sender_less_than_its_organization() -> None:
    shares = SenderShares(10)
    for _ in range(3):
        shares.take(1, 7)
    assert shares.full().webhooks == []
    shares.take(1, 7)
    # 4 of the organization's 5: its other webhooks still have one here.
    assert shares.full().webhooks == [7] and shares.full().organizations == []
    shares.give_back(1, 7)
    assert shares.full().webhooks == []


def test_a_single_sender_is_each_organizations_and_webhooks_share() -> None:
    shares = SenderShares(1)
    assert shares.full().organizations == []
    shares.take(7, 70)
    assert shares.full().organizations == [7] and shares.full().webhooks == [70]
    shares.give_back(7, 70)
    assert shares.full().organizations == [] and shares.full().webhooks == []
