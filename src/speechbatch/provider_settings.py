"""The paid providers' settings (ElevenLabs, Azure, Google, Polly), read from the
environment with the rest of ``config.Settings``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from speechbatch.errors import ConfigError

_TRUE = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


@dataclass(frozen=True)
class PaidProviders:
    """Keys, endpoints and models of the paid providers (unused ones stay unset)."""

    elevenlabs_api_key: str | None = field(default=None, repr=False)
    elevenlabs_base_url: str = "https://api.elevenlabs.io"
    elevenlabs_model: str = "eleven_multilingual_v2"
    azure_key: str | None = field(default=None, repr=False)
    azure_region: str | None = None
    # None: https://{region}.tts.speech.microsoft.com
    azure_base_url: str | None = None
    google_api_key: str | None = field(default=None, repr=False)
    google_base_url: str = "https://texttospeech.googleapis.com"
    polly_endpoint_url: str | None = None
    polly_engine: str = "neural"
    polly_speech_marks: bool = False

    @property
    def azure_url(self) -> str:
        """Azure's base URL: the one set, else the region's."""
        return self.azure_base_url or f"https://{self.azure_region}.tts.speech.microsoft.com"

    def validate(self, enabled: tuple[str, ...]) -> None:
        """Raise ConfigError naming the variable when an enabled provider cannot work."""
        urls = {
            "ELEVENLABS_BASE_URL": self.elevenlabs_base_url,
            "GOOGLE_BASE_URL": self.google_base_url,
            "AZURE_BASE_URL": self.azure_base_url,
            "POLLY_ENDPOINT_URL": self.polly_endpoint_url,
        }
        for name, url in urls.items():
            parts = urlsplit(url or "")
            if url is not None and (parts.scheme not in ("http", "https") or not parts.netloc):
                raise ConfigError(f"SPEECHBATCH_{name} must be an http(s) URL, not {url!r}")
        if "azure" in enabled and not (self.azure_base_url or self.azure_region):
            raise ConfigError("the azure provider needs SPEECHBATCH_AZURE_REGION")
        if self.azure_region and not self.azure_region.replace("-", "").isalnum():
            raise ConfigError(f"SPEECHBATCH_AZURE_REGION is not a region: {self.azure_region!r}")


@dataclass(frozen=True)
class ProviderLimit:
    """One provider's own limits and price (None: the deployment-wide setting)."""

    concurrency: int | None = None
    rpm: int | None = None
    price_per_million_characters: float | None = None

    def over(
        self, concurrency: int, rpm: int, price: float | None
    ) -> tuple[int, int, float | None]:
        """(concurrency, rpm, price): this provider's own where set, else those given."""
        own_price = self.price_per_million_characters
        return (
            concurrency if self.concurrency is None else self.concurrency,
            rpm if self.rpm is None else self.rpm,
            price if own_price is None else own_price,
        )


def provider_limits_from_env(
    env: Mapping[str, str], names: tuple[str, ...]
) -> dict[str, ProviderLimit]:
    """SPEECHBATCH_{PROVIDER}_CONCURRENCY, _RPM and _PRICE_PER_MILLION_CHARACTERS of the
    providers ``names`` that set any."""
    found: dict[str, ProviderLimit] = {}
    for name in names:
        values: dict[str, float | int] = {}
        for setting, kind in (("concurrency", int), ("rpm", int),
                              ("price_per_million_characters", float)):  # fmt: skip
            var = f"SPEECHBATCH_{name.upper()}_{setting.upper()}"
            raw = env.get(var, "").strip()
            if not raw:
                continue
            try:
                values[setting] = kind(raw)
            except ValueError:
                raise ConfigError(f"{var} must be a number, not {raw!r}") from None
        if values:
            limit = ProviderLimit(**values)  # type: ignore[arg-type]
            check_limit(name, limit)
            found[name] = limit
    return found


def check_limit(name: str, limit: ProviderLimit) -> None:
    """Raise ConfigError naming the variable of a limit that cannot work."""
    prefix = f"SPEECHBATCH_{name.upper()}_"
    if limit.concurrency is not None and limit.concurrency < 1:
        raise ConfigError(f"{prefix}CONCURRENCY must be at least 1")
    if limit.rpm is not None and limit.rpm < 0:
        raise ConfigError(f"{prefix}RPM must be 0 (no limit) or more")
    price = limit.price_per_million_characters
    if price is not None and not (0 <= price < float("inf")):
        raise ConfigError(f"{prefix}PRICE_PER_MILLION_CHARACTERS must be a non-negative number")


def providers_from_env(env: Mapping[str, str]) -> tuple[str, ...]:
    """SPEECHBATCH_TTS_PROVIDERS as names (lower case, in order, without repeats)."""
    raw = env.get("SPEECHBATCH_TTS_PROVIDERS", "")
    names = [p.strip().lower() for p in raw.split(",") if p.strip()]
    return tuple(dict.fromkeys(names))


def paid_providers_from_env(env: Mapping[str, str]) -> PaidProviders:
    """The SPEECHBATCH_{ELEVENLABS,AZURE,GOOGLE,POLLY}_* variables that are set."""
    values: dict[str, object] = {}
    for name in PaidProviders.__dataclass_fields__:
        raw = env.get("SPEECHBATCH_" + name.upper(), "").strip()
        if not raw:
            continue
        if name == "polly_speech_marks":
            if raw.lower() not in _TRUE:
                raise ConfigError(
                    f"SPEECHBATCH_POLLY_SPEECH_MARKS must be true or false, not {raw!r}"
                )
            values[name] = _TRUE[raw.lower()]
        else:
            values[name] = raw
    return PaidProviders(**values)  # type: ignore[arg-type]


def check_providers(default: str, enabled: tuple[str, ...], known: tuple[str, ...]) -> None:
    """Raise ConfigError when SPEECHBATCH_TTS_PROVIDER(S) name an unknown provider."""
    if default not in known:
        raise ConfigError(
            f"SPEECHBATCH_TTS_PROVIDER must be one of {', '.join(known)}, not {default!r}"
        )
    if any(p not in known for p in enabled):
        raise ConfigError(
            f"SPEECHBATCH_TTS_PROVIDERS must name some of {', '.join(known)}, "
            f"not {', '.join(enabled)!r}"
        )


def provider_values(env: Mapping[str, str], known: tuple[str, ...]) -> dict[str, object]:
    """The settings of several providers: ``paid``, ``tts_providers`` (and the default,
    their first, unless SPEECHBATCH_TTS_PROVIDER names another), ``provider_limits``."""
    enabled = providers_from_env(env)
    values: dict[str, object] = {
        "paid": paid_providers_from_env(env),
        "tts_providers": enabled,
        "provider_limits": provider_limits_from_env(env, known),
    }
    if enabled and not env.get("SPEECHBATCH_TTS_PROVIDER", "").strip():
        values["tts_provider"] = enabled[0]
    return values
