"""The Idempotency-Key header's value: bare or as the IETF draft's quoted string."""

from __future__ import annotations

import pytest

from speechbatch.errors import BadRequest
from speechbatch.services.idempotency import check_key


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
        ('"8e03978e-40d5"', "8e03978e-40d5"),
        ('"say \\"hi\\""', 'say "hi"'),
        ('""', '""'),
        ("order 17 retry", "order 17 retry"),
    ],
)
def test_a_key_is_its_value_or_its_quoted_content(raw: str, key: str) -> None:
    assert check_key(raw) == key


@pytest.mark.parametrize("raw", ["", "   ", "x" * 256, "caf\u00e9", "tab\there"])
def test_an_empty_long_or_non_ascii_key_is_refused(raw: str) -> None:
    with pytest.raises(BadRequest, match="Idempotency-Key"):
        check_key(raw)
