"""Settings from the environment, validated at start with one clear line."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from speechbatch.config import OPENAI_VOICES, Settings
from speechbatch.errors import ConfigError


@pytest.fixture(autouse=True)
def _instance_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default instance folder (relative to the working directory) is the test's own."""
    monkeypatch.chdir(tmp_path)


def test_defaults(tmp_path: Path) -> None:
    s = Settings.from_env({}, instance_dir=tmp_path)
    assert s.tts_provider == "espeak"
    assert s.lease_seconds == 1800 and s.worker_dead_seconds == 60
    assert s.db_retry_seconds == 60
    assert s.item_concurrency == 4 and s.tts_max_attempts == 4 and s.tts_timeout_seconds == 60
    assert s.tts_voices == OPENAI_VOICES
    assert s.database_url.startswith("sqlite:///") and s.database_url.endswith("speechbatch.db")
    assert s.tts_model == "gpt-4o-mini-tts"
    assert s.provider_concurrency == 8 and s.provider_rpm == 0
    assert s.trusted_proxies == 0 and s.metrics_token is None


def test_values_are_read() -> None:
    s = Settings.from_env(
        {
            "SPEECHBATCH_TTS_PROVIDER": "OpenAI",
            "SPEECHBATCH_TTS_BASE_URL": "http://127.0.0.1:9/v1",
            "SPEECHBATCH_TTS_VOICES": "a, b ,c",
            "SPEECHBATCH_TTS_TIMEOUT_SECONDS": "2",
            "SPEECHBATCH_TTS_MAX_ATTEMPTS": "2",
            "SPEECHBATCH_LEASE_SECONDS": "7",
            "SPEECHBATCH_WORKER_DEAD_SECONDS": "3",
            "SPEECHBATCH_DB_RETRY_SECONDS": "12.5",
            "SPEECHBATCH_ITEM_CONCURRENCY": "8",
            "SPEECHBATCH_TTS_API_KEY": "sk-secret",
            "SPEECHBATCH_PROVIDER_CONCURRENCY": "3",
            "SPEECHBATCH_PROVIDER_RPM": "120",
            "SPEECHBATCH_TRUSTED_PROXIES": "2",
            "SPEECHBATCH_METRICS_TOKEN": " scrape-secret ",
            "SPEECHBATCH_PIPER_PROCESSES": "3",
        }
    )
    assert s.piper_processes == 3
    assert s.trusted_proxies == 2 and s.metrics_token == "scrape-secret"
    assert "scrape-secret" not in repr(s)
    assert s.provider_concurrency == 3 and s.provider_rpm == 120
    assert s.tts_provider == "openai" and s.tts_voices == ("a", "b", "c")
    assert s.lease_seconds == 7 and s.worker_dead_seconds == 3 and s.item_concurrency == 8
    assert s.db_retry_seconds == 12.5
    assert "sk-secret" not in repr(s)


