"""IPv6 spellings of forbidden IPv4 addresses: refused as check URLs and at push time.

An IPv6 address that carries an IPv4 address (IPv4-mapped, -translated,
-compatible, NAT64 in the well-known and the local-use prefix, 6to4, Teredo)
reaches that IPv4 address, so it is held to the IPv4 rules; the same forms
of allowed addresses (loopback, private, public) stay allowed.
"""

from __future__ import annotations

import ipaddress

import httpx
import pytest

from coordinator.core.checkback import push
from coordinator.domain.check_urls import _rfc6052_address, check_url, forbidden_address
from coordinator.domain.errors import InvalidMessage
from tests.checkback_helpers import pushed_check_request

LINK_LOCAL = "link-local"

# Each form of 169.254.169.254 (the metadata address) and what the refusal names.
METADATA_FORMS = [
    ("::ffff:169.254.169.254", "IPv4-mapped form of 169.254.169.254"),
    ("::ffff:0:169.254.169.254", "IPv4-translated form of 169.254.169.254"),
    ("::169.254.169.254", "IPv4-compatible form of 169.254.169.254"),
    ("::a9fe:a9fe", "IPv4-compatible form of 169.254.169.254"),
    ("64:ff9b::169.254.169.254", "NAT64 form of 169.254.169.254"),
    ("64:ff9b:1::169.254.169.254", "local-use NAT64 form of 169.254.169.254"),  # /96
    ("64:ff9b:1:a9fe:a9:fe00::", "local-use NAT64 form of 169.254.169.254"),  # /48
    ("64:ff9b:1:a9:fe:a9fe::", "local-use NAT64 form of 169.254.169.254"),  # /56
    ("64:ff9b:1:0:a9:fea9:fe00:0", "local-use NAT64 form of 169.254.169.254"),  # /64
    ("2002:a9fe:a9fe::", "6to4 form of 169.254.169.254"),
    ("2002:a9fe:a9fe:1:2:3:4:5", "6to4 form of 169.254.169.254"),
    # Teredo: the client's address is stored inverted in the last 32 bits
    ("2001:0:4136:e378:8000:63bf:5601:5601", "Teredo form of 169.254.169.254"),
]


@pytest.mark.parametrize(("address", "form"), METADATA_FORMS)
def test_ipv6_forms_of_the_metadata_address_are_link_local(address: str, form: str) -> None:
    refused = forbidden_address(address)
    assert refused is not None and refused.startswith(LINK_LOCAL) and form in refused


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("::ffff:100.100.100.200", "metadata"),
        ("2002:6464:64c8::", "metadata"),  # Alibaba Cloud's, by 6to4
        ("64:ff9b::224.0.0.1", "multicast"),
        ("2002:e000:1::", "multicast"),
        ("::255.255.255.255", "broadcast"),
        ("2002:ffff:ffff::", "broadcast"),
        ("::0.1.2.3", "unspecified"),
        ("64:ff9b::", "unspecified"),  # NAT64 of 0.0.0.0
        ("2002::", "unspecified"),
        ("64:ff9b:1:e000:0:100::", "multicast"),  # local-use /48 of 224.0.0.1
    ],
)
def test_ipv6_forms_of_other_forbidden_addresses(address: str, reason: str) -> None:
    refused = forbidden_address(address)
    assert refused is not None and reason in refused


@pytest.mark.parametrize(
    "address",
    [
        "::1",  # loopback itself, not the IPv4-compatible 0.0.0.1
        "::127.0.0.1",
        "::ffff:10.0.0.7",
        "64:ff9b::10.0.0.1",
        "64:ff9b::93.184.216.34",
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "2002:5db8:d822::1",  # 6to4 of a public address
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo of 192.0.2.45 (RFC 4380's example)
        # RFC 6052's 192.0.2.33 at each local-use length: the zeros of the
        # other lengths are padding, not 0.0.0.0
        "64:ff9b:1::c000:221",
        "64:ff9b:1:c000:2:2100::",
        "64:ff9b:1:c0:0:221::",
        "64:ff9b:1:0:c0:2:2100:0",
        "2001:db8::1",
        "fd12:3456::1",
    ],
)
def test_ipv6_forms_of_allowed_addresses_are_allowed(address: str) -> None:
    assert forbidden_address(address) is None


@pytest.mark.parametrize(
    ("address", "length"),
    [
        # RFC 6052 section 2.4's table: 192.0.2.33 after a prefix of each length
        ("2001:db8:c000:221::", 32),
        ("2001:db8:1c0:2:21::", 40),
        ("2001:db8:122:c000:2:2100::", 48),
        ("2001:db8:122:3c0:0:221::", 56),
        ("2001:db8:122:344:c0:2:2100:0", 64),
    ],
)
def test_the_ipv4_address_after_a_nat64_prefix_is_where_rfc_6052_puts_it(
    address: str, length: int
) -> None:
    embedded = _rfc6052_address(int(ipaddress.ip_address(address)), length)
    assert embedded == ipaddress.IPv4Address("192.0.2.33")


@pytest.mark.parametrize(("address", "form"), METADATA_FORMS)
def test_check_urls_with_ipv6_forms_of_the_metadata_address_are_refused(
    address: str, form: str
) -> None:
    with pytest.raises(InvalidMessage) as refused:
        check_url(f"http://[{address}]:8080/check")
    message = refused.value.message
    assert message.startswith("check URL address ") and LINK_LOCAL in message and form in message
    assert message.endswith("the coordinator does not call it")


@pytest.mark.anyio
@pytest.mark.parametrize(("address", "form"), METADATA_FORMS)
async def test_a_push_to_an_ipv6_form_of_the_metadata_address_is_not_sent(
    address: str, form: str
) -> None:
    # a URL registered before these rules: the push checks its host again
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"resolution": "commit"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        outcome = await push.push(client, f"http://[{address}]/check", pushed_check_request(), None)
    assert sent == [] and not outcome.delivered
    assert outcome.detail is not None
    assert outcome.detail.startswith("check URL resolves to a forbidden address ")
    assert form in outcome.detail
