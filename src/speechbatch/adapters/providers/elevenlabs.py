"""ElevenLabs: ``POST {base}/v1/text-to-speech/{voice_id}/with-timestamps``, answered by
JSON with the audio in base64 and the timing of every character.

The key goes in ``xi-api-key``. The job's speed becomes ``voice_settings.speed``; its
instructions have no counterpart and are not sent. Bills characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from speechbatch.adapters.providers.base import Speech
from speechbatch.adapters.providers.http import json_body
from speechbatch.adapters.providers.paid import PaidHttpProvider, base64_audio
from speechbatch.adapters.providers.timing import from_characters
from speechbatch.adapters.providers.voices import Voice

OUTPUT_FORMAT = "mp3_44100_128"


def elevenlabs_message(payload: Any) -> str | None:
    """ElevenLabs' error text: ``{"detail": {"message"}}``, ``{"detail": [{"msg"}]}``
    (a validation error) or ``{"detail": str}``."""
    detail = payload.get("detail") if isinstance(payload, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("message"), str):
        return str(detail["message"])
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return str(detail[0].get("msg") or detail[0])
    return detail if isinstance(detail, str) else None


class ElevenLabsProvider(PaidHttpProvider):
    """One billed call per ``speak``, with character timing turned into words and
    sentences."""

    name = "elevenlabs"
    # eleven_multilingual_v2's limit per request.
    max_chars = 10_000

    def __init__(
        self, base_url: str, api_key: str | None, model: str, timeout_seconds: float
    ) -> None:
        self.model = model
        self._headers = {"xi-api-key": api_key or ""}
        super().__init__(base_url, api_key, timeout_seconds)

    def speak(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> Speech:
        """POST the text once; the audio with sentence and word timing."""
        self.check_voice(voice)
        body: dict[str, Any] = {"text": text, "model_id": self.model}
        if options and options.get("speed") is not None:
            body["voice_settings"] = {"speed": options["speed"]}
        url = f"{self.base_url}/v1/text-to-speech/{quote(voice, safe='')}/with-timestamps"
        response = self.http.call(
            "POST", url, json=body, headers=self._headers,
            params={"output_format": OUTPUT_FORMAT}, find_message=elevenlabs_message,
        )  # fmt: skip
        payload = json_body(response, "audio_base64")
        audio = base64_audio(payload, "audio_base64")
        alignment = payload.get("alignment")
        if not isinstance(alignment, dict):
            alignment = {}
        sentences, words = from_characters(
            alignment.get("characters") or [],
            alignment.get("character_start_times_seconds") or [],
            alignment.get("character_end_times_seconds") or [],
        )
        return Speech(audio, self.billed(text), self.billing_unit, sentences or None, words or None)

    def _list_voices(self) -> list[Voice]:
        payload = self.http.get_json(
            f"{self.base_url}/v1/voices", headers=self._headers, find_message=elevenlabs_message
        )
        voices = payload.get("voices") if isinstance(payload, dict) else None
        found: list[Voice] = []
        for v in voices if isinstance(voices, list) else []:
            if isinstance(v, dict) and isinstance(v.get("voice_id"), str):
                labels = v.get("labels")
                labels = labels if isinstance(labels, dict) else {}
                language = str(labels.get("language") or labels.get("accent") or "")
                found.append(Voice(v["voice_id"], str(v.get("name") or v["voice_id"]), language))
        return found