@pytest.mark.parametrize(
    "env,variable",
    [
        ({"SPEECHBATCH_TTS_PROVIDER": "watson"}, "SPEECHBATCH_TTS_PROVIDER"),
        ({"SPEECHBATCH_TTS_BASE_URL": "not a url"}, "SPEECHBATCH_TTS_BASE_URL"),
        ({"SPEECHBATCH_TTS_BASE_URL": "ftp://host/v1"}, "SPEECHBATCH_TTS_BASE_URL"),
        ({"SPEECHBATCH_LEASE_SECONDS": "60"}, "SPEECHBATCH_LEASE_SECONDS"),
        ({"SPEECHBATCH_LEASE_SECONDS": "soon"}, "SPEECHBATCH_LEASE_SECONDS"),
        ({"SPEECHBATCH_ITEM_CONCURRENCY": "0"}, "SPEECHBATCH_ITEM_CONCURRENCY"),
        ({"SPEECHBATCH_DB_RETRY_SECONDS": "-1"}, "SPEECHBATCH_DB_RETRY_SECONDS"),
        ({"SPEECHBATCH_DB_RETRY_SECONDS": "a minute"}, "SPEECHBATCH_DB_RETRY_SECONDS"),
        ({"SPEECHBATCH_TTS_MAX_ATTEMPTS": "0"}, "SPEECHBATCH_TTS_MAX_ATTEMPTS"),
        ({"SPEECHBATCH_PROVIDER_CONCURRENCY": "0"}, "SPEECHBATCH_PROVIDER_CONCURRENCY"),
        ({"SPEECHBATCH_PROVIDER_RPM": "-1"}, "SPEECHBATCH_PROVIDER_RPM"),
        ({"SPEECHBATCH_TRUSTED_PROXIES": "-1"}, "SPEECHBATCH_TRUSTED_PROXIES"),
        ({"SPEECHBATCH_TRUSTED_PROXIES": "one"}, "SPEECHBATCH_TRUSTED_PROXIES"),
        ({"SPEECHBATCH_PIPER_PROCESSES": "-1"}, "SPEECHBATCH_PIPER_PROCESSES"),
        ({"SPEECHBATCH_DATABASE_URL": "mysql://x"}, "SPEECHBATCH_DATABASE_URL"),
        (
            {"SPEECHBATCH_LISTEN_DATABASE_URL": "postgresql+psycopg://db/sb"},
            "SPEECHBATCH_LISTEN_DATABASE_URL",
        ),  # beside the SQLite default
        (
            {
                "SPEECHBATCH_DATABASE_URL": "postgresql+psycopg://pool/sb",
                "SPEECHBATCH_LISTEN_DATABASE_URL": "sqlite:///x.db",
            },
            "SPEECHBATCH_LISTEN_DATABASE_URL",
        ),
        ({"SPEECHBATCH_ENV": "production"}, "SPEECHBATCH_SECRET_KEY"),
    ],
)
def test_bad_configuration_names_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    assert variable in str(info.value)
    assert "\n" not in str(info.value)


def test_lease_must_exceed_one_items_worst_case() -> None:
    # 4 attempts x 60 s + 3 waits x 60 s = 420 s
    assert Settings().item_worst_case_seconds == 420
    with pytest.raises(ConfigError, match="LEASE_SECONDS"):
        Settings.from_env({"SPEECHBATCH_LEASE_SECONDS": "420"})
    assert Settings.from_env({"SPEECHBATCH_LEASE_SECONDS": "421"}).lease_seconds == 421


def test_development_key_is_made_once_in_the_instance_folder(tmp_path: Path) -> None:
    first = Settings.from_env({}, instance_dir=tmp_path)
    second = Settings.from_env({}, instance_dir=tmp_path)
    assert first.secret_key == second.secret_key == (tmp_path / "secret_key").read_text()
    assert len(first.secret_key) >= 32


def test_development_key_file_is_private(tmp_path: Path) -> None:
    Settings.from_env({}, instance_dir=tmp_path)
    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600


def test_secret_key_from_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    s = Settings.from_env({"SPEECHBATCH_SECRET_KEY": "from-env"}, instance_dir=tmp_path)
    assert s.secret_key == "from-env"
    assert not (tmp_path / "secret_key").exists()


def test_production_requires_a_secret_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SPEECHBATCH_SECRET_KEY is required"):
        Settings.from_env({"SPEECHBATCH_ENV": "production"}, instance_dir=tmp_path)
    assert not (tmp_path / "secret_key").exists()


@pytest.mark.parametrize("value", ["prod", "dev", "Production", "staging"])
def test_unknown_environment_stops_the_app(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="SPEECHBATCH_ENV must be one of development, production"):
        Settings.from_env({"SPEECHBATCH_ENV": value}, instance_dir=tmp_path)


