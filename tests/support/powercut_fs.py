"""A FUSE file system that forgets what was not synced when the power is cut.

    python -m tests.support.powercut_fs DISK MOUNTPOINT

Files live in the directory DISK (the "platters"). Data written through MOUNTPOINT - by
``write`` or by the kernel writing back the dirty pages of a shared mapping - goes to an
in-memory cache of 4 KiB pages first and reaches DISK only when the file is synced
(``fsync``/``fdatasync``, which for a mapped file the kernel sends after writing its dirty
pages back). Creating the file ``.powercut`` at the top of the mount cuts the power: the
cache is dropped, and every later write or sync fails with EIO, so nothing the process on
top does afterwards reaches DISK. DISK then holds exactly what a disk whose write cache
was lost would hold; mounting DISK again (a new process) is the reboot.

Metadata (create, unlink, rename, size changes, allocation) goes to DISK at once: the
model is a disk that loses unsynced *data*, not a file system that loses directory
entries (mqcore fsyncs directories after creating files anyway).

Tests start and stop it through :class:`PowerCutMount`.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time

PAGE = 4096
CUT_NAME = ".powercut"


def _ops_class():
    from mfusepy import FuseOSError, Operations

    class PowerCutFS(Operations):
        def __init__(self, disk: str) -> None:
            self.disk = disk
            self.lock = threading.Lock()
            #: path -> {page index: bytes of the page as written but not yet synced}
            self.cache: dict[str, dict[int, bytes]] = {}
            self.cut = False

        def _real(self, path: str) -> str:
            return os.path.join(self.disk, path.lstrip("/"))

        def _check_power(self) -> None:
            if self.cut:
                raise FuseOSError(errno.EIO)

        # --- metadata: straight to the disk --------------------------------------------
        def getattr(self, path, fh=None):
            st = os.lstat(self._real(path))
            out = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
                                               "st_atime", "st_mtime", "st_ctime")}
            with self.lock:
                pages = self.cache.get(path)
                if pages:  # a write past the end grew the file only in the cache
                    last = max(pages)
                    out["st_size"] = max(out["st_size"], last * PAGE + len(pages[last]))
            return out

        def readdir(self, path, fh):
            return [".", "..", *os.listdir(self._real(path))]

        def statfs(self, path):
            st = os.statvfs(self._real(path))
            return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

        def mkdir(self, path, mode):
            self._check_power()
            os.mkdir(self._real(path), mode)
            return 0

        def rmdir(self, path):
            self._check_power()
            os.rmdir(self._real(path))
            return 0

        def unlink(self, path):
            self._check_power()
            with self.lock:
                self.cache.pop(path, None)
            os.unlink(self._real(path))
            return 0

        def rename(self, old, new):
            self._check_power()
            with self.lock:
                pages = self.cache.pop(old, None)
                self.cache.pop(new, None)
                if pages:
                    self.cache[new] = pages
            os.rename(self._real(old), self._real(new))
            return 0

        def chmod(self, path, mode):
            os.chmod(self._real(path), mode)
            return 0

        def utimens(self, path, times=None):
            os.utime(self._real(path), ns=None if times is None else times)
            return 0

        def truncate(self, path, length, fh=None):
            self._check_power()
            with self.lock:
                pages = self.cache.get(path)
                if pages:
                    for i in [i for i in pages if i * PAGE >= length]:
                        del pages[i]
                    last = length // PAGE
                    if last in pages:
                        pages[last] = pages[last][:length - last * PAGE]
            os.truncate(self._real(path), length)
            return 0

        def fallocate(self, path, mode, offset, size, fh):
            self._check_power()
            if mode:
                raise FuseOSError(errno.EOPNOTSUPP)
            os.posix_fallocate(fh, offset, size)
            return 0

        # --- files ----------------------------------------------------------------------
        def create(self, path, mode, fi=None):
            if path == "/" + CUT_NAME:
                with self.lock:
                    self.cut = True
                    self.cache.clear()
                raise FuseOSError(errno.EIO)  # the power is off: nothing is created
            self._check_power()
            return os.open(self._real(path), os.O_RDWR | os.O_CREAT, mode)

        def open(self, path, flags):
            return os.open(self._real(path), os.O_RDWR if flags & (os.O_WRONLY | os.O_RDWR) else os.O_RDONLY)

        def release(self, path, fh):
            os.close(fh)
            return 0

        def flush(self, path, fh):
            return 0

        def lock(self, path, fh, cmd, lock):
            return 0  # one broker at a time on this mount: every record lock is granted

        def read(self, path, size, offset, fh):
            data = bytearray(os.pread(fh, size, offset))
            with self.lock:
                pages = self.cache.get(path)
                if pages:
                    end = offset + size
                    for i in range(offset // PAGE, (end + PAGE - 1) // PAGE):
                        page = pages.get(i)
                        if page is None:
                            continue
                        lo, hi = max(offset, i * PAGE), min(end, i * PAGE + len(page))
                        if hi <= lo:
                            continue
                        if len(data) < hi - offset:
                            data.extend(bytes(hi - offset - len(data)))
                        data[lo - offset:hi - offset] = page[lo - i * PAGE:hi - i * PAGE]
            return bytes(data)

        def write(self, path, data, offset, fh):
            with self.lock:
                self._check_power()
                pages = self.cache.setdefault(path, {})
                pos, end = offset, offset + len(data)
                while pos < end:
                    i = pos // PAGE
                    page = pages.get(i)
                    if page is None:
                        page = os.pread(fh, PAGE, i * PAGE)
                    buf = bytearray(page)
                    lo, hi = pos - i * PAGE, min(PAGE, end - i * PAGE)
                    if len(buf) < hi:
                        buf.extend(bytes(hi - len(buf)))
                    buf[lo:hi] = data[pos - offset:pos - offset + hi - lo]
                    pages[i] = bytes(buf)
                    pos += hi - lo
            return len(data)

        def fsync(self, path, datasync, fh):
            with self.lock:
                self._check_power()
                pages = self.cache.pop(path, None)
                if pages:
                    for i, page in sorted(pages.items()):
                        os.pwrite(fh, page, i * PAGE)
            return 0

    return PowerCutFS


class PowerCutMount:
    """Start the file system over ``disk`` at ``mountpoint`` (a process of its own), cut the
    power, unmount. ``with PowerCutMount(disk, mnt):`` mounts and always unmounts."""

    def __init__(self, disk: str, mountpoint: str) -> None:
        self.disk = disk
        self.mountpoint = mountpoint
        self.proc: subprocess.Popen | None = None

    def mount(self) -> PowerCutMount:
        os.makedirs(self.disk, exist_ok=True)
        os.makedirs(self.mountpoint, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.powercut_fs", self.disk, self.mountpoint],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 20
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = self.proc.stdout.read() if self.proc.poll() is not None else ""
                self.unmount()
                raise RuntimeError(f"the power-cut file system did not mount at {self.mountpoint}: {out}")
            time.sleep(0.02)
        return self

    def cut_power(self) -> None:
        """Drop every unsynced page; later writes and syncs fail (see the module docstring)."""
        try:
            open(os.path.join(self.mountpoint, CUT_NAME), "w").close()
        except OSError as e:
            if e.errno != errno.EIO:
                raise

    def unmount(self) -> None:
        if os.path.ismount(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None

    def __enter__(self) -> PowerCutMount:
        return self.mount()

    def __exit__(self, *exc) -> None:
        self.unmount()


def main(argv: list[str]) -> int:
    from mfusepy import FUSE
    disk, mountpoint = argv
    FUSE(_ops_class()(os.path.abspath(disk)), mountpoint, foreground=True, nothreads=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
