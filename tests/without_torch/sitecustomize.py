"""Loaded by every Python process of the fast test tier (conftest puts this folder on PYTHONPATH):
torch cannot be imported, as on a machine without it. A fast test that needs torch fails
instead of quietly paying seconds for it."""

import sys


class WithoutTorch:
    """A meta-path finder that answers every torch module with ModuleNotFoundError."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (the fast test tier runs without torch)", name=name)
        return None


sys.meta_path.insert(0, WithoutTorch())
