"""Settings: one frozen object built from the environment by the app factory."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from speechbatch.errors import ConfigError
from speechbatch.provider_settings import (
    PaidProviders,
    ProviderLimit,
    check_providers,
    provider_values,
)

PROVIDERS = ("espeak", "piper", "openai", "elevenlabs", "azure", "google", "polly")
ENVIRONMENTS = ("development", "production")
# web: every gunicorn process runs the jobs it claims; worker: web processes only claim,
# and `flask --app wsgi worker` processes take the claimed runs and run them.
RUNNERS = ("web", "worker")
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
)  # fmt: skip
DEFAULT_INSTANCE_DIR = Path("instance")
BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclass(frozen=True)
class StorageLocation:
    """A folder (``folder`` set) or a bucket with a key prefix (``bucket`` set)."""

    folder: str | None = None
    bucket: str | None = None
    prefix: str = ""


def storage_location(url: str | None, folder: str) -> StorageLocation:
    """Parse SPEECHBATCH_STORAGE_URL: a path, ``file://PATH`` or ``s3://BUCKET/PREFIX``."""
    if not url:
        return StorageLocation(folder=folder)
    parts = urlsplit(url)
    if parts.scheme == "s3":
        bucket = parts.netloc
        # S3's bucket names: 3 to 63 lower-case letters, digits, dots and hyphens.
        ok = 3 <= len(bucket) <= 63 and all(c.islower() or c.isdigit() or c in ".-" for c in bucket)
        if not ok or parts.query or parts.fragment:
            raise ConfigError(
                f"SPEECHBATCH_STORAGE_URL must be s3://BUCKET/PREFIX with a valid bucket name, "
                f"not {url!r}"
            )
        prefix = parts.path.strip("/")
        return StorageLocation(bucket=bucket, prefix=prefix + "/" if prefix else "")
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path:
        return StorageLocation(folder=unquote(parts.path))
    if "://" in url or parts.scheme == "file":
        raise ConfigError(
            "SPEECHBATCH_STORAGE_URL must be a folder path, a file:// URL or s3://BUCKET/PREFIX, "
            f"not {url!r}"
        )
    return StorageLocation(folder=url)


# Takes kept per item unless SPEECHBATCH_TAKES_KEPT says otherwise.
DEFAULT_TAKES_KEPT = 5


