"""Where a store's files live: a local disk (mmap) or a remote file system (byte ranges).

A store path is a plain path or any URI Spark users use: ``file://``, ``s3://``/``s3a://``,
``gs://``, ``abfs(s)://``, ``hdfs://``. Local paths keep the fast path (the kernels decode
straight out of an mmap); everything else goes through ``pyarrow.fs`` -- or fsspec, for a
scheme pyarrow has no file system for -- and is read in byte ranges, so an executor only
fetches the part of a commitlog file its split covers.

A ``Storage`` is picklable: the planner resolves it once and every split carries it to the
executors, which therefore need no credentials of their own beyond what the options hold.
"""
from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from mqcore.errors import ConfigError, StoreError
from mqcore.format.files import open_view as _mmap_view

if TYPE_CHECKING:  # pyarrow ships no annotations (its names are Any to mypy); imported where used
    from pyarrow.fs import FileInfo, FileSystem

#: URI schemes that are the local disk
_LOCAL_SCHEMES = ("", "file")
#: Hadoop's S3 connector names; pyarrow knows the bucket by the plain ``s3`` scheme
_S3_SCHEMES = ("s3", "s3a", "s3n")
#: option prefix whose rest is a keyword of the pyarrow file system's constructor
FS_OPTION_PREFIX = "fs."


class RemoteStoreError(StoreError):
    """A remote store could not be reached or read (the cause is chained)."""


