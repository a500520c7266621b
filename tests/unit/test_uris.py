"""catalog.core.uris: validation, canonical form, traversal refusal, prefix ranges, directories."""

from __future__ import annotations

import re
import sys
from urllib.parse import unquote

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from catalog.core.uris import (
    MAX_URI_BYTES,
    InvalidUri,
    check_uri_characters,
    descendant_prefix,
    is_descendant,
    normalize_uri,
    uri_prefix_upper_bound,
    validate_uri_prefix,
)

# --------------------------------------------------------------------------------------------------
# Canonical form


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("test://static-text", "test://static-text"),
        ("TEST://Static-Text", "test://static-text"),  # scheme and host are case-insensitive
        ("test://host/Path/Is/Kept", "test://host/Path/Is/Kept"),  # the path is not
        ("file:///project/src/main.py", "file:///project/src/main.py"),
        ("FILE:///a", "file:///a"),
        ("file://localhost/a", "file:///a"),
        ("file://LOCALHOST/a", "file:///a"),
        ("file:/a/b", "file:///a/b"),
        ("file://", "file:///"),
        ("file://server/share/x", "file://server/share/x"),
        ("file:///a//b///c", "file:///a/b/c"),
        ("file:///a/./b/.", "file:///a/b/"),
        ("file:///a/b/", "file:///a/b/"),  # trailing slash is significant
        ("file:///a/%2e/b", "file:///a/b"),  # %2E is an unreserved '.', hence a '.' segment
        ("test://h/a/./b", "test://h/a/b"),
        ("test://h/a//b", "test://h/a//b"),  # '//' collapses for file: only
        ("test:/./x", "test:/x"),
        ("test:a/./b", "test:a/./b"),  # rootless paths keep '.'
        ("test://h/%7e%41%5f", "test://h/~A_"),  # unreserved triplets decoded
        ("test://h/%2f%3a%c3%a9", "test://h/%2F%3A%C3%A9"),  # others: hex uppercased
        ("test://h/café", "test://h/caf%C3%A9"),  # IRI → URI
        ("test://HÉ.example/", "test://h%C3%89.example/"),  # only ASCII is case-folded
        ("test://h/?q=%7e&r=a/b?c", "test://h/?q=~&r=a/b?c"),
        ("test://h/#Frag", "test://h/#Frag"),
        ("test://h/?", "test://h/?"),  # an empty query is not "no query"
        ("test://h:/x", "test://h/x"),
        ("test://h:0080/x", "test://h:80/x"),
        ("test://h:000/x", "test://h:0/x"),
        ("test://User:Pw@Host/", "test://User:Pw@host/"),  # userinfo keeps its case
        ("http://[2001:DB8:0:0:0:0:0:1]:8080/", "http://[2001:db8::1]:8080/"),
        ("http://[::FFFF:192.0.2.1]/", "http://[::ffff:192.0.2.1]/"),
        ("http://[v1.A:b]/", "http://[v1.a:b]/"),
        ("urn:isbn:0451450523", "urn:isbn:0451450523"),
        ("mailto:A@Example.com", "mailto:A@Example.com"),
        ("data:text/plain,hi", "data:text/plain,hi"),
        ("a+b-c.d://x", "a+b-c.d://x"),
        ("test://h/a..b/..c/d../...x", "test://h/a..b/..c/d../...x"),  # dots inside names are fine
        ("test://h/a;b=c/.x/_/", "test://h/a;b=c/.x/_/"),
        ("file:///a/b?x=../../etc", "file:///a/b?x=../../etc"),  # the query is not a path
    ],
)
def test_normalize_uri_gives_the_canonical_form(raw: str, canonical: str) -> None:
    assert normalize_uri(raw) == canonical


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("::", "scheme is required"),
        ("no-scheme", "scheme is required"),
        ("/abs/path", "scheme is required"),
        ("//host/path", "scheme is required"),
        ("1abc://x", "invalid scheme"),
        ("a_b://x", "invalid scheme"),
        ("-a:x", "invalid scheme"),
        ("test://h/a b", "whitespace"),
        (" test://h", "whitespace"),
        ("test://h/\x00", "control character U+0000"),
        ("test://h/\t", "control character U+0009"),
        ("test://h/\n", "control character U+000A"),
        ("test://h/\x7f", "control character U+007F"),
        ("test://h/\x85", "control character U+0085"),
        ("test://h/\u00a0", "whitespace U+00A0"),
        ("test://h/\u2028", "line separator"),
        ("test://h/\u202e", "format character U+202E"),  # bidi override
        ("test://h/\u200b", "format character U+200B"),
        ("test://h/\ue000", "private-use"),
        ("test://h/\ufdd0", "non-character"),
        ("test://h/\uffff", "non-character"),
        ("test://h/\ud800", "lone surrogate"),
        ("test://h/%", "invalid percent-encoding"),
        ("test://h/%4", "invalid percent-encoding"),
        ("test://h/%zz", "invalid percent-encoding"),
        ("test://h/%00", "NUL"),
        ("test://h/?q=%00", "NUL"),
        ("test://h/<x>", "not allowed in the path"),
        ('test://h/"', "not allowed in the path"),
        ("test://h/{id}", "not allowed in the path"),
        ("test://h/a|b", "not allowed in the path"),
        ("test://h/a^b", "not allowed in the path"),
        ("test://h/a`b", "not allowed in the path"),
        ("test://h/[x]", "not allowed in the path"),
        ("test://h/?q=[x]", "not allowed in the query"),
        ("test://h/#a#b", "not allowed in the fragment"),
        ("test://h\\x", "backslash"),
        ("test://a@b@c/", "more than one '@'"),
        ("test://h:8o/", "port"),
        ("test://[::1/", "unterminated IP literal"),
        ("test://[::g]/", "invalid IPv6"),
        ("test://[fe80::1%25eth0]/", "zone"),
        ("test://[::1]x/", "after the IP literal"),
        ("test://h%20x/", None),  # accepted: a percent-encoded reg-name is RFC 3986
        ("file:relative/path", "absolute path"),
        ("file:", "absolute path"),
        ("test:/.//x", "would start with '//'"),
    ],
)
def test_normalize_uri_refuses_malformed_uris_with_a_reason(raw: str, reason: str | None) -> None:
    """RES-22 (docs/requirements.toml)."""
    if reason is None:
        normalize_uri(raw)
        return
    with pytest.raises(InvalidUri) as info:
        normalize_uri(raw)
    assert reason in info.value.reason
    assert info.value.uri == raw
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("raw", [b"test://x", ["test://x"], {"uri": "test://x"}, None, 7])
def test_invalid_uri_refuses_non_strings(raw: object) -> None:
    """Unhashable values too: the canonical form is cached, and the cache must not see them."""
    with pytest.raises(InvalidUri, match="not a string"):
        normalize_uri(raw)  # type: ignore[arg-type]
    with pytest.raises(InvalidUri, match="not a string"):
        validate_uri_prefix(raw)  # type: ignore[arg-type]


