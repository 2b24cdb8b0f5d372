"""Reservations: every billed attempt is a row; a refund flips it, once, to its month."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from speechbatch.adapters.models import Reservation as ReservationRow
from speechbatch.adapters.models import UsageMonth
from speechbatch.adapters.repositories import UserRecord
from speechbatch.adapters.repositories.ledger import Reservation
from speechbatch.app import Services
from speechbatch.services import get_job
from tests.helpers import claim, concrete, new_job


def _reserved(svc: Services, admin: UserRecord, characters: int) -> tuple[int, Reservation]:
    job_id = new_job(svc, admin, 1)
    attempt = claim(svc, admin, job_id)
    assert attempt is not None
    with concrete(svc.uow_factory)() as uow:
        reservation = uow.spending.reserve_characters(
            admin.organization_id, job_id, attempt, characters
        )
        uow.commit()
    assert reservation is not None
    return job_id, reservation


def _refund(svc: Services, reservation: Reservation) -> bool:
    with concrete(svc.uow_factory)() as uow:
        won = uow.spending.refund_reservation(reservation)
        uow.commit()
    return won


def _months(svc: Services) -> dict[str, tuple[int, int]]:
    with concrete(svc.uow_factory)(read_only=True) as uow:
        rows = uow.session.execute(
            select(UsageMonth.month, UsageMonth.billed_characters, UsageMonth.provider_calls)
        ).all()
    return {row.month: (row.billed_characters, row.provider_calls) for row in rows}


def _run_line(svc: Services, admin: UserRecord, job_id: int) -> tuple[int, int]:
    """The run's share of the ledger as the job's run history shows it."""
    (run,) = get_job(svc.uow_factory, svc.settings, admin, job_id)["runs"]
    return run["billed_characters"], run["provider_calls"]


def test_a_refund_retried_after_a_lost_acknowledgement_gives_back_once(
    svc: Services, admin: UserRecord
) -> None:
    """The runner retries a transaction whose commit acknowledgement was lost: the
    refund runs again. The second one finds its reservation flipped and gives nothing."""
    job_id, reservation = _reserved(svc, admin, 40)
    (month,) = _months(svc)
    assert _months(svc) == {month: (40, 1)}
    assert _refund(svc, reservation)
    assert not _refund(svc, reservation)
    assert _months(svc) == {month: (0, 0)}
    assert _run_line(svc, admin, job_id) == (0, 0)
    with svc.uow_factory(read_only=True) as uow:
        assert uow.spending.usage(admin.organization_id).billed_characters == 0


def test_a_refund_goes_back_to_the_month_that_paid(svc: Services, admin: UserRecord) -> None:
    """A call reserved at 23:59:59 UTC on the last day of a month and refunded after
    midnight gives its characters back to that month, not to the new one."""
    _, paid_earlier = _reserved(svc, admin, 30)
    (month,) = _months(svc)
    with concrete(svc.uow_factory)() as uow:  # as if reserved in January 2000
        uow.session.execute(
            update(UsageMonth).where(UsageMonth.month == month).values(month="2000-01")
        )
        uow.session.execute(update(ReservationRow).values(month="2000-01"))
        uow.commit()
    paid_earlier = Reservation(paid_earlier.id, paid_earlier.job_id, 30, "2000-01")
    _reserved(svc, admin, 5)  # this month's own call
    assert _refund(svc, paid_earlier)
    assert _months(svc) == {"2000-01": (0, 0), month: (5, 1)}


def test_a_months_billed_characters_can_never_go_negative(svc: Services, admin: UserRecord) -> None:
    _reserved(svc, admin, 10)
    with concrete(svc.uow_factory)() as uow, pytest.raises(IntegrityError):
        uow.session.execute(update(UsageMonth).values(billed_characters=-1))
        uow.session.flush()
    with concrete(svc.uow_factory)() as uow, pytest.raises(IntegrityError):
        uow.session.execute(update(UsageMonth).values(provider_calls=-1))


def test_a_reservation_over_the_budget_writes_nothing(svc: Services, admin: UserRecord) -> None:
    with concrete(svc.uow_factory)() as uow:
        uow.spending.set_budget("acme", 10)
        uow.commit()
    job_id = new_job(svc, admin, 1)
    attempt = claim(svc, admin, job_id)
    assert attempt is not None
    with concrete(svc.uow_factory)() as uow:
        assert uow.spending.reserve_characters(admin.organization_id, job_id, attempt, 11) is None
        uow.commit()
    assert _months(svc) == {}
    assert _run_line(svc, admin, job_id) == (0, 0)
    with concrete(svc.uow_factory)(read_only=True) as uow:
        assert uow.session.execute(select(ReservationRow.id)).first() is None
