"""A decoded commitlog record: the one named type every reader of records uses.

``decode_records`` (both kernel implementations) returns :class:`DecodedRecord`
values: a ``NamedTuple``, so the kernels still build a plain tuple (cheap), while
the broker, the client, the tools and Spark read fields by name. Nothing outside
this module depends on the order of the fields.

Field values are as stored (store-format §1): ``born_host``/``store_host`` are
``"ip:port"`` text (``"[v6]:port"`` for IPv6), ``body`` is the body as stored (still
compressed when ``sys_flag`` says so), ``properties`` the raw property string.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["DecodedRecord", "DECODED_FIELDS"]


class DecodedRecord(NamedTuple):
    """One record of a commitlog or of a PULL/QUERY response body, every field decoded."""

    store_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phy_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_offset: int
    body: bytes
    topic: str
    properties: bytes


#: the field names, in the order the kernels fill them
DECODED_FIELDS: tuple[str, ...] = DecodedRecord._fields
