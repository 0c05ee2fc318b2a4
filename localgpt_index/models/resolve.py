"""Find a model: a local folder or a hub id that is already cached (or can be fetched).

Nothing here imports torch or byaldi, so commands that only need to know
*which* model (status, doctor) stay fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.errors import EnvironmentMissing, UsageError
from ..core.files import user_cache_folder

DEFAULT_MODEL = "vidore/colpali-v1.3"
# How ModelRef.fingerprint is computed (a manifest records the scheme beside the fingerprint):
# 1: config bytes and the first MiB of each weight file (lgpt-index up to index format 2);
# 2: config bytes and every byte of every weight file (XXH3-128), the base model's too for an adapter.
FINGERPRINT_SCHEME = 2
WEIGHT_PATTERNS = ("*.safetensors", "*.bin")


@dataclass(frozen=True)
class ModelRef:
    """A model resolved to files on this machine."""

    id: str  # as named by the user: hub id or folder
    path: str  # local folder with config and weights
    family: str  # a name from localgpt_index.families
    revision: str | None  # hub commit, when from the hub
    fingerprint: str  # identifies the weights (FINGERPRINT_SCHEME); an index only answers queries from the same one

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ModelSpec:
    """The model a command is asked for (--model, --device, --dtype), before it is resolved to a ModelRef."""

    id: str | None = None  # hub id or local folder; None: the index's model, else DEFAULT_MODEL
    device: str = "auto"  # auto, cpu, cuda, cuda:N or mps (models/device.py decides what auto means)
    dtype: str = "auto"  # auto, bfloat16, float16 or float32


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
    from .families import detect_family, supported  # (the plugins with them: not for a query a warm service answers)

    data = _read_json(config)
    family = detect_family(data)
    if family is None:
        described = ", ".join(str(a) for a in data.get("architectures") or []) or str(data.get("model_type") or "(none)")
        raise UsageError(f"{folder}: {described[:200]} is not a supported multi-vector family; lgpt-index loads {supported()}.")
    return family.name


def weight_files(folder: Path) -> list[Path]:
    """The weight files of a checkpoint folder, in the order the fingerprints read them."""
    return [path for pattern in WEIGHT_PATTERNS for path in sorted(folder.glob(pattern))]


def _legacy_folder_fingerprint(folder: Path) -> str:
    """Scheme 1 (kept to compare with indexes fingerprinted before scheme 2): config bytes plus
    the name, size and first MiB of every weight file."""
    digest = hashlib.sha256()
    for name in ("config.json", "adapter_config.json"):
        if (folder / name).exists():
            digest.update((folder / name).read_bytes())
    for weights in weight_files(folder):
        digest.update(weights.name.encode())
        digest.update(str(weights.stat().st_size).encode())
        with open(weights, "rb") as handle:
            digest.update(handle.read(1 << 20))
    return "sha256:" + digest.hexdigest()


def _folder_fingerprint(folder: Path, base: str | None, digests: "WeightDigests") -> str:
    """Scheme 2: config bytes, then the name, size and XXH3-128 of every byte of every weight
    file, then `base` (the identity of an adapter's base model)."""
    import xxhash

    digest = xxhash.xxh3_128()
    for name in ("config.json", "adapter_config.json"):
        if (folder / name).exists():
            digest.update(f"{name}\0".encode() + (folder / name).read_bytes() + b"\0")
    for weights in weight_files(folder):
        try:
            digest.update(f"{weights.name}\0{weights.stat().st_size}\0{digests.of(weights)}\0".encode())
        except OSError as exc:
            raise EnvironmentMissing(f"model {folder}: {weights.name} cannot be read ({exc.strerror or exc}).") from None
    if base is not None:
        digest.update(f"base\0{base}".encode())
    return "xxh3:" + digest.hexdigest()


def _cache_file() -> Path:
    """The user's cache of weight digests."""
    return user_cache_folder() / "weight-digests.json"


class WeightDigests:
    """XXH3-128 digests of weight files, remembered by path and stat (size, mtime, ctime, inode,
    device), like the documents' sha256 in a manifest: a model's weights are read once, not by
    every command. Kept in the user's cache folder rather than in an index, since readers
    (query, serve) never write into an index, and one model serves many indexes. A lost or
    unreadable cache only costs a hash; a file changed in place changes its ctime, so it is
    never trusted stale."""

    LIMIT = 4096  # entries kept; the oldest go first
    VERSION = 1

    def __init__(self, path: Path | None = None, clock=time.time_ns) -> None:
        self.path = path or _cache_file()
        self.clock = clock
        self.entries = self._read()
        self.changed = False

    def _read(self) -> dict[str, dict]:
        try:
            with open(self.path, "rb") as handle:
                data = json.loads(handle.read(64 << 20))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != self.VERSION or not isinstance(data.get("files"), dict):
            return {}
        return {k: v for k, v in data["files"].items() if isinstance(v, dict) and isinstance(v.get("xxh3_128"), str)}

    @staticmethod
    def _stamp(info: os.stat_result) -> list[int]:
        return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]

    def of(self, path: Path) -> str:
        """The digest of `path`'s whole content: remembered, or read now at memory speed."""
        import xxhash

        key = str(path.resolve())
        stamp = self._stamp(os.stat(path))
        entry = self.entries.get(key)
        if entry is not None and entry.get("stat") == stamp:
            return entry["xxh3_128"]
        started = self.clock()
        digest = xxhash.xxh3_128()
        with open(path, "rb") as handle:
            while chunk := handle.read(16 << 20):
                digest.update(chunk)
        value = digest.hexdigest()
        # remembered only when it did not change meanwhile, and not so recently that a change within
        # the same timestamp tick could go unseen (git's "racily clean" entries)
        if self._stamp(os.stat(path)) == stamp and max(stamp[1], stamp[2]) < started - _racy_ns():
            self.entries.pop(key, None)
            self.entries[key] = {"stat": stamp, "xxh3_128": value}
            self.changed = True
        return value

    def save(self) -> None:
        """Write the cache (atomically) when it learnt something; a cache that cannot be written is skipped."""
        if not self.changed:
            return
        self.changed = False
        kept = dict(list(self.entries.items())[-self.LIMIT :])
        temporary = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            import tempfile

            handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".digests-", suffix=".json")
            with os.fdopen(handle, "w") as out:
                json.dump({"version": self.VERSION, "files": kept}, out)
            os.replace(temporary, self.path)
        except OSError:
            if temporary is not None:
                with suppress(OSError):
                    os.unlink(temporary)


