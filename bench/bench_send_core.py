"""One plain SEND (or, with ``--mode pull``, one PULL of 32 stored messages) per receive buffer,
in process: the broker's C connection core next to the Python Channel running the same
pipeline (``SendPipeline.use_core = False`` / ``PullPipeline.use_core = False``), interleaved.

Each path gets its own broker (store in a temp dir, removed at the end) and a connection made
by the broker's own server with a stub transport (no socket: what is measured is the broker's
work per request without the wake-up). One 100 B SEND_MESSAGE_V2 frame is copied into the
buffer ``get_buffer`` hands out and ``buffer_updated`` is called, as the event loop does for a
client with one request in flight. Prints µs per request (best of the rounds) and the Python
function calls per request (cProfile, one extra round), with the load average.

    python bench/bench_send_core.py --n 20000 --rounds 5
    python bench/bench_send_core.py --mode pull --n 20000 --rounds 5
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.broker.broker import Broker  # noqa: E402
from mqcore.broker.config import BrokerConfig  # noqa: E402
from mqcore.broker.metadata import TopicConfig  # noqa: E402
from mqcore.broker.processors.pull_pipeline import PullPipeline  # noqa: E402
from mqcore.broker.processors.send_pipeline import SendPipeline  # noqa: E402
from mqcore.config import StoreConfig  # noqa: E402
from mqcore.remoting import RequestCode, create_request  # noqa: E402
from mqcore.remoting.command import encode_frame  # noqa: E402

PULL_EXT = {"consumerGroup": "CG", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "20000", "subVersion": "0",
            "subscription": "*", "expressionType": "TAG"}
EXT = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1700000000123", "h": "0",
       "i": "UNIQ_KEY\x01U0\x02TAGS\x01tg", "j": "0", "k": "false", "m": "false"}


class StubTransport:
    """What a Channel calls on its transport; counts the writes."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data) -> None:
        self.writes += 1

    def writelines(self, data) -> None:
        self.writes += 1

    def get_extra_info(self, key, default=None):
        return {"peername": ("127.0.0.1", 5555), "sockname": ("127.0.0.1", 10911)}.get(key, default)

    def set_write_buffer_limits(self, high, low) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


#: messages per PULL (as bench_floor.py's pull rungs)
PULL_BATCH = 32


async def _broker(root: str, core: bool, mode: str):
    # read when the broker builds its pipelines
    (SendPipeline if mode == "send" else PullPipeline).use_core = core  # type: ignore[attr-defined]
    broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="core" if core else "py"),
                    StoreConfig(store_path=root))
    await broker.start()
    SendPipeline.use_core = PullPipeline.use_core = True  # type: ignore[attr-defined]
    broker.topics.update(TopicConfig("T", 4, 4))
    if mode == "pull":
        from mqcore.broker.metadata import SubscriptionGroupConfig
        from mqcore.message import MessageExtBrokerInner

        broker.groups.table.put(SubscriptionGroupConfig("CG"))
        for _ in range(PULL_BATCH):
            broker.store.put_message(MessageExtBrokerInner(topic="T", body=b"x" * 100, queue_id=0,
                                                           properties={"TAGS": "tg"}, born_host=b"\x7f\0\0\1\0\0\x15\xb3",
                                                           store_host=b"\x7f\0\0\1\0\0\x2a\x9f",
                                                           born_timestamp=1_700_000_000_000))
    channel = broker.server._new_channel()
    transport = StubTransport()
    channel.connection_made(transport)
    return broker, channel, transport


def _feed(channel, frame: bytes, n: int) -> None:
    get_buffer, buffer_updated, size = channel.get_buffer, channel.buffer_updated, len(frame)
    for _ in range(n):
        get_buffer(65536)[:size] = frame
        buffer_updated(size)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="requests per path and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mode", choices=("send", "pull"), default="send")
    args = ap.parse_args()
    if args.mode == "send":
        frame = encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, EXT, b"x" * 100, opaque=1))
    else:  # what PullConsumer.pull sends: the same 32 messages read again by every request
        frame = encode_frame(create_request(RequestCode.PULL_MESSAGE, PULL_EXT, opaque=1))
    root = tempfile.mkdtemp(prefix="bench-send-core-")
    paths = {}
    try:
        for name, core in (("core (C)", True), ("Python Channel", False)):
            paths[name] = await _broker(os.path.join(root, "core" if core else "py"), core, args.mode)
        for name, (_, channel, transport) in paths.items():
            _feed(channel, frame, 1000)  # warm up; every request answered
            assert transport.writes == 1000, (name, transport.writes)
            print(f"{name}: {type(channel).__name__}")
        best = {name: float("inf") for name in paths}
        loads = [os.getloadavg()[0]]
        for _ in range(args.rounds):
            for name, (_, channel, _t) in paths.items():
                t0 = time.perf_counter()
                _feed(channel, frame, args.n)
                best[name] = min(best[name], (time.perf_counter() - t0) / args.n)
            loads.append(os.getloadavg()[0])
        calls = {}
        for name, (_, channel, _t) in paths.items():
            prof = cProfile.Profile()
            prof.enable()
            _feed(channel, frame, 1000)
            prof.disable()
            calls[name] = pstats.Stats(prof).total_calls / 1000  # type: ignore[attr-defined]
        print(f"\n{args.mode.upper()}, one request per receive buffer")
        print(f"\n| path (best of {args.rounds} x {args.n}, load {min(loads):.1f}-{max(loads):.1f}) "
              "| µs per request | Python calls per request |")
        print("|---|---:|---:|")
        for name in paths:
            print(f"| {name} ({type(paths[name][1]).__name__}) | {best[name] * 1e6:.2f} | {calls[name]:.0f} |")
    finally:
        for broker, _c, _t in paths.values():
            await broker.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
