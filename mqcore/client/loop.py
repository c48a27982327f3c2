"""The client's private event loop, running in a daemon thread.

Every network operation of a client runs on this loop; the blocking API
(``Producer.send``, ``LitePullConsumer.poll``...) hands a coroutine to it and waits,
so the client works the same in scripts, threads and web apps, and never touches the
caller's own event loop (if any).

Thread model: ``run``/``submit``/``call_soon`` may be called from any thread.
``run`` refuses to block the loop thread itself (that would deadlock): code running
on the loop (callbacks, processors) must use the coroutines directly.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import _base as _futures
from typing import TYPE_CHECKING, Any, TypeVar

from mqcore.errors import ClosedError, IllegalStateError, RemotingTimeoutError
from mqcore.remoting.client import new_event_loop

if TYPE_CHECKING:  # annotations only
    from mqcore.kernel_api import PendingBatchApi

log = logging.getLogger(__name__)

__all__ = ["LoopThread", "BatchFuture", "BurstSubmitter", "CallbackThread", "SiblingFuture", "settle_batch", "settled_outcome",
           "settle_siblings"]

T = TypeVar("T")


class LoopThread:
    """An asyncio loop in its own thread, with blocking and future-based entry points."""

    def __init__(self, name: str = "mqcore-client") -> None:
        self.name = name
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()
        self._closed = False

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._started.set)
        try:
            self._loop.run_forever()
        finally:
            self._cancel_leftovers()

    def _cancel_leftovers(self) -> None:
        pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()
            self._started.wait()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def closed(self) -> bool:
        return self._closed

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        if self._closed:
            coro.close()
            raise ClosedError(f"{self.name} is shut down")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and block until it finishes.

        ``timeout_s`` is only a guard against a stuck loop: the coroutine enforces
        its own deadlines and raises the precise error.
        """
        if self.in_loop_thread():
            coro.close()
            raise IllegalStateError(
                "a blocking client method was called on the client's own event-loop thread "
                "(e.g. from a send callback); use the async variant or another thread")
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RemotingTimeoutError(f"{self.name}: no result within {timeout_s} s") from None

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._closed:
            raise ClosedError(f"{self.name} is shut down")
        self._loop.call_soon_threadsafe(fn, *args)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the loop (pending tasks are cancelled) and join the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._thread.is_alive():
            self._loop.close()
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        if not self.in_loop_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("%s: loop thread did not stop within %.1f s", self.name, timeout_s)