def test_invalid_uri_message_shortens_huge_input() -> None:
    with pytest.raises(InvalidUri) as info:
        normalize_uri("test://h/" + "a" * 5000)
    assert len(str(info.value)) < 300
    assert info.value.uri == "test://h/" + "a" * 5000


def test_length_limit_is_2048_bytes_of_utf8() -> None:
    head = "test://h/"
    fits = head + "a" * (MAX_URI_BYTES - len(head))
    assert normalize_uri(fits) == fits
    with pytest.raises(InvalidUri, match="2048"):
        normalize_uri(fits + "a")


def test_length_limit_counts_the_percent_encoded_form_of_an_iri() -> None:
    iri = "test://h/" + "é" * 500  # 1009 bytes of UTF-8, 3009 bytes once encoded
    assert len(iri.encode()) < MAX_URI_BYTES
    with pytest.raises(InvalidUri, match="percent-encoded"):
        normalize_uri(iri)


def test_canonical_output_is_ascii_for_iri_input() -> None:
    out = normalize_uri("file:///データ/ファイル.txt")
    assert out.isascii()
    assert unquote(out) == "file:///データ/ファイル.txt"


# --------------------------------------------------------------------------------------------------
# Traversal

TRAVERSAL_PAYLOADS = [
    "file:///project/../../etc/passwd",
    "file:///project/..",
    "file:///..",
    "file:///../etc/passwd",
    "file:///project/%2e%2e/etc/passwd",
    "file:///project/%2E%2E/etc/passwd",
    "file:///project/%2E%2e/etc/passwd",
    "file:///project/.%2e/etc/passwd",
    "file:///project/%2e./etc/passwd",
    "file:///project/..%2fetc/passwd",
    "file:///project/..%2Fetc",
    "file:///project/x%2f..%2f..%2fetc",
    "file:///project/%2f../etc",
    "file:///project/%252e%252e/etc/passwd",
    "file:///project/%252E%252E%252Fetc",
    "file:///project/%25252e%25252e/etc",
    "file:///project/.%252e/etc",
    "file:///project/..%5cetc",
    "file:///project/..%5C..%5Cwindows",
    "file:///project/%5c..%5cetc",
    "file:///project/%255c..%255cetc",
    "file:///project/%c0%ae%c0%ae/etc",  # overlong UTF-8 '.'
    "file:///project/%25c0%25ae%25c0%25ae/etc",  # ... double-encoded
    "file:///project/%c0%af../etc",  # overlong '/'
    "file:///project/%e0%80%ae%e0%80%ae/etc",
    "file:///project/..;/etc/passwd",  # Tomcat path parameter
    "file:///project/..;jsessionid=x/etc",
    "file:///project/...",  # Windows trims trailing dots
    "file:///project/..%20/etc",  # ... and trailing spaces
    "file:///project/.%20./etc",
    "file:///project/%e2%80%a5/etc",  # U+2025 TWO DOT LEADER, NFKC '..'
    "file:///project/%ef%bc%8e%ef%bc%8e/etc",  # FULLWIDTH FULL STOP x2
    "file:///project/\u2025/etc",  # the same, raw (IRI)
    "file:///project/\uff0e\uff0e/etc",  # the same, raw
    "file:///project/%2e%2e",
    "file:///project/a/../../../../etc/shadow",
    "FILE://localhost/project/../../etc/passwd",
    "file:/project/../etc",
    "file://host/share/../x",
    "test://a/../b",
    "test://template/../secret/data",
    "test:/a/%2e%2e/b",
    "test:../b",
    "https://example.com/a/%2E%2E/b",
    "test://h/a/%2e%2e%2f%2e%2e%2f",
]


