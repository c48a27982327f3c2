"""``mqbroker``: start a broker (with an embedded name server unless ``-n`` is given).

    mqbroker                       # name server 127.0.0.1:9876, broker 127.0.0.1:10911, store ~/store
    mqbroker -c broker.conf        # RocketMQ key names (brokerName, listenPort, storePathRootDir, ...)
    mqbroker -n 10.0.0.5:9876      # register with an external name server instead
    mqbroker -p                    # print the effective configuration and exit

SIGINT/SIGTERM shut down cleanly: flush, persist config, remove the abort file.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
import sys

from mqcore.broker.broker import Broker
from mqcore.broker.conf import build_configs, effective_config_lines, read_properties
from mqcore.errors import MQError
from mqcore.netaddr import tcp_port
from mqcore.remoting import eventloop

log = logging.getLogger("mqbroker")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="mqbroker", description="Run a RocketMQ-compatible mqcore broker.")
    p.add_argument("-c", "--config", help="broker.conf (Java properties with RocketMQ key names)")
    p.add_argument("-n", "--namesrv", help="external name server address(es), 'host:port;host:port'")
    p.add_argument("-p", "--print-config", action="store_true", help="print the effective configuration and exit")
    p.add_argument("--store", help="store directory (storePathRootDir)")
    p.add_argument("--listen-port", type=tcp_port, help="broker port (listenPort); 0 picks a free one")
    p.add_argument("--namesrv-port", type=tcp_port, help="embedded name server port; 0 picks a free one")
    p.add_argument("--broker-name", help="brokerName")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING")
    return p.parse_args(argv)


def load_configs(args):
    props = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                props = read_properties(f.read())
        except OSError as e:
            raise MQError(f"cannot read {args.config}: {e.strerror}") from e
    overrides = {"namesrvAddr": args.namesrv, "storePathRootDir": args.store,
                 "listenPort": None if args.listen_port is None else str(args.listen_port),
                 "namesrvListenPort": None if args.namesrv_port is None else str(args.namesrv_port),
                 "brokerName": args.broker_name}
    props.update({k: v for k, v in overrides.items() if v is not None})
    loaded = build_configs(props)
    return loaded


async def serve(broker: Broker, ready_line: bool = True) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    ns = ";".join(broker.namesrv_addrs) or "(none)"
    print(f"mqbroker: broker {broker.cfg.broker_name} listening on {broker.addr}, name server {ns}"
          f"{' (embedded)' if broker.namesrv else ''}, store {broker.store_config.store_path}, "
          f"event loop {eventloop.loop_kind()}", flush=True)
    if ready_line:
        print(f"READY broker={broker.addr} namesrv={ns}", flush=True)
    await stop.wait()
    print("mqbroker: shutting down", flush=True)
    await broker.shutdown()


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        loaded = load_configs(args)
    except MQError as e:
        print(f"mqbroker: {e}", file=sys.stderr)
        return 2
    for key in loaded.unknown_keys:
        log.warning("unknown configuration key %r ignored", key)
    if args.print_config:
        for line in effective_config_lines(loaded.broker, loaded.store):
            print(line)
        return 0
    broker = Broker(loaded.broker, dataclasses.replace(loaded.store))
    try:
        eventloop.run(serve(broker))
    except MQError as e:
        print(f"mqbroker: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"mqbroker: cannot start: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
