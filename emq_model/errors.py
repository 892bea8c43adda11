"""The refusal family: every refused call raises an ``EmqError`` whose ``code`` is the
stable first word of the matching script error reply (specs/lifecycle.md, "Refusals").

The words live here and nowhere else; the model, the live client and the driver map
codes to classes through ``from_code``.
"""

from __future__ import annotations

KIND = "EMQKIND"
STALE = "EMQSTALE"
STATE = "EMQSTATE"
LOCK = "EMQLOCK"
ARG = "EMQARG"
VERSION = "EMQVERSION"
TYPE = "EMQTYPE"

CODES = (KIND, STALE, STATE, LOCK, ARG, VERSION, TYPE)


class EmqError(Exception):
    """A refused call. ``code`` is one of ``CODES``; the refused call changed nothing."""

    code: str = ""

    def __init__(self, message: str = "") -> None:
        super().__init__(f"{self.code} {message}".rstrip())
        self.detail = message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EmqError) and other.code == self.code

    def __hash__(self) -> int:
        return hash(self.code)


class KindError(EmqError, ValueError):
    """The id is not a well-formed id of the expected namespace."""

    code = KIND


class StaleError(EmqError):
    """The token does not name the job's live attempt (mismatch, settled, or gone)."""

    code = STALE


class StateError(EmqError):
    """The job is in the wrong location for the op."""

    code = STATE


class LockError(EmqError):
    """The job is active: it is held under a lease."""

    code = LOCK


class ArgError(EmqError, ValueError):
    """A malformed argument: wrong type, out of range, or a bad queue name."""

    code = ARG


class VersionError(EmqError):
    """The keyspace carries another wire version than this client's (the fence)."""

    code = VERSION


class WrongTypeError(EmqError):
    """A key the call touches holds another type than its grammar's (CC-8): the call
    was refused before its first write and changed nothing."""

    code = TYPE


_BY_CODE = {cls.code: cls for cls in (KindError, StaleError, StateError, LockError, ArgError, VersionError,
                                      WrongTypeError)}


def from_code(code: str, message: str = "") -> EmqError:
    """The exception for a refusal code; ``KeyError`` for a word that is not a code."""
    return _BY_CODE[code](message)


def parse_reply(text: str) -> EmqError | None:
    """The exception for an error reply whose first word is a code, else ``None``."""
    code, _, rest = text.strip().partition(" ")
    cls = _BY_CODE.get(code)
    return cls(rest) if cls else None