@pytest.mark.parametrize("payload", TRAVERSAL_PAYLOADS)
def test_traversal_payload_is_refused(payload: str) -> None:
    """RES-24 (docs/requirements.toml)."""
    with pytest.raises(InvalidUri) as info:
        normalize_uri(payload)
    assert re.search(r"traversal|disguised|UTF-8", info.value.reason)


def test_traversal_corpus_is_large() -> None:
    assert len(TRAVERSAL_PAYLOADS) >= 25


@pytest.mark.parametrize("payload", TRAVERSAL_PAYLOADS)
def test_traversal_payload_is_refused_as_a_prefix_too(payload: str) -> None:
    with pytest.raises(InvalidUri):
        validate_uri_prefix(payload)


@pytest.mark.parametrize(
    "payload",
    [
        "file:///project/%252e/x",  # double-encoded single dot: an alias of '.'
        "file:///project/.;x/y",
        "file:///project/a%2f.%2fb",
        "file:///project/%20./x",
    ],
)
def test_disguised_single_dot_segments_are_refused(payload: str) -> None:
    with pytest.raises(InvalidUri, match="disguised"):
        normalize_uri(payload)


def test_path_octets_must_be_valid_utf8() -> None:
    with pytest.raises(InvalidUri, match="UTF-8"):
        normalize_uri("file:///a/%ff.txt")
    assert normalize_uri("file:///a/b?bin=%FF") == "file:///a/b?bin=%FF"  # the query is free


