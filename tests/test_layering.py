"""The layering rule, checked on the source: lower layers never import higher ones.

From the bottom: ``errors``, ``clock`` and ``format.layout`` (import nothing from
mqcore); ``jsonutil``, ``netaddr``, the rest of ``format`` and ``config``; the kernels;
``message``; ``store`` and ``remoting`` side by side; ``acl`` (it checks and signs remoting
commands); ``namesrv`` (which a broker may
embed), then ``broker`` and ``client`` side by side (with ``grpc`` and ``dashboard``, the 5.x
endpoint and the web dashboard the broker starts, beside ``broker``); ``tools``, ``spark``, ``admin``
and ``testing`` (the pytest plugin's broker) on top
(``admin`` speaks the protocol through ``remoting`` and ``client``, never into a broker's insides).
Imports are read from the source files (``.py``, ``.pyx``, ``.pxi``) with no import
executed, so a violation is reported even in a module no test loads.
"""
from __future__ import annotations

import ast
import os

import pytest

import mqcore

ROOT = os.path.dirname(os.path.dirname(mqcore.__file__))


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)
    name = os.path.splitext(rel)[0].replace(os.sep, ".")
    return name.removesuffix(".__init__")


def _imports(path: str) -> set[str]:
    text = open(path, encoding="utf-8").read()
    if path.endswith(".py"):
        found = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # "from pkg import mod" imports pkg.mod (and pkg's __init__, which must stay empty of
                # imports); "from mod import name" is under mod either way
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                       or isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
                found.add(node.args[0].value)  # importlib.import_module("mqcore.x") is an import too
        return {m for m in found if m == "mqcore" or m.startswith("mqcore.")}
    found = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("from", "import", "cimport") and words[1].startswith("mqcore"):
            found.add(f"{words[1]}.{words[3]}" if words[0] == "from" and len(words) >= 4 else words[1])
    return found


def _all_modules() -> dict[str, set[str]]:
    out = {}
    for d, _dirs, files in os.walk(os.path.join(ROOT, "mqcore")):
        for f in files:
            if f.endswith((".py", ".pyx", ".pxi")):
                p = os.path.join(d, f)
                out[_module_name(p)] = _imports(p)
    return out


MODULES = _all_modules()
KERNELS = ("mqcore._store", "mqcore._store_py", "mqcore._columns_py", "mqcore._columns", "mqcore._wire_client", "mqcore._wire_client_py",
           "mqcore._pipeline", "mqcore._pipeline_py", "mqcore._record_py", "mqcore._compat",
           "mqcore.kernel_api")


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


