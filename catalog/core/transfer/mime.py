"""The media type of an imported file, guessed from its name by a fixed table (the same on every
machine).
"""

from __future__ import annotations

import mimetypes

_MIME_TYPES = mimetypes.MimeTypes()  # Python's built-in table only: the same guess on every machine
for _suffix, _type in {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".rst": "text/x-rst",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".ts": "text/x-typescript",
    ".tsx": "text/x-typescript",
    ".jsx": "text/javascript",
    ".rs": "text/x-rust",
    ".go": "text/x-go",
    ".java": "text/x-java",
    ".rb": "text/x-ruby",
    ".sh": "text/x-shellscript",
    ".sql": "application/sql",
    ".ini": "text/plain",
    ".cfg": "text/plain",
    ".log": "text/plain",
    ".webp": "image/webp",
    ".wasm": "application/wasm",
}.items():
    _MIME_TYPES.add_type(_type, _suffix)
_ENCODING_TYPES = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}


def guess_mime_type(name: str, *, is_text: bool) -> str:
    guessed, encoding = _MIME_TYPES.guess_type(name, strict=False)
    if encoding is not None:
        return _ENCODING_TYPES.get(encoding, "application/octet-stream")
    return guessed or ("text/plain" if is_text else "application/octet-stream")
