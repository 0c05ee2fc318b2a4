"""Deprecated since 0.3: moved to `localgpt_index.interop.pages` (the package layout of issue 25).

Kept so that code written against the 0.2 README's Python API keeps working; import from
`localgpt_index` (the public API) or `localgpt_index.interop.pages` instead. Removed in a later release.
"""

import warnings

from .interop.pages import *  # noqa: F401,F403

warnings.warn("localgpt_index.pages is deprecated: import from localgpt_index.interop.pages", DeprecationWarning, stacklevel=2)