class CallbackThread:
    """Runs callbacks one after the other on one daemon thread, in the order they were
    submitted (a producer's send callbacks, in completion order).

    ``submit`` is one put on a C-level queue, cheap enough to call once per message from
    the event loop: a ``ThreadPoolExecutor.submit`` builds a ``Future`` with its own lock
    and condition per call, which was about half of the loop thread's time with 1000
    auto-batched ``send_async`` calls in flight (py-spy). A callback that raises is logged;
    the thread goes on with the next one.

    Thread model: ``submit``/``shutdown`` from any thread.
    """

    _STOP = object()

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopped = False
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._stopped:
            log.warning("%s is shut down: callback %r dropped", self.name, fn)
            return
        self._queue.put((fn, args))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception:  # user code: report, keep the thread alive for the next callbacks
                log.exception("callback %r raised", fn)

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Run what is queued, then stop the thread and wait for it (not when called
        from a callback itself). Idempotent."""
        if not self._stopped:
            self._stopped = True
            self._queue.put(self._STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)


_DONE_STATES = frozenset((_futures.CANCELLED, _futures.CANCELLED_AND_NOTIFIED, _futures.FINISHED))
_CANCELLED_STATES = frozenset((_futures.CANCELLED, _futures.CANCELLED_AND_NOTIFIED))


class SiblingFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """A ``concurrent.futures.Future`` that shares its condition with its siblings.

    Why: a plain ``Future()`` builds a ``threading.Condition`` and its ``RLock`` per
    instance, which was the largest single cost of ``Producer.send_async`` with 1000
    sends in flight (py-spy). Futures of one producer share one condition instead; the
    base class's ``set_result``/``cancel``/``add_done_callback`` and
    ``concurrent.futures.wait``/``as_completed`` work unchanged (the condition's lock
    is re-entrant, so acquiring it once per future in ``wait`` is fine). Because a
    ``notify_all`` for one sibling wakes the waiters of all, ``result`` and
    ``exception`` wait in a loop until *their* future is done or the timeout passes
    (the base class waits once and would report a spurious wake-up as a timeout).

    ``done_callback`` is registered before the future is handed to anyone (what
    ``add_done_callback`` would do, without taking the lock).

    The base class's ``_waiters`` and ``_done_callbacks`` lists are made on first use:
    most futures never get a waiter (only ``concurrent.futures.wait``/``as_completed``
    add one) and an auto-batched send's has no callback. Each list is one more object
    the cyclic garbage collector tracks for as long as the caller keeps the future, and
    with thousands of futures alive the collections cost a producer pipelining
    ``send_async`` more than its own work per message (bench/bench_send_async.py).
    """

    __slots__ = ("_waiter_list", "_callback_list", "traced")

    def __init__(self, condition: threading.Condition, done_callback: Callable[[Any], Any] | None = None) -> None:
        # the base __init__ would build a condition of its own: set its fields here
        self._condition = condition
        self._state = _futures.PENDING
        self._result = None
        self._exception = None
        self._waiter_list: list[Any] | None = None
        self._callback_list: list[Callable[[Any], Any]] | None = None if done_callback is None else [done_callback]
        #: a traced send's message and the epoch ms it started (its completion hook writes
        #: the Pub record); None, untraced
        self.traced: tuple[Any, int] | None = None

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]  # a property over the base class's plain attribute (see the class docstring)
        waiters = self._waiter_list
        if waiters is None:
            waiters = self._waiter_list = []
        return waiters

    @property
    def _done_callbacks(self) -> list[Callable[[Any], Any]]:
        callbacks = self._callback_list
        if callbacks is None:
            callbacks = self._callback_list = []
        return callbacks

    def result(self, timeout: float | None = None) -> Any:
        return _result(self, timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return _exception(self, timeout)

    def settled_outcome(self) -> tuple[Any, BaseException | None]:
        """``(result, error)`` of a future that is already done, without taking the lock:
        a done future never changes again. A cancelled one gives ``CancelledError``."""
        return settled_outcome(self)


def _run_done_callbacks(futures: Iterable[Any]) -> None:
    """The done callbacks of settled futures, future by future and in order, outside their lock."""
    for future in futures:
        for callback in future._callback_list or ():
            try:
                callback(future)
            except Exception:  # as the base class: a callback's failure is logged, not raised
                log.exception("exception calling callback for %r", future)


def settle_siblings(futures: list[SiblingFuture], results: list[Any]) -> None:
    """Complete sibling futures (one shared condition) with their results in one lock
    round and one wake-up, then run their done callbacks outside the lock, in order.
    A future already done (cancelled by its caller) is left as it is.

    Why: ``set_result`` per future takes the lock, notifies every waiter of every
    sibling and runs its callbacks, once per message of an auto-batched send."""
    if not futures:
        return
    condition = futures[0]._condition
    settled = []
    with condition:
        for future, result in zip(futures, results, strict=True):
            if future._condition is not condition:
                raise ValueError("settle_siblings needs futures that share one condition")
            if future._state != _futures.PENDING and future._state != _futures.RUNNING:
                continue
            future._result = result
            future._state = _futures.FINISHED
            if future._waiter_list:
                for waiter in future._waiter_list:
                    waiter.add_result(future)
            if future._callback_list:
                settled.append(future)
        condition.notify_all()
    _run_done_callbacks(settled)


#: runs on the loop with the caller's future; returns an awaitable whose outcome is
#: copied into that future, or None when it completes the future itself
Starter = Callable[[concurrent.futures.Future[Any]], Any]


class BurstSubmitter:
    """Hands work from caller threads to the loop in bursts.

    ``submit(starter)`` queues ``starter`` and returns a ``concurrent.futures.Future``;
    the loop runs queued starters in order with that future: a starter either
    returns an awaitable (a coroutine or ``asyncio.Future``) whose outcome is copied
    into the future, or returns None and completes the future itself (what the
    auto-batching accumulator does, with no per-message loop callback).
    Only the first ``submit`` of a burst wakes the loop, so a producer
    pipelining thousands of sends costs one cross-thread wakeup per burst instead of
    one (plus a task) per message.

    Thread model: ``submit`` from any thread; starters run on the loop thread.
    """

    def __init__(self, loop_thread: LoopThread) -> None:
        self._loop_thread = loop_thread
        self._items: list[tuple[Starter, concurrent.futures.Future[Any]]] = []
        self._lock = threading.Lock()
        self._scheduled = False
        #: shared by every future of this submitter's family (``new_future``)
        self.condition = threading.Condition()

    def new_future(self, done_callback: Callable[[Any], Any] | None = None) -> SiblingFuture:
        """A future of this submitter's family (shared condition) that runs ``done_callback``
        first when it completes."""
        return SiblingFuture(self.condition, done_callback)

    def submit(self, starter: Starter, done_callback: Callable[[Any], Any] | None = None, *,
               future: SiblingFuture | None = None) -> concurrent.futures.Future[Any]:
        """Queue ``starter``; the returned future (``future`` if given, from ``new_future``)
        runs ``done_callback`` first when it completes."""
        if future is None:
            future = SiblingFuture(self.condition, done_callback)
        with self._lock:
            self._items.append((starter, future))
            if self._scheduled:
                return future
            self._scheduled = True
        try:
            self._loop_thread.call_soon(self._drain)
        except ClosedError:
            with self._lock:
                self._scheduled = False
            raise
        return future

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        for starter, future in items:
            try:
                started = starter(future)
                if started is None:
                    continue
                awaitable = asyncio.ensure_future(started)
            except Exception as e:  # the starter failed synchronously: report to its caller
                _set_exception(future, e)
                continue
            awaitable.add_done_callback(lambda f, cf=future: copy_outcome(f, cf))


def _set_exception(future: concurrent.futures.Future[Any], error: BaseException) -> None:
    if not future.done():
        try:
            future.set_exception(error)
        except concurrent.futures.InvalidStateError:
            log.debug("future %r was cancelled before its outcome arrived", future)


def copy_outcome(source: asyncio.Future[Any], target: concurrent.futures.Future[Any]) -> None:
    """Copy the outcome of a loop future (or task) into a caller's future, unless that one is done."""
    if target.done():
        return
    try:
        if source.cancelled():
            target.cancel()
            return
        error = source.exception()
        if error is not None:
            target.set_exception(error)
        else:
            target.set_result(source.result())
    except concurrent.futures.InvalidStateError:
        log.debug("future %r was cancelled before its outcome arrived", target)


