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
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_H16, _LS32 = (
    "[0-9A-Fa-f]{1,4}",
    f"([0-9A-Fa-f]{{1,4}}:[0-9A-Fa-f]{{1,4}}|{_OCTET}(\\.{_OCTET}){{3}})",
)


def _ipv6_pattern() -> str:
    """RFC 3986's IPv6address: n groups before "::" and 7 - n after it (one group fewer
    on each side of an elided run), or 8 groups (the last two may be an IPv4 address)."""
    forms = [f"({_H16}:){{6}}{_LS32}", f"::({_H16}:){{5}}{_LS32}"]
    for before, after in enumerate([4, 3, 2, 1, 0], start=0):
        head = f"(({_H16}:){{0,{before}}}{_H16})?"
        tail = f"({_H16}:){{{after}}}{_LS32}" if after else _LS32
        forms.append(f"{head}::{tail}")
    forms += [f"(({_H16}:){{0,5}}{_H16})?::{_H16}", f"(({_H16}:){{0,6}}{_H16})?::"]
    return "(" + "|".join(f"({form})" for form in forms) + ")"


IPV6_PATTERN = _ipv6_pattern()
_HOST = f"([A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)*\\.?|\\[{IPV6_PATTERN}\\])"
URL_PATTERN = f"^https?://{_HOST}(:{_PORT})?([/?#][!-~]*)?$"
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
    """The URL if it matches URL_PATTERN (an http(s) URL with a host name, an IPv4
    address or a bracketed IPv6 literal, an optional port and printable ASCII after it);
    ValidationError otherwise."""
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


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries and reaches: IPv4-mapped, -compatible and
    -translated forms, NAT64 (64:ff9b::/96) and 6to4 (2002::/16); None for any other."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    compatible = ip in _IPV4_COMPATIBLE and int(ip) > 1  # not :: nor ::1, themselves
    if compatible or ip in _NAT64 or ip in _IPV4_TRANSLATED:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _kind(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if ip.is_loopback:
        return "a loopback"
    if ip.is_link_local:
        return "a link-local"
    if ip.is_unspecified:
        return "an unspecified"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "a shared (carrier-grade NAT)"
    if ip.is_multicast:
        return "a multicast"
    if ip.is_private:
        return "a private"
    return "a reserved"


def refusal(address: str) -> str | None:
    """Why a delivery may not reach ``address`` unless private addresses are allowed (in
    words), or None when it may: every address that is not globally routable (loopback,
    private, link-local, unspecified, shared 100.64.0.0/10, multicast, reserved), and an
    IPv6 address that carries such an IPv4 address (mapped, compatible, NAT64, 6to4)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None:
            reason = refusal(str(inner))
            return None if reason is None else f"{reason} (as {ip})"
        if ip in _NAT64_LOCAL_USE:
            return f"{ip}, a local-use NAT64 address"
    # Python counts multicast as global; no webhook receiver is a group of hosts.
    if ip.is_global and not ip.is_multicast:
        return None
    return f"{ip}, {_kind(ip)} address"
