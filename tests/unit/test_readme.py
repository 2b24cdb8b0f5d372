"""The README's quick start and API example agree with what bin/quickstart makes: the
voice the example names is one the quick start has, its port is the quick start's, and
the database file it names is the one the quick start creates."""

from __future__ import annotations

import json
import re
from pathlib import Path

from flask import Flask

from speechbatch.adapters.providers.piper import discover_voices
from speechbatch.cli import _register_quickstart
from speechbatch.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _quickstart_default(name: str) -> object:
    app = Flask("readme")
    _register_quickstart(app)
    command = app.cli.commands["quickstart"]
    return next(p.default for p in command.params if p.name == name)


def test_the_quick_start_speaks_with_piper() -> None:
    script = (ROOT / "bin" / "quickstart").read_text()
    assert 'SPEECHBATCH_TTS_PROVIDER="${SPEECHBATCH_TTS_PROVIDER:-piper}"' in script


def test_the_api_examples_name_a_voice_the_quick_start_has() -> None:
    # The examples up to the cast's, which says it needs a deployment with more voices.
    before_cast = README.split("### A cast of voices", 1)[0]
    bodies = [json.loads(b) for b in re.findall(r"-d '(\{[^']*\})'", before_cast)]
    voices = {body["voice"] for body in bodies if "voice" in body}
    assert voices, "the README has no API example with a voice"
    assert voices <= set(discover_voices()), voices


def test_the_examples_use_the_quick_starts_port() -> None:
    ports = set(re.findall(r"http://127\.0\.0\.1:(\d+)", README))
    assert ports == {str(_quickstart_default("port"))}


def test_the_database_file_named_is_the_one_made(tmp_path: Path) -> None:
    named = re.search(r"migrates `([^`]+)`", README)
    assert named is not None and named[1] == "instance/speechbatch.db"
    # bin/quickstart runs from the repository's root, where instance/ is.
    default = Settings.from_env({}, instance_dir=tmp_path).database_url
    assert default.startswith("sqlite:///") and default.endswith("/" + named[1])
