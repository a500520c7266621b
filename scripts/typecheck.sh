#!/usr/bin/env bash
# The type gate: pyright over catalog/ with [tool.pyright] of pyproject.toml (the package ships
# py.typed, so its annotations are a promise to its importers). Exits non-zero on any error.
# Run it from the virtualenv catalog is installed in (`pip install -e '.[test]'`): the imports
# resolve against that interpreter's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-$(command -v python || command -v python3)}"
exec pyright --pythonpath "$python" "$@"
