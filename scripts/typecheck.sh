#!/usr/bin/env bash
# The type gate: pyright over catalog/ as [tool.pyright] in pyproject.toml says (the package ships
# py.typed, so its annotations are a promise to its importers). Exits non-zero on any error.
# Imports resolve against the packages of the Python that has catalog installed
# (`pip install -e '.[test]'`): $PYTHON if set, else the `python` on PATH (an activated virtualenv);
# pyright is taken from beside it when it is there.
set -euo pipefail
cd "$(dirname "$0")/.."
python="$(command -v "${PYTHON:-python}" || command -v python3)"
pyright="$(dirname "$python")/pyright"
[ -x "$pyright" ] || pyright=pyright
exec "$pyright" --pythonpath "$python" "$@"