def test_storage_url_wins_over_the_folder_and_is_checked_at_start(tmp_path: Path) -> None:
    env = {"SPEECHBATCH_STORAGE_DIR": "/srv/a"}
    assert Settings.from_env(env, instance_dir=tmp_path).storage.folder == "/srv/a"
    bucket = Settings.from_env(
        {**env, "SPEECHBATCH_STORAGE_URL": "s3://audio-bucket/prod/eu"}, instance_dir=tmp_path
    ).storage
    assert (bucket.bucket, bucket.prefix, bucket.folder) == ("audio-bucket", "prod/eu/", None)
    assert Settings(storage_url="s3://audio-bucket").storage.prefix == ""
    assert Settings(storage_url="file:///srv/b").storage.folder == "/srv/b"
    assert Settings(storage_url="/srv/c").storage.folder == "/srv/c"
    for url in ("s3://", "s3://UPPER/x", "s3://a/x", "http://host/bucket", "s3://bkt?x=1"):
        with pytest.raises(ConfigError, match=r"^SPEECHBATCH_STORAGE_URL must be"):
            Settings.from_env({"SPEECHBATCH_STORAGE_URL": url}, instance_dir=tmp_path)


def test_presigned_downloads_is_a_boolean(tmp_path: Path) -> None:
    on = {"SPEECHBATCH_STORAGE_PRESIGNED_DOWNLOADS": "true"}
    assert Settings.from_env(on, instance_dir=tmp_path).storage_presigned_downloads
    assert not Settings.from_env({}, instance_dir=tmp_path).storage_presigned_downloads
    with pytest.raises(ConfigError, match="SPEECHBATCH_STORAGE_PRESIGNED_DOWNLOADS"):
        Settings.from_env(
            {"SPEECHBATCH_STORAGE_PRESIGNED_DOWNLOADS": "maybe"}, instance_dir=tmp_path
        )


def test_runs_belong_to_web_processes_by_default(tmp_path: Path) -> None:
    s = Settings.from_env({}, instance_dir=tmp_path)
    assert s.runner == "web"
    assert not s.runs_in_workers


@pytest.mark.parametrize("value", ["worker", "Worker", " worker "])
def test_the_worker_tier_is_chosen_by_speechbatch_runner(tmp_path: Path, value: str) -> None:
    s = Settings.from_env({"SPEECHBATCH_RUNNER": value}, instance_dir=tmp_path)
    assert s.runs_in_workers


@pytest.mark.parametrize("value", ["workers", "celery", "both"])
def test_unknown_runner_stops_the_app(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="SPEECHBATCH_RUNNER must be one of web, worker"):
        Settings.from_env({"SPEECHBATCH_RUNNER": value}, instance_dir=tmp_path)


def test_a_listen_database_url_is_read_beside_a_postgresql_database_url(tmp_path: Path) -> None:
    env = {
        "SPEECHBATCH_DATABASE_URL": "postgresql+psycopg://app@pgbouncer:6432/sb",
        "SPEECHBATCH_LISTEN_DATABASE_URL": " postgresql+psycopg://app@db:5432/sb ",
    }
    s = Settings.from_env(env, instance_dir=tmp_path)
    assert s.listen_database_url == "postgresql+psycopg://app@db:5432/sb"
    assert Settings.from_env({}, instance_dir=tmp_path).listen_database_url is None


def test_paid_providers_read_their_variables() -> None:
    settings = Settings.from_env(
        {
            "SPEECHBATCH_TTS_PROVIDER": "azure",
            "SPEECHBATCH_AZURE_KEY": "k",
            "SPEECHBATCH_AZURE_REGION": "westeurope",
            "SPEECHBATCH_POLLY_SPEECH_MARKS": "true",
            "SPEECHBATCH_SECRET_KEY": "x" * 32,
        }
    )
    assert settings.paid.azure_url == "https://westeurope.tts.speech.microsoft.com"
    assert settings.paid.polly_speech_marks is True
    assert settings.paid.elevenlabs_model == "eleven_multilingual_v2"
    assert "'k'" not in repr(settings)


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"SPEECHBATCH_TTS_PROVIDER": "azure"}, "SPEECHBATCH_AZURE_REGION"),
        ({"SPEECHBATCH_POLLY_SPEECH_MARKS": "maybe"}, "SPEECHBATCH_POLLY_SPEECH_MARKS"),
        ({"SPEECHBATCH_GOOGLE_BASE_URL": "ftp://x"}, "SPEECHBATCH_GOOGLE_BASE_URL"),
    ],
)
def test_bad_paid_provider_settings_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        Settings.from_env({**env, "SPEECHBATCH_SECRET_KEY": "x" * 32})
