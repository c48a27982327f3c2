"""``mqnamesrv``: a standalone name server, so several brokers form one cluster.

    mqnamesrv                 # 127.0.0.1:9876
    mqnamesrv --port 9877 --host 0.0.0.0
    mqnamesrv --log-dir /var/log/mq     # namesrv.log, remoting.log (default ~/logs/rocketmqlogs)
    mqnamesrv --acl conf/plain_acl.yml  # writes (broker registration, KV config) need an admin signature
    mqnamesrv --tls-mode permissive     # TLS and plaintext on the port (docs/tls.md)
    mqnamesrv --tls-config-file /etc/rocketmq/tls.properties   # tls.server.* keys, as RocketMQ reads them
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from mqcore.clock import system_clock_ms
from mqcore.config import read_properties
from mqcore.errors import ConfigError, MQError
from mqcore.logs import configure_logging, log_level
from mqcore.namesrv.config import NamesrvConfig
from mqcore.namesrv.server import NameServer
from mqcore.netaddr import tcp_port
from mqcore.remoting import eventloop
from mqcore.remoting.tls import ClientAuth, TlsMode, TlsServerConfig, load_or_make_certificate, server_context


async def serve(config: NamesrvConfig, tls: TlsServerConfig | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ns = NameServer(config, system_clock_ms)
    ns.server.set_tls(tls)
    port = await ns.start()
    print(f"mqnamesrv: listening on {config.listen_host}:{port}", flush=True)
    print(f"READY namesrv={config.listen_host}:{port}", flush=True)
    await stop.wait()
    await ns.shutdown()


def _tls(args: argparse.Namespace) -> TlsServerConfig | None:
    """The port's TLS from --tls-config-file and --tls-mode (which wins), None when disabled."""
    props: dict[str, str] = {}
    if args.tls_config_file:
        try:
            with open(args.tls_config_file, encoding="utf-8") as f:
                props = read_properties(f.read())
        except OSError as e:
            raise ConfigError(f"cannot read --tls-config-file {args.tls_config_file}: {e.strerror}") from e
    mode = TlsMode.parse(args.tls_mode or props.get("tls.server.mode", "disabled"))
    if mode is TlsMode.DISABLED:
        return None
    cert, key = load_or_make_certificate(props.get("tls.server.certPath"), props.get("tls.server.keyPath"),
                                         args.tls_dir, keys="tls.server.certPath and tls.server.keyPath")
    context = server_context(cert, key, client_auth=ClientAuth.parse(props.get("tls.server.need.client.auth", "none")),
                             trust_cert_path=props.get("tls.server.trustCertPath"))
    return TlsServerConfig(mode, context)


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
    # the broker's keys of the same names (docs/broker-conf.md) bound this port the same way
    p.add_argument("--server-channel-max-idle-time-seconds", type=int, default=120, metavar="S",
                   help="close a connection idle this long (serverChannelMaxIdleTimeSeconds; default 120)")
    p.add_argument("--server-frame-min-bytes-per-second", type=int, default=1024, metavar="N",
                   help="close a connection whose frame, under way 10 s, arrives slower (0: no minimum; default 1024)")
    p.add_argument("--server-max-connections", type=int, default=0, metavar="N",
                   help="open connections at most; one more is closed at accept (0, the default: as many "
                        "as RLIMIT_NOFILE allows less a reserve of an eighth, at least 64)")
    p.add_argument("--server-frame-budget-bytes", type=int, default=256 * 1024 * 1024, metavar="N",
                   help="bytes of partial large frames all connections hold together (default 256 MiB)")
    p.add_argument("--tls-mode", help="tls.server.mode: disabled (default), permissive or enforcing")
    p.add_argument("--tls-config-file", metavar="PROPERTIES",
                   help="tls.config.file: a properties file with tls.server.mode, tls.server.certPath, "
                        "tls.server.keyPath, tls.server.need.client.auth, tls.server.trustCertPath")
    p.add_argument("--tls-dir", default=os.path.join(os.path.expanduser("~"), "namesrv"),
                   help="where the self-signed certificate is kept when no tls.server.certPath is given "
                        "(default ~/namesrv)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        logs = configure_logging("namesrv", args.log_dir, args.log_level)
    except MQError as e:
        print(f"mqnamesrv: {e}", file=sys.stderr)
        return 2
    try:
        tls = _tls(args)
        eventloop.run(serve(NamesrvConfig(listen_host=args.host, listen_port=args.port,
                                        broker_channel_expired_ms=args.broker_expiry_ms, acl_file=args.acl,
                                        scan_not_active_broker_interval_ms=args.scan_interval_ms,
                                        server_channel_max_idle_time_seconds=args.server_channel_max_idle_time_seconds,
                                        server_frame_min_bytes_per_s=args.server_frame_min_bytes_per_second,
                                        server_max_connections=args.server_max_connections,
                                        server_frame_budget_bytes=args.server_frame_budget_bytes), tls))
    except OSError as e:
        print(f"mqnamesrv: cannot start: {e}", file=sys.stderr)
        return 1
    except MQError as e:  # a bad ACL file, a limit out of range
        print(f"mqnamesrv: {e}", file=sys.stderr)
        return 2
    finally:
        logs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
