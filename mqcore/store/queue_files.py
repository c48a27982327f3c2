"""QueueFileService: makes the first file of each new consume queue off the put's path.

A put to a queue that has no file yet leaves the queue *pending* (``ConsumeQueueTable``):
its record is in the commitlog and its unit waits in memory while this thread creates the
queue's directory and file - new directory entries, ~0.3-0.8 ms each on some file systems -
and then writes the waiting units under the put lock. The Java broker does the same work in
its dispatch thread (``ReputMessageService``), after the send was answered.
"""
from __future__ import annotations

from mqcore.service import ServiceThread
from mqcore.store.consume_queue import ConsumeQueueTable

#: seconds between tries while a file cannot be made (a full disk, say)
RETRY_S = 1.0
#: seconds between looks with nothing pending (a wake-up ends the wait at once)
IDLE_S = 1.0


class QueueFileService(ServiceThread):
    name = "mqcore-queue-files"

    def __init__(self, queues: ConsumeQueueTable):
        super().__init__()
        self.queues = queues

    def run(self) -> None:
        while not self.stopped:
            # pending is read after the wait's clear: a wake-up that came during a pass is
            # never lost, its queue is in ``pending`` when the next pass looks
            if not self.queues.pending:
                self.wait_for_running(IDLE_S)
            elif not self.queues.make_all_ready():
                self.wait_for_running(RETRY_S)
