"""A release published only as a source distribution, for an engine whose Python files are all the
workbench reads (vllm-ascend: most of its release candidates from 0.27.1rc1 on have no wheel).

``pip download`` of an sdist builds its metadata first, which for vllm-ascend needs CMake, the
CANN toolkit and torch_npu; so the file is taken from the package index's JSON listing (PEP 691;
``PIP_INDEX_URL``, else PyPI) by its exact name, checked against the sha256 the index gives, and
unpacked without building anything. A setuptools sdist carries the ``*.egg-info`` its wheel's
dist-info is made from (``PKG-INFO``, ``entry_points.txt``, ``top_level.txt``); those become the
unpacked tree's ``<name>-<version>.dist-info``, so vLLM finds the plugin's entry points as it finds
an installed wheel's. Nothing is compiled: the kernels the plugin builds are what a CPU never runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

INDEX_URL = "https://pypi.org/simple"
Progress = Callable[[str], None]


class SdistError(RuntimeError):
    """The release has no source distribution on the index, or it could not be fetched."""


def fetch(name: str, version: str, folder: Path, progress: Progress) -> Path:
    """The sdist of ``name==version`` downloaded into ``folder``, its sha256 checked."""
    listing = f"{os.environ.get('PIP_INDEX_URL', INDEX_URL).rstrip('/')}/{name}/"
    request = urllib.request.Request(listing, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            files = json.load(answer).get("files", [])
    except (OSError, ValueError) as error:
        raise SdistError(f"the package index's listing of {name} could not be read ({listing}: {error})") from None
    wanted = f"{name.replace('-', '_')}-{version}.tar.gz"
    entry = next((f for f in files if str(f.get("filename", "")).lower() == wanted.lower() and not f.get("yanked")), None)
    if entry is None:
        raise SdistError(f"{name}=={version} has neither a wheel nor a source distribution ({wanted}) on the index")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / str(entry["filename"])
    size = entry.get("size")
    progress(f"{name}=={version}: no wheel on the index; downloading its source distribution {target.name}"
             + (f" ({int(size) / 2**20:.0f} MB)" if size else ""))
    try:
        with urllib.request.urlopen(str(entry["url"]), timeout=300) as answer, target.open("wb") as out:
            while chunk := answer.read(1 << 20):
                out.write(chunk)
    except OSError as error:
        raise SdistError(f"{target.name} could not be downloaded: {error}") from None
    expected = (entry.get("hashes") or {}).get("sha256")
    if expected and sha256(target) != expected:
        raise SdistError(f"{target.name}: its sha256 is not the one the index lists")
    return target


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def unpack(sdist: Path, src: Path, suffixes: tuple[str, ...]) -> tuple[int, int, int, str]:
    """The files of the sdist's top-level packages ending in ``suffixes`` under ``src``, and its
    egg-info as a dist-info; (kept, total, bytes, the newest member's day ``YYYY-MM-DD``)."""
    import datetime

    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        root = members[0].name.split("/", 1)[0]
        info = next((m.name.rsplit("/", 1)[0] for m in members if m.name.endswith(".egg-info/PKG-INFO")
                     and m.name.count("/") == 2), None)
        if info is None:
            raise SdistError(f"{sdist.name} carries no egg-info (PKG-INFO, entry_points.txt): not a setuptools sdist")
        top = tar.extractfile(f"{info}/top_level.txt")
        packages = [p for p in (top.read().decode().split() if top else []) if p]
        keep = [m for m in members if m.name.endswith(suffixes)
                and any(m.name.startswith(f"{root}/{p}/") for p in packages)]
        for member in keep:
            _extract(tar, member, src / member.name[len(root) + 1:])
        distribution = root  # "<name>-<version>", as a wheel's dist-info is named
        for name, as_name in (("PKG-INFO", "METADATA"), ("entry_points.txt", "entry_points.txt"),
                              ("top_level.txt", "top_level.txt")):
            found = next((m for m in members if m.name == f"{info}/{name}"), None)
            if found is not None:
                _extract(tar, found, src / f"{distribution}.dist-info" / as_name)
        newest = max(m.mtime for m in members)
    day = datetime.datetime.fromtimestamp(newest, tz=datetime.timezone.utc).strftime("%Y-%m-%d")
    return len(keep), len(members), sum(m.size for m in keep), day


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    """One regular file's bytes at ``target`` (never a path the archive chooses)."""
    stream = tar.extractfile(member)
    if stream is None:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(stream.read())
