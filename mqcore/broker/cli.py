"""``mqbroker``: start a broker (with an embedded name server unless ``-n`` is given).

    mqbroker                       # name server 127.0.0.1:9876, broker 127.0.0.1:10911, store ~/store
    mqbroker -c broker.conf        # RocketMQ key names (brokerName, listenPort, storePathRootDir, ...)
    mqbroker -n 10.0.0.5:9876      # register with an external name server instead
    mqbroker -p                    # check the configuration, print it as a broker.conf, exit
    mqbroker --log-dir /var/log/mq # broker.log, store.log, remoting.log there (default ~/logs/rocketmqlogs)

SIGINT/SIGTERM shut down cleanly: flush, persist config, remove the abort file.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import gc
import ipaddress
import logging
import os
import signal
import sys

from mqcore.broker.broker import Broker
from mqcore.broker.conf import IGNORED_KEYS, LoadedConf, build_configs, effective_config_lines
from mqcore.config import read_properties
from mqcore.errors import MQError
from mqcore.logs import configure_logging, log_level
from mqcore.netaddr import tcp_port
from mqcore.progress import ProgressReporter
from mqcore.remoting import eventloop

log = logging.getLogger("mqbroker")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mqbroker", description="Run a RocketMQ-compatible mqcore broker.")
    p.add_argument("-c", "--config", help="broker.conf (Java properties with RocketMQ key names)")
    p.add_argument("-n", "--namesrv", help="external name server address(es), 'host:port;host:port'")
    p.add_argument("-p", "--print-config", action="store_true",
                   help="validate the configuration as a start would, print it as a broker.conf and exit")
    p.add_argument("--store", help="store directory (storePathRootDir)")
    p.add_argument("--listen-port", type=tcp_port, help="broker port (listenPort); 0 picks a free one")
    p.add_argument("--namesrv-port", type=tcp_port, help="embedded name server port; 0 picks a free one")
    p.add_argument("--broker-name", help="brokerName")
    p.add_argument("--log-level", default="INFO", type=log_level, help="DEBUG, INFO, WARNING or ERROR")
    p.add_argument("--log-dir", help="directory of broker.log, store.log, remoting.log (logDir; "
                                      "default ~/logs/rocketmqlogs)")
    p.add_argument("--metrics-port", type=tcp_port, help="Prometheus endpoint port (metricsPort); 0 = off")
    p.add_argument("--dashboard-port", type=tcp_port, help="web dashboard port (dashboardPort); 0 = off")
    return p.parse_args(argv)


def load_configs(args: argparse.Namespace) -> LoadedConf:
    props: dict[str, str] = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                props = read_properties(f.read())
        except OSError as e:
            raise MQError(f"cannot read {args.config}: {e.strerror}") from e
    overrides = {"namesrvAddr": args.namesrv, "storePathRootDir": args.store,
                 "listenPort": None if args.listen_port is None else str(args.listen_port),
                 "namesrvListenPort": None if args.namesrv_port is None else str(args.namesrv_port),
                 "brokerName": args.broker_name, "logDir": args.log_dir,
                 "metricsPort": None if args.metrics_port is None else str(args.metrics_port),
                 "dashboardPort": None if args.dashboard_port is None else str(args.dashboard_port)}
    props.update({k: v for k, v in overrides.items() if v is not None})
    if props.get("aclEnable", "").strip().lower() == "true" and not props.get("plainAclFile"):
        props["plainAclFile"] = default_acl_file(args.config)
    loaded = build_configs(props)
    return loaded


def default_acl_file(config_path: str | None) -> str:
    """Where RocketMQ looks (``$ROCKETMQ_HOME/conf/plain_acl.yml``), else next to broker.conf,
    else the working directory."""
    home = os.environ.get("ROCKETMQ_HOME")
    if home:
        return os.path.join(home, "conf", "plain_acl.yml")
    return os.path.join(os.path.dirname(os.path.abspath(config_path)) if config_path else os.getcwd(),
                        "plain_acl.yml")


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve(broker: Broker, ready_line: bool = True) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    settle_gc()
    ns = ";".join(broker.namesrv_addrs) or "(none)"
    host = broker.cfg.listen_host
    bound = f"{host}:{broker.port}" if host not in ("", "0.0.0.0", "::") else f"{host or '0.0.0.0'}:{broker.port} (every address)"
    if not (broker.cfg.acl_enable or broker.cfg.authentication_enabled) and not _loopback(host):
        print(f"mqbroker: WARNING: listening on {host or '0.0.0.0'} with aclEnable=false: any host that reaches "
              "this machine can send, consume and administer topics (and use the dashboard, if on); bind to "
              "loopback (listenHost=127.0.0.1) or turn the ACL on (docs/ACCESS_CONTROL.md)", flush=True)
    print(f"mqbroker: broker {broker.cfg.broker_name} listening on {bound} (advertised as "
          f"{broker.addr}), name server {ns}"
          f"{' (embedded)' if broker.namesrv else ''}, store {broker.store_config.store_path}, "
          f"event loop {eventloop.loop_kind()}", flush=True)
    if ready_line:
        # addresses where something listens (brokerIP1 may be another host's view of us);
        # ``advertised`` is what the name server hands to clients
        print(f"READY broker={broker.listen_addr} namesrv={ns} advertised={broker.addr}", flush=True)
    await stop.wait()
    print("mqbroker: shutting down", flush=True)
    await broker.shutdown()


#: the youngest generation's allocation threshold once the broker runs (CPython's default is 700)
GC_YOUNG_THRESHOLD = 10_000


def settle_gc() -> None:
    """The broker process's collector policy, set once the broker has started.

    Everything alive at that point (modules, configuration, the store's recovered state) lives
    as long as the process: ``gc.freeze()`` moves it out of the collector's sight, so an
    occasional full collection no longer walks the whole heap. Requests allocate short-lived
    containers (item tuples, lists of answers) that reference counting frees; with CPython's
    default threshold the young generation was still collected every ~700 of them, a fixed
    cost the broker paid every few hundred requests. A library embedding ``Broker`` keeps its
    own policy: only the ``mqbroker`` process sets this.
    """
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (what RocketMQ's operators are told to
    do with ``ulimit -n``): the store holds one descriptor per mapped file and every
    connection one more. Returns (soft, hard) as they are now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:  # an unlimited hard limit some kernels refuse as a soft one
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, hard, e)
    return soft, hard


def descriptor_hint(e: OSError) -> str:
    """What to tell an operator whose start failed with ``e``."""
    if e.errno not in (errno.EMFILE, errno.ENFILE):
        return ""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if e.errno == errno.ENFILE:
        return " (the system-wide file table is full: raise fs.file-max)"
    return (f" (the store needs more file descriptors than RLIMIT_NOFILE allows: soft {soft}, hard {hard}; "
            "raise the hard limit: ulimit -Hn, LimitNOFILE= in a systemd unit, nofile in "
            "/etc/security/limits.conf)")


def _did_you_mean(key: str) -> str:
    import difflib

    from mqcore.broker.conf import BROKER_KEYS, IGNORED_KEYS, STORE_KEYS
    close = difflib.get_close_matches(key, [*BROKER_KEYS, *STORE_KEYS, *IGNORED_KEYS], n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        loaded = load_configs(args)
    except MQError as e:
        print(f"mqbroker: {e}", file=sys.stderr)
        return 2
    if loaded.unknown_keys:
        # RocketMQ's broker skips keys it does not know; a misspelt listenPort then leaves the
        # broker on the default port with nothing but a log line. Refused here, by name.
        for key in loaded.unknown_keys:
            print(f"mqbroker: unknown configuration key {key!r}{_did_you_mean(key)}", file=sys.stderr)
        print("mqbroker: not started: fix or remove the keys above (`mqbroker -p` lists every key it knows)",
              file=sys.stderr)
        return 2
    if args.print_config:
        try:
            sys.stdout.write("\n".join(effective_config_lines(loaded.broker, loaded.store, loaded.ignored)) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `mqbroker -p | head`: the reader had enough; no error at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    try:
        logs = configure_logging("broker", loaded.broker.log_dir, args.log_level)
    except MQError as e:
        print(f"mqbroker: {e}", file=sys.stderr)
        return 2
    # the console shows the log lines but not where they are kept (nor that they rotate there)
    print(f"mqbroker: logs go to {logs.directory} ({', '.join(sorted(logs.files))}; logDir or --log-dir "
          "moves them)", flush=True)
    for key, value in loaded.ignored.items():
        log.info("%s=%s accepted without effect (%s)", key, value, IGNORED_KEYS[key][1])
    soft, hard = raise_descriptor_limit()
    log.info("file descriptor limit (RLIMIT_NOFILE): %d", soft)
    progress = ProgressReporter("store recovery", logging.getLogger("mqcore.store.recovery"), stream=sys.stderr)
    broker = Broker(loaded.broker, dataclasses.replace(loaded.store), recovery_progress=progress,
                    config_file=os.path.abspath(args.config) if args.config else None)
    try:
        eventloop.run(serve(broker))
    except MQError as e:
        print(f"mqbroker: {e}{descriptor_hint(e) if isinstance(e, OSError) else ''}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"mqbroker: cannot start: {e}{descriptor_hint(e)}", file=sys.stderr)
        return 1
    finally:
        logs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
