"""Webhooks' pure rules: event types, delivery states, the retry schedule, the Standard
Webhooks signature, and which addresses a delivery may not reach.

The signature is the Standard Webhooks one (what the ``standardwebhooks`` package checks):
``v1,`` and the base64 HMAC-SHA256, keyed with the secret's decoded bytes, of
``ID.TIMESTAMP.BODY``; the secret is ``whsec_`` and the base64 of 24 random bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
import secrets
from collections.abc import Sequence
from enum import StrEnum

from speechbatch.errors import ValidationError

SECRET_PREFIX = "whsec_"
MAX_URL_LENGTH = 2000
MAX_DESCRIPTION_LENGTH = 500
# What a webhook URL may be, as the OpenAPI document says it (the same pattern).
_PORT = "([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
URL_PATTERN = f"^https?://[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)*\\.?(:{_PORT})?([/?#][!-~]*)?$"
URL_RE = re.compile(URL_PATTERN)
DESCRIPTION_PATTERN = "^[^\\u0000]*$"


class DeliveryStatus(StrEnum):
    """A delivery: PENDING (attempts to come) -> DELIVERED | FAILED (schedule used up)."""

    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"


class EventType(StrEnum):
    """What a webhook can be told."""

    JOB_COMPLETED = "job.completed"
    JOB_FAILED = "job.failed"
    RENDER_COMPLETED = "render.completed"
    RENDER_FAILED = "render.failed"
    EXPORT_COMPLETED = "export.completed"
    EXPORT_FAILED = "export.failed"
    PING = "ping"


EVENT_TYPES = tuple(str(t) for t in EventType)


def new_secret() -> str:
    """A fresh signing secret in the Standard Webhooks form."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header of one attempt."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def check_url(url: object) -> str:
    """The URL if it matches URL_PATTERN (an http(s) URL with a host name or IPv4
    address, an optional port and printable ASCII after it); ValidationError otherwise."""
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH or not URL_RE.match(url):
        raise ValidationError(
            "url must be an http:// or https:// URL with a host (printable ASCII, at most "
            f"{MAX_URL_LENGTH} characters)",
            field="url",
        )
    # Python's "$" also matches before a final newline, which is no part of the URL.
    return url.removesuffix("\n")


def check_events(events: object) -> list[str]:
    """The subscribed event types, without duplicates, in a stable order."""
    if not isinstance(events, list) or not events:
        raise ValidationError("events must be a non-empty list of event types", field="events")
    unknown = [e for e in events if not isinstance(e, str) or e not in EVENT_TYPES]
    if unknown:
        raise ValidationError(
            f"unknown event type(s); known: {', '.join(EVENT_TYPES)}", field="events"
        )
    return [t for t in EVENT_TYPES if t in events]


def check_description(description: object) -> str:
    """The description (may be empty), at most MAX_DESCRIPTION_LENGTH characters, no NUL."""
    if (
        not isinstance(description, str)
        or len(description) > MAX_DESCRIPTION_LENGTH
        or "\x00" in description
    ):
        raise ValidationError(
            f"description must be text of at most {MAX_DESCRIPTION_LENGTH} characters",
            field="description",
        )
    return description


def next_wait(schedule: Sequence[float], failed_attempts: int) -> float | None:
    """The wait before the next attempt after ``failed_attempts`` failures in a row
    (counted since the last redeliver), or None when the schedule is used up."""
    if failed_attempts < 1 or failed_attempts > len(schedule):
        return None
    return schedule[failed_attempts - 1]


def forbidden_address(address: str) -> bool:
    """Whether a delivery may not reach ``address`` unless private addresses are allowed:
    loopback, private, link-local, unspecified (also as IPv4 mapped into IPv6)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_unspecified
