"""One log line format for every `ykshm` role: `--log-level` and `--log-format text|json`.

`ykshm run` writes every child's stderr into one file, and before this each role had its own
shape (`INFO ykshm.engine: ...` without a time, `ykshm web[pid]: ...`, hypercorn's
`[date] [pid] [INFO]`, each hypercorn line twice through its own handler and the root's). Every
role now configures the root logger once, here, so a line is

    2026-11-28T14:11:27.791Z INFO engine[1234] ykshm.engine: configuration loaded

(UTC, milliseconds; the role and pid say which process among several of one instance), or with
`--log-format json` one object per line with YuniKorn's zap keys (`ts`, `level`, `logger`, `msg`)
plus `role` and `pid`. hypercorn's loggers are handed to the root (`hypercorn_loggers`), so its
lines take the same shape and are written once.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")


def level_arg(value: str) -> str:
    """argparse type of --log-level: any case, stored upper-case (logging's names)."""
    if value.lower() not in LEVELS:
        raise argparse.ArgumentTypeError(f"invalid level {value!r} (choose from {', '.join(LEVELS)})")
    return value.upper()


def add_flags(parser: argparse.ArgumentParser, default_level: str = "info") -> None:
    """--log-level and --log-format on a role's parser; the role's name is the parser's prog."""
    parser.add_argument("--log-level", type=level_arg, default=default_level.upper(), metavar="LEVEL",
                        help=f"least severe level logged: {', '.join(LEVELS)} (default {default_level})")
    parser.add_argument("--log-format", choices=FORMATS, default="text",
                        help="text: one timestamped line per record (default); json: one object per line")
    parser.set_defaults(log_role=parser.prog.removeprefix("ykshm").strip() or "ykshm")


def argv_of(args: argparse.Namespace) -> list[str]:
    """The same two flags again, for a child process."""
    return ["--log-level", args.log_level.lower(), "--log-format", args.log_format]


def _utc(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_utc(record)} {record.levelname} {self.role}[{record.process}] {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def __init__(self, role: str) -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"ts": _utc(record), "level": record.levelname.lower(), "role": self.role,
                               "pid": record.process, "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def configure(role: str, level: str = "INFO", fmt: str = "text") -> None:
    """The root logger: one stderr handler in the chosen format, at `level`. Called again (a role
    configures, then a library it calls does), it replaces its own handler, never adds a second;
    a handler someone else attached (pytest's caplog) stays."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(role) if fmt == "json" else TextFormatter(role))
    handler.ykshm = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if not getattr(h, "ykshm", False)] + [handler]
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    for name in ("ykshm", "hypercorn.error", "hypercorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()     # a handler set up before (an import, a library) would write twice
        logger.propagate = True


def configure_from(args: argparse.Namespace, role: str | None = None) -> None:
    """configure() with the flags add_flags() put on the parser (the role: its prog); a namespace
    built without them (a library caller) gets the defaults."""
    configure(role or getattr(args, "log_role", "ykshm"), getattr(args, "log_level", "INFO"),
              getattr(args, "log_format", "text"))


def hypercorn_loggers(config: Any) -> Any:
    """A hypercorn Config whose error log is the root's (our format, once) and with no access log."""
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config
