"""OpenAIProvider against a mocked HTTP API (the ``responses`` library)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from email.utils import formatdate
from typing import Any

import pytest
import requests
import responses

from speechbatch.adapters.providers import (
    PermanentProviderError,
    ProviderError,
    RetryableProviderError,
    build_provider,
)
from speechbatch.adapters.providers.base import CallNotSent, Delivery, RefusedKeyError, guarded
from speechbatch.adapters.providers.openai import OpenAIProvider, parse_retry_after
from speechbatch.config import Settings

BASE = "https://tts.example.test/v1/"
URL = "https://tts.example.test/v1/audio/speech"
KEY = "sk-test-SECRET-0123456789abcdef"
AUDIO = b"\xff\xf3\x84\xc4" + b"\x00" * 200


@pytest.fixture
def mocked() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock() as rsps:
        yield rsps


def timeout_of(call: responses.Call) -> object:
    """The ``timeout`` that requests was given (``responses`` records it on the request)."""
    return getattr(call.request, "req_kwargs", {}).get("timeout")


def make(api_key: str | None = KEY, timeout: float = 12.5) -> OpenAIProvider:
    return OpenAIProvider(
        base_url=BASE,
        api_key=api_key,
        model="tts-1",
        voices=("alloy", "nova"),
        timeout_seconds=timeout,
    )


def test_posts_the_contract_request_and_returns_bytes(mocked: responses.RequestsMock) -> None:
    mocked.post(URL, body=AUDIO, status=200, content_type="audio/mpeg")
    assert make().synthesize("Hello there", "nova") == AUDIO
    request = mocked.calls[0].request
    assert request.url == URL
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.headers["Content-Type"] == "application/json"
    assert request.body is not None
    assert json.loads(request.body) == {
        "model": "tts-1",
        "input": "Hello there",
        "voice": "nova",
        "response_format": "mp3",
    }
    assert timeout_of(mocked.calls[0]) == 12.5


def test_no_authorization_header_without_a_key(mocked: responses.RequestsMock) -> None:
    mocked.post(URL, body=AUDIO)
    make(api_key=None).synthesize("hi", "alloy")
    assert "Authorization" not in mocked.calls[0].request.headers


def test_the_environments_proxy_and_ca_bundle_still_apply(
    mocked: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests reads the proxy and the CA bundle from the environment itself."""
    for name in ("NO_PROXY", "no_proxy", "https_proxy", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.test:3128")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/company-ca.pem")
    mocked.post(URL, body=AUDIO)
    make().synthesize("hi", "alloy")
    kwargs = getattr(mocked.calls[0].request, "req_kwargs", {})
    assert kwargs["proxies"].get("https") == "http://proxy.example.test:3128"
    assert kwargs["verify"] == "/etc/ssl/certs/company-ca.pem"


