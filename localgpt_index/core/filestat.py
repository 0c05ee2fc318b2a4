"""What a file looked like: the stat fields a build compares to decide that a file did not change.

Apart from core.types (which holds no pydantic model) so that the command line's cheap paths, which
read the modes and fusions there, import no pydantic."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Count = Annotated[int, Field(ge=0, le=1 << 48)]


class FileStat(BaseModel):
    """What a build compares to decide, without reading a byte, that a file did not change (like git's index)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    size: Count
    mtime_ns: int
    ino: Count
    ctime_ns: int
