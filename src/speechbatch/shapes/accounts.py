"""The organization's settings and access: voices, tokens, webhooks and the lexicon."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired, TypedDict

from speechbatch.domain.lexicon import MAX_MATCH, MAX_RULES, MAX_SAY
from speechbatch.domain.limits import MAX_PREVIEW, MAX_TOKEN_NAME
from speechbatch.domain.webhooks import (
    DESCRIPTION_PATTERN,
    MAX_DESCRIPTION_LENGTH,
    MAX_URL_LENGTH,
    URL_PATTERN,
    DeliveryStatus,
    EventType,
)
from speechbatch.shapes.common import NO_NUL, NOT_BLANK, Count, Id, Timestamp
from speechbatch.shapes.schema import Schema, object_keywords


class VoiceDetail(TypedDict):
    """One voice: its name in jobs (``PROVIDER:VOICE``, or bare for the default
    provider), its provider, a label and a language as the provider lists them."""

    name: str
    provider: str
    label: str
    language: str


class Voices(TypedDict):
    """The enabled providers' voices."""

    voices: list[str]
    details: list[VoiceDetail]


class Token(TypedDict):
    """An API token, never its secret."""

    id: Id
    name: str
    prefix: str
    created_at: Timestamp
    last_used_at: Timestamp | None


class NewToken(TypedDict):
    """A token just made: its secret is shown this once."""

    id: Id
    name: str
    prefix: str
    token: str
    created_at: Timestamp


class TokenList(TypedDict):
    """The caller's live tokens."""

    tokens: list[Token]


class TokenRequest(TypedDict):
    """A token to make."""

    name: Annotated[str, Schema(maxLength=MAX_TOKEN_NAME, pattern=NOT_BLANK)]


WebhookUrl = Annotated[str, Schema(maxLength=MAX_URL_LENGTH, pattern=URL_PATTERN)]
Events = Annotated[list[EventType], Schema(minItems=1)]
Description = Annotated[str, Schema(maxLength=MAX_DESCRIPTION_LENGTH, pattern=DESCRIPTION_PATTERN)]


class Webhook(TypedDict):
    """A receiver of the organization's events."""

    id: Id
    url: str
    events: list[EventType]
    description: str
    enabled: bool
    created_at: Timestamp


class NewWebhook(Webhook):
    """A webhook just made, with its signing secret (shown this once)."""

    secret: Annotated[str, Schema(pattern="^whsec_")]


class WebhookList(TypedDict):
    """The organization's webhooks, newest first."""

    webhooks: list[Webhook]


class WebhookRequest(TypedDict):
    """A webhook to make."""

    url: WebhookUrl
    events: Events
    description: NotRequired[Description]


@object_keywords(additionalProperties=False)
class WebhookChange(TypedDict, total=False):
    """What to change of a webhook."""

    url: WebhookUrl
    events: Events
    description: Description
    enabled: bool


class Delivery(TypedDict):
    """One event's delivery to one webhook."""

    id: Id
    event_id: str
    type: EventType
    status: DeliveryStatus
    attempts: Count
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: Timestamp | None
    delivered_at: Timestamp | None
    created_at: Timestamp


class DeliveryList(TypedDict):
    """A webhook's deliveries, newest first."""

    deliveries: list[Delivery]


class Ping(TypedDict):
    """The ping's event id (its webhook-id)."""

    event_id: str


class Redelivery(TypedDict):
    """A delivery due again now."""

    id: Id
    status: Literal["PENDING"]


@object_keywords(additionalProperties=False)
class LexiconRule(TypedDict):
    """Say ``say`` where ``match`` is (a whole word, or a regex)."""

    match: Annotated[str, Schema(minLength=1, maxLength=MAX_MATCH, pattern=NOT_BLANK)]
    say: NotRequired[Annotated[str, Schema(maxLength=MAX_SAY, pattern=NO_NUL)]]
    regex: NotRequired[bool]
    case_sensitive: NotRequired[bool]


Rules = Annotated[list[LexiconRule], Schema(maxItems=MAX_RULES)]


class Lexicon(TypedDict):
    """The organization's rules, their version, and whether the stale marks of the newest
    version are still being written."""

    rules: Rules
    version: Count
    stale_pass: Literal["running", "done"]


class LexiconRules(TypedDict):
    """Rules to save or to count the effect of."""

    rules: Rules


class PreviewRequest(TypedDict):
    """A text to preview."""

    text: Annotated[str, Schema(maxLength=MAX_PREVIEW)]


class SpokenText(TypedDict):
    """A text as the organization's rules have it spoken."""

    spoken_text: str


ImpactStatus = Literal["pending", "running", "done", "failed"]


class ImpactRequest(TypedDict):
    """A dry run asked: it is counted in the background; read its counts at ``url``."""

    id: Id
    status: ImpactStatus
    url: str


class LexiconImpact(TypedDict):
    """A dry run's counts so far: the DONE lines not stale now that the rules would make
    stale, in how many jobs, among the ``checked`` lines read of ``total`` (null until
    counted); ``complete`` once every line was read (``status`` ``done``)."""

    id: Id
    status: ImpactStatus
    lines: Count
    jobs: Count
    checked: Count
    total: Count | None
    complete: bool