def _racy_ns() -> int:
    from ..core.files import RACY_NS

    return RACY_NS


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
    digests = WeightDigests()
    if folder.is_dir():
        folder = folder.resolve()
        base = _adapter_base(folder, allow_download)
        family = model_family(folder, base and base[0])
        ref = ModelRef(model, str(folder), family, None, _folder_fingerprint(folder, _base_identity(base, digests), digests))
    elif model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise EnvironmentMissing(f"--model {model}: no such folder.",
                                 hint="Give the folder of a checkpoint on this machine, or a hub id (see `lgpt-index doctor`).")
    else:
        snapshot = _hub_snapshot(model, allow_download, revision)
        base = _adapter_base(snapshot, allow_download)
        identity = _base_identity(base, digests)
        fingerprint = f"hub:{model}@{snapshot.name}" + (f"+base:{identity}" if identity else "")
        ref = ModelRef(model, str(snapshot), model_family(snapshot, base and base[0]), snapshot.name, fingerprint)
    digests.save()
    return ref


def fingerprint_in(ref: ModelRef, scheme: int) -> str:
    """`ref`'s fingerprint as the given scheme computes it (an index records the scheme it used)."""
    if scheme == FINGERPRINT_SCHEME:
        return ref.fingerprint
    if scheme == 1:
        return f"hub:{ref.id}@{ref.revision}" if ref.revision else _legacy_folder_fingerprint(Path(ref.path))
    raise ValueError(f"unknown fingerprint scheme {scheme}")


def same_model(ref: ModelRef, fingerprint: str, scheme: int) -> bool:
    """Whether `ref` is the model recorded as `fingerprint` under `scheme`: an index fingerprinted the
    old way is compared the old way (on the same folder) until a writer records the current scheme."""
    return fingerprint_in(ref, scheme) == fingerprint


def _adapter_base(folder: Path, allow_download: bool) -> tuple[Path, str | None] | None:
    """For an adapter (colpali-v1.3 is one), the folder of its base model, which must be here too,
    and its hub id when it came from the hub cache."""
    adapter = folder / "adapter_config.json"
    if not adapter.exists():
        return None
    base = _read_json(adapter).get("base_model_name_or_path")
    if not base or not isinstance(base, str):
        return None
    if Path(base).is_dir():
        return Path(base), None
    return _hub_snapshot(base, allow_download), base


def _base_identity(base: tuple[Path, str | None] | None, digests: WeightDigests) -> str | None:
    """What an adapter's fingerprint says of its base: a hub base by its id and revision, a local one
    by its own fingerprint (every byte of its weights)."""
    if base is None:
        return None
    folder, hub_id = base
    if hub_id is not None:  # a snapshot folder is named by its revision
        return f"hub:{hub_id}@{folder.name}"
    return _folder_fingerprint(folder.resolve(), None, digests)


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
    if family.config_dim and config.exists():
        return int(_read_json(config).get("dim", family.dim))
    return family.dim


RANDOM_MARKER = "lgpt_checkpoint.json"


def is_random_checkpoint(folder: str | Path) -> bool:
    """True for a checkpoint written by `make_checkpoint` or `make_family_checkpoint`."""
    marker = Path(folder) / RANDOM_MARKER
    return marker.exists() and json.loads(marker.read_text()).get("random_weights", False)
