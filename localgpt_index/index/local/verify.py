"""`verify` of a local index: every file against the manifest, full sha256 included."""

from __future__ import annotations

from typing import Any

from ...core.errors import IndexProblem
from ...core.files import sha256_file
from ..artifact_registry import check_all
from ..format.files import regular_size
from .blobs import LocalBlobs


def verify_local(store: Any) -> list[str]:  # an LocalStore (local/store.py imports this module)
    """Check everything against the manifest, full sha256 of every file included; the problems found."""
    try:
        manifest = store.read_manifest()
        if manifest is None:
            return [f"no index at {store.root}."]
        store._check_folder("segments", required=bool(manifest.segments))
        store._check_folder("pdf", required=False)
    except IndexProblem as exc:
        return [exc.message]
    problems: list[str] = []
    for segment in manifest.segments.values():
        try:
            damaged = store.segment_files(segment).check_all()  # every block, whatever this process has checked
        except IndexProblem as exc:
            problems.append(exc.message)
            continue
        vec_path = store.segments_dir / f"{segment.id}.vectors.npy"
        if damaged:
            shown = ", ".join(str(b) for b in damaged[:5]) + (f" and {len(damaged) - 5} more" if len(damaged) > 5 else "")
            problems.append(f"{vec_path}: block{'s' if len(damaged) > 1 else ''} {shown} of {len(segment.checksum.blocks)} "
                            f"({segment.checksum.block_size} bytes each) do{'' if len(damaged) > 1 else 'es'} not match "
                            "the checksums; the vectors are damaged.")
            continue
        if sha256_file(vec_path) != segment.vectors_sha256:
            problems.append(f"{vec_path}: sha256 mismatch; the vectors are damaged.")
    pdfs = {(d.pdf, d.pdf_sha256, d.path) for d in [*manifest.documents, *manifest.in_progress] if d.pdf}
    for rel, expected, source in sorted(pdfs):
        try:
            regular_size(store.root, rel)
        except IndexProblem as exc:
            problems.append(f"{exc.message} (the converted PDF of {source})")
            continue
        if sha256_file(store.root / rel) != expected:
            problems.append(f"{store.root / rel}: sha256 mismatch; the converted PDF of {source} is damaged.")
    return problems + check_all(manifest, LocalBlobs(store.root))
