"""The private runtime directory: where every role keeps its SI socket, status, log and temp files.

A predictable name in world-writable /tmp (`/tmp/ykshm-NAME.sock`) let any local user bind it
first and act as the engine towards the shim (issue 26.2). Every role therefore resolves one
directory, in this order:

    $RUNTIME_DIRECTORY      systemd's `RuntimeDirectory=ykshm` (/run/ykshm; first entry if several)
    $XDG_RUNTIME_DIR/ykshm  a login session's private /run/user/UID
    /tmp/ykshm-UID          made here, 0700
    ~/.cache/ykshm/run      made here, 0700, when /tmp/ykshm-UID is another user's or a symlink

and refuses one that is a symlink, is not owned by an allowed user (`allowed_uids`: ours, root,
and `YKSHM_ALLOWED_UIDS`), or that others may write to; the two directories we create ourselves
must be exactly 0700. The last line: /tmp is world-writable, so any local user could make
`/tmp/ykshm-UID` first and stop every role (security review 2, N16); a random `mkdtemp` name
would be safe but the roles could not find each other, so the fallback is a fixed place only we
can write, and every role that starts after the plant agrees on it. `peer_uid` and `check_peer` are SO_PEERCRED on a connected UNIX socket:
the engine checks the shim's uid and the shim the engine's. `check_socket_file` is what a client
checks before it connects. `write_private` replaces a file atomically through a tempfile of our
own (O_EXCL, no symlink followed), never a predictable `.tmp` name.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import tempfile
from pathlib import Path

from common.cliutil import Failure

ENV_ALLOWED = "YKSHM_ALLOWED_UIDS"
SUBDIR = "ykshm"


class RuntimeDirError(Failure, OSError):
    """The runtime directory, a socket in it or a peer is not what we may trust: one line, exit 1
    from any `ykshm` command (a `Failure`), and an OSError to code that copes with missing files."""


def allowed_uids(environ: dict[str, str] | None = None) -> frozenset[int]:
    """Our uid, root, and the comma-separated uids or user names in $YKSHM_ALLOWED_UIDS."""
    env = os.environ if environ is None else environ
    uids = {os.geteuid(), 0}
    for item in filter(None, (x.strip() for x in env.get(ENV_ALLOWED, "").split(","))):
        uids.add(_uid_of(item))
    return frozenset(uids)


def _uid_of(item: str) -> int:
    if item.isdigit():
        return int(item)
    import pwd

    try:
        return pwd.getpwnam(item).pw_uid
    except KeyError:
        raise RuntimeDirError(f"{ENV_ALLOWED}: {item!r} is neither a uid nor a user name") from None


def _candidates(environ: dict[str, str]) -> tuple[Path, bool]:
    """The directory to use, and whether we create it ourselves (then it must be 0700)."""
    systemd = environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd), False
    xdg = environ.get("XDG_RUNTIME_DIR", "")
    if xdg:
        return Path(xdg) / SUBDIR, True
    tmp = Path(tempfile.gettempdir()) / f"ykshm-{os.geteuid()}"
    try:
        st = os.lstat(tmp)
    except FileNotFoundError:
        return tmp, True
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
        return tmp, True
    home = environ.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".cache" / SUBDIR / "run", True


def runtime_dir_candidate(environ: dict[str, str] | None = None) -> Path:
    """Where the runtime directory would be, unchecked: for naming it in a message only."""
    return _candidates(os.environ if environ is None else environ)[0]


def peer_refusal(sock: socket.socket, uids: frozenset[int]) -> str | None:
    """Why a connected peer is refused (its uid is not allowed), or None: for a server's accept."""
    try:
        check_peer(sock, uids)
    except RuntimeDirError as exc:
        return str(exc)
    return None


def runtime_dir(create: bool = True, environ: dict[str, str] | None = None) -> Path:
    """The checked runtime directory (made 0700 if it is ours to make and `create`)."""
    env = os.environ if environ is None else environ
    path, ours = _candidates(env)
    if ours and create:
        try:
            if path.name == "run":   # the fallback in the home directory: its parents may be new
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    check_dir(path, exact_private=ours, uids=allowed_uids(env))
    return path


def check_dir(path: Path, *, exact_private: bool, uids: frozenset[int]) -> None:
    """Refuse a symlink, a non-directory, a foreign owner, or a mode others may write to."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise RuntimeDirError(f"runtime directory {path} does not exist") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeDirError(f"runtime directory {path} is not a directory (a symlink?)")
    if st.st_uid not in uids:
        raise RuntimeDirError(f"runtime directory {path} is owned by uid {st.st_uid}, "
                              f"not by an allowed user ({_names(uids)})")
    mode = stat.S_IMODE(st.st_mode)
    if exact_private and st.st_uid == os.geteuid() and mode != 0o700:
        raise RuntimeDirError(f"runtime directory {path} has mode {mode:o}, not 700")
    if mode & 0o022:
        raise RuntimeDirError(f"runtime directory {path} has mode {mode:o}: others may write")


def check_socket_file(path: str, uids: frozenset[int] | None = None) -> None:
    """Before connecting: `path` is a socket (not a symlink) owned by an allowed user."""
    uids = allowed_uids() if uids is None else uids
    st = os.lstat(path)  # FileNotFoundError: nobody listens yet, the caller waits
    if not stat.S_ISSOCK(st.st_mode):
        raise RuntimeDirError(f"{path} is not a socket")
    if st.st_uid not in uids:
        raise RuntimeDirError(f"{path} is owned by uid {st.st_uid}, not by an allowed user "
                              f"({_names(uids)})")


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected UNIX socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def check_peer(sock: socket.socket, uids: frozenset[int] | None = None) -> int:
    """The peer's uid if it is allowed; RuntimeDirError naming it otherwise."""
    uids = allowed_uids() if uids is None else uids
    uid = peer_uid(sock)
    if uid not in uids:
        raise RuntimeDirError(f"peer uid {uid} is not an allowed user ({_names(uids)})")
    return uid


def write_private(path: str | Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data`: a tempfile of our own beside it (O_EXCL, mode set before any
    byte is written), renamed over it. A symlink planted at `path` is replaced, not followed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def open_private_append(path: str | Path, mode: int = 0o600) -> int:
    """An fd appending to `path`, created `mode` if absent; never through a symlink, and refused
    if the file is not ours."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    if os.fstat(fd).st_uid != os.geteuid():
        os.close(fd)
        raise RuntimeDirError(f"{path} is not owned by us")
    return fd


def _names(uids: frozenset[int]) -> str:
    return ", ".join(f"uid {u}" for u in sorted(uids))
