"""Tokens: the token file, and who may do what.

Token file (``--token-file``), JSON: ``{"admin": ["TOKEN", ...], "publisher": ["TOKEN", ...]}``
(a single string is accepted in place of a list; tokens are non-empty strings).  A request
carries its token as ``Authorization: Bearer TOKEN`` or, for browsers' EventSource and
WebSocket, ``?token=TOKEN``.  Roles:

* admin: everything;
* publisher: writes (PUT/DELETE subscriptions, messages, advance), snapshot queries and the
  recent messages (GET /v1/messages);
* owner: the token a ``PUT /v1/subscriptions/{id}`` answers with when it creates the
  subscription (field ``token``; a bulk ``POST /v1/subscriptions`` answers one per record): that
  subscription's result, events and deletion.

Owner tokens are shown once, at creation: the state, the log and the snapshots hold only
``sha256:`` + the hex SHA-256 of each (:func:`owner_hash`).  A data directory written before
(plain tokens in its log records and snapshots) is read by hashing them as they are loaded
(:func:`stored_owner`).  Without a token file every request is allowed, and the server listens
on loopback only (and :mod:`~skype.service.guard` checks Host and Origin).  Tokens are compared
in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from pathlib import Path

from skype.errors import InputError

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def new_owner_token() -> str:
    return secrets.token_urlsafe(24)


def new_owner_tokens(n: int) -> list[str]:
    """``n`` tokens as :func:`new_owner_token` makes them (24 random bytes, URL-safe base64: 32
    characters), from one draw and one encoding (a bulk call makes 100k)."""
    text = base64.urlsafe_b64encode(secrets.token_bytes(24 * n)).decode()  # 24 bytes: 32 characters, no padding
    return [text[i:i + 32] for i in range(0, 32 * n, 32)]


HASH_PREFIX = "sha256:"


def owner_hash(token: str) -> str:
    """What the server keeps of an owner token."""
    return HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def stored_owner(value: str) -> str:
    """An owner entry read from a log record or a snapshot as the state keeps it: a hash as it
    is, a plain token of an older data directory hashed ("" stays "": no owner)."""
    return value if not value or value.startswith(HASH_PREFIX) else owner_hash(value)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class Tokens:
    def __init__(self, admin: list[str], publisher: list[str]) -> None:
        self.admin, self.publisher = admin, publisher

    @classmethod
    def load(cls, path: str) -> Tokens:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise InputError("E101", path=path, detail=str(err)) from None
        if not isinstance(data, dict) or not set(data) <= {"admin", "publisher"}:
            raise InputError("E101", path=path, detail='expected {"admin": [...], "publisher": [...]}')
        roles = {}
        for role in ("admin", "publisher"):
            value = data.get(role, [])
            value = [value] if isinstance(value, str) else value
            if not isinstance(value, list) or not all(isinstance(t, str) and t for t in value):
                raise InputError("E101", path=path, detail=f"{role!r} must be a token string or a list of them")
            roles[role] = value
        if not roles["admin"] and not roles["publisher"]:
            raise InputError("E101", path=path, detail="no token in it")
        return cls(roles["admin"], roles["publisher"])

    def is_admin(self, token: str | None) -> bool:
        return token is not None and any(_same(token, t) for t in self.admin)

    def is_publisher(self, token: str | None) -> bool:
        return token is not None and (self.is_admin(token) or any(_same(token, t) for t in self.publisher))

    def is_owner(self, token: str | None, owner: str | None) -> bool:
        """``owner``: the subscription's stored owner hash (:func:`owner_hash`)."""
        return token is not None and (self.is_admin(token) or (bool(owner) and _same(owner_hash(token), owner or "")))


def check_host(host: str, tokens: Tokens | None) -> None:
    if tokens is None and host not in LOOPBACK:
        raise InputError("E097", host=host)
