"""Naming the author a recorded label names (the inverse of ``Principal.label``)."""

from __future__ import annotations

from catalog.core.principal import Author, Principal, TokenName, author_of_label


def test_every_principals_label_reads_back_as_its_kind() -> None:
    tokens = {7: TokenName("deploy bot", revoked=False)}
    principals = [
        Principal.platform_admin(),
        Principal.system("import"),
        Principal(kind="jwt", subject="auth0|ada"),
        Principal(kind="token", token_id=7),
        Principal.anonymous(1, "acme"),
    ]
    assert [author_of_label(p.label, tokens) for p in principals] == [
        Author("platform", "platform admin"),
        Author("system", "import", subject="import"),
        Author("jwt", "auth0|ada", subject="auth0|ada"),
        Author("token", "deploy bot", token_id=7, revoked=False),
        Author("anonymous", "anonymous"),
    ]


def test_a_label_that_is_no_known_spelling_is_kept_as_it_is() -> None:
    for label in ("token:abc", "token:", "token:-1", "jwt:", "someone", "token:١٢"):
        assert author_of_label(label, {}) == Author("unknown", label)
