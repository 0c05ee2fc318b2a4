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

DEFAULT_MODEL = "vidore/colpali-v1.3"
FAMILIES = ("colpali", "colqwen2")
_FAMILY_BY_MODEL_TYPE = {"paligemma": "colpali", "qwen2_vl": "colqwen2", "qwen2_5_vl": "colqwen2"}


@dataclass(frozen=True)
class ModelRef:
    """A model resolved to files on this machine."""

    id: str  # as named by the user: hub id or folder
    path: str  # local folder with config and weights
    family: str  # "colpali" or "colqwen2"
    revision: str | None  # hub commit, when from the hub
    fingerprint: str  # identifies the weights; an index only answers queries from the same one

    def to_dict(self) -> dict:
        return asdict(self)


def _family(folder: Path, name: str) -> str:
    lowered = name.lower()
    for family in FAMILIES:
        if family in lowered:
            return family
    config = folder / "config.json"
    if config.exists():
        model_type = json.loads(config.read_text()).get("model_type", "")
        if model_type in _FAMILY_BY_MODEL_TYPE:
            return _FAMILY_BY_MODEL_TYPE[model_type]
    adapter = folder / "adapter_config.json"
    if adapter.exists():
        base = json.loads(adapter.read_text()).get("base_model_name_or_path", "")
        for family in FAMILIES:
            if family in base.lower():
                return family
    raise UsageError(
        f"{name}: not a ColPali or ColQwen2 checkpoint (byaldi supports only those; config.json has no paligemma or qwen2_vl model_type)."
    )


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


def offline_hint(model_id: str) -> str:
    return (
        f"On a machine with internet access run `hf download {model_id}` (huggingface_hub < 1.0: "
        "`huggingface-cli download`), and the same for its base model if it is an adapter; then copy the Hugging Face cache "
        "(~/.cache/huggingface) here, or pass --model /path/to/a/local/folder."
    )


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def resolve_model(model: str, allow_download: bool = True) -> ModelRef:
    """Resolve a hub id or a local folder; raise EnvironmentMissing when the weights are not here."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        folder = folder.resolve()
        return ModelRef(model, str(folder), _family(folder, str(folder)), None, _folder_fingerprint(folder))
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise UsageError(f"--model {model}: no such folder.")

    snapshot = _hub_snapshot(model, allow_download)
    adapter = snapshot / "adapter_config.json"
    if adapter.exists():
        base = json.loads(adapter.read_text()).get("base_model_name_or_path")
        if base and not Path(base).is_dir():
            _hub_snapshot(base, allow_download)  # the base weights must be here too
    return ModelRef(model, str(snapshot), _family(snapshot, model), snapshot.name, f"hub:{model}@{snapshot.name}")


def _hub_snapshot(model_id: str, allow_download: bool = True) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(model_id, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    except Exception as exc:  # a malformed id and the like
        raise UsageError(f"--model {model_id}: {exc}") from exc
    if not allow_download or hub_offline():
        raise EnvironmentMissing(
            f"model {model_id} is not in the local Hugging Face cache"
            + (" and HF_HUB_OFFLINE is set." if hub_offline() else "."),
            hint=offline_hint(model_id),
        )
    try:
        return Path(snapshot_download(model_id))
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200]
        raise EnvironmentMissing(
            f"model {model_id} is not cached here and could not be downloaded ({type(exc).__name__}: {reason}).",
            hint=offline_hint(model_id),
        ) from exc
