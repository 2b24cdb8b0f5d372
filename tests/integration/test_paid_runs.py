"""A job run through a paid provider (its local stand-in) on both databases: every item
DONE, and the ledger bills exactly what the provider received, in its own unit."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from speechbatch import create_app
from speechbatch.app import Services
from speechbatch.config import Settings
from speechbatch.provider_settings import PaidProviders as PaidSettings
from speechbatch.provider_settings import ProviderLimit
from speechbatch.services import start_generation
from speechbatch.services.jobs import create_job
from speechbatch.services.spending import estimate, usage_view
from tests.conftest import close_services, services
from tests.helpers import new_admin, statuses, view, wait_for
from tests.support.paid_providers import KEY, PaidProviders


@pytest.fixture
def server() -> Iterator[PaidProviders]:
    """The local paid providers."""
    s = PaidProviders().start()
    yield s
    s.stop()


def _app(settings: Settings, provider: str, server: PaidProviders) -> Services:
    paid = PaidSettings(
        elevenlabs_api_key=KEY, elevenlabs_base_url=server.url,
        google_api_key=KEY, google_base_url=server.url,
    )  # fmt: skip
    return services(create_app(replace(settings, tts_provider=provider, paid=paid).validate()))


@pytest.mark.parametrize(
    ("provider", "voice", "texts", "billed"),
    [
        ("elevenlabs", "21m00Tcm4TlvDq8rCL9Xx", ["Hello there.", "Tom & Jerry <3"], 12 + 14),
        ("google", "en-US-Neural2-C", ["Café crème.", "Hello."], 13 + 6),  # bytes
    ],
)
def test_a_job_on_a_paid_provider_bills_what_it_received(
    settings: Settings, server: PaidProviders, provider: str, voice: str,
    texts: list[str], billed: int,
) -> None:  # fmt: skip
    svc = _app(settings, provider, server)
    try:
        admin = new_admin(svc, "acme", "admin@acme.test")
        limits = svc.limits
        job_id = create_job(svc.uow_factory, admin, "paid", voice, texts, limits)
        start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
        job = wait_for(lambda: (j := view(svc, admin, job_id))["status"] != "GENERATING" and j)
        assert job["status"] == "COMPLETED" and statuses(job) == ["DONE", "DONE"]
        assert len(server.speech_requests()) == 2
        with svc.uow_factory() as uow:
            usage = uow.spending.usage(admin.organization_id)
        assert usage.billed_characters == billed
    finally:
        close_services(svc)


def test_two_providers_at_once_each_under_its_own_concurrency(
    settings: Settings, server: PaidProviders
) -> None:
    server.latency = 0.3
    paid = PaidSettings(
        elevenlabs_api_key=KEY, elevenlabs_base_url=server.url,
        google_api_key=KEY, google_base_url=server.url,
    )  # fmt: skip
    both = replace(
        settings, tts_provider="elevenlabs", tts_providers=("elevenlabs", "google"), paid=paid,
        provider_concurrency=8,
        provider_limits={"elevenlabs": ProviderLimit(concurrency=1),
                         "google": ProviderLimit(concurrency=2,
                                                 price_per_million_characters=1000.0)},
    ).validate()  # fmt: skip
    svc = services(create_app(both))
    try:
        admin = new_admin(svc, "acme", "admin@acme.test")
        voices = svc.limits.voices
        assert "google:en-US-Neural2-C" in voices and "21m00Tcm4TlvDq8rCL9Xx" in voices
        texts = [f"Line {n}." for n in range(6)]
        slow = create_job(svc.uow_factory, admin, "eleven", "elevenlabs:21m00Tcm4TlvDq8rCL9Xx",
                          texts, svc.limits)  # fmt: skip
        cafes = [f"Café {n}." for n in range(6)]  # 7 characters, 8 bytes each
        fast = create_job(svc.uow_factory, admin, "google", "google:en-US-Neural2-C",
                          cafes, svc.limits)  # fmt: skip
        quote = estimate(svc.uow_factory, svc.settings, svc.provider, admin, fast)
        assert quote["characters"] == 48  # Google's unit: bytes, at Google's own price
        assert quote["price"] == {"amount": 0.048, "currency": "USD"}
        for job_id in (slow, fast):
            start_generation(svc.uow_factory, svc.settings, svc.runner, admin, job_id)
        google_done = wait_for(lambda: (j := view(svc, admin, fast))["status"] == "COMPLETED" and j)
        # Google's 6 calls, two at a time, end while ElevenLabs' one slot is still busy.
        assert view(svc, admin, slow)["progress"]["done"] < 6
        assert statuses(google_done) == ["DONE"] * 6
        wait_for(lambda: view(svc, admin, slow)["status"] == "COMPLETED", timeout=20)
        assert server.most_in_flight == {"with-timestamps": 1, "text:synthesize": 2}
        with svc.uow_factory() as uow:
            usage = uow.spending.usage(admin.organization_id)
        assert usage.billed_characters == 42 + 48
        assert usage_view(svc.uow_factory, svc.settings, admin)["providers"] == [
            {"provider": "elevenlabs", "billed": 42, "calls": 6},
            {"provider": "google", "billed": 48, "calls": 6},
        ]
    finally:
        close_services(svc)
