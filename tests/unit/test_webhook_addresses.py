"""Which addresses a webhook may reach, as a pure function over addresses (no packet is
sent anywhere): everything that is not globally routable is refused, in every IPv6 form
that carries an IPv4 address; public IPv4 and IPv6 addresses, and IPv6 literals in URLs,
are accepted."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speechbatch.domain.webhooks import IPV6_PATTERN, check_url, embedded_ipv4, refusal
from speechbatch.errors import ValidationError

REFUSED = [
    "127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.0.1", "169.254.169.254", "0.0.0.0",
    "::1", "::", "fe80::1%eth0", "fd00::1",
    # Shared address space (carrier-grade NAT), which Python calls neither private nor global.
    "100.64.0.1", "100.127.255.254",
    # IPv4-mapped, -compatible and -translated forms of refused addresses.
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::127.0.0.1", "::ffff:0:a00:1", "::ffff:100.64.0.1",
    # NAT64 (well-known and local-use) and 6to4 forms.
    "64:ff9b::a00:1", "64:ff9b::7f00:1", "64:ff9b::6440:1", "64:ff9b:1::808:808",
    "2002:a00:1::1", "2002:7f00:1::", "2002:a9fe:a9fe::1",
    # Multicast (Python counts it as global), documentation, benchmarking, reserved.
    "224.0.0.1", "ff02::1", "ff0e::1", "2001:db8::1", "198.18.0.1", "240.0.0.1",
    "255.255.255.255",
]  # fmt: skip
REACHABLE = [
    "93.184.216.34", "8.8.8.8", "2606:2800:220:1::1", "2001:4860:4860::8888",
    # A public IPv4 address reached through NAT64 or 6to4, or written mapped.
    "64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8",
]  # fmt: skip


@pytest.mark.parametrize("address", REFUSED)
def test_an_address_that_is_not_globally_routable_is_refused(address: str) -> None:
    reason = refusal(address)
    assert reason is not None and "address" in reason


@pytest.mark.parametrize("address", REACHABLE)
def test_a_public_address_is_reachable(address: str) -> None:
    assert refusal(address) is None


def _ipv6_forms(v4: ipaddress.IPv4Address) -> list[ipaddress.IPv6Address]:
    n = int(v4)
    forms = [
        ipaddress.IPv6Address((0xFFFF << 32) | n),  # mapped
        ipaddress.IPv6Address((0x64FF9B << 96) | n),  # NAT64
        ipaddress.IPv6Address((0x2002 << 112) | (n << 80)),  # 6to4
    ]
    return [*forms, ipaddress.IPv6Address(n)] if n > 1 else forms  # compatible


@given(st.ip_addresses(v=4))
def test_every_ipv6_form_of_an_ipv4_address_is_judged_as_that_address(
    v4: ipaddress.IPv4Address,
) -> None:
    for form in _ipv6_forms(v4):
        assert embedded_ipv4(form) == v4
        assert (refusal(str(form)) is None) == (refusal(str(v4)) is None), form


@pytest.mark.parametrize(
    "url",
    ["http://[2606:2800:220:1::1]:8443/hook", "https://[::ffff:8.8.8.8]/", "http://[::1]/x"],
)
def test_an_ipv6_literal_url_is_accepted(url: str) -> None:
    assert check_url(url) == url


@pytest.mark.parametrize(
    "url", ["http://[:::]/", "http://[1::2::3]/", "http://[12345::]/", "http://[1:2:3:4:5:6:7]/"]
)
def test_a_malformed_ipv6_literal_is_refused(url: str) -> None:
    with pytest.raises(ValidationError):
        check_url(url)


@given(st.ip_addresses(v=6))
def test_the_url_pattern_takes_every_ipv6_address(ip: ipaddress.IPv6Address) -> None:
    for text in (ip.compressed, ip.exploded):
        assert check_url(f"http://[{text}]:80/hook")


@settings(max_examples=40)
@given(st.from_regex(re.compile(f"^{IPV6_PATTERN}$"), fullmatch=True))
def test_what_the_url_pattern_takes_is_an_ipv6_address(text: str) -> None:
    # The OpenAPI document carries the pattern: what a client generates from it is valid.
    assert ipaddress.IPv6Address(text)
