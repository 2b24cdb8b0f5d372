"""Azure AI Speech: ``POST {base}/cognitiveservices/v1`` with an SSML body, answered by
the MP3 bytes.

The key goes in ``Ocp-Apim-Subscription-Key``. The spoken text is escaped into the SSML
(``Tom & Jerry <3`` arrives as written); the job's speed becomes ``<prosody rate>``.
Azure bills the characters of the text, not the markup. It gives no timing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from speechbatch.adapters.providers.base import RetryableProviderError, Speech
from speechbatch.adapters.providers.paid import PaidHttpProvider
from speechbatch.adapters.providers.voices import Voice

OUTPUT_FORMAT = "audio-24khz-96kbitrate-mono-mp3"


def language_of_voice(voice: str) -> str:
    """``en-US`` of ``en-US-AvaNeural`` (Azure's and Google's voice names begin with it)."""
    parts = voice.split("-")
    return "-".join(parts[:2]) if len(parts) >= 2 else "en-US"


def azure_ssml(text: str, voice: str, options: Mapping[str, Any] | None = None) -> str:
    """The SSML document of one call: the text escaped, the speed as a prosody rate."""
    body = escape(text)
    speed = (options or {}).get("speed")
    if speed is not None:
        body = f"<prosody rate={quoteattr(f'{float(speed):g}')}>{body}</prosody>"
    return (
        f'<speak version="1.0" xmlns="http://www.w3.org/2001/10/synthesis" '
        f"xml:lang={quoteattr(language_of_voice(voice))}>"
        f"<voice name={quoteattr(voice)}>{body}</voice></speak>"
    )


class AzureProvider(PaidHttpProvider):
    """One billed call per ``speak`` (see the module)."""

    name = "azure"
    # Kept well under what one REST request may carry (64 KB of SSML, 10 minutes of audio).
    max_chars = 5000

    def __init__(self, base_url: str, key: str | None, timeout_seconds: float) -> None:
        self.model = OUTPUT_FORMAT
        self._key_header = {"Ocp-Apim-Subscription-Key": key or ""}
        super().__init__(base_url, key, timeout_seconds)

    def speak(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> Speech:
        """POST the SSML once and answer the MP3."""
        self.check_voice(voice)
        headers = {
            **self._key_header,
            "Content-Type": "application/ssml+xml",
            "X-Microsoft-OutputFormat": OUTPUT_FORMAT,
            "User-Agent": "speechbatch",
        }
        ssml = azure_ssml(text, voice, options).encode("utf-8")
        response = self.http.call(
            "POST", f"{self.base_url}/cognitiveservices/v1", data=ssml, headers=headers
        )
        if not response.content:
            raise RetryableProviderError("empty audio", response.status_code)
        return Speech(response.content, self.billed(text), self.billing_unit)

    def _list_voices(self) -> list[Voice]:
        payload = self.http.get_json(
            f"{self.base_url}/cognitiveservices/voices/list", headers=self._key_header
        )
        return [
            Voice(v["ShortName"], str(v.get("DisplayName") or v["ShortName"]),
                  str(v.get("Locale") or ""))
            for v in (payload if isinstance(payload, list) else [])
            if isinstance(v, dict) and isinstance(v.get("ShortName"), str)
        ]  # fmt: skip