@dataclass(frozen=True)
class Settings:
    """Everything the app reads from its environment, validated once at start."""

    database_url: str = "sqlite:///" + str((DEFAULT_INSTANCE_DIR / "speechbatch.db").resolve())
    # A direct PostgreSQL connection for LISTEN, when SPEECHBATCH_DATABASE_URL goes through
    # a pooler (PgBouncer in transaction mode) where LISTEN receives nothing; None: that URL.
    listen_database_url: str | None = None
    secret_key: str = field(default_factory=lambda: secrets.token_hex(32))
    env: str = "development"
    tts_provider: str = "espeak"
    tts_base_url: str = "https://api.openai.com/v1"
    tts_api_key: str | None = field(default=None, repr=False)
    tts_model: str = "gpt-4o-mini-tts"
    tts_voices: tuple[str, ...] = OPENAI_VOICES
    lease_seconds: float = 1800.0
    worker_dead_seconds: float = 60.0
    # How long a process retries an unreachable database before giving a unit of work up.
    db_retry_seconds: float = 60.0
    item_concurrency: int = 4
    tts_timeout_seconds: float = 60.0
    tts_max_attempts: int = 4
    storage_dir: str = str((DEFAULT_INSTANCE_DIR / "audio").resolve())
    max_content_length: int = 25 * 1024 * 1024
    export_lock_ttl_seconds: float = 60.0
    render_lock_ttl_seconds: float = 60.0
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
    # A folder path, a file:// URL or s3://BUCKET/PREFIX; wins over storage_dir when set.
    storage_url: str | None = None
    # Downloads from a bucket answer a redirect to a presigned URL instead of the bytes.
    storage_presigned_downloads: bool = False
    # Who runs claimed jobs: the web processes ("web") or worker processes ("worker").
    runner: str = "web"
    # Extra Piper voices (NAME.onnx with NAME.onnx.json) for the piper provider.
    piper_voices_dir: str | None = None
    # Processes the piper provider speaks in (None: one per core; 0: in the process itself).
    piper_processes: int | None = None
    # Keys, endpoints and models of ElevenLabs, Azure, Google and Polly.
    paid: PaidProviders = field(default_factory=PaidProviders)
    # The providers enabled together (empty: tts_provider alone), and their own limits.
    tts_providers: tuple[str, ...] = ()
    provider_limits: Mapping[str, ProviderLimit] = field(default_factory=dict)

    @property
    def providers(self) -> tuple[str, ...]:
        """The enabled providers, the default (``tts_provider``) first."""
        return (self.tts_provider, *(p for p in self.tts_providers if p != self.tts_provider))

    def limit_of(self, provider: str) -> tuple[int, int, float | None]:
        """(concurrency, rpm, price per million) of one provider: its own, else the
        deployment-wide settings."""
        return self.provider_limits.get(provider, ProviderLimit()).over(
            self.provider_concurrency, self.provider_rpm, self.tts_price_per_million_characters
        )

    # Seconds before each retry of a failed webhook delivery; then it is FAILED.
    webhook_retry_schedule: tuple[float, ...] = (5, 60, 300, 1800, 7200, 21600, 43200, 86400)
    # Whether webhook URLs may reach private addresses; None: only in development.
    webhook_allow_private: bool | None = None
    # Not from the environment: the contract's 10 s, shorter in tests.
    webhook_timeout_seconds: float = 10.0
    # Not from the environment: how long an idle sender thread waits before it looks again.
    webhook_idle_seconds: float = 0.5

    @property
    def webhooks_reach_private(self) -> bool:
        """Whether deliveries may connect to loopback, private and link-local addresses."""
        if self.webhook_allow_private is None:
            return not self.is_production
        return self.webhook_allow_private

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
    def storage(self) -> StorageLocation:
        """Where audio, exports and renders live (raises ConfigError when malformed)."""
        return storage_location(self.storage_url, self.storage_dir)

    @property
    def runs_in_workers(self) -> bool:
        """Whether runs are left to ``flask --app wsgi worker`` processes."""
        return self.runner == "worker"

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
        if self.runner not in RUNNERS:
            raise ConfigError(
                f"SPEECHBATCH_RUNNER must be one of {', '.join(RUNNERS)}, not {self.runner!r}"
            )
        check_providers(self.tts_provider, self.tts_providers, PROVIDERS)
        url = urlsplit(self.tts_base_url)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ConfigError(
                f"SPEECHBATCH_TTS_BASE_URL must be an http(s) URL, not {self.tts_base_url!r}"
            )
        if not self.database_url.startswith(("sqlite", "postgresql")):
            raise ConfigError(
                "SPEECHBATCH_DATABASE_URL must be a sqlite:// or postgresql+psycopg:// URL"
            )
        if self.listen_database_url is not None and not (
            self.listen_database_url.startswith("postgresql")
            and self.database_url.startswith("postgresql")
        ):
            raise ConfigError(
                "SPEECHBATCH_LISTEN_DATABASE_URL must be a postgresql+psycopg:// URL, beside a "
                "PostgreSQL SPEECHBATCH_DATABASE_URL"
            )
        self.paid.validate(self.providers)
        if self.tts_provider == "openai" and not self.tts_voices:
            raise ConfigError("SPEECHBATCH_TTS_VOICES must name at least one voice")
        self._check_numbers()
        price = self.tts_price_per_million_characters
        if price is not None and not (0 <= price < float("inf")):
            raise ConfigError(
                "SPEECHBATCH_TTS_PRICE_PER_MILLION_CHARACTERS must be a non-negative number"
            )
        if not (self.currency.isalpha() and 1 <= len(self.currency) <= 10):
            raise ConfigError(
                f"SPEECHBATCH_CURRENCY must be a currency code, not {self.currency!r}"
            )
        self.storage  # noqa: B018 (raises ConfigError when malformed)
        if self.piper_voices_dir is not None and not Path(self.piper_voices_dir).is_dir():
            raise ConfigError(
                f"SPEECHBATCH_PIPER_VOICES_DIR must be a folder, not {self.piper_voices_dir!r}"
            )
        if self.lease_seconds <= self.item_worst_case_seconds:
            raise ConfigError(
                f"SPEECHBATCH_LEASE_SECONDS ({self.lease_seconds:g}) must be longer than one "
                f"item's worst case ({self.item_worst_case_seconds:g} s = attempts x timeout "
                "+ waits between attempts)"
            )
        return self

    def _check_numbers(self) -> None:
        """Counts and durations that cannot work: (value, the least it may be, exclusive
        of it, the variable and what it must be)."""
        checks: list[tuple[float, float, bool, str, str]] = [
            (self.tts_timeout_seconds, 0, True, "TTS_TIMEOUT_SECONDS", "positive"),
            (self.tts_max_attempts, 1, False, "TTS_MAX_ATTEMPTS", "at least 1"),
            (self.item_concurrency, 1, False, "ITEM_CONCURRENCY", "at least 1"),
            (self.provider_concurrency, 1, False, "PROVIDER_CONCURRENCY", "at least 1"),
            (self.provider_rpm, 0, False, "PROVIDER_RPM", "0 (no limit) or more"),
            (self.trusted_proxies, 0, False, "TRUSTED_PROXIES", "0 (no proxy) or more"),
            (self.takes_kept, 1, False, "TAKES_KEPT", "at least 1"),
            (self.piper_processes or 0, 0, False, "PIPER_PROCESSES", "0 (none) or more"),
            (self.export_lock_ttl_seconds, 0, True, "EXPORT_LOCK_TTL_SECONDS", "positive"),
            (self.render_lock_ttl_seconds, 0, True, "RENDER_LOCK_TTL_SECONDS", "positive"),
            (self.worker_dead_seconds, 0, True, "WORKER_DEAD_SECONDS", "positive"),
            (self.db_retry_seconds, 0, False, "DB_RETRY_SECONDS", "0 (no retry) or more"),
        ]
        for value, least, exclusive, name, must in checks:
            if value < least or (exclusive and value == least):
                raise ConfigError(f"SPEECHBATCH_{name} must be {must}")

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

        for name in ("database_url", "listen_database_url", "secret_key", "env",
                     "tts_base_url", "tts_api_key", "tts_model", "storage_dir", "currency",
                     "metrics_token", "storage_url", "piper_voices_dir"):  # fmt: skip
            raw = env.get("SPEECHBATCH_" + name.upper())
            if raw:
                values[name] = raw.strip()
        for name in ("tts_provider", "runner"):
            raw = env.get("SPEECHBATCH_" + name.upper())
            if raw:
                values[name] = raw.strip().lower()
        voices = env.get("SPEECHBATCH_TTS_VOICES")
        if voices:
            values["tts_voices"] = tuple(v.strip() for v in voices.split(",") if v.strip())
        for name in ("lease_seconds", "worker_dead_seconds", "db_retry_seconds",
                     "tts_timeout_seconds",
                     "export_lock_ttl_seconds", "render_lock_ttl_seconds",
                     "tts_price_per_million_characters"):  # fmt: skip
            number(name, float)
        for name in ("item_concurrency", "tts_max_attempts", "provider_concurrency",
                     "provider_rpm", "trusted_proxies", "takes_kept",
                     "piper_processes"):  # fmt: skip
            number(name, int)
        values.update(_presigned_values(env))
        values.update(_webhook_values(env))
        values.update(provider_values(env, PROVIDERS))
        if values.get("env", "development") == "development" and "secret_key" not in values:
            values["secret_key"] = shared_secret_key(instance_dir or DEFAULT_INSTANCE_DIR)
        settings = cls(**values)  # type: ignore[arg-type]
        settings.validate()
        if settings.is_production and "secret_key" not in values:
            raise ConfigError("SPEECHBATCH_SECRET_KEY is required when SPEECHBATCH_ENV=production")
        return settings


