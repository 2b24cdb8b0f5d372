"""Issue 44: what each paid provider's client adds to a call, against the bare HTTP round trip.

For ElevenLabs, Azure, Google and Polly, one line of prose is spoken through the
provider's client (``speak``: the request built, SSML escaped and marked, Polly's request
signed by boto3, the answer parsed: base64 decoded, timing turned into words and
sentences) against the local stand-in of the test suite
(``tests/support/paid_providers.py``, in this process, no latency, each answer's MP3
encoded once). The bare round trip is the same request, as the client wrote it, replayed
by a plain ``requests.Session`` (keep-alive) to the same server, its answer read and not
parsed: the server does the same work for both. The two alternate,
CALLS times each after a warm-up; the figure per provider is median(speak) - median(bare)
in milliseconds. Target: a few milliseconds at most (<= 5 ms).

    .venv/bin/python bench/provider_overhead.py [--calls 200] [--characters 200]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import requests
from _common import ROOT, exit_on_sigterm, figure, median, write_results

sys.path.insert(0, str(ROOT))
import tests.support.paid_providers as stand_in
from tests.support.paid_providers import KEY, PaidProviders, Request

from speechbatch.adapters.providers.azure import AzureProvider
from speechbatch.adapters.providers.base import TTSProvider
from speechbatch.adapters.providers.elevenlabs import ElevenLabsProvider
from speechbatch.adapters.providers.google import GoogleProvider
from speechbatch.adapters.providers.polly import PollyProvider

TARGET_MS = 5.0
PROSE = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, "
    "it was the age of foolishness, it was the epoch of belief, it was the epoch of "
    "incredulity, it was the season of Light, it was the season of Darkness."
)
CLIENTS: dict[str, tuple[Callable[[str], TTSProvider], str]] = {
    "elevenlabs": (
        lambda url: ElevenLabsProvider(url, KEY, "eleven_multilingual_v2", 30.0),
        "21m00Tcm4TlvDq8rCL9Xx",
    ),
    "azure": (lambda url: AzureProvider(url, KEY, 30.0), "en-US-AvaNeural"),
    "google": (lambda url: GoogleProvider(url, KEY, 30.0), "en-US-Neural2-C"),
    "polly": (lambda url: PollyProvider("neural", 30.0, endpoint_url=url), "Joanna"),
}


def _replay(session: requests.Session, base: str, request: Request) -> None:
    """The request as the client wrote it, sent again; its answer read, not parsed."""
    query = "&".join(f"{k}={v}" for k, values in request.query.items() for v in values)
    url = f"{base}{request.path}" + (f"?{query}" if query else "")
    headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "connection")}
    answer = session.request(request.method, url, data=request.body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text[:200]
    assert answer.content


def measure(server: PaidProviders, name: str, text: str, calls: int) -> dict[str, Any]:
    """``calls`` alternating speak / bare pairs for provider ``name``, in milliseconds."""
    build, voice = CLIENTS[name]
    provider = build(server.url)
    with server.lock:
        server.requests.clear()
    provider.speak(text, voice, {})  # warm-up: connections, the voices call, boto3's loaders
    request = server.speech_requests()[-1]
    spoken, bare = [], []
    with requests.Session() as session:
        _replay(session, server.url, request)
        for _ in range(calls):
            started = time.perf_counter()
            speech = provider.speak(text, voice, {})
            spoken.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            _replay(session, server.url, request)
            bare.append((time.perf_counter() - started) * 1000)
    assert speech.audio and speech.billed > 0
    with server.lock:
        server.requests.clear()
    return {
        "speak_ms": round(median(spoken), 3),
        "bare_ms": round(median(bare), 3),
        "overhead_ms": round(median(spoken) - median(bare), 3),
        "timed": "words" if speech.words else ("sentences" if speech.sentences else "none"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="pairs per provider")
    parser.add_argument("--characters", type=int, default=200, help="length of the line")
    args = parser.parse_args()
    exit_on_sigterm()
    # The stand-in accepts Polly's signature by its key id.
    os.environ.update(AWS_ACCESS_KEY_ID="AKID", AWS_SECRET_ACCESS_KEY="secret")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    text = (PROSE * (1 + args.characters // len(PROSE)))[: args.characters].rstrip() + "."
    # The stand-in encodes its answer's MP3 once per text: its own work, the same for both
    # sides, would otherwise be most of each call's time and of its noise.
    stand_in.mp3_of = functools.cache(stand_in.mp3_of)
    server = PaidProviders().start()
    results: dict[str, Any] = {}
    figures = {}
    try:
        for name in CLIENTS:
            result = measure(server, name, text, args.calls)
            results[name] = result
            print(
                f"{name}: speak {result['speak_ms']:.2f} ms, bare {result['bare_ms']:.2f} ms, "
                f"timing by {result['timed']}",
                flush=True,
            )
        for name, result in results.items():
            value = result["overhead_ms"]
            figures[name] = figure(
                f"overhead_ms_{name}", value, f"<= {TARGET_MS:g} ms", value <= TARGET_MS
            )
    finally:
        server.stop()
    write_results(
        "provider_overhead",
        {"calls": args.calls, "characters": len(text), "providers": results, "figures": figures},
    )


if __name__ == "__main__":
    main()
