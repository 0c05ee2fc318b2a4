"""The artifacts this process writes and reads, and checking and opening a generation's artifacts.

They are those of the plugin manager's `lgpt_artifacts` hook (core/plugins.py), the built-ins
(index/text/artifact.py, index/scoring/codes/artifact.py) first; index/artifacts.py says what an
artifact is."""

from __future__ import annotations

from ..core.plugins import collected, plugin_manager
from .artifacts import Artifact, BlobSource
from .format.manifest import Manifest, PartRef


def registered_artifacts() -> tuple[Artifact, ...]:
    """Every artifact: the built-ins, then the plugins' in the order they registered (a later one
    replaces an earlier one of its name); every transaction begun writes them."""
    return tuple(_by_name().values())


def artifact_named(name: str) -> Artifact | None:
    return _by_name().get(name)


def _by_name() -> dict[str, Artifact]:
    from .scoring.codes import artifact as codes
    from .text import artifact as text

    return {artifact.name: artifact for artifact in collected(plugin_manager(text, codes).hook.lgpt_artifacts())}


def check_all(manifest: Manifest, source: BlobSource) -> list[str]:
    """Every artifact and part a generation names: each blob's size and sha256, then the artifact's own check."""
    from ..core.errors import IndexProblem

    problems: list[str] = []
    refs: list[tuple[str, str, PartRef]] = [(name, f"artifact {name}", ref) for name, ref in sorted(manifest.artifacts.items())]
    refs += [(name, f"segment {sid}'s {name} part", part) for sid, seg in sorted(manifest.segments.items())
             for name, part in sorted(seg.parts.items())]
    for name, where, ref in refs:
        damaged = False
        for blob in ref.blobs:
            try:
                source.read(blob)
            except IndexProblem as exc:
                problems.append(f"{where}: {exc.message}")
                damaged = True
        artifact = artifact_named(name)
        if not damaged and artifact is not None:
            problems += [f"{where}: {problem}" for problem in artifact.check(ref, source, True)]
    return problems


def open_artifact(name: str, manifest: Manifest, source: BlobSource) -> object | None:
    """Artifact `name` of a generation, opened (None: not registered here, or not in this generation)."""
    artifact = artifact_named(name)
    ref = manifest.artifacts.get(name)
    parts = {sid: seg.parts[name] for sid, seg in manifest.segments.items() if name in seg.parts}
    if artifact is None or (ref is None and not parts):
        return None
    return artifact.open(ref, parts, source)
