"""Which model a build uses, and whether the index allows it (same model, pool factor and visual tokens)."""

from __future__ import annotations

import os
from dataclasses import replace

from ..core.errors import IndexProblem
from ..index.format.manifest import Manifest, ModelInfo
from ..index.local.store import LocalStore
from ..ingest.discover import Discovery
from ..models.resolve import DEFAULT_MODEL, FINGERPRINT_SCHEME, ModelRef, fingerprint_in, resolve_model, resolve_recorded, same_model
from .options import BuildOptions
from .plan import BuildPlan


def choose_model(base: Manifest | None, options: BuildOptions) -> ModelRef:
    """The model given, else the index's own (at the revision it recorded), else the default."""
    if base is not None and options.model in (None, base.model.id):
        return resolve_recorded(base.model.id, base.model.path, base.model.revision)
    return resolve_model(options.model or DEFAULT_MODEL)


def check_model(base: Manifest | None, model: ModelRef, options: BuildOptions, store: LocalStore) -> None:
    if base is None or options.rebuild or not base.documents:
        return
    if not same_model(model, base.model.fingerprint, base.model.fingerprint_scheme):
        theirs = fingerprint_in(model, base.model.fingerprint_scheme)
        raise IndexProblem(
            f"{store.location} was built with {base.model.id} ({base.model.fingerprint}); {model.id} ({theirs}) is a different model.",
            hint="Use --rebuild to embed everything again with the new model, or another --name.",
        )
    if base.settings.pool_factor != options.pool_factor:
        raise IndexProblem(
            f"{store.location} was built with --pool-factor {base.settings.pool_factor}, not {options.pool_factor}; "
            "pages pooled differently would not score alike.",
            hint=f"Use --pool-factor {base.settings.pool_factor}, or --rebuild to change it.",
        )


def upgraded(recorded: ModelInfo, model: ModelRef) -> ModelInfo:
    """The index's model record, with the current fingerprint scheme where it is the same model
    recorded under an older one (the next commit writes it: writers upgrade, readers never do)."""
    if recorded.fingerprint_scheme == FINGERPRINT_SCHEME or not same_model(model, recorded.fingerprint, recorded.fingerprint_scheme):
        return recorded
    return ModelInfo(**{**recorded.model_dump(), "fingerprint": model.fingerprint, "fingerprint_scheme": FINGERPRINT_SCHEME})


def with_recorded_visual_tokens(base: Manifest | None, options: BuildOptions) -> BuildOptions:
    """--max-visual-tokens: by default the index's own; another value needs --rebuild, since pages
    seen through another number of tokens would not score alike."""
    recorded = base.settings.max_visual_tokens if base is not None else None
    if recorded is None or options.rebuild:
        return options
    if options.max_visual_tokens is None:
        return replace(options, max_visual_tokens=recorded)
    if options.max_visual_tokens != recorded and base.documents:
        raise IndexProblem(
            f"the index was built with --max-visual-tokens {recorded}, not {options.max_visual_tokens}; "
            "pages seen through another number of image tokens would not score alike.",
            hint=f"Use --max-visual-tokens {recorded}, or --rebuild to change it.",
        )
    return options


def check_rebuild_keeps(plan: BuildPlan, base: Manifest | None, model: ModelRef, options: BuildOptions, found: Discovery) -> None:
    """A rebuild with another model (or pool factor) cannot keep documents it does not embed again."""
    if not options.rebuild or base is None or not plan.keep:
        return
    if same_model(model, base.model.fingerprint, base.model.fingerprint_scheme) and base.settings.pool_factor == options.pool_factor:
        return
    folders = sorted({os.path.dirname(d.path) for d in plan.keep})
    shown = ", ".join(folders[:3]) + (f" and {len(folders) - 3} more" if len(folders) > 3 else "")
    raise IndexProblem(
        f"a rebuild of {found.root} with another model or pool factor would leave {len(plan.keep)} document(s) it does not "
        f"embed again with vectors that no longer compare ({shown}).",
        hint="Remove them first (lgpt-index remove FOLDER), or build into another --name.",
    )