def test_absurdly_deep_percent_encoding_is_refused() -> None:
    deep = "%2e"
    for _ in range(20):
        deep = deep.replace("%", "%25")
    assert unquote(deep) != "."
    with pytest.raises(InvalidUri, match="too many times"):
        normalize_uri(f"file:///a/{deep}/b")


@pytest.mark.parametrize(
    "benign",
    [
        "file:///a/..foo",
        "file:///a/foo..",
        "file:///a/.hidden",
        "file:///1.0..2.0",
        "file:///a/b..c/d",
        "file:///a/%252e%252ex",  # a literal "%2e%2ex": not only dots
        "file:///a/x%2f..y",
        "test://h/..%41",  # "..A"
    ],
)
def test_names_containing_dots_are_not_traversal(benign: str) -> None:
    assert normalize_uri(benign)


# --------------------------------------------------------------------------------------------------
# Property tests

_PIECES = st.sampled_from(
    [
        "/", "//", ".", "..", "%2e", "%2E", "%2f", "%5c", "%25", "%41", "%c3%a9", "é", "ü", "?", "#",
        "@", ":", ";", "=", "&", "a", "B", "~", "-", "_", "localhost", "[::1]", "%7E", "!", "'", "0",
    ]
)  # fmt: skip
_SCHEMES = st.sampled_from(
    ["file:", "file://", "file:///", "test://", "test:", "TEST://", "urn:", "https://"]
)
_URI_LIKE = st.builds(lambda s, parts: s + "".join(parts), _SCHEMES, st.lists(_PIECES, max_size=25))


def _segments_decoded(uri: str) -> list[str]:
    path = re.sub(r"^[a-z][a-z0-9+.\-]*:(//[^/?#]*)?", "", uri).split("?")[0].split("#")[0]
    out = []
    for seg in path.split("/"):
        for _ in range(20):
            seg = unquote(seg)
        out += re.split(r"[/\\]", seg)
    return out


@settings(max_examples=600)
@given(_URI_LIKE)
@example("file:///a/%2e%2e")
@example("TEST://H/%7e")
def test_normalize_is_idempotent_and_canonical_has_no_traversal(raw: str) -> None:
    try:
        once = normalize_uri(raw)
    except InvalidUri:
        return
    assert normalize_uri(once) == once
    assert once.isascii()
    assert len(once) <= MAX_URI_BYTES
    assert ".." not in _segments_decoded(once)
    if once.startswith("file:"):
        assert once.startswith("file://")
        assert "//" not in once[len("file://") :].split("?")[0].split("#")[0]


@settings(max_examples=300)
@given(st.text(max_size=60))
def test_normalize_never_crashes_and_is_idempotent_on_arbitrary_text(text: str) -> None:
    try:
        once = normalize_uri("test://h/" + text)
    except InvalidUri:
        return
    assert normalize_uri(once) == once


@settings(max_examples=300)
@given(_URI_LIKE)
def test_a_canonical_uri_starts_with_the_canonical_form_of_each_of_its_prefixes(raw: str) -> None:
    try:
        canonical = normalize_uri(raw)
    except InvalidUri:
        return
    if "@" in canonical:
        return  # an unfinished authority is read as a host (see validate_uri_prefix)
    for cut in range(len(canonical) + 1):
        try:
            prefix = validate_uri_prefix(canonical[:cut])
        except InvalidUri:
            continue
        assert canonical.startswith(prefix)


