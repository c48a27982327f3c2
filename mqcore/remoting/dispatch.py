"""Request dispatch: code -> processor, run concurrently, answered per Java's rules.

Shared by :class:`~mqcore.remoting.server.RemotingServer` (client requests) and
:class:`~mqcore.remoting.client.RemotingClient` (broker-initiated requests). Rules
(remoting-protocol.md §3):

* unknown code -> REQUEST_CODE_NOT_SUPPORTED, remark ``" request type <code> not supported"``;
* a processor raising :class:`~mqcore.errors.BrokerError` -> that code and remark;
* any other exception -> SYSTEM_ERROR with ``"<Type>: <message>"`` as remark (logged);
* a oneway request is never answered. (Java 4.9.8 still answers an unknown *oneway*
  code; we do not, since a oneway sender does not read answers anyway.)
* a plain callable runs inline, in the read callback that decoded the request, and
  its answer is written before the next frame is looked at: no task, no extra trip
  round the loop. If it returns an awaitable (it has to wait: long polling, an fsync)
  that awaitable runs in its own task, so a parked long poll never delays other
  requests on the same connection; answers go out as they complete. A coroutine
  function always gets a task. More than ``max_inflight`` concurrent tasks on one
  connection get SYSTEM_BUSY.

Processor signature: ``processor(channel, request) -> RemotingCommand | None`` or an
awaitable of that, either a coroutine function or a plain callable. A plain callable
runs inline on the event loop (keep it quick) unless registered with an ``executor``,
in which case it runs there and must not touch the channel (which belongs to the
loop). Returning ``None`` sends nothing: the processor answered itself
(``channel.send_response``) or will later.
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
from mqcore.remoting.ratelimit import RateLimitedLog

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
    inline: bool  # a plain callable without executor: called in the read callback


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ProcessorTable:
    """Maps request codes to processors and runs them for a channel.

    Registration is expected before serving starts; lookups happen on the loop.
    """

    def __init__(self, *, max_inflight: int = DEFAULT_MAX_INFLIGHT, warnings: RateLimitedLog | None = None) -> None:
        if max_inflight < 1:
            raise IllegalArgumentError(f"max_inflight must be >= 1, got {max_inflight}")
        self._processors: dict[int, _Registration] = {}
        self._default: _Registration | None = None
        self._max_inflight = max_inflight
        self._warn = warnings if warnings is not None else RateLimitedLog(log)

    def register(self, code: int, processor: Processor, *, executor: concurrent.futures.Executor | None = None) -> None:
        if not callable(processor):
            raise IllegalArgumentError(f"processor for code {code} is not callable: {processor!r}")
        self._processors[int(code)] = _registration(processor, executor)

    def register_default(self, processor: Processor, *, executor: concurrent.futures.Executor | None = None) -> None:
        """Processor for every code without its own registration."""
        if not callable(processor):
            raise IllegalArgumentError(f"default processor is not callable: {processor!r}")
        self._default = _registration(processor, executor)

    def lookup(self, code: int) -> Processor | None:
        reg = self._processors.get(code, self._default)
        return reg.processor if reg is not None else None

    # --- RequestSink --------------------------------------------------------------------
    def submit(self, channel: Channel, request: RemotingCommand) -> None:
        """Called by the channel for every inbound request, in its read callback."""
        if request.decode_error is not None:
            self._warn.warning(f"bad {channel.remote_host} {request.code}", "%s: bad request code %d: %s",
                               channel, request.code, request.decode_error)
            if not request.is_oneway:
                self._reply_nowait(channel, request, create_response(
                    request, ResponseCode.SYSTEM_ERROR, f"ProtocolError: {request.decode_error}"))
            return
        reg = self._processors.get(request.code, self._default)
        if reg is None:
            log.debug("%s: request code %d not supported", channel, request.code)
            if not request.is_oneway:
                self._reply_nowait(channel, request, create_response(
                    request, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"))
            return
        if not reg.inline:
            if self._busy(channel, request):
                return
            channel.track(asyncio.ensure_future(self.process(channel, request)))
            return
        try:
            result = reg.processor(channel, request)
        except Exception as e:
            result = self._error_response(channel, request, e)
        if result is None:
            return
        if isinstance(result, RemotingCommand):
            if not request.is_oneway:
                self._reply_nowait(channel, request, result)
            return
        if inspect.isawaitable(result):  # the processor has to wait: finish in a task
            channel.track(asyncio.ensure_future(self._finish(channel, request, result)))
            return
        self._reply_nowait(channel, request, self._invalid(channel, request, result))

    def _busy(self, channel: Channel, request: RemotingCommand) -> bool:
        if channel.request_task_count < self._max_inflight:
            return False
        self._warn.warning(f"busy {channel.remote_host}", "%s: %d requests in flight, rejecting code %d",
                           channel, self._max_inflight, request.code)
        if not request.is_oneway:
            self._reply_nowait(channel, request, create_response(
                request, ResponseCode.SYSTEM_BUSY,
                f"[OVERLOAD]system busy, more than {self._max_inflight} requests in flight on this connection"))
        return True

    async def _finish(self, channel: Channel, request: RemotingCommand, awaitable: Awaitable[ProcessorResult]) -> None:
        try:
            result = await awaitable
        except asyncio.CancelledError:
            raise
        except Exception as e:
            result = self._error_response(channel, request, e)
        if result is not None and not isinstance(result, RemotingCommand):
            result = self._invalid(channel, request, result)
        if result is not None and not request.is_oneway:
            await self._reply(channel, request, result)

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
        except Exception as e:
            return self._error_response(channel, request, e)
        if result is not None and not isinstance(result, RemotingCommand):
            return self._invalid(channel, request, result)
        return result

    def _error_response(self, channel: Channel, request: RemotingCommand, e: Exception) -> RemotingCommand:
        """The answer to a processor's exception, as Java gives it (and one log line)."""
        if isinstance(e, BrokerError):
            return create_response(request, e.code, e.remark)
        if isinstance(e, ProtocolError):  # malformed header or body: the request's fault, not ours
            self._warn.warning(f"bad {channel.remote_host} {request.code}", "%s: bad request code %d: %s",
                               channel, request.code, e)
            return create_response(request, ResponseCode.SYSTEM_ERROR, _describe(e))
        # report to the peer as Java does, and keep serving
        log.exception("%s: processor for code %d failed", channel, request.code)
        return create_response(request, ResponseCode.SYSTEM_ERROR, _describe(e))

    def _invalid(self, channel: Channel, request: RemotingCommand, result: object) -> RemotingCommand:
        log.error("%s: processor for code %d returned %r, not a RemotingCommand", channel, request.code, result)
        return create_response(request, ResponseCode.SYSTEM_ERROR, "processor returned an invalid response")

    def _reply_nowait(self, channel: Channel, request: RemotingCommand, response: RemotingCommand) -> None:
        response.opaque = request.opaque
        response.flag |= FLAG_RESPONSE
        try:
            channel.write_nowait(response)
        except RemotingError as e:
            log.debug("%s: answer to opaque %d dropped: %s", channel, request.opaque, e)
        except IllegalArgumentError as e:  # processor built an unencodable response
            log.error("%s: cannot encode answer to code %d: %s", channel, request.code, e)
            try:
                channel.write_nowait(create_response(request, ResponseCode.SYSTEM_ERROR, _describe(e)))
            except RemotingError as e2:
                log.debug("%s: fallback answer dropped: %s", channel, e2)

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


def _registration(processor: Processor, executor: concurrent.futures.Executor | None) -> _Registration:
    inline = executor is None and not inspect.iscoroutinefunction(processor)
    return _Registration(processor, executor, inline)


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
