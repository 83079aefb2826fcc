"""Lazy public names for a package (PEP 562 module ``__getattr__``): a name is imported from its submodule on
first access, so importing the package (``import aiayn``, ``import aiayn.data.batching``) costs nothing until a
name is used. Not a paper section: it keeps the app's first page free of torch and a translation process free of
pandas.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public ``names`` map to submodules.

    Args:
        package: the package's ``__name__``.
        names: public name -> submodule relative to ``package`` (``".transformer"``); a name equal to the
            submodule's last component with no attribute of that name (``"interop": ".interop"``) is the
            submodule itself.

    Returns:
        the two module-level functions to assign in the package's ``__init__``. The first import of a name
        stores it in the package namespace, so later look-ups are plain attribute reads.

    Raises (from the returned ``__getattr__``):
        AttributeError: the name is not one of ``names``.
    """

    def __getattr__(name: str) -> Any:
        try:
            module = importlib.import_module(names[name], package)
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = module if module.__name__.rsplit(".", 1)[-1] == name and not hasattr(module, name) else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
