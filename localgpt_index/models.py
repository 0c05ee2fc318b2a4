"""Find a model: a local folder or a hub id that is already cached (or can be fetched).

Nothing here imports torch or byaldi, so commands that only need to know
*which* model (status, doctor) stay fast.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import EnvironmentMissing, UsageError
from .families import detect_family, supported

DEFAULT_MODEL = "vidore/colpali-v1.3"


@dataclass(frozen=True)
class ModelRef:
    """A model resolved to files on this machine."""

    id: str  # as named by the user: hub id or folder
    path: str  # local folder with config and weights
    family: str  # a name from localgpt_index.families
    revision: str | None  # hub commit, when from the hub
    fingerprint: str  # identifies the weights; an index only answers queries from the same one

    def to_dict(self) -> dict:
        return asdict(self)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable ({' '.join(str(exc).split())[:120]}).") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object.")
    return data


def model_family(folder: Path, base: Path | None = None) -> str:
    """The family from config.json (architectures, then model_type), or from the base model's
    for an adapter; never from the name."""
    config = folder / "config.json"
    if not config.exists() and base is not None:
        config = base / "config.json"
    if not config.exists():
        raise UsageError(f"{folder}: no config.json (nor a base model with one); not a model checkpoint.")
    data = _read_json(config)
    family = detect_family(data)
    if family is None:
        described = ", ".join(str(a) for a in data.get("architectures") or []) or str(data.get("model_type") or "(none)")
        raise UsageError(f"{folder}: {described[:200]} is not a supported multi-vector family; lgpt-index loads {supported()}.")
    return family.name


def _folder_fingerprint(folder: Path) -> str:
    """Config bytes plus the name, size and head of every weight file: cheap, and changes with the weights."""
    digest = hashlib.sha256()
    for name in ("config.json", "adapter_config.json"):
        if (folder / name).exists():
            digest.update((folder / name).read_bytes())
    for weights in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        digest.update(weights.name.encode())
        digest.update(str(weights.stat().st_size).encode())
        with open(weights, "rb") as handle:
            digest.update(handle.read(1 << 20))
    return "sha256:" + digest.hexdigest()


def offline_hint(model_id: str, revision: str | None = None) -> str:
    at = f" --revision {revision}" if revision else ""
    return (
        f"On a machine with internet access run `hf download {model_id}{at}` (huggingface_hub < 1.0: "
        "`huggingface-cli download`), and the same for its base model if it is an adapter; then copy the Hugging Face cache "
        "(~/.cache/huggingface) here, or pass --model /path/to/a/local/folder."
    )


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def resolve_model(model: str, allow_download: bool = True, revision: str | None = None) -> ModelRef:
    """Resolve a hub id (at `revision`, a commit, when given) or a local folder; raise
    EnvironmentMissing when the weights are not here."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        folder = folder.resolve()
        base = _adapter_base(folder, allow_download)
        return ModelRef(model, str(folder), model_family(folder, base), None, _folder_fingerprint(folder))
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise UsageError(f"--model {model}: no such folder.")
    snapshot = _hub_snapshot(model, allow_download, revision)
    base = _adapter_base(snapshot, allow_download)
    return ModelRef(model, str(snapshot), model_family(snapshot, base), snapshot.name, f"hub:{model}@{snapshot.name}")


def _adapter_base(folder: Path, allow_download: bool) -> Path | None:
    """For an adapter (colpali-v1.3 is one), the folder of its base model, which must be here too."""
    adapter = folder / "adapter_config.json"
    if not adapter.exists():
        return None
    base = _read_json(adapter).get("base_model_name_or_path")
    if not base or not isinstance(base, str):
        return None
    if Path(base).is_dir():
        return Path(base)
    return _hub_snapshot(base, allow_download)


def _hub_snapshot(model_id: str, allow_download: bool = True, revision: str | None = None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(model_id, revision=revision, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    except Exception as exc:  # a malformed id and the like
        raise UsageError(f"--model {model_id}: {' '.join(str(exc).split())[:200]}") from None
    at = f" at revision {revision}" if revision else ""
    if not allow_download or hub_offline():
        raise EnvironmentMissing(
            f"model {model_id}{at} is not in the local Hugging Face cache"
            + (" and HF_HUB_OFFLINE is set." if hub_offline() else "."),
            hint=offline_hint(model_id, revision),
        )
    try:
        return Path(snapshot_download(model_id, revision=revision))
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200]
        raise EnvironmentMissing(
            f"model {model_id}{at} is not cached here and could not be downloaded ({type(exc).__name__}: {reason}).",
            hint=offline_hint(model_id, revision),
        ) from None


def resolve_recorded(model_id: str, path: str | None, revision: str | None, allow_download: bool = True) -> ModelRef:
    """The model an index recorded: a hub model at the very revision it was built with (not
    whatever the cache holds now), or the local folder it was loaded from."""
    from dataclasses import replace

    if revision:
        return resolve_model(model_id, allow_download, revision=revision)
    if path and Path(path).is_dir():
        return replace(resolve_model(path, allow_download), id=model_id)
    return resolve_model(model_id, allow_download)


def expected_dim(ref: ModelRef) -> int:
    """The vector size a model writes: its config's "dim" where the family reads one, else the family's."""
    from .families import family_named

    family = family_named(ref.family)
    config = Path(ref.path) / "config.json"
    if family.name in ("fake", "colqwen3_5") and config.exists():
        return int(_read_json(config).get("dim", family.dim))
    return family.dim
