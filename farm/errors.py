"""User-facing errors: bad input that the CLI reports in one line and exits 2 on, having written nothing."""
from __future__ import annotations


class UserError(ValueError):
    pass


def user_error_types() -> tuple[type[BaseException], ...]:
    """Every exception that means "your input is wrong", from each room of the house."""
    from cluster.profiles import ProfileError
    from stages.checkpoint import CheckpointError
    from stages.config import ConfigError
    from stages.protocol import ProtocolError

    from .models import ModelError

    return UserError, ModelError, ProtocolError, ConfigError, CheckpointError, ProfileError


MAX_TEXT_BYTES = 1 << 20      # lyrics, scores and specs: far above any song, far below a mistaken multi-GB file


def read_user_text(path, what: str) -> str:
    """A user's text file, read safely: a regular file (never a directory, a pipe or a device, which could hang),
    at most MAX_TEXT_BYTES, UTF-8. Raises UserError naming `what` (a flag, or a spec's file/track/field) and the
    path."""
    import os
    import stat

    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{what}: file not found: {path}") from None
    except OSError as exc:
        raise UserError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise UserError(f"{what}: {path} is {kind}")
    if info.st_size > MAX_TEXT_BYTES:
        raise UserError(f"{what}: {path} is {info.st_size:,} bytes; at most {MAX_TEXT_BYTES:,}")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TEXT_BYTES + 1)
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what}: not a UTF-8 text file: {path}") from None
    except OSError as exc:
        raise UserError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None


def write_crash_log(exc: BaseException) -> str:
    """A bug's whole traceback, with the command line and versions, into a log file → its path. The folder is
    $FARM_LOG_DIR, else $XDG_STATE_HOME/yue2-farm (~/.local/state/yue2-farm), else the temp folder when that
    cannot be written."""
    import datetime
    import os
    import platform
    import sys
    import tempfile
    import traceback

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    text = (f"farm {' '.join(sys.argv[1:])}\npython {platform.python_version()} on {platform.platform()}\n\n"
            + "".join(traceback.format_exception(exc)))
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    for folder in (os.environ.get("FARM_LOG_DIR") or os.path.join(state, "yue2-farm"), tempfile.gettempdir()):
        path = os.path.join(folder, f"crash-{stamp}-{os.getpid()}.log")
        try:
            os.makedirs(folder, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return path
        except OSError:
            continue
    return "(no folder could be written; the traceback is lost)"
