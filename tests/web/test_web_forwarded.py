"""Which address the web's per-host limits count (common.http1.forwarded): the rules a user relies
on when putting ykshm behind a reverse proxy. The servers' side is in
tests/security/test_web_tls_security.py."""

from __future__ import annotations

import pytest

from common.http1.forwarded import ProxyConfigError, TrustedProxies

PROXIES = TrustedProxies.parse(["10.0.0.5", "192.168.0.0/16", "fd00::/8"])


def _xff(*values: str) -> list[tuple[bytes, bytes]]:
    return [(b"host", b"x")] + [(b"x-forwarded-for", v.encode()) for v in values]


def test_none_trusted_by_default_the_header_never_counts():
    assert TrustedProxies().client("10.0.0.5", _xff("1.2.3.4")) == "10.0.0.5"
    assert TrustedProxies.parse([]).client("127.0.0.1", _xff("1.2.3.4")) == "127.0.0.1"


def test_an_untrusted_peer_is_counted_whatever_it_writes():
    assert PROXIES.client("203.0.113.9", _xff("1.2.3.4")) == "203.0.113.9"


def test_the_rightmost_untrusted_address_is_the_client():
    assert PROXIES.client("10.0.0.5", _xff("6.6.6.6, 1.2.3.4")) == "1.2.3.4"
    # a chain of trusted proxies is walked through; the first untrusted hop is the client
    assert PROXIES.client("10.0.0.5", _xff("6.6.6.6, 1.2.3.4, 192.168.7.7")) == "1.2.3.4"
    # several header lines are one list, in order
    assert PROXIES.client("10.0.0.5", _xff("6.6.6.6", "1.2.3.4")) == "1.2.3.4"
    assert PROXIES.client("::ffff:10.0.0.5", _xff("2001:db8::1")) == "2001:db8::1"
    assert PROXIES.client("fd00::1", _xff("[2001:db8::2]")) == "2001:db8::2"


def test_without_an_untrusted_hop_or_with_garbage_the_last_trusted_hop_counts():
    assert PROXIES.client("10.0.0.5", []) == "10.0.0.5"
    assert PROXIES.client("10.0.0.5", _xff("192.168.1.1")) == "192.168.1.1"
    assert PROXIES.client("10.0.0.5", _xff("1.2.3.4, not-an-ip")) == "10.0.0.5"
    assert PROXIES.client("10.0.0.5", _xff("unknown, 192.168.1.1")) == "192.168.1.1"


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "bogus", "", 7, None])
def test_a_bad_entry_is_named(entry):
    with pytest.raises(ProxyConfigError) as err:
        TrustedProxies.parse(["10.0.0.1", entry])
    assert err.value.entry == entry