_FINISHED = _futures.FINISHED


class BatchFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """The future of one auto-batched ``send_async``: a ``concurrent.futures.Future``
    whose state lives in its batch (a ``PendingBatch`` of the wire kernels, shared by
    every message of the batch).

    Why: a future of its own per message (``SiblingFuture``) cost a lock round, a notify
    and a ``SendResult`` per message when the batch was answered, and thousands of them,
    alive in the caller's list, were objects the cyclic garbage collector walked again and
    again. Here the batcher kernel makes the object (no ``__init__``: two attributes,
    ``_cell`` and ``_index``), settling the batch is one write under its condition for all
    its messages, and the message's own ``SendResult`` is made when it is first asked for
    (``PendingBatch.settled_result``: kept by the batch, so ``result()`` of a settled future
    is one kernel call and writes nothing on the future).

    Everything ``concurrent.futures.Future`` offers works: ``result(timeout)``,
    ``exception``, ``done``, ``cancel``, ``add_done_callback``, ``concurrent.futures.wait``
    / ``as_completed`` and ``asyncio.wrap_future`` (they read ``_state``, ``_result``,
    ``_waiters``... which are properties here, answered from the batch unless this future
    was settled on its own, e.g. cancelled). A future that gets a waiter or a done
    callback joins its batch's ``watchers``, which the batch settles one by one.

    The compiled batcher has the collector ignore the object (it refers only to its
    batch, which never refers back); it is tracked again as soon as it holds a callback,
    a waiter or an exception of its own, anything that could close a cycle. Attributes a
    user sets on it are not watched: a cycle through them would not be collected.
    """

    # the defaults of what a future settled on its own holds (the kernel sets none of these)
    _own_state: str | None = None
    _own_result: Any = None
    _own_exception: BaseException | None = None
    _waiter_list: list[Any] | None = None
    _callback_list: list[Callable[[Any], Any]] | None = None
    # set by the kernel on each future it makes (declared only: no class attribute)
    _cell: PendingBatchApi
    _index: int

    def __init__(self) -> None:  # pragma: no cover - made by AutoBatcher.add only
        raise TypeError("BatchFuture objects are made by the auto-batching kernel")

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]  # a property over the base class's plain attribute (see the class docstring)
        return self._cell.condition

    @property
    def _state(self) -> str:
        return self._own_state or self._cell.state

    @_state.setter
    def _state(self, value: str) -> None:
        self._own_state = value

    @property
    def _result(self) -> Any:
        if self._own_state is not None:
            return self._own_result
        return self._cell.settled_result(self._index)

    @_result.setter
    def _result(self, value: Any) -> None:
        if value is not None:  # set_result() by hand: any object, it could close a cycle
            self._cell.track(self)
        self._own_result = value

    @property
    def _exception(self) -> BaseException | None:
        return self._own_exception if self._own_state is not None else self._cell.error

    @_exception.setter
    def _exception(self, value: BaseException | None) -> None:
        if value is not None:
            self._cell.track(self)
        self._own_exception = value

    def _watched(self) -> None:
        """About to hold its first waiter list or callback list (the condition held)."""
        if self._waiter_list is not None or self._callback_list is not None:
            return  # already watched
        cell = self._cell
        cell.track(self)
        if self._own_state is None and cell.state == _futures.PENDING:
            if cell.watchers is None:
                cell.watchers = []
            cell.watchers.append(self)

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]  # a property over the base class's plain attribute (see the class docstring)
        waiters = self._waiter_list
        if waiters is None:
            self._watched()
            waiters = self._waiter_list = []
        return waiters

    @property
    def _done_callbacks(self) -> list[Callable[[Any], Any]]:
        callbacks = self._callback_list
        if callbacks is None:
            self._watched()
            callbacks = self._callback_list = []
        return callbacks

    def result(self, timeout: float | None = None) -> Any:
        if self._own_state is None:
            result = self._cell.settled_result(self._index)  # settled: no lock needed
            if result is not None:
                return result
        return _result(self, timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return _exception(self, timeout)

    def settled_outcome(self) -> tuple[Any, BaseException | None]:
        """``(result, error)`` of a future that is already done (see ``SiblingFuture``)."""
        return settled_outcome(self)


def _result(future: concurrent.futures.Future[Any], timeout: float | None) -> Any:
    """``Future.result`` for futures that share their condition with siblings."""
    with future._condition:
        _wait_done_locked(future, timeout)
        if future._state in _CANCELLED_STATES:
            raise concurrent.futures.CancelledError()
        error = future._exception
        if error is not None:
            try:
                raise error
            finally:
                error = None  # no reference cycle through the traceback (as the base class)
        return future._result


def _exception(future: concurrent.futures.Future[Any], timeout: float | None) -> BaseException | None:
    """``Future.exception`` for futures that share their condition with siblings."""
    with future._condition:
        _wait_done_locked(future, timeout)
        if future._state in _CANCELLED_STATES:
            raise concurrent.futures.CancelledError()
        return future._exception


def settled_outcome(future: concurrent.futures.Future[Any]) -> tuple[Any, BaseException | None]:
    """``(result, error)`` of a future that is already done, without taking the lock."""
    state = future._state
    if state in _CANCELLED_STATES:
        return None, concurrent.futures.CancelledError()
    if state != _futures.FINISHED:
        raise concurrent.futures.InvalidStateError(f"the future is {state}, not done")
    return future._result, future._exception


def _wait_done_locked(future: concurrent.futures.Future[Any], timeout: float | None) -> None:
    """Wait on a condition shared with siblings until *this* future is done (a notify for a
    sibling is a spurious wake-up here); the condition held."""
    if future._state in _DONE_STATES:
        return
    deadline = None if timeout is None else time.monotonic() + timeout
    while future._state not in _DONE_STATES:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise concurrent.futures.TimeoutError()
        future._condition.wait(remaining)


def settle_batch(batch: Any, result: Any = None, error: BaseException | None = None, *,
                 cancelled: bool = False) -> None:
    """Settle every future of ``batch`` (a ``PendingBatch``) at once: its outcome is
    written under its condition with one ``notify_all``; only the futures that asked to
    be told (``watchers``: a waiter, a done callback) are visited, their callbacks run
    outside the lock; the caller's own futures (``externals``) get their own result.
    A future settled on its own before (cancelled by its caller) is left as it is."""
    condition = batch.condition
    with condition:
        if batch.state != _futures.PENDING:
            return
        batch.result = result
        batch.error = error
        batch.state = _futures.CANCELLED_AND_NOTIFIED if cancelled else _FINISHED
        watchers = batch.watchers
        batch.watchers = None
        told = [f for f in watchers if f._own_state is None] if watchers else []
        for future in told:
            for waiter in future._waiter_list or ():
                if cancelled:
                    waiter.add_cancelled(future)
                elif error is not None:
                    waiter.add_exception(future)
                else:
                    waiter.add_result(future)
        condition.notify_all()
    _run_done_callbacks(told)
    externals = batch.externals
    if not externals:
        return
    running = asyncio.events._get_running_loop()
    elsewhere: dict[asyncio.AbstractEventLoop, list[tuple[Any, Any]]] = {}
    for index, future in externals:
        outcome: Any = _CANCEL if cancelled else error if error is not None else batch.result_for(index)
        get_loop = getattr(future, "get_loop", None)  # an asyncio future: settled on its own loop
        loop = get_loop() if get_loop is not None else None
        if loop is None or loop is running:
            _settle_one(future, outcome)
        else:
            elsewhere.setdefault(loop, []).append((future, outcome))
    for loop, items in elsewhere.items():  # one wake-up per loop for the whole batch (asend)
        try:
            loop.call_soon_threadsafe(_settle_many, items)
        except RuntimeError:  # that loop is closed: nobody waits there any more
            log.debug("a batched asend's loop closed before its result arrived")


_CANCEL = object()


def _settle_one(future: Any, outcome: Any) -> None:
    if future.done():
        return
    try:
        if outcome is _CANCEL:
            future.cancel()
        elif isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except (asyncio.InvalidStateError, concurrent.futures.InvalidStateError):
        log.debug("a batched send's future was cancelled before its result arrived")


def _settle_many(items: list[tuple[Any, Any]]) -> None:
    for future, outcome in items:
        _settle_one(future, outcome)