class Storage:
    """The local disk. Paths are absolute POSIX paths."""

    is_local = True

    def display(self, path: str) -> str:
        return path

    def join(self, *parts: str) -> str:
        return os.path.join(*parts)

    def basename(self, path: str) -> str:
        return os.path.basename(path)

    def dirname(self, path: str) -> str:
        return os.path.dirname(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def files_below(self, path: str) -> list[str]:
        """Paths relative to ``path`` (``/``-separated) of every file under it."""
        out = []
        for d, _, names in os.walk(path, followlinks=True):
            rel = os.path.relpath(d, path)
            out += [n if rel == "." else f"{rel}/{n}".replace(os.sep, "/") for n in names]
        return out

    def read_at(self, path: str, offset: int, n: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(n)

    @contextlib.contextmanager
    def open_view(self, path: str) -> Iterator[memoryview]:
        with _mmap_view(path) as v:
            yield v

    def __eq__(self, other: object) -> bool:
        return type(other) is Storage

    def __hash__(self) -> int:
        return hash(Storage)


LOCAL = Storage()


class ArrowStorage(Storage):
    """A ``pyarrow.fs.FileSystem``; paths are that file system's (``bucket/key`` for S3)."""

    is_local = False

    def __init__(self, fs: FileSystem, scheme: str) -> None:
        self.fs = fs
        self.scheme = scheme

    def display(self, path: str) -> str:
        return f"{self.scheme}://{path}" if self.scheme else path

    def join(self, *parts: str) -> str:
        return "/".join(p.rstrip("/") for p in parts[:-1]) + "/" + parts[-1]

    def basename(self, path: str) -> str:
        return path.rstrip("/").rsplit("/", 1)[-1]

    def dirname(self, path: str) -> str:
        return path.rstrip("/").rsplit("/", 1)[0]

    def _info(self, path: str) -> FileInfo:
        try:
            return self.fs.get_file_info(path)
        except OSError as e:
            raise RemoteStoreError(f"cannot stat {self.display(path)}: {e}") from e

    def isdir(self, path: str) -> bool:
        from pyarrow.fs import FileType
        found: bool = self._info(path).type == FileType.Directory
        return found

    def exists(self, path: str) -> bool:
        from pyarrow.fs import FileType
        found: bool = self._info(path).type != FileType.NotFound
        return found

    def listdir(self, path: str) -> list[str]:
        from pyarrow.fs import FileSelector
        try:
            infos = self.fs.get_file_info(FileSelector(path, allow_not_found=True))
        except OSError as e:
            raise RemoteStoreError(f"cannot list {self.display(path)}: {e}") from e
        return [i.base_name for i in infos]

    def size(self, path: str) -> int:
        size: int = self._info(path).size
        return size

    def files_below(self, path: str) -> list[str]:
        from pyarrow.fs import FileSelector, FileType
        try:
            infos = self.fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
        except OSError as e:
            raise RemoteStoreError(f"cannot list {self.display(path)}: {e}") from e
        base = path.rstrip("/") + "/"
        return [i.path[len(base):] for i in infos if i.type == FileType.File and i.path.startswith(base)]

    def read_at(self, path: str, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (fewer at the end of the file), one ranged read."""
        try:
            with self.fs.open_input_file(path) as f:
                data: bytes = f.read_at(max(0, min(n, f.size() - offset)), offset)
                return data
        except OSError as e:
            raise RemoteStoreError(f"cannot read {self.display(path)} at {offset}: {e}") from e

    @contextlib.contextmanager
    def open_view(self, path: str) -> Iterator[memoryview]:
        """The whole file in memory: only for small files (consume queues, index, configs)."""
        try:
            with self.fs.open_input_file(path) as f:
                data = f.read()
        except OSError as e:
            raise RemoteStoreError(f"cannot read {self.display(path)}: {e}") from e
        yield memoryview(data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrowStorage) and other.fs.equals(self.fs)

    def __hash__(self) -> int:
        return hash(self.scheme)

    def __reduce__(self) -> tuple[type[ArrowStorage], tuple[FileSystem, str]]:
        return ArrowStorage, (self.fs, self.scheme)


def _option_value(text: str) -> str | bool:
    v = str(text).strip()
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    return v


def _arrow_fs(scheme: str, kwargs: dict[str, str | bool]) -> FileSystem | None:
    """A pyarrow file system built from constructor keywords (the ``fs.*`` options)."""
    from pyarrow import fs as pafs
    if scheme in _S3_SCHEMES:
        return pafs.S3FileSystem(**kwargs)
    if scheme in ("gs", "gcs"):
        return pafs.GcsFileSystem(**kwargs)
    if scheme in ("abfs", "abfss", "az"):
        return pafs.AzureFileSystem(**kwargs)
    if scheme == "hdfs":
        return pafs.HadoopFileSystem(**kwargs)
    return None


def _fsspec_fs(scheme: str, kwargs: dict[str, str | bool]) -> FileSystem | None:
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem
    except ImportError:
        return None
    try:
        return PyFileSystem(FSSpecHandler(fsspec.filesystem(scheme, **kwargs)))
    except (ValueError, ImportError):
        return None


def resolve(uri: str, fs_options: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> tuple[Storage, str]:
    """(storage, path inside it) of a store path or URI.

    ``fs_options`` are the reader's ``fs.<name>`` options without the prefix: keywords of
    the pyarrow file system's constructor (for S3: ``endpoint_override``, ``access_key``,
    ``secret_key``, ``region``, ``scheme``...). Without them the URI alone decides, as
    ``pyarrow.fs.FileSystem.from_uri`` reads it (S3 takes ``?endpoint_override=...`` there).
    """
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if len(scheme) <= 1:  # no scheme, or a Windows drive letter
        scheme = ""
    if scheme in _LOCAL_SCHEMES:
        if scheme and fs_options:
            raise ConfigError("fs.* options are for remote stores; the path is on the local disk")
        local = uri.removeprefix("file://").removeprefix("file:") if scheme else uri
        return LOCAL, os.path.abspath(os.path.expanduser(local))
    from pyarrow import fs as pafs
    kwargs = {k: _option_value(v) for k, v in dict(fs_options).items()}
    path = (parts.netloc + parts.path).rstrip("/")
    try:
        if kwargs:
            fs = _arrow_fs(scheme, kwargs) or _fsspec_fs(scheme, kwargs)
            if fs is None:
                raise ConfigError(f"no file system for {scheme}:// (pyarrow has none and fsspec does not know it)")
            if scheme == "hdfs":
                path = parts.path.rstrip("/")
            return ArrowStorage(fs, scheme), path
        arrow_uri = "s3" + uri[len(parts.scheme):] if scheme in _S3_SCHEMES else uri
        try:
            fs, path = pafs.FileSystem.from_uri(arrow_uri)
        except pafs.ArrowInvalid:  # pyarrow has no file system for the scheme: try fsspec
            fs = _fsspec_fs(scheme, {})
            if fs is None:
                raise ConfigError(f"no file system for {scheme}:// (pyarrow has none; install fsspec and the "
                                  f"fsspec package for {scheme})") from None
        return ArrowStorage(fs, scheme), path.rstrip("/")
    except TypeError as e:
        raise ConfigError(f"bad fs.* option for {scheme}://: {e}") from e
    except OSError as e:
        raise RemoteStoreError(f"cannot open {uri}: {e}") from e