def test_no_proxy_bypasses_the_proxy(
    mocked: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example.test:3128")
    monkeypatch.setenv("NO_PROXY", "tts.example.test")
    mocked.post(URL, body=AUDIO)
    make().synthesize("hi", "alloy")
    assert "https" not in getattr(mocked.calls[0].request, "req_kwargs", {})["proxies"]


def test_a_netrc_entry_for_the_host_does_not_replace_the_api_key(
    mocked: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine tts.example.test login someone password other-secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    mocked.post(URL, body=AUDIO)
    make().synthesize("hi", "alloy")
    assert mocked.calls[0].request.headers["Authorization"] == f"Bearer {KEY}"


def test_every_call_has_the_timeout(mocked: responses.RequestsMock) -> None:
    mocked.post(URL, body=AUDIO)
    provider = make(timeout=3.0)
    for _ in range(3):
        provider.synthesize("hi", "alloy")
    assert [timeout_of(call) for call in mocked.calls] == [3.0] * 3


def test_empty_200_is_retryable(mocked: responses.RequestsMock) -> None:
    mocked.post(URL, body=b"", status=200)
    with pytest.raises(RetryableProviderError, match="empty audio"):
        make().synthesize("hi", "alloy")


def test_429_with_retry_after_seconds(mocked: responses.RequestsMock) -> None:
    mocked.post(
        URL,
        json={"error": {"message": "Rate limit reached"}},
        status=429,
        headers={"Retry-After": "17"},
    )
    with pytest.raises(RetryableProviderError) as info:
        make().synthesize("hi", "alloy")
    assert info.value.status == 429
    assert info.value.retry_after == 17.0
    assert "Rate limit reached" in str(info.value)


def test_429_with_retry_after_http_date(mocked: responses.RequestsMock) -> None:
    import time

    mocked.post(URL, status=429, headers={"Retry-After": formatdate(time.time() + 30, usegmt=True)})
    with pytest.raises(RetryableProviderError) as info:
        make().synthesize("hi", "alloy")
    assert info.value.retry_after is not None
    assert 25 <= info.value.retry_after <= 31


def test_parse_retry_after() -> None:
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_retryable(mocked: responses.RequestsMock, status: int) -> None:
    mocked.post(URL, body="upstream exploded", status=status)
    with pytest.raises(RetryableProviderError) as info:
        make().synthesize("hi", "alloy")
    assert info.value.status == status
    assert info.value.retry_after is None
    assert "upstream exploded" in str(info.value)


def test_400_is_permanent_with_the_providers_message(mocked: responses.RequestsMock) -> None:
    mocked.post(
        URL,
        json={"error": {"message": "Input is too long", "type": "invalid_request_error"}},
        status=400,
    )
    with pytest.raises(PermanentProviderError) as info:
        make().synthesize("hi", "alloy")
    assert info.value.status == 400
    assert "Input is too long" in str(info.value)


def test_plain_text_error_is_truncated(mocked: responses.RequestsMock) -> None:
    mocked.post(URL, body="x" * 5000, status=404)
    with pytest.raises(PermanentProviderError) as info:
        make().synthesize("hi", "alloy")
    assert info.value.status == 404
    assert len(str(info.value)) < 600


def test_timeout_is_retryable(mocked: responses.RequestsMock) -> None:
    mocked.post(URL, body=requests.ReadTimeout("read timed out"))
    with pytest.raises(RetryableProviderError, match="timed out") as info:
        make().synthesize("hi", "alloy")
    assert info.value.status is None


def test_a_connection_error_of_unknown_origin_is_retryable_and_in_doubt(
    mocked: responses.RequestsMock,
) -> None:
    """No connection of the transport saw it (a mocked transport): it may have been sent,
    so it is billed as in doubt (real refusals and resets: test_in_doubt.py)."""
    mocked.post(URL, body=requests.ConnectionError("refused"))
    with pytest.raises(RetryableProviderError, match="connection lost") as info:
        make().synthesize("hi", "alloy")
    assert info.value.delivery is Delivery.IN_DOUBT


def test_unknown_voice_is_permanent_without_a_call(mocked: responses.RequestsMock) -> None:
    with pytest.raises(PermanentProviderError, match="unknown voice"):
        make().synthesize("hi", "robot")
    assert len(mocked.calls) == 0


def test_api_key_never_leaks(mocked: responses.RequestsMock) -> None:
    provider = make()
    assert KEY not in repr(provider)
    assert KEY not in str(provider)
    # A provider that echoes the key back in its error message and in an exception.
    mocked.post(URL, json={"error": {"message": f"Incorrect API key provided: {KEY}"}}, status=401)
    mocked.post(URL, body=f"oops {KEY}", status=503)
    mocked.post(URL, body=requests.ConnectionError(f"failed with {KEY}"))
    mocked.post(URL, body=requests.RequestException(f"odd {KEY}"))
    errors: list[ProviderError] = []
    for _ in range(4):
        with pytest.raises(ProviderError) as info:
            provider.synthesize("hi", "alloy")
        errors.append(info.value)
    assert [type(e) for e in errors] == [
        RefusedKeyError,  # a 401: the refused key's own kind of permanent error
        RetryableProviderError,
        RetryableProviderError,
        PermanentProviderError,
    ]
    for error in errors:
        assert KEY not in str(error)
        assert KEY not in repr(error)
        assert KEY not in error.message


def test_a_refusing_send_guard_keeps_the_request_from_leaving(
    mocked: responses.RequestsMock,
) -> None:
    """The guard runs once per call, in the transport; a refusal sends nothing."""
    mocked.post(URL, body=AUDIO)
    provider = make()
    checks: list[str] = []

    def refuse() -> None:
        checks.append("checked")
        raise CallNotSent()

    with guarded(refuse), pytest.raises(CallNotSent):
        provider.synthesize("hi", "alloy")
    assert checks == ["checked"]
    assert len(mocked.calls) == 0
    with guarded(lambda: checks.append("passed")):
        assert provider.synthesize("hi", "alloy") == AUDIO
    assert checks == ["checked", "passed"]
    assert len(mocked.calls) == 1


def test_build_provider() -> None:
    settings = Settings(
        tts_provider="openai", tts_base_url=BASE, tts_api_key=KEY, tts_voices=("a", "b")
    )
    provider = build_provider(settings)
    assert isinstance(provider, OpenAIProvider)
    assert provider.voices == ("a", "b")
    assert provider.url == URL
    assert provider.timeout_seconds == settings.tts_timeout_seconds
    assert build_provider(Settings()).name == "espeak"
