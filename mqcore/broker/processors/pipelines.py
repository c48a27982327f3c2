"""The request pipelines of the broker's connections, one per request kind.

The remoting server takes one frames processor; :class:`RequestPipelines` offers the head
of each receive buffer to the pipeline of every kind in turn (SEND, PULL) until none takes
the frame there, which the channel then decodes for the general processors. Each pipeline
reads only frames of its own kind and returns where it stopped.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqcore.remoting.channel import Channel, FramesProcessor

__all__ = ["RequestPipelines"]


class RequestPipelines:
    """A frames processor made of the pipelines of several request kinds."""

    def __init__(self, *pipelines: FramesProcessor) -> None:
        self.pipelines = pipelines
        #: the C connection core's fast paths (``ChannelCore`` reads them per receive buffer,
        #: plain attributes: a property would cost a Python call each time): the first
        #: pipeline's ``core``, the SEND pipeline's ``SendCore``, and the first ``pull_core``,
        #: the PULL pipeline's ``PullCore``, with the compiled kernels; the channel core picks
        #: one by the request code of the buffer's first frame. A buffer a core does not take
        #: whole comes back through ``__call__``, every pipeline in turn.
        self.core: Any = getattr(pipelines[0], "core", None) if pipelines else None
        self.pull_core: Any = next((c for c in (getattr(p, "pull_core", None) for p in pipelines) if c is not None),
                                   None)

    def __call__(self, channel: Channel, view: memoryview, start: int, end: int) -> int:
        pos = start
        while pos < end:
            for pipeline in self.pipelines:
                stop = pipeline(channel, view, pos, end)
                if stop != pos:
                    pos = stop
                    break
            else:
                return pos  # no pipeline takes the frame here: the general path's
            if channel.reading_paused or not channel.is_active:
                return pos  # the peer is behind (or gone): the channel resumes from here
        return pos
