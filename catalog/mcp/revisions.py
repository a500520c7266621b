"""Each handshake revision is sent only the fields it defines (COMPAT-5).

The SDK shapes every handshake-era result by the 2025-11-25 schema, so a session that negotiated
2024-11-05, 2025-03-26 or 2025-06-18 would receive fields its revision does not define (``title``,
``icons``, ``annotations.lastModified``, the ``completions`` capability); a strict peer of that
revision may reject them. :func:`for_revision` removes them from a result of such a session.
"""

from __future__ import annotations

from typing import Any

# The revision that introduced each field (on the object named), per the revisions' schemas.
_RESOURCE_FIELDS = {
    "uri": "2024-11-05",
    "name": "2024-11-05",
    "description": "2024-11-05",
    "mimeType": "2024-11-05",
    "annotations": "2024-11-05",
    "size": "2024-11-05",
    "title": "2025-06-18",
    "_meta": "2025-06-18",
    "icons": "2025-11-25",
}
_TEMPLATE_FIELDS = {
    **{k: v for k, v in _RESOURCE_FIELDS.items() if k not in ("uri", "size")},
    "uriTemplate": "2024-11-05",
}
_CONTENTS_FIELDS = {
    "uri": "2024-11-05",
    "mimeType": "2024-11-05",
    "text": "2024-11-05",
    "blob": "2024-11-05",
    "_meta": "2025-06-18",
}
_ANNOTATION_FIELDS = {"audience": "2024-11-05", "priority": "2024-11-05", "lastModified": "2025-06-18"}
_IMPLEMENTATION_FIELDS = {
    "name": "2024-11-05",
    "version": "2024-11-05",
    "title": "2025-06-18",
    "description": "2025-11-25",
    "websiteUrl": "2025-11-25",
    "icons": "2025-11-25",
}
_CAPABILITY_FIELDS = {
    "experimental": "2024-11-05",
    "logging": "2024-11-05",
    "prompts": "2024-11-05",
    "resources": "2024-11-05",
    "tools": "2024-11-05",
    "completions": "2025-03-26",
    "tasks": "2025-11-25",
    "extensions": "2025-11-25",
}

CURRENT_HANDSHAKE = "2025-11-25"  # what the SDK shapes results by: nothing to remove for it


def _known(fields: dict[str, str], version: str, item: dict[str, Any]) -> dict[str, Any]:
    # Revisions are dates: the string order is their order.
    return {k: v for k, v in item.items() if k in fields and fields[k] <= version}


def _resource(version: str, item: dict[str, Any], fields: dict[str, str]) -> dict[str, Any]:
    kept = _known(fields, version, item)
    if isinstance(kept.get("annotations"), dict):
        kept["annotations"] = _known(_ANNOTATION_FIELDS, version, kept["annotations"])
    return kept


def for_revision(version: str, method: str, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` of ``method`` as the handshake revision ``version`` defines it."""
    if version >= CURRENT_HANDSHAKE:
        return result
    out = dict(result)
    if method == "resources/list" and isinstance(out.get("resources"), list):
        out["resources"] = [_resource(version, r, _RESOURCE_FIELDS) for r in out["resources"]]
    elif method == "resources/templates/list" and isinstance(out.get("resourceTemplates"), list):
        out["resourceTemplates"] = [_resource(version, t, _TEMPLATE_FIELDS) for t in out["resourceTemplates"]]
    elif method == "resources/read" and isinstance(out.get("contents"), list):
        out["contents"] = [_known(_CONTENTS_FIELDS, version, c) for c in out["contents"]]
    elif method == "initialize":
        if isinstance(out.get("capabilities"), dict):
            out["capabilities"] = _known(_CAPABILITY_FIELDS, version, out["capabilities"])
        if isinstance(out.get("serverInfo"), dict):
            out["serverInfo"] = _known(_IMPLEMENTATION_FIELDS, version, out["serverInfo"])
    return out
