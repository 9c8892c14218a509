"""A release taken from its source distribution (``engines/store/sdists.py``): what is unpacked and how the
egg-info becomes the dist-info vLLM's plugin look-up reads. The archive is built here, in the layout
setuptools gives an sdist (``<name>-<version>/``, ``<name>.egg-info/``), so no network is needed."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from workbench.engines.store import sdists
from workbench.engines.vllm import loader as vllm_loader

ENTRY_POINTS = "[vllm.platform_plugins]\nascend = vllm_ascend:register\n"


def _sdist(tmp_path: Path, files: dict[str, str]) -> Path:
    path = tmp_path / "vllm_ascend-9.9.9rc1.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm_ascend-9.9.9rc1/{name}")
            info.size, info.mtime = len(data), 1_760_000_000  # 2025-10-09 UTC
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_packages_files_and_the_egg_info_are_unpacked(tmp_path: Path) -> None:
    sdist = _sdist(tmp_path, {
        "setup.py": "raise SystemExit('never run')\n",
        "csrc/third_party/tool/setup.py": "",  # outside the top-level packages: left out
        "vllm_ascend/__init__.py": "def register():\n    return 'vllm_ascend.platform.NPUPlatform'\n",
        "vllm_ascend/spec_decode/proposer.py": "max_model_len = 1\n",
        "vllm_ascend/kernels.cpp": "",  # not a suffix kept
        "vllm_ascend.egg-info/PKG-INFO": "Metadata-Version: 2.1\nName: vllm_ascend\nVersion: 9.9.9rc1\n",
        "vllm_ascend.egg-info/entry_points.txt": ENTRY_POINTS,
        "vllm_ascend.egg-info/top_level.txt": "vllm_ascend\n",
    })
    src = tmp_path / "src"
    kept, total, size, day = sdists.unpack(sdist, src, (".py", ".json"))
    assert (kept, total, day) == (2, 8, "2025-10-09")
    assert size == len("def register():\n    return 'vllm_ascend.platform.NPUPlatform'\n") + len("max_model_len = 1\n")
    assert sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file()) == [
        "vllm_ascend-9.9.9rc1.dist-info/METADATA", "vllm_ascend-9.9.9rc1.dist-info/entry_points.txt",
        "vllm_ascend-9.9.9rc1.dist-info/top_level.txt", "vllm_ascend/__init__.py",
        "vllm_ascend/spec_decode/proposer.py"]
    # the plugin is found as an installed wheel's is: by its vllm.platform_plugins entry point
    assert vllm_loader.platform_plugin(src) == "vllm-ascend==9.9.9rc1"


def test_an_sdist_without_egg_info_is_refused(tmp_path: Path) -> None:
    sdist = _sdist(tmp_path, {"pyproject.toml": "", "vllm_ascend/__init__.py": ""})
    with pytest.raises(sdists.SdistError, match="carries no egg-info"):
        sdists.unpack(sdist, tmp_path / "src", (".py",))


def test_sha256_is_the_files(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert sdists.sha256(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2 example