#: module prefix -> mqcore prefixes it may import (besides itself)
ALLOWED = {
    "mqcore.errors": (),
    "mqcore.format.layout": (),
    "mqcore.clock": (),
    "mqcore.permissions": (),
    "mqcore.uniq_id": ("mqcore.errors", "mqcore.clock"),
    "mqcore.jsonutil": ("mqcore.errors", "mqcore.format.javahash"),
    "mqcore.format.javahash": (),
    "mqcore.config": ("mqcore.errors", "mqcore.format.layout", "mqcore.format.delays"),
    "mqcore.format": ("mqcore.errors", "mqcore.format"),
    "mqcore.netaddr": ("mqcore.errors",),
    "mqcore.tags": ("mqcore.format.javahash",),
    "mqcore.service": ("mqcore.errors", "mqcore.clock"),
    "mqcore.logs": ("mqcore.errors",),
    "mqcore.progress": (),
    "mqcore.histogram": (),
    **{k: ("mqcore.errors", "mqcore.format", "mqcore") + KERNELS for k in KERNELS},
    "mqcore.message": ("mqcore.errors", "mqcore.format", "mqcore.clock", "mqcore.netaddr"),
}
# the interface the kernels satisfy imports only the leaf that names a decoded record
ALLOWED["mqcore.kernel_api"] = ("mqcore.format.record", "mqcore.format.scans")
# the kernels are grouped by user: the store kernels and the column kernels (Spark) share only
# the record checker (_record_py, the twin of _record.pxi); neither imports the other
ALLOWED["mqcore._record_py"] = ("mqcore.errors", "mqcore.format")
ALLOWED["mqcore._store_py"] = ("mqcore.errors", "mqcore.format", "mqcore._record_py", "mqcore._wire_client_py")
ALLOWED["mqcore._columns_py"] = ("mqcore.errors", "mqcore.format", "mqcore._record_py")
ALLOWED["mqcore._columns"] = ("mqcore.errors", "mqcore.format", "mqcore._store")  # cimports _store.pxd (layout)
ALLOWED["mqcore.format.record"] = ()
ALLOWED["mqcore.format.scans"] = ()
#: package -> packages it must not import
FORBIDDEN = {
    "mqcore.store": ("mqcore.broker", "mqcore.namesrv", "mqcore.client", "mqcore.remoting", "mqcore.spark",
                     "mqcore.tools", "mqcore.dashboard"),
    "mqcore.remoting": ("mqcore.store", "mqcore.broker", "mqcore.namesrv", "mqcore.client", "mqcore.spark",
                        "mqcore.tools", "mqcore.acl", "mqcore.dashboard"),
    # plain ACL checks and signs remoting commands; the servers and the client use it
    "mqcore.acl": ("mqcore.store", "mqcore.broker", "mqcore.namesrv", "mqcore.client", "mqcore.spark",
                   "mqcore.tools", "mqcore.admin", "mqcore.grpc", "mqcore.dashboard"),
    "mqcore.namesrv": ("mqcore.broker", "mqcore.store", "mqcore.client", "mqcore.spark", "mqcore.tools",
                       "mqcore.dashboard"),
    "mqcore.broker": ("mqcore.client", "mqcore.spark", "mqcore.tools", "mqcore.testing"),
    # the 5.x gRPC endpoint sits beside the broker's processors and, like them, is handed the
    # managers it uses (grpc.source.GrpcSource, built by Broker.grpc_source): it imports nothing
    # of the broker (which imports it to start it), never a client
    # POP consumption sits below both protocols that serve it: the broker's remoting processor
    # and the gRPC endpoint are each handed the one PopService; it knows neither
    "mqcore.pop": ("mqcore.broker", "mqcore.grpc", "mqcore.remoting", "mqcore.client", "mqcore.spark", "mqcore.tools",
                   "mqcore.dashboard", "mqcore.admin", "mqcore.namesrv"),
    "mqcore.grpc": ("mqcore.broker", "mqcore.client", "mqcore.spark", "mqcore.tools", "mqcore.dashboard"),
    # the web dashboard sits beside the broker too (the broker starts it, as it starts the gRPC
    # endpoint): like the endpoint it is handed the managers it uses (dashboard.source.DashboardSource,
    # built by Broker.dashboard_source) and imports nothing of the broker, never a client or the
    # admin API, and nothing below the broker knows it
    "mqcore.dashboard": ("mqcore.broker", "mqcore.client", "mqcore.spark", "mqcore.tools", "mqcore.admin",
                         "mqcore.grpc"),
    "mqcore.client": ("mqcore.store", "mqcore.broker", "mqcore.namesrv", "mqcore.spark", "mqcore.tools",
                      "mqcore.dashboard", "mqcore.testing"),
    # the pytest plugin runs a broker for a test: on top of everything, known by nothing
    "mqcore.testing": ("mqcore.spark", "mqcore.tools", "mqcore.admin", "mqcore.dashboard"),
    "mqcore.spark": ("mqcore.store", "mqcore.broker", "mqcore.namesrv", "mqcore.remoting", "mqcore.client",
                     "mqcore.tools", "mqcore.dashboard"),
    "mqcore.tools": ("mqcore.broker", "mqcore.namesrv", "mqcore.remoting", "mqcore.client", "mqcore.spark",
                     "mqcore.dashboard"),
    "mqcore.admin": ("mqcore.store", "mqcore.broker", "mqcore.namesrv", "mqcore.spark", "mqcore.tools",
                     "mqcore.dashboard"),
}
#: narrow exceptions to FORBIDDEN, each with its reason
EXCEPTIONS = {
    # analytics reads the broker's JSON files with the store's tolerant, .bak-aware loader
    "mqcore.spark": ("mqcore.store.config_files",),
    # `mqstore import` writes topics.json for the topics it creates, as a broker would
    "mqcore.tools": ("mqcore.broker.metadata",),
}


