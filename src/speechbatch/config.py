"""Settings: one frozen object built from the environment by the app factory."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from speechbatch.errors import ConfigError

PROVIDERS = ("espeak", "openai")
ENVIRONMENTS = ("development", "production")
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
)  # fmt: skip
DEFAULT_INSTANCE_DIR = Path("instance")


# Takes kept per item unless SPEECHBATCH_TAKES_KEPT says otherwise.
DEFAULT_TAKES_KEPT = 5


@dataclass(frozen=True)
class Settings:
    """Everything the app reads from its environment, validated once at start."""

    database_url: str = "sqlite:///" + str(
        (DEFAULT_INSTANCE_DIR / "speechbatch.adapters.db").resolve()
    )
    secret_key: str = field(default_factory=lambda: secrets.token_hex(32))
    env: str = "development"
    tts_provider: str = "espeak"
    tts_base_url: str = "https://api.openai.com/v1"
    tts_api_key: str | None = field(default=None, repr=False)
    tts_model: str = "gpt-4o-mini-tts"
    tts_voices: tuple[str, ...] = OPENAI_VOICES
    lease_seconds: float = 1800.0
    worker_dead_seconds: float = 60.0
    item_concurrency: int = 4
    tts_timeout_seconds: float = 60.0
    tts_max_attempts: int = 4
    storage_dir: str = str((DEFAULT_INSTANCE_DIR / "audio").resolve())
    max_content_length: int = 25 * 1024 * 1024
    export_lock_ttl_seconds: float = 60.0
    # Price of a million billed characters, for estimates; None: characters only.
    tts_price_per_million_characters: float | None = None
    currency: str = "USD"
    # Deployment-wide: provider calls in flight at once, and started per minute (0: no limit).
    provider_concurrency: int = 8
    provider_rpm: int = 0
    # Reverse proxies in front of the app whose X-Forwarded-* headers are believed.
    trusted_proxies: int = 0
    # When set, GET /metrics needs "Authorization: Bearer" with it.
    metrics_token: str | None = field(default=None, repr=False)
    # Takes kept per item; an older take's audio goes when nothing else refers to it.
    takes_kept: int = DEFAULT_TAKES_KEPT

    @property
    def item_worst_case_seconds(self) -> float:
        """Longest one item may take: every attempt times out and every wait is capped."""
        attempts = self.tts_max_attempts
        return attempts * self.tts_timeout_seconds + (attempts - 1) * self.tts_timeout_seconds

    @property
    def is_sqlite(self) -> bool:
        """Whether the database is the embedded SQLite default."""
        return self.database_url.startswith("sqlite")

    @property
    def is_production(self) -> bool:
        """Whether the app runs with SPEECHBATCH_ENV=production."""
        return self.env == "production"

    def validate(self) -> Settings:
        """Raise ConfigError naming the variable when a value cannot work."""
        if self.env not in ENVIRONMENTS:
            # A typo such as "prod" must not quietly give development's key and cookies.
            raise ConfigError(
                f"SPEECHBATCH_ENV must be one of {', '.join(ENVIRONMENTS)}, not {self.env!r}"
            )
        if self.tts_provider not in PROVIDERS:
            raise ConfigError(
                f"SPEECHBATCH_TTS_PROVIDER must be one of {', '.join(PROVIDERS)}, "
                f"not {self.tts_provider!r}"
            )
        url = urlsplit(self.tts_base_url)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ConfigError(
                f"SPEECHBATCH_TTS_BASE_URL must be an http(s) URL, not {self.tts_base_url!r}"
            )
        if not self.database_url.startswith(("sqlite", "postgresql")):
            raise ConfigError(
                "SPEECHBATCH_DATABASE_URL must be a sqlite:// or postgresql+psycopg:// URL"
            )
        if self.tts_provider == "openai" and not self.tts_voices:
            raise ConfigError("SPEECHBATCH_TTS_VOICES must name at least one voice")
        if self.tts_timeout_seconds <= 0:
            raise ConfigError("SPEECHBATCH_TTS_TIMEOUT_SECONDS must be positive")
        if self.tts_max_attempts < 1:
            raise ConfigError("SPEECHBATCH_TTS_MAX_ATTEMPTS must be at least 1")
        if self.item_concurrency < 1:
            raise ConfigError("SPEECHBATCH_ITEM_CONCURRENCY must be at least 1")
        if self.provider_concurrency < 1:
            raise ConfigError("SPEECHBATCH_PROVIDER_CONCURRENCY must be at least 1")
        if self.provider_rpm < 0:
            raise ConfigError("SPEECHBATCH_PROVIDER_RPM must be 0 (no limit) or more")
        if self.takes_kept < 1:
            raise ConfigError("SPEECHBATCH_TAKES_KEPT must be at least 1")
        if self.trusted_proxies < 0:
            raise ConfigError("SPEECHBATCH_TRUSTED_PROXIES must be 0 (no proxy) or more")
        if self.export_lock_ttl_seconds <= 0:
            raise ConfigError("SPEECHBATCH_EXPORT_LOCK_TTL_SECONDS must be positive")
        price = self.tts_price_per_million_characters
        if price is not None and not (0 <= price < float("inf")):
            raise ConfigError(
                "SPEECHBATCH_TTS_PRICE_PER_MILLION_CHARACTERS must be a non-negative number"
            )
        if not (self.currency.isalpha() and 1 <= len(self.currency) <= 10):
            raise ConfigError(
                f"SPEECHBATCH_CURRENCY must be a currency code, not {self.currency!r}"
            )
        if self.worker_dead_seconds <= 0:
            raise ConfigError("SPEECHBATCH_WORKER_DEAD_SECONDS must be positive")
        if self.lease_seconds <= self.item_worst_case_seconds:
            raise ConfigError(
                f"SPEECHBATCH_LEASE_SECONDS ({self.lease_seconds:g}) must be longer than one "
                f"item's worst case ({self.item_worst_case_seconds:g} s = attempts x timeout "
                "+ waits between attempts)"
            )
        return self

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, instance_dir: Path | None = None
    ) -> Settings:
        """Build and validate settings from SPEECHBATCH_* variables.

        In development without SPEECHBATCH_SECRET_KEY, the key is the one kept in
        ``instance_dir/secret_key`` (made on first use), so every process shares it.
        """
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}

        def number(name: str, kind: type[int] | type[float]) -> None:
            var = "SPEECHBATCH_" + name.upper()
            raw = env.get(var)
            if raw is None or raw.strip() == "":
                return
            try:
                values[name] = kind(raw)
            except ValueError:
                raise ConfigError(f"{var} must be a number, not {raw!r}") from None

        for name in ("database_url", "secret_key", "env", "tts_base_url", "tts_api_key",
                     "tts_model", "storage_dir", "currency", "metrics_token"):  # fmt: skip
            raw = env.get("SPEECHBATCH_" + name.upper())
            if raw:
                values[name] = raw.strip()
        provider = env.get("SPEECHBATCH_TTS_PROVIDER")
        if provider:
            values["tts_provider"] = provider.strip().lower()
        voices = env.get("SPEECHBATCH_TTS_VOICES")
        if voices:
            values["tts_voices"] = tuple(v.strip() for v in voices.split(",") if v.strip())
        for name in ("lease_seconds", "worker_dead_seconds", "tts_timeout_seconds",
                     "export_lock_ttl_seconds", "tts_price_per_million_characters"):  # fmt: skip
            number(name, float)
        for name in ("item_concurrency", "tts_max_attempts", "provider_concurrency",
                     "provider_rpm", "trusted_proxies", "takes_kept"):  # fmt: skip
            number(name, int)
        if values.get("env", "development") == "development" and "secret_key" not in values:
            values["secret_key"] = shared_secret_key(instance_dir or DEFAULT_INSTANCE_DIR)
        settings = cls(**values)  # type: ignore[arg-type]
        settings.validate()
        if settings.is_production and "secret_key" not in values:
            raise ConfigError("SPEECHBATCH_SECRET_KEY is required when SPEECHBATCH_ENV=production")
        return settings


def shared_secret_key(instance_dir: Path) -> str:
    """The development key kept in ``instance_dir/secret_key`` (mode 0600), made once.

    Every process of the machine reads the same file: gunicorn workers built apart must
    sign sessions and CSRF tokens alike. The file appears whole or not at all (a hard
    link of a complete temporary file), so a process racing another never reads half a key.
    """
    path = instance_dir / "secret_key"
    if not path.exists():
        instance_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=instance_dir, prefix=".secret_key.")
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, secrets.token_hex(32).encode())
            os.close(fd)
            with contextlib.suppress(FileExistsError):  # another process made it first
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
    key = path.read_text().strip()
    if len(key) < 32:
        raise ConfigError(f"{path} holds no usable secret key; delete it to make a new one")
    return key
