"""Deprecated since 0.3: moved to `localgpt_index.index.store` (the package layout of issue 25).

Kept so that code written against the 0.2 README's Python API keeps working; import from
`localgpt_index` (the public API) or `localgpt_index.index.store` instead. Removed in a later release.
"""

import warnings

from .index.store import *  # noqa: F401,F403

warnings.warn("localgpt_index.store is deprecated: import from localgpt_index.index.store", DeprecationWarning, stacklevel=2)
