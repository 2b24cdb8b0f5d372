"""The values an item's pipeline passes along: the run, one attempt, and its outcome.

An ``Attempt`` is immutable: each step (``begin → pace → send → finish``, see
``item.py``) takes one and answers the next, with its ``outcome`` saying what happened.
A step given an attempt whose outcome it does not handle passes it on untouched.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from speechbatch.adapters.providers.base import Span, Speech, TTSProvider
from speechbatch.adapters.repositories.ledger import Reservation
from speechbatch.adapters.repositories.slots import SlotGrant
from speechbatch.domain.lexicon import EMPTY, Lexicon


def audio_key(job_id: int, item_id: int, attempt: int, extension: str) -> str:
    """Where an item's audio of one attempt lives; a later run never reuses the name."""
    return f"jobs/{job_id}/{item_id}-a{attempt}.{extension}"


@dataclass
class Run:
    """One run of this process, shared by its item threads (its lanes)."""

    job_id: int
    attempt: int
    # The voice as the provider names it (without a ``PROVIDER:`` prefix).
    voice: str = ""
    # The provider of the run's voice (None: the process's one provider).
    provider: TTSProvider | None = None
    organization_id: int = 0
    # The job's options (speed, instructions), sent with every call of the run.
    options: dict[str, Any] = field(default_factory=dict)
    # The organization's rules when the run began: every item of the run is sent,
    # billed and fingerprinted with them (see ``runner/lexicon.py`` for a change).
    lexicon: Lexicon = EMPTY
    regenerate: bool = False
    # Set (with the message) when the budget could not pay for the next call.
    over_budget: str | None = None
    # Items were left PENDING because the run began to stop (drain).
    left_items: bool = False
    # A lane failed (not fenced): the run starts nothing more and ends with this reason.
    failure: BaseException | None = None
    # time.monotonic() taken just before the run's last fenced write that won (any thread).
    fenced_at: float = float("-inf")
    fenced: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class Outcome(StrEnum):
    """What the last step made of an attempt."""

    # Begun: the item is ours (GENERATING), a slot and a reservation are held.
    BEGUN = "begun"
    # The provider answered with audio: ``audio``.
    SENT = "sent"
    # The item ends ERROR with ``error`` (the provider refused it, or gave up).
    FAILED = "failed"
    # A retryable failure: begin again after ``wait`` seconds.
    RETRY = "retry"
    # No slot: wait for one (``at_share``: only the job's own releases help). From the
    # send: the slot may have been given to someone else while the call waited.
    NO_SLOT = "no_slot"
    # Not sent, because the run stops starting calls (drain): PENDING again.
    NOT_SENT = "not_sent"
    # The budget cannot pay for it: PENDING again, and the run stops starting items.
    OVER_BUDGET = "over_budget"
    # The run may no longer write (cancelled, recovered, superseded): it stops.
    FENCED = "fenced"
    # DONE without a call, sharing the audio of item ``reused_from``.
    REUSED = "reused"
    # Not startable any more (another run or an edit has it): left as it is.
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Attempt:
    """One item on its way to the provider, as it is after the last step."""

    run: Run
    item_id: int
    text: str  # the spoken text: what is sent and billed
    fingerprint: str
    outcome: Outcome | None = None
    # The voice it is spoken with: its speaker's in the job's cast, else the job's.
    voice: str = ""
    # The provider of that voice (None: the run's) and the voice's name there: the line is
    # gated, paced, reserved, sent and billed by it, whatever the job's voice is.
    provider: TTSProvider | None = None
    provider_voice: str = ""
    # The item is ours: GENERATING since its first begin.
    started: bool = False
    # Calls begun so far (the first begin makes it 1; a retry's begin adds one).
    number: int = 0
    slot: SlotGrant | None = None
    reservation: Reservation | None = None
    # time.monotonic() before the transaction that last confirmed the fence and the slot.
    confirmed_at: float = float("-inf")
    # The audio the item had when it started (a regenerate replaces it).
    previous_audio: str | None = None
    # The job has no item left to start: the other jobs' fair shares may have grown.
    drained: bool = False
    at_share: bool = False
    audio: bytes | None = None
    # The provider's whole answer (its bill and timing, when it gave any).
    speech: Speech | None = None
    error: str | None = None
    wait: float = 0.0
    reused_from: int | None = None
    # Audio that a reuse left unreferenced (to delete once committed).
    orphans: tuple[str, ...] = ()

    @property
    def timing(self) -> tuple[Span, ...] | None:
        """The provider's timing of the audio: its words when it gave them, else its
        sentences (None: the finish measures it from the audio)."""
        if self.speech is None:
            return None
        return self.speech.words or self.speech.sentences

    def to(self, outcome: Outcome, **changes: Any) -> Attempt:
        """This attempt with ``outcome`` (and ``changes``)."""
        return replace(self, outcome=outcome, **changes)