@settings(max_examples=300)
@given(_URI_LIKE)
def test_validate_uri_prefix_is_idempotent(raw: str) -> None:
    try:
        once = validate_uri_prefix(raw)
    except InvalidUri:
        return
    assert validate_uri_prefix(once) == once


# --------------------------------------------------------------------------------------------------
# Prefixes


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("test:", "test:"),
        ("TEST:", "test:"),
        ("file:", "file:"),
        ("file:/", "file:/"),
        ("file://", "file://"),
        ("file:///", "file:///"),
        ("file:/project/", "file:///project/"),
        ("file://localhost/p", "file:///p"),
        ("file://LOC", "file://loc"),  # an unfinished host is still lowercased
        ("test://Host:8", "test://host:8"),
        ("Test://A/./b/", "test://a/b/"),
        ("file:///a//b/", "file:///a/b/"),
        ("file:///project/.", "file:///project/."),  # may begin '.git'
        ("file:///project/.gi", "file:///project/.gi"),
        ("test://h/%7eu", "test://h/~u"),
        ("test://h/?q=a", "test://h/?q=a"),
        ("test://h/#fr", "test://h/#fr"),
    ],
)
def test_validate_uri_prefix_canonicalises_a_valid_beginning(raw: str, canonical: str) -> None:
    assert validate_uri_prefix(raw) == canonical


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("test", "scheme is required"),
        ("://x", "scheme is required"),
        ("file:///a/..", "traversal"),
        ("file:///a/%2e%2e", "traversal"),
        ("file:///a/../b", "traversal"),
        ("file:///a/%2", "ends inside a percent-encoding"),
        ("file:///a/%", "ends inside a percent-encoding"),
        ("file:///a/%zz", "invalid percent-encoding"),
        ("file:///a\n", "control character"),
        ("file:///a b", "whitespace"),
        ("file:relative", "absolute path"),
        ("test://h/" + "a" * 2048, "2048"),
    ],
)
def test_validate_uri_prefix_refuses_bad_beginnings(raw: str, reason: str) -> None:
    with pytest.raises(InvalidUri) as info:
        validate_uri_prefix(raw)
    assert reason in info.value.reason


def test_check_uri_characters_refuses_controls_and_allows_iri_letters() -> None:
    check_uri_characters("test://h/é{x}")
    with pytest.raises(InvalidUri, match=re.escape("U+0001")):
        check_uri_characters("a\x01")


# --------------------------------------------------------------------------------------------------
# Upper bound of a prefix range

MAX = chr(sys.maxunicode)


@pytest.mark.parametrize(
    ("prefix", "upper"),
    [
        ("test://", "test:/0"),
        ("file:///project/", "file:///project0"),
        ("a", "b"),
        ("a" + MAX, "b"),
        ("a" + MAX + MAX, "b"),
        ("\ud7ff", "\ue000"),  # the code point after U+D7FF that UTF-8 can carry
        ("x\ud7ff" + MAX, "x\ue000"),
        ("\u007f", "\u0080"),
        ("\uffff", "\U00010000"),
        ("", None),
        (MAX, None),
        (MAX * 3, None),
    ],
)
def test_uri_prefix_upper_bound_edge_cases(prefix: str, upper: str | None) -> None:
    assert uri_prefix_upper_bound(prefix) == upper


def test_uri_prefix_upper_bound_refuses_surrogates() -> None:
    with pytest.raises(ValueError, match="surrogate"):
        uri_prefix_upper_bound("a\udc80")


_NO_SURROGATES = st.characters(blacklist_categories=("Cs",))
_BIASED_CHARS = st.one_of(
    st.sampled_from(["a", "b", "/", "0", "\x7f", "\x80", "\ud7ff", "\ue000", "\uffff", MAX, "\U0010fffe"]),
    _NO_SURROGATES,
)
_BIASED_TEXT = st.text(alphabet=_BIASED_CHARS, max_size=8)