def _presigned_values(env: Mapping[str, str]) -> dict[str, object]:
    """``storage_presigned_downloads`` when the environment sets it (true or false)."""
    presigned = env.get("SPEECHBATCH_STORAGE_PRESIGNED_DOWNLOADS", "").strip().lower()
    if not presigned:
        return {}
    if presigned not in BOOLEANS:
        raise ConfigError(
            f"SPEECHBATCH_STORAGE_PRESIGNED_DOWNLOADS must be true or false, not {presigned!r}"
        )
    return {"storage_presigned_downloads": BOOLEANS[presigned]}


def _webhook_values(env: Mapping[str, str]) -> dict[str, object]:
    """SPEECHBATCH_WEBHOOK_RETRY_SCHEDULE and SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE, parsed."""
    values: dict[str, object] = {}
    raw = env.get("SPEECHBATCH_WEBHOOK_RETRY_SCHEDULE")
    if raw is not None and raw.strip():
        try:
            schedule = tuple(float(p) for p in raw.split(",") if p.strip())
        except ValueError:
            schedule = (-1.0,)
        if any(not (0 <= wait < float("inf")) for wait in schedule):
            raise ConfigError(
                "SPEECHBATCH_WEBHOOK_RETRY_SCHEDULE must be seconds (numbers >= 0) separated "
                f"by commas, not {raw!r}"
            )
        values["webhook_retry_schedule"] = schedule
    allow = env.get("SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE")
    if allow is not None and allow.strip():
        flag = allow.strip().lower()
        if flag not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            raise ConfigError(
                f"SPEECHBATCH_WEBHOOK_ALLOW_PRIVATE must be true or false, not {allow!r}"
            )
        values["webhook_allow_private"] = flag in ("1", "true", "yes", "on")
    return values


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
