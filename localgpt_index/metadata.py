"""Deprecated since 0.3: moved to `localgpt_index.core.metadata` (the package layout of issue 25).

Kept so that code written against the 0.2 README's Python API keeps working; import from
`localgpt_index` (the public API) or `localgpt_index.core.metadata` instead. Removed in a later release.
"""

import warnings

from .core.metadata import *  # noqa: F401,F403

warnings.warn("localgpt_index.metadata is deprecated: import from localgpt_index.core.metadata", DeprecationWarning, stacklevel=2)
