"""Which model a build uses, and whether the index allows it (the same model; its settings: BuildSettings.settled)."""

from __future__ import annotations

import os

from ..core.errors import IndexProblem
from ..index.format.manifest import Manifest, ModelInfo
from ..index.protocols import Store
from ..ingest.discover import Discovery
from ..models.resolve import DEFAULT_MODEL, FINGERPRINT_SCHEME, ModelRef, fingerprint_in, resolve_model, resolve_recorded, same_model
from .options import BuildOptions
from .plan import BuildPlan


def choose_model(base: Manifest | None, options: BuildOptions) -> ModelRef:
    """The model given, else the index's own (at the revision it recorded), else the default."""
    if base is not None and options.model.id in (None, base.model.id):
        return resolve_recorded(base.model.id, base.model.path, base.model.revision)
    return resolve_model(options.model.id or DEFAULT_MODEL)


def check_model(base: Manifest | None, model: ModelRef, options: BuildOptions, store: Store) -> None:
    if base is None or options.rebuild or not base.documents:
        return
    if not same_model(model, base.model.fingerprint, base.model.fingerprint_scheme):
        theirs = fingerprint_in(model, base.model.fingerprint_scheme)
        raise IndexProblem(
            f"{store.location} was built with {base.model.id} ({base.model.fingerprint}); {model.id} ({theirs}) is a different model.",
            hint="Use --rebuild to embed everything again with the new model, or another --name.",
        )


def upgraded(recorded: ModelInfo, model: ModelRef) -> ModelInfo:
    """The index's model record, with the current fingerprint scheme where it is the same model
    recorded under an older one (the next commit writes it: writers upgrade, readers never do)."""
    if recorded.fingerprint_scheme == FINGERPRINT_SCHEME or not same_model(model, recorded.fingerprint, recorded.fingerprint_scheme):
        return recorded
    return ModelInfo(**{**recorded.model_dump(), "fingerprint": model.fingerprint, "fingerprint_scheme": FINGERPRINT_SCHEME})


def check_rebuild_keeps(plan: BuildPlan, base: Manifest | None, model: ModelRef, options: BuildOptions, found: Discovery) -> None:
    """A rebuild with another model (or pool factor, or visual-token budget) cannot keep documents it does not
    embed again."""
    if not options.rebuild or base is None or not plan.keep:
        return
    made_alike = (base.settings.pool_factor == options.settings.pool_factor
                  and base.settings.max_visual_tokens == options.settings.max_visual_tokens)
    if same_model(model, base.model.fingerprint, base.model.fingerprint_scheme) and made_alike:
        return
    folders = sorted({os.path.dirname(d.path) for d in plan.keep})
    shown = ", ".join(folders[:3]) + (f" and {len(folders) - 3} more" if len(folders) > 3 else "")
    raise IndexProblem(
        f"a rebuild of {found.root} with another model, pool factor or visual-token budget would leave {len(plan.keep)} "
        f"document(s) it does not embed again with vectors that no longer compare ({shown}).",
        hint="Remove them first (lgpt-index remove FOLDER), or build into another --name.",
    )