def test_the_scan_sees_imports_inside_functions(tmp_path):
    """ast.walk visits every node, so an import deferred into a function (or made through
    importlib) counts like one at the top: a lazy import cannot hide an upward edge."""
    src = tmp_path / "lazy.py"
    src.write_text("import os\n\ndef f():\n    from mqcore.broker import broker\n    import mqcore.spark.decode\n"
                   "    import importlib\n    return importlib.import_module('mqcore.client.producer')\n")
    assert _imports(str(src)) == {"mqcore.broker.broker", "mqcore.spark.decode", "mqcore.client.producer"}
    # and a relative import, which the scan would not resolve, is not used anywhere
    relative = [m for m, p in ((m, p) for m, p, _ in _library_sources())
                if any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(ast.parse(open(p).read())))]
    assert not relative, f"relative imports (write them absolute, so the layering scan sees them): {relative}"


def test_the_scan_sees_the_package():
    assert {"mqcore.format.layout", "mqcore.store.writer", "mqcore._store", "mqcore.broker.broker"} <= set(MODULES)
    assert "mqcore.format.layout" in MODULES["mqcore.store.writer"]


@pytest.mark.parametrize("low", sorted(ALLOWED))
def test_low_layers_import_only_lower_ones(low):
    bad = {}
    for mod, imports in MODULES.items():
        if not _under(mod, (low,)):
            continue
        # the most specific rule wins (format.layout is stricter than format)
        rule = max((k for k in ALLOWED if _under(mod, (k,))), key=len)
        if rule != low:
            continue
        allowed = ALLOWED[rule]
        wrong = sorted(i for i in imports if i != "mqcore" and not _under(i, (rule,) + allowed))
        if wrong:
            bad[mod] = wrong
    assert not bad, f"imports from a higher layer: {bad}"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_packages_do_not_import_upwards(package):
    bad = {mod: sorted(i for i in imports if _under(i, FORBIDDEN[package])
                       and not _under(i, EXCEPTIONS.get(package, ())))
           for mod, imports in MODULES.items() if _under(mod, (package,))}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{package} imports a layer above it (or a sibling it must not know): {bad}"


# --- one accessor for the kernels ------------------------------------------------------------------
#: modules allowed to bind ``_compat.kernels`` at import (none: the rule holds for every module)
KERNELS_AT_IMPORT_PENDING: tuple[str, ...] = ()


def _library_sources():
    for d, _dirs, files in os.walk(os.path.join(ROOT, "mqcore")):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                yield _module_name(p), p, open(p, encoding="utf-8").read()


def _calls_at_import(tree: ast.Module, name: str) -> list[int]:
    """Lines where ``name()`` runs at import: at module level or in a default argument."""
    at_import: list[ast.AST] = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            at_import.append(node)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            at_import.extend(node.args.defaults + [d for d in node.args.kw_defaults if d is not None])
    return [c.lineno for n in at_import for c in ast.walk(n)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == name]


def test_library_code_reaches_the_kernels_through_the_accessor():
    """A module that binds the chosen kernels at import cannot be handed the other
    implementation by a test: library code takes ``kernels=`` and asks
    ``_compat.default_kernels()`` when it got none."""
    bad = {}
    for mod, path, text in _library_sources():
        if mod == "mqcore._compat" or _under(mod, KERNELS_AT_IMPORT_PENDING):
            continue
        tree = ast.parse(text)
        lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "mqcore._compat"
                 and any(a.name == "kernels" for a in n.names)]
        lines += [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "kernels"
                  and isinstance(n.value, ast.Name) and n.value.id == "_compat"]
        lines += _calls_at_import(tree, "default_kernels")
        if lines:
            bad[mod] = sorted(lines)
    assert not bad, f"kernels bound at import instead of injected (module: lines): {bad}"


