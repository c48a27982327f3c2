"""Topic and broker permission bits (RocketMQ's ``PermName``), shared by namesrv, broker and client."""
from __future__ import annotations

PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1

#: the perm values a topic may be created or updated with: what RocketMQ's mqadmin documents
#: (2 write, 4 read, 6 read+write) and 7 (read+write+inherit, TBW102's), which mqadmin
#: and a 4.9 broker accept. A 4.9 broker stores anything (-1, 255 ...): a topic then reads
#: as unreadable or unwritable in ways no tool shows, so mqcore refuses the rest.
TOPIC_PERMS = (2, 4, 6, 7)


def topic_perm_problem(perm: int) -> str | None:
    """Why ``perm`` may not be a topic's permission, or None."""
    if perm in TOPIC_PERMS:
        return None
    return f"perm {perm} is not a topic permission: use 2 (write), 4 (read), 6 (read+write) or 7 (read+write+inherit)"


def perm_to_string(perm: int) -> str:
    """``PermName.perm2String``: read, write, inherit as ``R``/``W``/``X`` or ``-`` ("RW-" for 6),
    as Apache's mqadmin prints a topic's perm."""
    return "".join(c if perm & bit else "-" for c, bit in (("R", PERM_READ), ("W", PERM_WRITE), ("X", PERM_INHERIT)))
