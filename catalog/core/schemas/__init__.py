"""The catalogue's JSON shapes: camelCase, the same Resource, Annotations and Icon as MCP.

One set of models serves the admin API (bodies and responses), ``catalog import``/``export`` (JSONL
lines are admin-API resource objects) and the conversion to MCP results, so a field is validated
the same way wherever it enters. One module per domain, importing the shared field types and the
base model of :mod:`.base`: :mod:`.resources`, :mod:`.templates`, :mod:`.grants`, :mod:`.tokens`
(and who a bearer is), :mod:`.tenants`, :mod:`.audit` (the audit log and the change feed).
Callers import from the module that defines a shape.
"""
