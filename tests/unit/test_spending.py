"""Spending rules without a database: fingerprints, the call plan, prices."""

from __future__ import annotations

from speechbatch.config import Settings
from speechbatch.domain.fingerprints import audio_fingerprint
from speechbatch.services.spending import plan_calls, price
from speechbatch.web.usage import estimate_line, money


def fp(org: int = 1, voice: str = "alloy", text: str = "hi", model: str = "m") -> str:
    return audio_fingerprint(org, "openai", model, voice, "mp3", text)


def test_fingerprint_differs_by_organization_voice_model_and_text() -> None:
    assert fp() == fp()
    assert len({fp(), fp(org=2), fp(voice="echo"), fp(model="n"), fp(text="ho")}) == 5


def test_plan_sends_identical_texts_once_and_skips_existing_audio() -> None:
    requests = [(3, "A"), (3, "A"), (5, "H"), (2, "X")]
    plan = plan_calls(requests, existing={"H"})
    assert (plan.calls, plan.characters, plan.reused_items, plan.smallest_call) == (2, 5, 2, 2)


def test_plan_of_nothing_to_send_has_no_smallest_call() -> None:
    assert plan_calls([(1, "A")], existing={"A"}).smallest_call is None


def test_price_follows_the_configured_rate() -> None:
    assert price(Settings(), 1000) is None
    priced = Settings(tts_price_per_million_characters=15.0, currency="EUR")
    assert price(priced, 14_300) == {"amount": 0.2145, "currency": "EUR"}


def test_estimate_line_reads_like_the_button_it_explains() -> None:
    est = {"items": 120, "characters": 14_300, "reused_items": 30,
           "price": {"amount": 0.2145, "currency": "USD"}}  # fmt: skip
    assert estimate_line("Retry", est) == (
        "Retry: 120 items, 14,300 characters, about $0.21; 30 will reuse audio"
    )
    assert money({"amount": 0.004, "currency": "USD"}) == "<$0.01"
    assert money({"amount": 3.5, "currency": "CHF"}) == "3.50 CHF"
