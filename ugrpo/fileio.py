"""Atomic, umask-respecting file writes, JSON conversion, and reads whose errors name the file.

Shared by every package; imports nothing of ugrpo but :mod:`ugrpo.errors`. :mod:`ugrpo.runs` (run folders) and
:mod:`ugrpo.runlock` (their manifest and lock) both write through it, so neither needs the other to write a file.

Every byte a run folder gets goes through :func:`write_chunk`, and an ``OSError`` while writing (a full disk, a
quota) always names the file it was writing, even when a third-party writer (``torch.save``, safetensors,
matplotlib) would have wrapped it in an error of its own: the command line then reports it as one ``error:`` line
(``ugrpo.cli.main``) instead of a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["file_mode", "follow_umask", "to_jsonable", "atomic_write_text", "atomic_write_json",
           "atomic_write_bytes", "atomic_save", "naming", "write_chunk", "read_text", "read_json", "DISK_FULL",
           "os_error_of"]

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
"""errno values of a write that ran out of space (a full disk, a quota)"""
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how Rust's io::Error (safetensors, tokenizers) shows an errno


def file_mode(directory: bool = False) -> int:
    """The permissions a new file (or folder) gets under the user's umask: 0644 / 0755 under umask 022."""
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


def follow_umask(path: str | os.PathLike) -> None:
    """Give ``path`` (and everything under it) the umask's permissions: some writers (safetensors,
    mkdtemp) create 0600 / 0700 files, which a team sharing the run folder cannot read."""
    path = Path(path)
    os.chmod(path, file_mode(directory=path.is_dir()))
    if path.is_dir():
        for p in path.rglob("*"):
            if not p.is_symlink():
                os.chmod(p, file_mode(directory=p.is_dir()))


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, tensors, numpy scalars/arrays, paths -> plain JSON types; NaN/inf -> None."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if hasattr(obj, "tolist"):  # torch.Tensor, numpy array or scalar
        return to_jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return to_jsonable(obj.item())
    return str(obj)


# ---------------------------------------------------------------------- writing


def write_chunk(f: IO[bytes], data: bytes, path: Path) -> int:
    """Write ``data`` to ``f``, the open file of ``path``: the one call through which a run folder is written
    (tests replace it to fill the disk at a chosen file)."""
    return f.write(data)


def os_error_of(e: BaseException) -> OSError | None:
    """The operating-system error behind ``e``: itself, or the errno a Rust writer printed, or None."""
    if isinstance(e, OSError):
        return e
    m = _RUST_OS_ERROR.search(str(e))
    return OSError(int(m.group(1)), os.strerror(int(m.group(1)))) if m else None


@contextlib.contextmanager
def naming(path: str | os.PathLike) -> Iterator[None]:
    """Re-raise an ``OSError`` (or a Rust writer's error with an errno) raised inside as an ``OSError`` that
    names ``path``: Python's ``write`` and ``flush`` say "No space left on device" but not where."""
    try:
        yield
    except Exception as e:
        err = os_error_of(e)
        if err is None or (isinstance(e, OSError) and e.filename is not None):
            raise
        raise type(err)(err.errno, err.strerror, str(path)) from e


class _File:
    """A write-only binary file that writes through :func:`write_chunk` and keeps the first ``OSError``: a
    writer that wraps it (``torch.save`` raises ``RuntimeError``) is answered with the ``OSError`` itself."""

    def __init__(self, f: IO[bytes], path: Path):
        self._f, self.path, self.error = f, path, None

    def write(self, data) -> int:
        try:
            return write_chunk(self._f, bytes(data), self.path)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self._f.flush()

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


def atomic_save(path: str | os.PathLike, save: Callable[[Any], Any]) -> None:
    """Write ``path`` atomically with ``save(file)`` (``torch.save(obj, f)``, ``fig.savefig(f, ...)``, ...).

    The bytes go to a temporary file next to ``path`` (fsynced, then renamed over it), so a crash or a full disk
    never leaves a half-written ``path``; the temporary file is removed on any error. An ``OSError`` while writing
    is raised as itself with ``path`` as its file name, whatever error ``save`` turned it into.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with naming(path):
            os.fchmod(fd, file_mode())  # mkstemp makes 0600; the final file follows the umask like any other
            with os.fdopen(fd, "wb") as raw:
                f = _File(raw, path)
                try:
                    save(f)
                except Exception:
                    if f.error is not None:  # the writer's own error hides the OSError behind it
                        raise f.error from None
                    raise
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    atomic_save(path, lambda f: f.write(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n")


# ---------------------------------------------------------------------- reading


def read_text(path: str | os.PathLike, fix: str = "") -> str:
    """The UTF-8 text of ``path``; a file that is not UTF-8 text (a binary file) is a ``ValueError`` naming the
    file, the first bad byte and ``fix`` (what to do about it)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not a text file (byte 0x{data[e.start]:02x} at offset {e.start} is not UTF-8)"
                         + (f"; {fix}" if fix else "")) from None


def read_json(path: str | os.PathLike, fix: str = "") -> Any:
    """The JSON value in ``path``; a file that is not UTF-8 JSON is a ``ValueError`` naming the file, the line and
    column of the first error and ``fix``."""
    path = Path(path)
    text = read_text(path, fix)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
                         + (f"; {fix}" if fix else "")) from None
