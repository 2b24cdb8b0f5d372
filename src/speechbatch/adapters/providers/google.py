"""Google Cloud Text-to-Speech: ``POST {base}/v1beta1/text:synthesize?key=KEY`` with SSML,
answered by JSON with the audio in base64 and the times of the SSML marks.

A ``<mark>`` stands before every sentence (``s{n}``) and word (``w{n}_{w}``), so the
answer's timepoints time each of them. Google's limit is 5,000 bytes of input, SSML
included: when the word marks would pass it only the sentences are marked, then nothing;
a text that passes it alone is refused before anything is sent. Bills the text's bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

from speechbatch.adapters.providers.azure import language_of_voice
from speechbatch.adapters.providers.base import (
    BillingUnit,
    Delivery,
    PermanentProviderError,
    Speech,
)
from speechbatch.adapters.providers.http import json_body
from speechbatch.adapters.providers.paid import PaidHttpProvider, base64_audio
from speechbatch.adapters.providers.timing import Sentence, from_marks, mp3_seconds, sentences_of
from speechbatch.adapters.providers.voices import Voice

MAX_INPUT_BYTES = 5000


def google_ssml(text: str, sentences: Sequence[Sentence], *, words: bool, marks: bool) -> str:
    """The SSML of ``text``, escaped, with a mark before each sentence (``marks``) and
    each word (``words``)."""
    pieces: list[str] = ["<speak>"]
    pos = 0
    for n, sentence in enumerate(sentences):
        for w, word in enumerate(sentence.words):
            pieces.append(escape(text[pos : word.start]))
            if marks and w == 0:
                pieces.append(f'<mark name="s{n}"/>')
            if marks and words:
                pieces.append(f'<mark name="w{n}_{w}"/>')
            pieces.append(escape(word.text))
            pos = word.end
    pieces.append(escape(text[pos:]))
    pieces.append("</speak>")
    return "".join(pieces)


def fitting_ssml(text: str, sentences: Sequence[Sentence]) -> str:
    """The most marked SSML of ``text`` within the byte limit."""
    for words, marks in ((True, True), (False, True), (False, False)):
        ssml = google_ssml(text, sentences, words=words, marks=marks)
        if len(ssml.encode("utf-8")) <= MAX_INPUT_BYTES:
            return ssml
    raise PermanentProviderError(
        f"text too long for google: over {MAX_INPUT_BYTES:,} bytes of SSML",
        delivery=Delivery.NOT_SENT,
    )


def parse_timepoints(points: Any) -> tuple[dict[int, float], dict[tuple[int, int], float]]:
    """Sentence and word start times from the answer's ``timepoints``."""
    sentence_starts: dict[int, float] = {}
    word_starts: dict[tuple[int, int], float] = {}
    for point in points if isinstance(points, list) else []:
        if not isinstance(point, dict):
            continue
        name, seconds = point.get("markName"), point.get("timeSeconds")
        if not isinstance(name, str) or not isinstance(seconds, int | float):
            continue
        try:
            if name.startswith("s"):
                sentence_starts[int(name[1:])] = float(seconds)
            elif name.startswith("w"):
                n, w = name[1:].split("_")
                word_starts[(int(n), int(w))] = float(seconds)
        except ValueError:
            continue
    return sentence_starts, word_starts


class GoogleProvider(PaidHttpProvider):
    """One billed call per ``speak`` (see the module)."""

    name = "google"
    # Counted in bytes by the request itself; a character is at least one byte.
    max_chars = MAX_INPUT_BYTES
    billing_unit = BillingUnit.BYTES

    def __init__(self, base_url: str, api_key: str | None, timeout_seconds: float) -> None:
        self.model = "v1beta1"
        self._key = {"key": api_key or ""}
        super().__init__(base_url, api_key, timeout_seconds)

    def billed(self, text: str) -> int:
        """UTF-8 bytes of the text."""
        return len(text.encode("utf-8"))

    def speak(self, text: str, voice: str, options: Mapping[str, Any] | None = None) -> Speech:
        """POST the marked SSML once; the audio with the marks' timing."""
        self.check_voice(voice)
        sentences = sentences_of(text)
        audio_config: dict[str, Any] = {"audioEncoding": "MP3"}
        if options and options.get("speed") is not None:
            audio_config["speakingRate"] = options["speed"]
        body = {
            "input": {"ssml": fitting_ssml(text, sentences)},
            "voice": {"languageCode": self._language(voice), "name": voice},
            "audioConfig": audio_config,
            "enableTimePointing": ["SSML_MARK"],
        }
        response = self.http.call(
            "POST", f"{self.base_url}/v1beta1/text:synthesize", params=self._key, json=body
        )
        payload = json_body(response, "audioContent")
        audio = base64_audio(payload, "audioContent")
        starts, word_starts = parse_timepoints(payload.get("timepoints"))
        timed, words = None, None
        if starts or word_starts:
            timed, words = from_marks(sentences, starts, word_starts, mp3_seconds(audio))
        return Speech(audio, self.billed(text), self.billing_unit, timed, words)

    def _language(self, voice: str) -> str:
        return self.voice_cache.language_of(voice) or language_of_voice(voice)

    def _list_voices(self) -> list[Voice]:
        payload = self.http.get_json(f"{self.base_url}/v1/voices", params=self._key)
        voices = payload.get("voices") if isinstance(payload, dict) else None
        found: list[Voice] = []
        for v in voices if isinstance(voices, list) else []:
            if isinstance(v, dict) and isinstance(v.get("name"), str):
                codes = v.get("languageCodes") or [""]
                found.append(Voice(v["name"], v["name"], str(codes[0])))
        return found
