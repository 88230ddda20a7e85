"""Import every checker module of this package (``chNN_*.py``) so that each registers itself."""
import importlib
import pkgutil
from pathlib import Path

for _info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
    if _info.name.startswith("ch"):
        importlib.import_module(f"{__package__}.{_info.name}")