@settings(max_examples=400)
@given(_BIASED_TEXT, st.lists(_BIASED_TEXT, max_size=40))
def test_uri_prefix_upper_bound_selects_exactly_the_prefixed_strings_in_byte_order(
    prefix: str, others: list[str]
) -> None:
    upper = uri_prefix_upper_bound(prefix)
    population = others + [prefix + o for o in others] + [prefix]
    if upper is not None:
        population.append(upper)
    # PostgreSQL "C" collation: sort by UTF-8 bytes; it must agree with Python's code-point order.
    by_bytes = sorted(population, key=lambda s: s.encode("utf-8"))
    assert by_bytes == sorted(population)
    for s in by_bytes:
        in_range = s >= prefix and (upper is None or s < upper)
        in_range_bytes = s.encode() >= prefix.encode() and (upper is None or s.encode() < upper.encode())
        assert in_range == s.startswith(prefix) == in_range_bytes
    if upper is not None:
        assert not upper.startswith(prefix)
        assert upper > prefix
        upper.encode("utf-8")  # representable in PostgreSQL text


@settings(max_examples=300)
@given(_BIASED_TEXT.filter(lambda p: p.rstrip(MAX) != ""), _BIASED_TEXT)
def test_uri_prefix_upper_bound_is_tight(prefix: str, tail: str) -> None:
    upper = uri_prefix_upper_bound(prefix)
    assert upper is not None
    # The largest strings that start with the prefix are still below the bound ...
    assert prefix + MAX * 3 + tail < upper
    # ... and the strings just below the bound are in the range only if they start with the prefix.
    last = ord(upper[-1]) - 1
    if 0xD800 <= last <= 0xDFFF:
        last = 0xD7FF
    for candidate in (upper[:-1] + chr(last) + tail, upper[:-1] + chr(last), upper[:-1] + tail):
        assert (prefix <= candidate < upper) == candidate.startswith(prefix)


# --------------------------------------------------------------------------------------------------
# Directories


@pytest.mark.parametrize(
    ("parent", "uri", "expected"),
    [
        ("file:///a", "file:///a/b", True),
        ("file:///a", "file:///a/b/c/d", True),
        ("file:///a", "file:///ab", False),
        ("file:///a", "file:///a", False),
        ("file:///a", "file:///a/", False),
        ("file:///a", "file:///a/?q", False),
        ("file:///a", "file:///a/#f", False),
        ("file:///a", "file:///a?x", False),
        ("file:///a", "file:///b/a/c", False),
        ("file:///a/", "file:///a/b", True),
        ("file:///a/", "file:///a/", False),
        ("file:///a/", "file:///a", False),
        ("file:///a/", "file:///ab", False),
        ("file:///", "file:///x", True),
        ("file:///", "file:///", False),
        ("test://host", "test://host/x", True),
        ("test://host", "test://hostile/x", False),
        ("test://h/a?q", "test://h/a?q/b", False),  # a URI with a query has no children
        ("test://h/a#f", "test://h/a#f/b", False),
    ],
)
def test_is_descendant(parent: str, uri: str, expected: bool) -> None:
    assert is_descendant(parent, uri) is expected


def test_descendant_prefix() -> None:
    assert descendant_prefix("file:///a") == "file:///a/"
    assert descendant_prefix("file:///a/") == "file:///a/"
    assert descendant_prefix("test://h/a?q") is None


@settings(max_examples=200)
@given(st.lists(st.sampled_from(["a", "b", "ab", "a b", "?", "#", "/", "."]), max_size=6))
def test_descendants_lie_in_the_prefix_range_of_the_parent(parts: list[str]) -> None:
    parent = "file:///a"
    uri = parent + "".join(parts)
    head = descendant_prefix(parent)
    assert head is not None
    upper = uri_prefix_upper_bound(head)
    assert upper is not None
    if is_descendant(parent, uri):
        assert head <= uri < upper
