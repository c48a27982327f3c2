"""The ``apache.rocketmq.v2`` protocol modules, taken from the official Python 5.x client.

``rocketmq-python-client`` ships the generated modules (``rocketmq/grpc_protocol/
definition_pb2.py``, ``service_pb2.py``, ``service_pb2_grpc.py``). We do not ``import
rocketmq.grpc_protocol``: that runs the client's ``rocketmq/__init__.py``, which loads the
whole client (OpenTelemetry) and reconfigures logging with a file handler under
``~/logs`` — side effects a broker must not have — and ``rocketmq`` is also the top-level
name of PyPI's C++ client wrapper, so which ``rocketmq/__init__.py`` is on disk depends on
install order. Instead the three files are located through the distribution's metadata and
loaded under private names (``mqcore.grpc._v2.*``); their cross-imports name
``rocketmq.grpc_protocol`` and are pointed at those private names. The descriptors they
register are the client's own, so both sides agree on every field by construction.
"""
from __future__ import annotations

import importlib.metadata
import sys
import types

from mqcore.errors import ConfigError

DISTRIBUTION = "rocketmq-python-client"
_PACKAGE = "mqcore.grpc._v2"
_SOURCE_PACKAGE = "rocketmq.grpc_protocol"
_MODULES = ("definition_pb2", "service_pb2", "service_pb2_grpc")

INSTALL_HINT = ("the gRPC endpoint (grpcServerPort) needs the optional extra: pip install 'mqcore[grpc]' "
                "(grpcio and the rocketmq-python-client protocol modules)")


def _require(name: str) -> None:
    try:
        __import__(name)
    except ImportError as e:
        raise ConfigError(f"{INSTALL_HINT}; {name} is missing ({e})") from e


def _load() -> dict[str, types.ModuleType]:
    _require("grpc")
    _require("google.protobuf")
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as e:
        raise ConfigError(f"{INSTALL_HINT}; {DISTRIBUTION} is not installed") from e
    pkg = sys.modules.get(_PACKAGE)
    if pkg is None:
        pkg = types.ModuleType(_PACKAGE)
        pkg.__path__ = []  # a package with no directory: its modules are loaded explicitly below
        sys.modules[_PACKAGE] = pkg
    loaded = {}
    for name in _MODULES:
        full = f"{_PACKAGE}.{name}"
        if full in sys.modules:
            loaded[name] = sys.modules[full]
            continue
        path = str(dist.locate_file(f"rocketmq/grpc_protocol/{name}.py"))
        try:
            source = open(path, encoding="utf-8").read()
        except OSError as e:
            raise ConfigError(f"{DISTRIBUTION} {dist.version} has no {path}: {e}") from e
        if name != "definition_pb2" and f"from {_SOURCE_PACKAGE} import" not in source:
            raise ConfigError(f"{DISTRIBUTION} {dist.version}: {name}.py no longer imports its siblings "
                              f"from {_SOURCE_PACKAGE}; this loader needs updating")
        source = source.replace(f"from {_SOURCE_PACKAGE} import", f"from {_PACKAGE} import")
        module = types.ModuleType(full)
        module.__file__ = str(path)
        module.__package__ = _PACKAGE
        sys.modules[full] = module
        try:
            exec(compile(source, str(path), "exec"), module.__dict__)
        except Exception:
            del sys.modules[full]
            raise
        setattr(pkg, name, module)
        loaded[name] = module
    return loaded


def load_protocol() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    """(definition_pb2, service_pb2, service_pb2_grpc); ConfigError with an install hint if absent."""
    m = _load()
    return m["definition_pb2"], m["service_pb2"], m["service_pb2_grpc"]