# --- one home per concept --------------------------------------------------------------------------
#: text that marks a concept's implementation -> the modules that may hold it, and why
HOMES = {
    # the tag-expression grammar ("A || B")
    '.split("||")': ("mqcore.tags",),
    # String.hashCode's polynomial: the pure-Python home and the compiled kernels' copies for their
    # loops (the store's, and the broker pipeline's over the ASCII tags and keys it reads)
    "31 * h": ("mqcore.format.javahash", "mqcore._store", "mqcore._pipeline"),
    # a host:port split by hand instead of netaddr.parse_host_port
    'rpartition(":")': ("mqcore.netaddr",),
    # property separators spelled by hand instead of format.properties / layout's names
    '"\\x01"': ("mqcore.format.layout",),
    '"\\x02"': ("mqcore.format.layout",),
    "\\x01{": (),
    # body decompression: format.compression (client, gRPC and Spark call it)
    "zlib.decompress(": ("mqcore.format.compression",),
    "lz4.frame.decompress(": ("mqcore.format.compression",),
    # the topic/group name characters: format.names (as a byte set or a pattern)
    "abcdefghijklmnopqrstuvwxyz": (),
    "a-zA-Z0-9_-]+": (),
    "ascii_letters": ("mqcore.format.names",),
    # index file geometry is inferred by format.files.index_geometry only (RocketMQ's 1:4 ratio
    # is 4 + 4*20 = 84 bytes per slot)
    "% 84": (),
    "// 84": (),
    "def index_geometry": ("mqcore.format.files",),
    # fixed-size shapes are layout's structs and dtypes: the record's head and tail, a
    # consume-queue unit (struct or numpy), the size+magic pair
    '">iiiiiqqiq"': ("mqcore.format.layout",),
    '">iqi"': ("mqcore.format.layout",),
    '">qiq"': ("mqcore.format.layout",),
    '">qi"': ("mqcore.format.layout",),
    '("phy", ">i8")': (),
}


@pytest.mark.parametrize("marker", sorted(HOMES))
def test_a_concept_is_implemented_in_its_home_only(marker):
    found = set()
    for d, _dirs, files in os.walk(os.path.join(ROOT, "mqcore")):
        for f in files:
            if f.endswith((".py", ".pyx", ".pxi")):
                p = os.path.join(d, f)
                if marker in open(p, encoding="utf-8").read():
                    found.add(_module_name(p))
    assert found <= set(HOMES[marker]), f"{marker!r} outside its home: {sorted(found - set(HOMES[marker]))}"


# --- no import cycles ------------------------------------------------------------------------------
def _resolve(name: str) -> str | None:
    """The scanned module an import lands in ("mqcore.format.layout.X" -> "mqcore.format.layout")."""
    while name not in MODULES:
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return name


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for mod, imports in MODULES.items():
        g[mod] = {r for r in map(_resolve, imports) if r and r != mod and r != "mqcore"}
    return g


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_module_imports_itself_through_others():
    """No cycle between modules, function-level imports included (the kernels' twins used to
    import each other; the record checker they share is now _record_py)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the check can fail
    assert not _cycles(_graph()), _cycles(_graph())


#: package-level cycles still waiting for their owner, each with its reason; shrink, never grow
PACKAGE_CYCLES_PENDING = {
    # format.files reads the default delay levels from config, and config validates sizes with
    # format.layout: no module cycle, but the two should be one layer
    frozenset({"mqcore.config", "mqcore.format"}),
}


def test_no_package_cycles_beyond_the_pending_ones():
    def pkg(m: str) -> str:
        return ".".join(m.split(".")[:2])
    edges = {(pkg(a), pkg(b)) for a, bs in _graph().items() for b in bs if pkg(a) != pkg(b)}
    found = {frozenset((a, b)) for a, b in edges if (b, a) in edges}
    assert found <= PACKAGE_CYCLES_PENDING, f"new package cycles: {found - PACKAGE_CYCLES_PENDING}"
