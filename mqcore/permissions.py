"""Topic and broker permission bits (RocketMQ's ``PermName``), shared by namesrv, broker and client."""
from __future__ import annotations

PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
