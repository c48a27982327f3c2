"""Request dispatch: code -> processor, run concurrently, answered per Java's rules.

Shared by :class:`~mqcore.remoting.server.RemotingServer` (client requests) and
:class:`~mqcore.remoting.client.RemotingClient` (broker-initiated requests). Rules
(remoting-protocol.md §3):

* unknown code -> REQUEST_CODE_NOT_SUPPORTED, remark ``" request type <code> not supported"``;
* a processor raising :class:`~mqcore.errors.BrokerError` -> that code and remark;
* any other exception -> SYSTEM_ERROR with ``"<Type>: <message>"`` as remark (logged);
* a oneway request is never answered. (Java 4.9.8 still answers an unknown *oneway*
  code; we do not, since a oneway sender does not read answers anyway.)
* each request runs in its own task, so a parked long poll never delays other
  requests on the same connection; answers go out as they complete. More than
  ``max_inflight`` concurrent requests on one connection get SYSTEM_BUSY.

Processor signature: ``processor(channel, request) -> RemotingCommand | None``, either
a coroutine function or a plain callable. A plain callable runs inline on the event
loop (keep it quick) unless registered with an ``executor``, in which case it runs
there and must not touch the channel (which belongs to the loop). Returning ``None``
sends nothing: the processor answered itself (``channel.send_response``) or will later.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Optional, Union

from mqcore.errors import BrokerError, IllegalArgumentError, ProtocolError, RemotingError
from mqcore.remoting.channel import Channel
from mqcore.remoting.codes import FLAG_RESPONSE, ResponseCode
from mqcore.remoting.command import RemotingCommand, create_response

log = logging.getLogger(__name__)

__all__ = ["Processor", "ProcessorRegistry", "ProcessorTable", "DEFAULT_MAX_INFLIGHT"]

ProcessorResult = Optional[RemotingCommand]
Processor = Callable[[Channel, RemotingCommand], Union[ProcessorResult, Awaitable[ProcessorResult]]]

#: in-flight requests per connection before SYSTEM_BUSY; a push consumer long-polls
#: every assigned queue on one connection, so this must stay well above queue counts.
DEFAULT_MAX_INFLIGHT = 4096


@dataclass(frozen=True, slots=True)
class _Registration:
    processor: Processor
    executor: concurrent.futures.Executor | None


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ProcessorTable:
    """Maps request codes to processors and runs them for a channel.

    Registration is expected before serving starts; lookups happen on the loop.
    """

    def __init__(self, *, max_inflight: int = DEFAULT_MAX_INFLIGHT) -> None:
        if max_inflight < 1:
            raise IllegalArgumentError(f"max_inflight must be >= 1, got {max_inflight}")
        self._processors: dict[int, _Registration] = {}
        self._default: _Registration | None = None
        self._max_inflight = max_inflight

    def register(self, code: int, processor: Processor, *, executor: concurrent.futures.Executor | None = None) -> None:
        if not callable(processor):
            raise IllegalArgumentError(f"processor for code {code} is not callable: {processor!r}")
        self._processors[int(code)] = _Registration(processor, executor)

    def register_default(self, processor: Processor, *, executor: concurrent.futures.Executor | None = None) -> None:
        """Processor for every code without its own registration."""
        if not callable(processor):
            raise IllegalArgumentError(f"default processor is not callable: {processor!r}")
        self._default = _Registration(processor, executor)

    def lookup(self, code: int) -> Processor | None:
        reg = self._processors.get(code, self._default)
        return reg.processor if reg is not None else None

    # --- RequestSink --------------------------------------------------------------------
    def submit(self, channel: Channel, request: RemotingCommand) -> None:
        """Called by the channel's read loop for every inbound request."""
        if channel.request_task_count >= self._max_inflight:
            log.warning("%s: %d requests in flight, rejecting code %d", channel, self._max_inflight, request.code)
            if not request.is_oneway:
                busy = create_response(
                    request,
                    ResponseCode.SYSTEM_BUSY,
                    f"[OVERLOAD]system busy, more than {self._max_inflight} requests in flight on this connection",
                )
                channel.track(asyncio.ensure_future(self._reply(channel, request, busy)))
            return
        channel.track(asyncio.ensure_future(self.process(channel, request)))

    async def process(self, channel: Channel, request: RemotingCommand) -> None:
        """Run the processor for ``request`` and send its answer (unless oneway)."""
        reg = self._processors.get(request.code, self._default)
        if reg is None:
            log.debug("%s: request code %d not supported", channel, request.code)
            response: RemotingCommand | None = create_response(
                request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
            )
        else:
            response = await self._run(reg, channel, request)
        if response is None or request.is_oneway:
            return
        await self._reply(channel, request, response)

    async def _run(self, reg: _Registration, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        try:
            if reg.executor is not None:
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(reg.executor, reg.processor, channel, request)
            else:
                result = reg.processor(channel, request)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            raise
        except BrokerError as e:
            return create_response(request, e.code, e.remark)
        except ProtocolError as e:  # malformed header: the request's fault, not ours
            log.warning("%s: bad request code %d: %s", channel, request.code, e)
            return create_response(request, ResponseCode.SYSTEM_ERROR, _describe(e))
        except Exception as e:  # report to the peer as Java does, and keep serving
            log.exception("%s: processor for code %d failed", channel, request.code)
            return create_response(request, ResponseCode.SYSTEM_ERROR, _describe(e))
        if result is not None and not isinstance(result, RemotingCommand):
            log.error("%s: processor for code %d returned %r, not a RemotingCommand", channel, request.code, result)
            return create_response(request, ResponseCode.SYSTEM_ERROR, "processor returned an invalid response")
        return result

    async def _reply(self, channel: Channel, request: RemotingCommand, response: RemotingCommand) -> None:
        response.opaque = request.opaque
        response.flag |= FLAG_RESPONSE
        try:
            await channel.write(response)
        except RemotingError as e:
            log.debug("%s: answer to opaque %d dropped: %s", channel, request.opaque, e)
        except IllegalArgumentError as e:  # processor built an unencodable response
            log.error("%s: cannot encode answer to code %d: %s", channel, request.code, e)
            fallback = create_response(request, ResponseCode.SYSTEM_ERROR, _describe(e))
            try:
                await channel.write(fallback)
            except RemotingError as e2:
                log.debug("%s: fallback answer dropped: %s", channel, e2)


class ProcessorRegistry:
    """Processor registration shared by the server (client requests) and the client
    (requests a broker sends it); ``self._table`` is the owner's ProcessorTable."""

    _table: ProcessorTable

    def register_processor(
        self, code: int, processor: Processor, *, executor: concurrent.futures.Executor | None = None
    ) -> None:
        """``processor(channel, request)`` answers ``code``; see the module docstring."""
        self._table.register(code, processor, executor=executor)

    def register_default_processor(
        self, processor: Processor, *, executor: concurrent.futures.Executor | None = None
    ) -> None:
        self._table.register_default(processor, executor=executor)
