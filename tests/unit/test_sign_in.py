"""Sign-in against fakes: a refusal costs one password check, whoever the email is."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from speechbatch.adapters import passwords
from speechbatch.adapters.repositories import AttemptCount
from speechbatch.services import accounts
from tests.fakes import FakeRepository, FakeUnitOfWork, FakeUowFactory

EMAIL = "admin@acme.test"


class FakeSignIns:
    """A throttle that never throttles (the limit has integration tests)."""

    def count_attempt(self, email: str, client_address: str, window_seconds: float) -> AttemptCount:
        now = datetime.now(UTC)
        return AttemptCount(1, now, now)

    def forget(self, email: str, client_address: str) -> None:
        pass

    def purge_expired(self, window_seconds: float) -> None:
        pass


@pytest.fixture
def factory() -> FakeUowFactory:
    repo = FakeRepository()
    repo.create_user(10, EMAIL, passwords.hash_password("password-1"))
    uow = FakeUnitOfWork(repo)
    uow.sign_ins = FakeSignIns()
    return FakeUowFactory(uow)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hashes the sign-in checked a password against, in order."""
    seen: list[str] = []
    real = passwords.check_password

    def spy(password_hash: str, password: str) -> bool:
        seen.append(password_hash)
        return real(password_hash, password)

    monkeypatch.setattr(accounts, "check_password", spy)
    return seen


@pytest.mark.parametrize("email", ["nobody@acme.test", EMAIL])
def test_a_refusal_checks_one_password_hash(
    factory: FakeUowFactory, checks: list[str], email: str
) -> None:
    assert accounts.sign_in(factory, email, "wrong-password", "10.0.0.1") is None
    assert len(checks) == 1


def test_an_unknown_email_is_checked_against_a_hash_of_the_same_cost(
    factory: FakeUowFactory, checks: list[str]
) -> None:
    accounts.sign_in(factory, "nobody@acme.test", "wrong-password", "10.0.0.1")
    accounts.sign_in(factory, EMAIL, "wrong-password", "10.0.0.1")
    unknown, known = checks
    # Same method and cost parameters ("scrypt:32768:8:1"), another salt.
    assert unknown.split("$")[0] == known.split("$")[0]
    assert unknown != known


def test_the_right_password_signs_in(factory: FakeUowFactory, checks: list[str]) -> None:
    user = accounts.sign_in(factory, EMAIL, "password-1", "10.0.0.1")
    assert user is not None and user.email == EMAIL
    assert len(checks) == 1
