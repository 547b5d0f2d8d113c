"""The capacity core imports nothing but the standard library and itself (the import-linter contract forbids
the web/DB stack; this test closes the gap for any other third-party package)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "service" / "core"


def test_core_imports_only_the_standard_library() -> None:
    offenders = []
    for path in sorted(CORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                root = name.split(".")[0]
                if root == "service":
                    if not name.startswith("service.core"):
                        offenders.append(f"{path.name}: {name}")
                elif root not in sys.stdlib_module_names and root != "__future__":
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []
