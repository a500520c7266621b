"""The one place for resource-URI rules: validation, canonical form, prefixes and directories.

Everything here is a pure function over ``str``; nothing touches the database.  The admin API (on
write) and the MCP surface (on read, subscribe, complete) both call :func:`normalize_uri`, so the
string it returns is *the* catalogue key: a canonical URI round-trips unchanged and
``normalize_uri(normalize_uri(x)) == normalize_uri(x)`` for every accepted ``x``.

Decisions
---------
* **Syntax** is RFC 3986 (generic syntax), strictly: a scheme is required (``ALPHA *(ALPHA / DIGIT /
  "+" / "-" / ".")``); every ``%`` starts a valid ``%XX`` triplet; ASCII characters outside the
  RFC 3986 set (space, ``"<>\\^`{|}``, ``[``/``]`` outside an IP literal, controls, DEL) are refused,
  not repaired.  ``%00`` is refused everywhere (no catalogue key ever needs a NUL).
* **IRIs are accepted and converted** (RFC 3987 §3.1): a non-ASCII character is percent-encoded as
  its UTF-8 octets, so every stored key is ASCII.  No Unicode normalisation (NFC) is applied: the key
  is exact.  Non-ASCII controls, format characters (bidi overrides, zero-width joiners), separators
  (U+00A0, U+2028, ...), private-use code points, lone surrogates and non-characters are refused.
* **Length**: at most 2048 bytes of UTF-8, checked on the input and on the canonical output (which
  can be longer, because of IRI encoding).
* **Canonical form** (RFC 3986 §6.2.2): scheme lowercased; host lowercased (IPv6 literals in
  RFC 5952 form); hex digits of triplets uppercased; triplets of unreserved characters decoded
  (``%7E`` -> ``~``, ``%2E`` -> ``.``); an empty port (``host:``) dropped and leading zeros of a port
  removed; ``.`` segments removed from hierarchical paths.  The trailing ``/`` is significant and
  kept (``file:///a`` and ``file:///a/`` are different keys).
* **file:** (RFC 8089): ``file:/p`` and ``file://localhost/p`` become ``file:///p``; empty segments
  collapse (``file:///a//b`` -> ``file:///a/b``); the path must be absolute.
* **Traversal is refused for every scheme**, not only ``file:``: a catalogue key must be canonical,
  so ``test://a/../b`` may not be an alias of ``test://b``.  A path segment is refused when it is
  ``..``, or when any decoding of it -- percent-decoded once, twice, ... (double encoding), split on
  ``/`` *and* ``\\``, NFKC-folded (``U+2025`` is "‥"), cut at ``;`` (``..;x``, a Tomcat path
  parameter) -- is made only of dots and spaces (Windows drops trailing dots and spaces, so ``...``
  and ``.. `` are refused too).  Overlong UTF-8 (``%C0%AE``) at any decoding level is refused, and the
  octets of a path must decode to valid UTF-8.  Query and fragment are not paths and are not checked.
* **Prefixes** (:func:`validate_uri_prefix`) get the same treatment as far as the text goes; the
  last, possibly incomplete, segment is kept as typed (``file:///a/.`` may begin ``.git``) but may
  not be made of dots only beyond a single ``.``.

Ordering: PostgreSQL ``text`` under the "C" collation compares UTF-8 bytes (``memcmp``) and Python
compares ``str`` by code point; for valid UTF-8 (no surrogates) the two orders are identical, which
is what :func:`uri_prefix_upper_bound` relies on.  Canonical keys are ASCII anyway.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import string
import sys
import unicodedata
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MAX_URI_BYTES",
    "InvalidUri",
    "check_uri_characters",
    "descendant_prefix",
    "is_descendant",
    "normalize_uri",
    "uri_prefix_upper_bound",
    "validate_uri_prefix",
]

MAX_URI_BYTES: Final = 2048
"""Largest URI (input and canonical form), in bytes of UTF-8."""

_MAX_DECODE_LEVELS: Final = 16

_UNRESERVED: Final = frozenset(string.ascii_letters + string.digits + "-._~")
_SUB_DELIMS: Final = frozenset("!$&'()*+,;=")
_REG_NAME_CHARS: Final = _UNRESERVED | _SUB_DELIMS
_USERINFO_CHARS: Final = _REG_NAME_CHARS | {":"}
_PATH_CHARS: Final = _REG_NAME_CHARS | {":", "@", "/"}
_QUERY_CHARS: Final = _PATH_CHARS | {"?"}
_PARTIAL_AUTHORITY_CHARS: Final = _USERINFO_CHARS | {"@", "[", "]"}
_HEXDIGITS: Final = frozenset(string.hexdigits)

_SCHEME_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
# RFC 3986 Appendix B, with the scheme made visible even when it is syntactically wrong.
_SPLIT_RE: Final = re.compile(r"(?:([^:/?#]*):)?(//([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.DOTALL)
_PCT_BYTES_RE: Final = re.compile(rb"%([0-9A-Fa-f]{2})")
_OVERLONG_RE: Final = re.compile(rb"[\xc0\xc1][\x80-\xbf]|\xe0[\x80-\x9f]|\xf0[\x80-\x8f]")
_REFUSED_CATEGORIES: Final = {
    "Cc": "control character",
    "Cf": "format character",
    "Cs": "lone surrogate",
    "Co": "private-use character",
    "Zs": "whitespace",
    "Zl": "line separator",
    "Zp": "paragraph separator",
}


class InvalidUri(ValueError):
    """A URI (or URI prefix) that the catalogue refuses.

    ``reason`` is a short human explanation; ``uri`` is the offending input, unchanged.
    """

    def __init__(self, reason: str, uri: object) -> None:
        self.reason = reason
        self.uri = uri
        shown = uri if not isinstance(uri, str) or len(uri) <= 120 else uri[:117] + "..."
        super().__init__(f"invalid URI {shown!r}: {reason}")


@dataclass(frozen=True)
class _Parts:
    scheme: str
    authority: str | None
    path: str
    query: str | None
    fragment: str | None

    def unsplit(self) -> str:
        out = [self.scheme, ":"]
        if self.authority is not None:
            out += ["//", self.authority]
        out.append(self.path)
        if self.query is not None:
            out += ["?", self.query]
        if self.fragment is not None:
            out += ["#", self.fragment]
        return "".join(out)


# --------------------------------------------------------------------------------------------------
# Public API


def normalize_uri(raw: str) -> str:
    """Validate ``raw`` and return its canonical form, the stored catalogue key.

    Raises :class:`InvalidUri` (a ``ValueError``) with a human ``reason`` for anything refused; see
    the module docstring for the rules.
    """
    return _canonical(raw, partial=False)


def validate_uri_prefix(raw: str) -> str:
    """Validate a URI prefix (grant ``uriPrefix``, list filter) and return its canonical form.

    A prefix need not be a complete URI, but it must be a valid beginning of one: a scheme and its
    ``:``, no control characters or whitespace, no traversal, and no incomplete trailing ``%XX``.
    The result is what canonical URIs are compared against, so ``Test://A/`` becomes ``test://a/``.
    An unfinished authority (``test://Ho``) is read as a host and lowercased, even though it could
    be the start of a userinfo (``test://Ho@...``); finish it (``test://Ho@``) to keep the case.
    """
    return _canonical(raw, partial=True)


def check_uri_characters(text: str) -> None:
    """Refuse the characters no URI or URI template may contain, raw: ASCII controls, DEL, space,
    backslash, and the non-ASCII controls, format characters, separators, private-use code points,
    surrogates and non-characters.  (Other non-ASCII characters are IRI characters.)"""
    if text.isascii() and _BAD_ASCII.search(text) is None:
        return  # the common case, decided in C: nothing below would refuse a character
    for ch in text:
        _check_char(ch, text)


def uri_prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with ``prefix``.

    For an index range: ``uri >= prefix AND uri < upper`` selects exactly the URIs starting with
    ``prefix``, in code-point order, which equals PostgreSQL "C" collation (UTF-8 byte) order.  Returns
    ``None`` when there is no such string (``prefix`` is empty or made only of U+10FFFF): then the
    range is just ``uri >= prefix``.  Surrogates cannot be encoded in UTF-8, so the code point after
    U+D7FF is U+E000; a ``prefix`` containing a surrogate is a ``ValueError``.
    """
    if any(0xD800 <= ord(c) <= 0xDFFF for c in prefix):
        raise ValueError("prefix contains a lone surrogate, which PostgreSQL text cannot hold")
    stem = prefix.rstrip(chr(sys.maxunicode))
    if not stem:
        return None
    nxt = ord(stem[-1]) + 1
    if 0xD800 <= nxt <= 0xDFFF:
        nxt = 0xE000
    return stem[:-1] + chr(nxt)


def descendant_prefix(parent_uri: str) -> str | None:
    """The string every descendant of ``parent_uri`` starts with (``parent + "/"``, or ``parent``
    itself when it already ends with ``/``); ``None`` when the URI cannot have descendants (it has a
    query or fragment).  Use with :func:`uri_prefix_upper_bound` for an index range, then
    :func:`is_descendant` to drop the ``?``/``#`` continuations.
    """
    if "?" in parent_uri or "#" in parent_uri:
        return None
    return parent_uri if parent_uri.endswith("/") else parent_uri + "/"


def is_descendant(parent_uri: str, uri: str) -> bool:
    """Whether ``uri`` lies below the directory ``parent_uri`` (inode/directory semantics).

    Children are the URIs that continue the parent's after a ``/``: parent ``file:///a`` has
    ``file:///a/b`` and ``file:///a/b/c`` but not ``file:///ab``, nor ``file:///a`` itself, nor
    ``file:///a/`` (nothing after the slash), nor ``file:///a/?q``.  A parent ending in ``/``
    (``file:///``) works the same way.  Both arguments are expected in canonical form.
    """
    head = descendant_prefix(parent_uri)
    if head is None or not uri.startswith(head):
        return False
    rest = uri[len(head) :]
    return rest != "" and rest[0] not in "?#"


# --------------------------------------------------------------------------------------------------
# The pipeline


def _canonical(raw: str, *, partial: bool) -> str:
    if not isinstance(raw, str):  # before the cache, which needs a hashable key
        raise InvalidUri("not a string", raw)
    return _canonical_text(raw, partial)


# Agents read and list the same URIs over and over; the check is pure and costs more than a lookup.
# Bounded (URIs are at most 2048 bytes); refusals are exceptions, which are never cached.
@functools.lru_cache(maxsize=2048)
def _canonical_text(raw: str, partial: bool) -> str:
    if raw == "":
        raise InvalidUri("empty", raw)
    try:
        size = len(raw.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidUri("contains a lone surrogate", raw) from None
    if size > MAX_URI_BYTES:
        raise InvalidUri(f"longer than {MAX_URI_BYTES} bytes", raw)
    check_uri_characters(raw)

    m = _SPLIT_RE.fullmatch(raw)
    assert m is not None  # every group is optional, so the pattern matches any string
    scheme, _, authority, path, query, fragment = m.groups()
    if scheme is None or scheme == "":
        raise InvalidUri("a scheme is required (for example 'file:' or 'test:')", raw)
    if not _SCHEME_RE.fullmatch(scheme):
        raise InvalidUri(f"invalid scheme {scheme!r}: a letter, then letters, digits, '+', '-' or '.'", raw)
    scheme = scheme.lower()
    # In a prefix, an authority that runs to the end of the text may still be incomplete.
    authority_open = partial and authority is not None and path == "" and query is None and fragment is None

    if authority is not None:
        authority = _canon_authority(authority, raw, partial=authority_open)

    # Which part of the text is the (possibly incomplete) tail?
    path_open = partial and query is None and fragment is None and not authority_open
    query_open = partial and query is not None and fragment is None
    fragment_open = partial and fragment is not None

    path = _canon_component(path, _PATH_CHARS, "path", raw, partial=path_open)
    if query is not None:
        query = _canon_component(query, _QUERY_CHARS, "query", raw, partial=query_open)
    if fragment is not None:
        fragment = _canon_component(fragment, _QUERY_CHARS, "fragment", raw, partial=fragment_open)

    if scheme == "file":
        authority, path = _file_rules(authority, path, raw, partial=partial, authority_open=authority_open)

    path = _canon_path(
        path, raw, hierarchical=authority is not None or path.startswith("/"), partial=path_open
    )
    if scheme == "file":
        path = _collapse_empty_segments(path, partial=path_open)
    if authority is None and path.startswith("//"):
        raise InvalidUri("the path would start with '//' and read as an authority", raw)

    out = _Parts(scheme, authority, path, query, fragment).unsplit()
    if len(out) > MAX_URI_BYTES:  # ASCII now, so characters are bytes
        raise InvalidUri(f"longer than {MAX_URI_BYTES} bytes once percent-encoded", raw)
    return out


# The ASCII characters _check_char refuses: controls, space, backslash, DEL.
_BAD_ASCII = re.compile(r"[\x00-\x20\\\x7f]")


def _check_char(ch: str, raw: str) -> None:
    o = ord(ch)
    if o < 0x80:
        if o < 0x20 or o == 0x7F:
            raise InvalidUri(f"control character U+{o:04X}", raw)
        if ch == " ":
            raise InvalidUri("whitespace (U+0020); percent-encode it as %20", raw)
        if ch == "\\":
            raise InvalidUri("backslash is not allowed in a URI", raw)
        return
    cat = unicodedata.category(ch)
    if cat in _REFUSED_CATEGORIES:
        raise InvalidUri(f"{_REFUSED_CATEGORIES[cat]} U+{o:04X}", raw)
    if 0xFDD0 <= o <= 0xFDEF or (o & 0xFFFE) == 0xFFFE:
        raise InvalidUri(f"non-character U+{o:04X}", raw)


def _canon_component(text: str, allowed: frozenset[str], what: str, raw: str, *, partial: bool) -> str:
    """Check characters, normalise triplets (uppercase hex, decode unreserved), encode IRI chars."""
    if allowed.issuperset(text):
        return text  # no triplet (``%`` is not in any allowed set) and nothing to encode: as it is
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "%":
            hexpart = text[i + 1 : i + 3]
            if len(hexpart) < 2 or not all(h in _HEXDIGITS for h in hexpart):
                if partial and i + 1 + len(hexpart) == n and all(h in _HEXDIGITS for h in hexpart):
                    raise InvalidUri("the prefix ends inside a percent-encoding", raw)
                raise InvalidUri(f"invalid percent-encoding {text[i : i + 3]!r} in the {what}", raw)
            byte = int(hexpart, 16)
            if byte == 0:
                raise InvalidUri("percent-encoded NUL (%00)", raw)
            decoded = chr(byte)
            out.append(decoded if decoded in _UNRESERVED else "%" + hexpart.upper())
            i += 3
            continue
        if ch in allowed:
            out.append(ch)
        elif ord(ch) >= 0x80:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            raise InvalidUri(f"character {ch!r} is not allowed in the {what}; percent-encode it", raw)
        i += 1
    return "".join(out)


def _lower_outside_triplets(text: str) -> str:
    return re.sub(r"%[0-9a-f]{2}", lambda m: m.group().upper(), text.lower())


def _canon_authority(authority: str, raw: str, *, partial: bool) -> str:
    if partial:
        # An incomplete authority: check characters, lowercase everything after the userinfo.
        text = _canon_component(authority, _PARTIAL_AUTHORITY_CHARS, "authority", raw, partial=True)
        userinfo, at, hostport = text.rpartition("@")
        if "@" in userinfo:
            raise InvalidUri("more than one '@' in the authority", raw)
        return userinfo + at + _lower_outside_triplets(hostport)

    userinfo, at, hostport = authority.rpartition("@")
    if "@" in userinfo:
        raise InvalidUri("more than one '@' in the authority", raw)
    if at:
        userinfo = _canon_component(userinfo, _USERINFO_CHARS, "userinfo", raw, partial=False)

    if hostport.startswith("["):
        close = hostport.find("]")
        if close == -1:
            raise InvalidUri("unterminated IP literal '[' in the host", raw)
        host = _canon_ip_literal(hostport[1:close], raw)
        rest = hostport[close + 1 :]
        if rest and not rest.startswith(":"):
            raise InvalidUri("unexpected text after the IP literal", raw)
        port = rest[1:] if rest else None
    else:
        host, colon, port_text = hostport.partition(":")
        port = port_text if colon else None
        host = _lower_outside_triplets(_canon_component(host, _REG_NAME_CHARS, "host", raw, partial=False))

    if port is not None:
        if port and not (port.isascii() and port.isdigit()):
            raise InvalidUri(f"the port {port!r} is not a number", raw)
        port = port.lstrip("0") or ("0" if port else "")
    return (userinfo + "@" if at else "") + host + (":" + port if port else "")


def _canon_ip_literal(inner: str, raw: str) -> str:
    if inner[:1] in ("v", "V"):
        version, dot, rest = inner[1:].partition(".")
        ok_version = version != "" and all(c in _HEXDIGITS for c in version)
        if not (dot and ok_version and rest and all(c in _USERINFO_CHARS for c in rest)):
            raise InvalidUri("invalid IPvFuture literal", raw)
        return "[" + inner.lower() + "]"
    if "%" in inner:
        raise InvalidUri("IPv6 zone identifiers are not supported", raw)
    try:
        address = ipaddress.IPv6Address(inner)
    except ValueError:
        raise InvalidUri(f"invalid IPv6 literal [{inner}]", raw) from None
    if address.ipv4_mapped is not None:  # RFC 5952 §5: mixed notation
        return f"[::ffff:{address.ipv4_mapped}]"
    return "[" + address.compressed + "]"


def _file_rules(
    authority: str | None, path: str, raw: str, *, partial: bool, authority_open: bool
) -> tuple[str | None, str]:
    """RFC 8089: an absolute path, an empty host for the local machine."""
    if authority is None:
        if path == "" and partial:
            return None, path  # "file:" as a prefix
        if not path.startswith("/"):
            raise InvalidUri("a file: URI needs an absolute path (file:///...)", raw)
        if partial and path == "/":
            return None, path  # "file:/" as a prefix: the beginning of every file URI
        authority = ""
    if not authority_open:
        if authority == "localhost":
            authority = ""
        if path == "":
            path = "/"
    return authority, path


def _canon_path(path: str, raw: str, *, hierarchical: bool, partial: bool) -> str:
    """Refuse traversal in every segment; remove ``.`` segments from hierarchical paths."""
    if path == "":
        return path
    segments = path.split("/")
    out: list[str] = []
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if partial and i == last:
            if seg != ".":
                _check_segment(seg, raw)
            out.append(seg)
            continue
        if _check_segment(seg, raw) and hierarchical:
            if i == last:
                out.append("")  # "/a/." means "/a/"
            continue
        out.append(seg)
    return "/".join(out)


def _collapse_empty_segments(path: str, *, partial: bool) -> str:
    """file: paths: ``//`` is ``/``.  Keeps the leading ``/`` and a trailing ``/``."""
    if "//" not in path:
        return path
    segments = path.split("/")
    middle = [s for s in segments[1:-1] if s]
    return "/".join([segments[0], *middle, segments[-1]])


def _check_segment(seg: str, raw: str) -> bool:
    """Return True for a plain ``.`` segment; raise for traversal or a disguised dot segment."""
    if seg == ".":
        return True
    if seg == "..":
        raise InvalidUri("'..' path segments (directory traversal) are not allowed", raw)
    if "." not in seg and "%" not in seg:
        return False  # fast path: nothing can decode to a dot
    data = seg.encode("ascii")
    for level in range(_MAX_DECODE_LEVELS + 1):
        if level == 1:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidUri("percent-encoded octets in the path are not valid UTF-8", raw) from None
        if _OVERLONG_RE.search(data):
            raise InvalidUri("overlong UTF-8 encoding in the path", raw)
        _check_pieces(data, raw)
        decoded = _PCT_BYTES_RE.sub(lambda m: bytes([int(m.group(1), 16)]), data)
        if decoded == data:
            return False
        data = decoded
    raise InvalidUri("the path is percent-encoded too many times over", raw)


def _check_pieces(data: bytes, raw: str) -> None:
    """Refuse any piece made only of dots and spaces (the plain ``.`` segment never gets here)."""
    for piece in re.split(rb"[/\\]", data):
        text = unicodedata.normalize("NFKC", piece.decode("utf-8", "replace")).split(";", 1)[0]
        if text and "." in text and text.strip(". ") == "":
            if ".." in text.replace(" ", ""):
                raise InvalidUri("'..' path segments (directory traversal) are not allowed", raw)
            raise InvalidUri(f"disguised '.' path segment {piece.decode('utf-8', 'replace')!r}", raw)
