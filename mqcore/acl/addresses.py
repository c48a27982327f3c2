"""White remote address patterns of ``plain_acl.yml`` (RocketMQ's ``RemoteAddressStrategy``).

A pattern matches the client's IP (the port is not part of it):

* blank: matches nothing (an account without a white address must sign);
* ``*``, ``*.*.*.*``, ``*:*:*:*:*:*:*:*``: matches every address;
* one address: ``192.168.0.1``, ``::1`` (IPv6 compared in full form);
* a list: ``192.168.0.1,192.168.0.2``, or the last part in braces: ``192.168.1.{1,2,3}``;
* a range in one IPv4 part, the parts after it ``*``: ``192.168.0.*``, ``192.168.1.1-10``,
  ``10.*.*.*``, ``10.2-5.*.*``.

A pattern that is none of these raises :class:`~mqcore.errors.AclConfigError` with the
pattern in the message (Java also refuses such a file at load).
"""
from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass

from mqcore.errors import AclConfigError

_MATCH_ALL = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


@functools.lru_cache(maxsize=4096)  # asked for every request; a broker sees few client hosts
def _canonical(address: str) -> str | None:
    """The address in one spelling (IPv6 expanded, IPv4 as given), or None if not an IP."""
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # a dual-stack socket reports ::ffff:a.b.c.d
            return str(ip.ipv4_mapped)
        return ip.exploded.upper()
    return str(ip)


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """One compiled pattern; ``matches(host)`` is what the validator asks."""

    text: str
    everything: bool = False
    addresses: frozenset[str] = frozenset()
    #: IPv4 range: the fixed leading parts, the index of the ranged part and its bounds
    head: tuple[int, ...] = ()
    low: int = 0
    high: int = -1

    def matches(self, host: str) -> bool:
        if self.everything:
            return True
        if not self.addresses and self.high < 0:  # blank: matches nothing
            return False
        canonical = _canonical(host)
        if canonical is None:
            return False
        if self.addresses:
            return canonical in self.addresses
        if self.high < 0 or ":" in canonical:
            return False
        parts = [int(p) for p in canonical.split(".")]
        n = len(self.head)
        return tuple(parts[:n]) == self.head and self.low <= parts[n] <= self.high


def compile_pattern(text: object) -> AddressPattern:
    if text is None or (isinstance(text, str) and not text.strip()):
        return AddressPattern(text="")  # matches nothing
    if not isinstance(text, str):
        raise AclConfigError(f"white remote address {text!r} is not a string")
    s = text.strip()
    if s in _MATCH_ALL:
        return AddressPattern(text=s, everything=True)
    if s.endswith("}"):
        return _braces(s)
    if "," in s:
        return AddressPattern(text=s, addresses=frozenset(_one(a, s) for a in s.split(",") if a.strip()))
    if "*" in s or "-" in s:
        return _range(s)
    return AddressPattern(text=s, addresses=frozenset({_one(s, s)}))


def _one(address: str, pattern: str) -> str:
    canonical = _canonical(address)
    if canonical is None:
        raise AclConfigError(f"white remote address {pattern!r}: {address.strip()!r} is not an IP address")
    return canonical


def _braces(s: str) -> AddressPattern:
    sep = ":" if ":" in s else "."
    head, _, last = s.rpartition(sep)
    if not last.startswith("{") or not head:
        raise AclConfigError(f"white remote address {s!r}: braces must hold the last part, e.g. 192.168.1.{{1,2}}")
    items = [x.strip() for x in last[1:-1].split(",") if x.strip()]
    if not items:
        raise AclConfigError(f"white remote address {s!r}: empty braces")
    return AddressPattern(text=s, addresses=frozenset(_one(f"{head}{sep}{x}", s) for x in items))


def _range(s: str) -> AddressPattern:
    parts = s.split(".")
    if len(parts) != 4:
        raise AclConfigError(f"white remote address {s!r}: a range needs four IPv4 parts (IPv6 ranges are "
                             "not supported: list the addresses)")
    ranged = next((i for i, p in enumerate(parts) if "*" in p or "-" in p), None)
    if ranged is None or ranged == 0 or any(p.strip() != "*" for p in parts[ranged + 1:]):
        raise AclConfigError(f"white remote address {s!r}: the range must be in one part after the first, "
                             "with only '*' after it (e.g. 192.168.0.*, 192.168.1.1-10)")
    try:
        head = tuple(int(p) for p in parts[:ranged])
        part = parts[ranged].strip()
        if part == "*":
            low, high = 0, 255
        else:
            a, _, b = part.partition("-")
            low, high = int(a), int(b)
    except ValueError:
        raise AclConfigError(f"white remote address {s!r} is not an address pattern") from None
    if not all(0 <= x <= 255 for x in head) or not 0 <= low <= high <= 255:
        raise AclConfigError(f"white remote address {s!r}: parts must be 0-255 and a range low-high with low <= high")
    return AddressPattern(text=s, head=head, low=low, high=high)
