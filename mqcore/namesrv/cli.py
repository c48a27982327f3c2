"""``mqnamesrv``: a standalone name server, so several brokers form one cluster.

    mqnamesrv                 # 127.0.0.1:9876
    mqnamesrv --port 9877 --host 0.0.0.0
    mqnamesrv --log-dir /var/log/mq     # namesrv.log, remoting.log (default ~/logs/rocketmqlogs)
    mqnamesrv --acl conf/plain_acl.yml  # writes (broker registration, KV config) need an admin signature
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from mqcore.clock import system_clock_ms
from mqcore.errors import MQError
from mqcore.logs import configure_logging, log_level
from mqcore.namesrv.config import NamesrvConfig
from mqcore.namesrv.server import NameServer
from mqcore.netaddr import tcp_port
from mqcore.remoting import eventloop


async def serve(config: NamesrvConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ns = NameServer(config, system_clock_ms)
    port = await ns.start()
    print(f"mqnamesrv: listening on {config.listen_host}:{port}", flush=True)
    print(f"READY namesrv={config.listen_host}:{port}", flush=True)
    await stop.wait()
    await ns.shutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mqnamesrv", description="Run a RocketMQ-compatible name server.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=tcp_port, default=9876, help="0 picks a free port")
    p.add_argument("--broker-expiry-ms", type=int, default=120_000,
                   help="drop brokers silent for this long (RocketMQ: 120 s)")
    p.add_argument("--scan-interval-ms", type=int, default=10_000,
                   help="how often silent brokers are looked for (RocketMQ: 10 s)")
    p.add_argument("--log-level", default="INFO", type=log_level, help="DEBUG, INFO, WARNING or ERROR")
    p.add_argument("--log-dir", help="directory of namesrv.log and remoting.log (default ~/logs/rocketmqlogs)")
    p.add_argument("--acl", metavar="PLAIN_ACL_YML",
                   help="plain ACL file: REGISTER_BROKER, UNREGISTER_BROKER, PUT/DELETE_KV_CONFIG and "
                        "DELETE_TOPIC_IN_NAMESRV need an admin account's signature (reads stay open)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        logs = configure_logging("namesrv", args.log_dir, args.log_level)
    except MQError as e:
        print(f"mqnamesrv: {e}", file=sys.stderr)
        return 2
    try:
        eventloop.run(serve(NamesrvConfig(listen_host=args.host, listen_port=args.port,
                                        broker_channel_expired_ms=args.broker_expiry_ms, acl_file=args.acl,
                                        scan_not_active_broker_interval_ms=args.scan_interval_ms)))
    except OSError as e:
        print(f"mqnamesrv: cannot start: {e}", file=sys.stderr)
        return 1
    except MQError as e:  # a bad ACL file
        print(f"mqnamesrv: {e}", file=sys.stderr)
        return 2
    finally:
        logs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
