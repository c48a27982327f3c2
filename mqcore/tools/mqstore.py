"""``mqstore``: inspect, check and fill RocketMQ store directories.

    mqstore dump   STORE (--commitlog | --cq TOPIC QID | --index FILE) [--from N] [--limit N] [--format jsonl|table]
    mqstore verify STORE
    mqstore stats  STORE [--json]
    mqstore import STORE FILE.jsonl|- [--batch]

``dump``, ``verify`` and ``stats`` only read (no lock, read-only maps), so they are safe on
a store a broker is serving. ``import`` writes through ``MessageStore`` and needs the lock.

Exit status: 0 success; 1 the data has problems (verify findings, a corrupt record that
stopped a dump, import lines that failed); 2 the command could not run (bad arguments,
not a store, store locked, unreadable input).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import IO

from mqcore._compat import default_kernels
from mqcore.errors import (
    CorruptFileError,
    IllegalArgumentError,
    MQError,
    StoreIOError,
    StoreLockedError,
)
from mqcore.format.files import StoreFiles
from mqcore.kernel_api import StoreKernels
from mqcore.tools import dump, importer, stats, verify

EXIT_OK, EXIT_PROBLEMS, EXIT_CANNOT_RUN = 0, 1, 2


def _non_negative(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqstore", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="exit status: 0 ok, 1 problems found in the data, 2 could not run")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    geometry = argparse.ArgumentParser(add_help=False)
    geometry.add_argument("--index-slots", type=_non_negative, help="index file hash slots (default: inferred)")
    geometry.add_argument("--index-entries", type=_non_negative, help="index file entries (default: inferred)")

    d = sub.add_parser("dump", parents=[geometry], help="print commitlog records, consume-queue units or index entries")
    d.add_argument("store", help="store root directory (storePathRootDir)")
    what = d.add_mutually_exclusive_group(required=True)
    what.add_argument("--commitlog", action="store_true", help="commitlog records")
    what.add_argument("--cq", nargs=2, metavar=("TOPIC", "QID"), help="units of one consume queue")
    what.add_argument("--index", metavar="FILE", help="header and entries of an index file (name or path)")
    d.add_argument("--from", dest="start", type=_non_negative, default=None,
                   help="commitlog offset / queue offset / index entry number to start at")
    d.add_argument("--limit", type=_non_negative, default=None, help="at most N rows")
    d.add_argument("--format", choices=("jsonl", "table"), default="jsonl")

    v = sub.add_parser("verify", parents=[geometry], help="check CRCs and cross-references; exit 1 on problems")
    v.add_argument("store")

    s = sub.add_parser("stats", help="messages, bytes, offsets and times per topic and queue")
    s.add_argument("store")
    s.add_argument("--json", action="store_true", help="JSON instead of a table")

    i = sub.add_parser("import", parents=[geometry], help="append messages from JSON lines (takes the store lock)",
                       description="Append messages from JSON lines to a store, through the store's put path "
                                   "(takes the store lock: stop a broker serving it first).",
                       epilog=importer.JSONL_FORMAT, formatter_class=argparse.RawDescriptionHelpFormatter)
    i.add_argument("store", help="store root directory (created if missing)")
    i.add_argument("input", help="JSON lines file, or - for stdin")
    i.add_argument("--batch", action="store_true", help="put runs of the same topic/queue as batches")
    i.add_argument("--store-host", default="127.0.0.1:10911", help="store host ip:port written into records")
    i.add_argument("--commitlog-file-size", type=_non_negative, help="for a new store (default 1 GiB)")
    i.add_argument("--consume-queue-file-size", type=_non_negative, help="for a new store (default 6000000)")
    return p


def _dump(k: StoreKernels, args: argparse.Namespace, out: IO[str]) -> list[str]:
    store = StoreFiles(args.store, index_slots=args.index_slots, index_entries=args.index_entries)
    if args.commitlog:
        return dump.dump_commitlog(k, store, out, start=args.start or 0, limit=args.limit, fmt=args.format)
    if args.cq:
        topic, qid = args.cq
        if not qid.isdigit():
            raise IllegalArgumentError(f"queue id {qid!r} is not a non-negative integer")
        return dump.dump_cq(k, store, topic, int(qid), out, start=args.start or 0, limit=args.limit, fmt=args.format)
    return dump.dump_index(k, store, args.index, out, start=args.start or 1, limit=args.limit, fmt=args.format)


def _run(k: StoreKernels, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    if args.command == "dump":
        problems = _dump(k, args, out)
        for problem in problems:
            err.write(f"mqstore: {problem}\n")
        return EXIT_PROBLEMS if problems else EXIT_OK
    if args.command == "verify":
        store = StoreFiles(args.store, index_slots=args.index_slots, index_entries=args.index_entries)
        v = verify.Verifier(k, store)
        found = v.run()
        return verify.report(found, v.summary, out, os.path.exists(store.paths.abort_path))
    if args.command == "stats":
        st = stats.collect(k, StoreFiles(args.store))
        stats.write(st, out, args.json)
        for problem in st.problems:
            err.write(f"mqstore: {problem}\n")
        return EXIT_PROBLEMS if st.problems else EXIT_OK
    sizes = importer.StoreSizes(args.commitlog_file_size, args.consume_queue_file_size, args.index_slots,
                                args.index_entries)
    if args.input == "-":
        return importer.run_import(args.store, sys.stdin, out, err, batch=args.batch, sizes=sizes,
                                   store_host=args.store_host)
    try:
        source = open(args.input, encoding="utf-8")
    except OSError as e:
        raise IllegalArgumentError(f"cannot read {args.input}: {e.strerror}") from e
    with source:
        return importer.run_import(args.store, source, out, err, batch=args.batch, sizes=sizes,
                                   store_host=args.store_host)


def main(argv: Sequence[str] | None = None, *, kernels: StoreKernels | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # usage errors and --help: return the status instead of exiting
        return e.code if isinstance(e.code, int) else EXIT_CANNOT_RUN
    out, err = sys.stdout, sys.stderr
    try:
        return _run(kernels or default_kernels(), args, out, err)
    except BrokenPipeError:
        # the reader went away (mqstore dump ... | head): stop quietly, as other tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except (IllegalArgumentError, StoreLockedError) as e:
        err.write(f"mqstore: error: {e}\n")
        return EXIT_CANNOT_RUN
    except CorruptFileError as e:
        err.write(f"mqstore: corrupt store file: {e}\n")
        return EXIT_PROBLEMS
    except (StoreIOError, OSError, UnicodeDecodeError) as e:
        err.write(f"mqstore: error: {e}\n")
        return EXIT_CANNOT_RUN
    except MQError as e:
        err.write(f"mqstore: error: {type(e).__name__}: {e}\n")
        return EXIT_CANNOT_RUN


if __name__ == "__main__":
    sys.exit(main())
