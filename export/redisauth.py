"""Where `ykshm export` gets its Redis URL, password and CA: never from the command line.

Anything in argv is readable by every local user (`ps`, /proc/PID/cmdline), so a password in a
`--redis` URL is refused (one line, exit 2) naming the alternatives, first found wins:

    --redis-password-file FILE            a file only the ykshm user reads
    $CREDENTIALS_DIRECTORY/redis-password systemd `LoadCredential=redis-password:/etc/ykshm/...`
    $REDISCLI_AUTH                        the variable redis-cli itself reads
The URL itself, when it is not given with --redis, comes from (first found wins):

    --redis-url-file FILE                 one line, may carry `user:password@`
    $CREDENTIALS_DIRECTORY/redis-url      systemd `LoadCredential=redis-url:/etc/ykshm/redis-url`
                                          (the shipped unit: nothing secret in ExecStart)
    $YKSHM_REDIS_URL                      may carry `user:password@` as it is; never expand it
                                          into `--redis ${YKSHM_REDIS_URL}` (argv again)

`--redis-ca FILE` verifies a `rediss://` server against that CA (TLS verification is always on).
The user name may stay in the URL: it is not a secret. `redact` keeps passwords out of logs and
of `ykshm status` either way.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from pathlib import Path
from typing import Any

ENV_URL = "YKSHM_REDIS_URL"
ENV_PASSWORD = "REDISCLI_AUTH"
CREDENTIAL = "redis-password"
URL_CREDENTIAL = "redis-url"


class AuthProblem(ValueError):
    """A URL, password or CA source that cannot be used; `str()` is the one-line reason."""


@dataclasses.dataclass(frozen=True)
class RedisAuth:
    """The password and CA that go to redis-py as arguments, never inside a URL we print."""

    password: str | None = None
    ca_file: str | None = None

    def client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.password is not None:
            kwargs["password"] = self.password
        if self.ca_file is not None:
            kwargs["ssl_ca_certs"] = self.ca_file
        return kwargs

    def __repr__(self) -> str:  # a log line or traceback never shows the password
        return f"RedisAuth(password={'***' if self.password else None}, ca_file={self.ca_file!r})"


def resolve(url_arg: str | None, password_file: str | None, ca_file: str | None,
            environ: dict[str, str] | None = None, flag: str = "--redis",
            url_file: str | None = None) -> tuple[str, RedisAuth]:
    """(URL without any password, RedisAuth) from the command line and the environment.
    `flag` names the URL's option in messages (`ykshm web` reads `--source`, with
    `--source-password-file` and `--source-ca`)."""
    env = os.environ if environ is None else environ
    if url_arg is not None:
        if _password_of(url_arg) is not None:
            raise AuthProblem(
                f"{flag}: a password in the URL is visible to every local user (ps, "
                f"/proc/PID/cmdline); give it in ${ENV_PASSWORD}, {flag}-password-file FILE, "
                f"systemd's LoadCredential={CREDENTIAL}:FILE" + _url_places(flag))
        url = url_arg
    else:
        url = _url_elsewhere(url_file, env, flag)
    in_url = _password_of(url)
    password = _password(password_file, env, flag) or (urllib.parse.unquote(in_url) if in_url else None)
    if ca_file is not None:
        if urllib.parse.urlsplit(url).scheme != "rediss":
            raise AuthProblem(f"{flag}-ca {ca_file}: only for a rediss:// (TLS) URL")
        _readable(ca_file, f"{flag}-ca")
    return _without_password(url), RedisAuth(password, ca_file)


def _url_places(flag: str) -> str:
    """The refusal's last alternative: where a whole URL may go (`ykshm export` only)."""
    if flag != "--redis":
        return ""
    return f", or the whole URL in {flag}-url-file FILE or LoadCredential={URL_CREDENTIAL}:FILE"


def _url_elsewhere(url_file: str | None, env: dict[str, str], flag: str) -> str:
    """The URL of a file, a systemd credential or the environment: places `ps` does not show."""
    if url_file is not None:
        return _read_secret(url_file, f"{flag}-url-file", "the URL")
    creds = env.get("CREDENTIALS_DIRECTORY")
    if creds and (Path(creds) / URL_CREDENTIAL).exists():
        return _read_secret(str(Path(creds) / URL_CREDENTIAL), f"credential {URL_CREDENTIAL}", "the URL")
    if env.get(ENV_URL):
        return env[ENV_URL]
    raise AuthProblem(f"{flag} URL (or {flag}-url-file, the credential {URL_CREDENTIAL}, "
                      f"${ENV_URL}) is required")


def _password(password_file: str | None, env: dict[str, str], flag: str) -> str | None:
    if password_file is not None:
        return _read_secret(password_file, f"{flag}-password-file")
    creds = env.get("CREDENTIALS_DIRECTORY")
    if creds and (Path(creds) / CREDENTIAL).exists():
        return _read_secret(str(Path(creds) / CREDENTIAL), f"credential {CREDENTIAL}")
    return env.get(ENV_PASSWORD) or None


def _read_secret(path: str, what: str, holding: str = "the password") -> str:
    text = _readable(path, what).rstrip("\r\n")
    if not text or "\n" in text:
        raise AuthProblem(f"{what} {path}: expected one line holding {holding}")
    return text


def _readable(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AuthProblem(f"{what} {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _password_of(url: str) -> str | None:
    try:
        return urllib.parse.urlsplit(url).password
    except ValueError:
        return None  # check_url names what is wrong with it


def _without_password(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    user = urllib.parse.quote(parts.username or "", safe="")
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port else ""
    netloc = f"{user}@{host}{port}" if user else f"{host}{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
