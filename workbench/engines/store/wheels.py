"""An engine's released wheel and its few small dependencies, in a cache folder of the workbench's own.

Conformance runs the engine's own code, so it needs that code on disk, pinned by version, and
never inside the project's environment (an engine wheel drags in hundreds of packages and would
shadow the project's own). The layout, under ``${WORKBENCH_CACHE:-~/.cache/workbench}/engines``::

    sglang-0.5.23/
      wheel/   the wheel as ``pip download --no-deps`` left it
      src/     the wheel unpacked (the ``sglang`` package is loaded from here, never installed)
      deps/    ``pip install --target`` of the small packages the modules import (never torch)
      torchvision/  a torchvision for the running torch, seen only by versions that need it
      ready    written last: a folder without it is an interrupted fetch and is fetched again

``deps/`` and ``torchvision/`` are links into ``shared/``: releases pinning the same transformers
and tokenizers share one install of their dependencies (``shared/deps-<hash of the pins>``), and
every release one torchvision for the running torch, so 43 releases take 43 unpacked wheels and a
handful of dependency folders rather than 43 copies of 300 MB. (A folder fetched before holds
real ``deps/`` and ``torchvision/`` folders and is used as it is.)

Large wheels (vLLM's is 336 MB, most of it compiled kernels no CPU loads) are kept *slim*: only
their Python files and the package data their parser and sizing read are unpacked, and the wheel
is deleted once unpacked (its name and sha256 stay in ``ready``). Their small dependencies are
what the release's METADATA allows, resolved by pip, and shared by every release that resolves to
the same versions::

    vllm-0.33.0/
      src/     the wheel's Python files, package data and dist-info
      deps/    a link to ``shared/deps-<hash of the resolved versions>``
      ready    the layout, the wheel's name and sha256

Everything here is reused when present, so the network is needed once per version.
``fetch(engine, progress=...)`` says what it is doing (downloading, unpacking, installing the
dependencies) through ``progress``, one line at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workbench.engines.store import sdists
from workbench.engines.store.cache_root import cache_root as workbench_cache
from workbench.engines.store.sdists import INDEX_URL  # the package index's JSON API (PEP 691): files, hashes, upload times
from workbench.engines.store.sdists import sha256 as _sha256
from workbench.files import exclusive

# Packages the allocator and attention modules import at module level whose stand-in would not be
# enough (msgspec structs, pydantic models, transformers' config classes the model registry
# subclasses). Installed with their own dependencies (never torch: none of them needs it), at the
# versions the engine's wheel pins where it pins one (``PINNED_FROM_WHEEL``).
SMALL_DEPS = ("msgspec", "orjson", "psutil", "pybase64", "dill", "pydantic", "starlette", "pillow")
PINNED_FROM_WHEEL = ("transformers", "tokenizers")


LAYOUT = "workbench-engine-cache 2"  # written into ``ready``; an older layout is fetched again
SLIM_LAYOUT = "workbench-engine-cache slim 4"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SlimFamily:
    """An engine family whose wheels are kept slim, and what its code imports.

    ``deps`` are installed at the versions the release's METADATA allows (its whole specifier,
    ``transformers<5.21.0,>=5.16.1``), with their own dependencies (never torch: none needs it).
    """

    deps: tuple[str, ...]
    keep_suffixes: tuple[str, ...] = (".py", ".pyi", ".json", ".jinja", ".yaml", ".yml", ".txt", ".typed")
    # Dependencies a release's METADATA leaves open above, kept below their newest major version
    # when the release was built before that major version's first release (a release installed
    # then never saw it): its transformers of the day, not one that renamed what it registers.
    of_their_day: tuple[str, ...] = ()
    # A release with no wheel is taken from its source distribution (``sdists``): for a family whose
    # Python files are all that is read and run, and whose sdist needs no build to read them.
    from_sources: bool = False


# vLLM's argument parser and configuration classes: pydantic dataclasses, regex patterns,
# msgspec structs, cachetools caches, and transformers' configs (the model's config.json is read
# with them). The rest of what its modules import (fastapi, openai, ...) gets a stand-in.
SLIM_FAMILIES = {
    "vllm": SlimFamily(deps=("pydantic", "regex", "msgspec", "cachetools", "transformers", "huggingface_hub",
                             "tokenizers"), of_their_day=("transformers",)),
    # runs over a vLLM release's install (its own deps); most release candidates are sdists only
    "vllm-ascend": SlimFamily(deps=(), from_sources=True),
}


class FetchError(RuntimeError):
    """The engine's wheel is neither cached nor fetchable; the message is one line."""


@dataclass(frozen=True)
class EngineInstall:
    engine: str  # "sglang==0.5.23"
    src: Path  # the unpacked wheel: holds sglang/
    deps: Path  # --target folder of the small dependencies

    @property
    def torchvision(self) -> Path:
        return self.deps.parent / "torchvision"

    @property
    def package_dir(self) -> Path:
        return self.src / self.engine.split("==")[0].replace("-", "_")

    @property
    def wheel(self) -> dict[str, str]:
        """The wheel's file name and sha256, as ``ready`` recorded them (empty when not recorded)."""
        ready = self.src.parent / "ready"
        lines = ready.read_text().splitlines() if ready.exists() else []
        if lines and lines[0] == SLIM_LAYOUT:
            record: dict[str, str] = json.loads(lines[1])
            return {k: record[k] for k in ("file", "sha256") if k in record}
        return {"file": lines[1]} if len(lines) > 1 else {}


def cache_root() -> Path:
    return workbench_cache() / "engines"


def split_engine(engine: str) -> tuple[str, str]:
    name, sep, version = engine.partition("==")
    if not sep or not name or not version:
        raise ValueError(f"engine: {engine!r} is not NAME==VERSION (e.g. sglang==0.5.23)")
    return name, version


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("WARNING")]
    return lines[-1].strip() if lines else "no output"


def cached(engine: str) -> EngineInstall | None:
    """The install of ``engine`` if a complete one is in the cache."""
    name, version = split_engine(engine)
    folder = cache_root() / f"{name}-{version}"
    ready = folder / "ready"
    if not ready.exists():
        return None
    text = ready.read_text()
    if name in SLIM_FAMILIES:
        return EngineInstall(engine, folder / "src", folder / "deps") if text.startswith(SLIM_LAYOUT) else None
    if LAYOUT not in text:
        return None
    return EngineInstall(engine, folder / "src", folder / "deps")


def fetching_allowed() -> bool:
    """False where ``$WORKBENCH_NO_FETCH`` is set (an offline machine, or a test that must not
    download): an uncached release is then missing, and the message says how to fetch it."""
    return os.environ.get("WORKBENCH_NO_FETCH", "") in ("", "0")


def fetch(engine: str, progress: Progress | None = None) -> EngineInstall:
    """The cached install of ``engine``, fetched first when absent; FetchError when it cannot be.
    ``progress`` hears each step of a fetch (nothing when the install is cached)."""
    found = cached(engine)
    if found is not None:
        return found
    if not fetching_allowed():
        raise FetchError(f"{engine} is not in the workbench's engine cache ({cache_root()}) and fetching is off "
                         f"(WORKBENCH_NO_FETCH): `workbench engines fetch {engine}` fetches it")
    name, version = split_engine(engine)
    # one fetch of a release at a time (two test workers, two notebooks): the second waits and finds it cached
    with exclusive(cache_root() / "locks" / f"{name}-{version}.lock"):
        found = cached(engine)
        if found is not None:
            return found
        if name in SLIM_FAMILIES:
            return _fetch_slim(engine, SLIM_FAMILIES[name], progress or (lambda line: None))
        return _fetch_full(engine, name, version, progress or (lambda line: None))


def _fetch_full(engine: str, name: str, version: str, progress: Progress) -> EngineInstall:
    """A whole wheel unpacked, its small dependencies installed beside it (SGLang's)."""
    folder = cache_root() / f"{name}-{version}"
    _clear_interrupted(engine, folder, progress)
    wheel_dir, src, deps = folder / "wheel", folder / "src", folder / "deps"
    got = _pip("download", "--no-deps", "--only-binary=:all:", "-d", str(wheel_dir), f"{name}=={version}")
    wheels = sorted(wheel_dir.glob("*.whl")) if wheel_dir.exists() else []
    if got.returncode != 0 or not wheels:
        raise FetchError(f"cannot fetch {engine} and it is not cached in {folder}: {_last_line(got.stderr)}")
    with zipfile.ZipFile(wheels[0]) as whl:
        whl.extractall(src)
    requirements = [*SMALL_DEPS, *_pins(src, PINNED_FROM_WHEEL)]
    try:
        shared_deps = _shared("deps", requirements, ["install", "--target", "{target}", *requirements])
        shared_vision = fetch_torchvision()  # a folder of its own: only the versions that need it see it
    except FetchError as error:
        raise FetchError(f"cannot fetch the small dependencies of {engine} ({', '.join(SMALL_DEPS)}, "
                         f"torchvision): {error}") from None
    deps.symlink_to(shared_deps, target_is_directory=True)
    (folder / "torchvision").symlink_to(shared_vision, target_is_directory=True)
    (folder / "ready").write_text(f"{LAYOUT}\n{wheels[0].name}\n")
    return EngineInstall(engine, src, deps)


def _clear_interrupted(engine: str, folder: Path, progress: Progress) -> None:
    """Remove what an interrupted fetch of ``engine`` left in ``folder``. The caller holds the
    release's lock and found no ``ready``, so no other process is fetching it: the folder is half
    of a fetch that was stopped (killed, or out of disk)."""
    if folder.exists():
        progress(f"{engine}: {folder} holds an interrupted fetch (no 'ready' file): removed, fetching again")
        shutil.rmtree(folder, ignore_errors=True)


def _shared(kind: str, requirements: list[str], pip_args: list[str]) -> Path:
    """``shared/<kind>-<hash of requirements>``, installed by ``pip_args`` (``{target}`` is the
    folder) when absent. Installed into a folder of its own first and then renamed, so two
    fetches at once, or an interrupted one, never leave a half install under the final name."""
    import hashlib

    key = hashlib.sha256("\n".join([sys.version.split()[0], *sorted(requirements)]).encode()).hexdigest()[:12]
    final = cache_root() / "shared" / f"{kind}-{key}"
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(f"{final.name}.part-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    got = _pip(*[str(partial) if arg == "{target}" else arg for arg in pip_args])
    if got.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise FetchError(_last_line(got.stderr))
    (partial / "requirements.txt").write_text("\n".join(requirements) + "\n")
    try:
        partial.rename(final)
    except OSError:  # another fetch finished the same install first
        shutil.rmtree(partial, ignore_errors=True)
    return final

def fetch_torchvision() -> Path:
    """The torchvision built for the running torch (about 24 MB), shared by every release that
    needs it: SGLang's releases get it with their fetch, vLLM's when a model class wants it."""
    vision = _torchvision_for_torch()
    return _shared("torchvision", [vision], ["install", "--no-deps", "--target", "{target}", vision])


def fetch_vision() -> Path:
    """torchvision for the running torch with Pillow beside it (what every GPU install of vLLM has,
    and what transformers needs to define its image processors), shared by every release whose
    model class wants them; apart from ``fetch_torchvision``'s folder, which SGLang's releases see."""
    vision = _torchvision_for_torch()
    return _shared("vision", [vision, "pillow"], ["install", "--no-deps", "--target", "{target}", vision, "pillow"])


def _fetch_slim(engine: str, family: SlimFamily, progress: Progress) -> EngineInstall:
    """Download the wheel, unpack its Python files and package data, delete it, and install (or
    reuse) the small dependencies its METADATA allows."""
    name, version = split_engine(engine)
    folder = cache_root() / f"{name}-{version}"
    _clear_interrupted(engine, folder, progress)
    wheel_dir, src = folder / "wheel", folder / "src"
    progress(f"{engine}: downloading the wheel from the package index (pip download --no-deps)")
    got = _pip_streamed(progress, "download", "--no-deps", "--only-binary=:all:", "-d", str(wheel_dir), engine)
    wheels = sorted(wheel_dir.glob("*.whl")) if wheel_dir.exists() else []
    if (got.returncode != 0 or not wheels) and family.from_sources:
        try:
            sdist = sdists.fetch(name, version, wheel_dir, progress)
            kept, total, kept_bytes, built = sdists.unpack(sdist, src, family.keep_suffixes)
        except sdists.SdistError as error:
            raise FetchError(f"cannot fetch {engine} and it is not cached in {folder}: {error}") from None
        record: dict[str, object] = {"file": sdist.name, "sha256": _sha256(sdist), "bytes": sdist.stat().st_size,
                                     "built": built}
        progress(f"{engine}: unpacked {kept:,} of {total:,} files of its packages ({kept_bytes / 2**20:.0f} MB of "
                 "Python files and package data; nothing built), source distribution deleted")
    elif got.returncode != 0 or not wheels:
        raise FetchError(f"cannot fetch {engine} and it is not cached in {folder}: {_last_line(got.stderr)}")
    else:
        wheel = wheels[0]
        record = {"file": wheel.name, "sha256": _sha256(wheel), "bytes": wheel.stat().st_size, "built": _built(wheel)}
        kept, total, kept_bytes = _unpack_slim(wheel, src, family.keep_suffixes)
        progress(f"{engine}: unpacked {kept:,} of {total:,} files ({kept_bytes / 2**20:.0f} MB of Python files and "
                 f"package data; compiled kernels left out), wheel deleted")
    shutil.rmtree(wheel_dir)
    deps = _family_deps(engine, src, family, str(record["built"]), progress)
    (folder / "deps").symlink_to(deps, target_is_directory=True)
    (folder / "ready").write_text(f"{SLIM_LAYOUT}\n{json.dumps(record, sort_keys=True)}\n")
    found = cached(engine)
    assert found is not None
    return found


def _unpack_slim(wheel: Path, src: Path, suffixes: tuple[str, ...]) -> tuple[int, int, int]:
    """Unpack the members of ``wheel`` ending in ``suffixes`` and its dist-info; (kept, total, bytes)."""
    with zipfile.ZipFile(wheel) as whl:
        members = whl.infolist()
        keep = [m for m in members if not m.is_dir() and (m.filename.endswith(suffixes) or ".dist-info/" in m.filename)
                and not m.filename.endswith("/RECORD")]
        for member in keep:
            whl.extract(member, src)
    return len(keep), len(members), sum(m.file_size for m in keep)


def _built(wheel: Path) -> str:
    """The day a wheel was built: the newest time stamp of its members (``YYYY-MM-DD``)."""
    with zipfile.ZipFile(wheel) as whl:
        year, month, day = max(m.date_time for m in whl.infolist())[:3]
    return f"{year:04d}-{month:02d}-{day:02d}"




def _upload_days(package: str, built: str) -> dict[str, str]:
    """``{version: the day its first file was uploaded}`` of every final release of ``package``,
    asked of the package index (``PIP_INDEX_URL``, else PyPI) and kept in
    ``shared/upload-days/<package>.json``; asked again when the wheel is newer than what is kept.
    Empty when the index cannot answer."""
    import urllib.request

    from workbench.engines.store.releases import version_key

    kept_file = cache_root() / "shared" / "upload-days" / f"{package}.json"
    kept: dict[str, str] = json.loads(kept_file.read_text()) if kept_file.exists() else {}
    if kept and max(kept.values()) >= built:
        return kept
    url = f"{os.environ.get('PIP_INDEX_URL', INDEX_URL).rstrip('/')}/{package}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            files = json.load(answer).get("files", [])
    except (OSError, ValueError):
        return kept
    days: dict[str, str] = {}
    for item in files:
        version = version_of(package, str(item.get("filename", "")))
        day = str(item.get("upload-time", ""))[:10]
        if version is None or not day or item.get("yanked"):
            continue
        try:
            if version_key(version)[1] != 3:  # a pre-release
                continue
        except ValueError:
            continue
        days[version] = min(day, days.get(version, day))
    kept_file.parent.mkdir(parents=True, exist_ok=True)
    kept_file.write_text(json.dumps(days, indent=1, sort_keys=True) + "\n")
    return days


def version_of(package: str, filename: str) -> str | None:
    """The version in a wheel's or an sdist's file name, when the file is ``package``'s."""
    def normal(name: str) -> str:
        return "".join("_" if ch in "-." else ch for ch in name.lower())

    if filename.endswith(".whl"):
        name, _, rest = filename.partition("-")
        version = rest.split("-", 1)[0]
    else:
        stem = next((filename[:-len(s)] for s in (".tar.gz", ".zip") if filename.endswith(s)), None)
        if stem is None or "-" not in stem:
            return None
        name, version = stem.rsplit("-", 1)
    return version if normal(name) == normal(package) else None


def newest_of_day(package: str, built: str) -> str | None:
    """The newest final release of ``package`` uploaded on or before ``built`` (``YYYY-MM-DD``)."""
    from workbench.engines.store.releases import version_key

    candidates = [v for v, day in _upload_days(package, built).items() if day <= built]
    return max(candidates, key=version_key) if candidates else None


def _major_release_day(package: str) -> tuple[int, str] | None:
    """(newest major version of ``package``, the day its ``X.0.0`` wheel was built), asked of the
    package index once (``pip index versions``, ``pip download --no-deps`` of that one wheel) and
    kept in ``shared/release-days.json``."""
    days_file = cache_root() / "shared" / "release-days.json"
    days: dict[str, list[object]] = json.loads(days_file.read_text()) if days_file.exists() else {}
    if package in days:
        major, day = days[package]
        return int(str(major)), str(day)
    got = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "index", "versions", package],
                         capture_output=True, text=True, timeout=300)
    line = next((x for x in got.stdout.splitlines() if x.startswith("Available versions:")), None)
    if got.returncode != 0 or line is None:
        return None
    major = int(line.split(":", 1)[1].split(",")[0].strip().split(".")[0])
    with tempfile.TemporaryDirectory() as folder:
        got = _pip("download", "--no-deps", "--only-binary=:all:", "-d", folder, f"{package}=={major}.0.0")
        found = sorted(Path(folder).glob("*.whl"))
        if got.returncode != 0 or not found:
            return None
        day = _built(found[0])
    days[package] = [major, day]
    days_file.parent.mkdir(parents=True, exist_ok=True)
    days_file.write_text(json.dumps(days, indent=1, sort_keys=True) + "\n")
    return major, day


def _of_their_day(wanted: list[str], family: SlimFamily, built: str, progress: Progress) -> list[str]:
    """``wanted`` with each of ``family.of_their_day`` capped at the newest release of the wheel's
    day, for a wheel built before that library's newest major version: an engine release older
    than the library's current series runs with the library its users had (a later transformers 4
    registers config names vLLM 0.9.0 registers again, and its import fails). A release of the
    current series gets the newest its METADATA allows, as ``pip install`` gives it today."""
    out = []
    for requirement in wanted:
        name = requirement.split("<")[0].split(">")[0].split("=")[0].split("!")[0].split("~")[0]
        major = _major_release_day(name) if name in family.of_their_day else None
        if major is not None and built < major[1]:
            newest = newest_of_day(name, built)
            if newest is not None:
                progress(f"  {name}<={newest}: the newest {name} on {built}, the day the wheel was built "
                         f"(before {name} {major[0]}.0.0, {major[1]})")
                requirement = f"{requirement}{',' if requirement != name else ''}<={newest}"
            else:
                progress(f"  {name}<{major[0]}: the package index did not say which releases are older than {built}")
                requirement = f"{requirement}{',' if requirement != name else ''}<{major[0]}"
        out.append(requirement)
    return out


def _family_deps(engine: str, src: Path, family: SlimFamily, built: str, progress: Progress) -> Path:
    """The shared folder of the small dependencies ``engine`` resolves to, installed when absent.

    The wheel's own specifiers are resolved (``pip install --dry-run --report``; those of
    ``family.of_their_day`` kept to the versions of the wheel's day) and the folder is named by the
    resolved versions, so releases that resolve alike share one folder."""
    wanted = _of_their_day(_specifiers(src, family.deps), family, built, progress)
    if not wanted:  # nothing to install (vllm-ascend loads over a vLLM install)
        empty = cache_root() / "shared" / "deps-none"
        empty.mkdir(parents=True, exist_ok=True)
        return empty
    progress(f"{engine}: resolving its small dependencies ({', '.join(wanted)})")
    resolved = _resolve(wanted)
    if resolved is None:
        raise FetchError(f"cannot resolve the small dependencies of {engine} ({', '.join(wanted)})")
    progress(f"{engine}: {len(resolved)} packages (installed once into the cache's shared/ folder, "
             "for every release that resolves alike)")
    try:
        return _shared("deps", resolved, ["install", "--no-deps", "--target", "{target}", *resolved])
    except FetchError as error:
        raise FetchError(f"cannot install the small dependencies of {engine}: {error}") from None


def _specifiers(src: Path, names: tuple[str, ...]) -> list[str]:
    """Each of ``names`` with the specifier the wheel's METADATA gives it (``name`` alone when
    none), in the order of ``names``; markers are dropped (this is one platform)."""
    wanted = {name.lower().replace("_", "-"): name for name in names}
    found = dict.fromkeys(names, "")
    for metadata in src.glob("*.dist-info/METADATA"):
        for line in metadata.read_text(errors="replace").splitlines():
            if not line.startswith("Requires-Dist:") or "extra ==" in line:
                continue
            requirement = line.split(":", 1)[1].split(";")[0].strip()
            bare = requirement.split("[")[0]
            cut = min((i for i, ch in enumerate(bare) if ch in "<>=!~ ("), default=len(bare))
            key = bare[:cut].strip().lower().replace("_", "-")
            if key in wanted:
                found[wanted[key]] = bare[cut:].strip(" ()").replace(" ", "")
    return [f"{name}{spec}" for name, spec in found.items()]


def _resolve(requirements: list[str]) -> list[str] | None:
    """``name==version`` of every package ``requirements`` install, with their dependencies,
    as pip resolves them on this platform (torch and numpy excluded: the running ones are used)."""
    # The report goes to a file: pip's stdout can carry other lines (a kernel's environment, a
    # resolver note), and one with a brace in it once made the report unreadable.
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder) / "report.json"
        got = _pip("install", "--dry-run", "--ignore-installed", "--report", str(where), *requirements)
        if got.returncode != 0 or not where.exists():
            return None
        report = json.loads(where.read_text())
    pins = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report.get("install", [])}
    return sorted(f"{n}=={v}" for n, v in pins.items() if n not in ("torch", "numpy"))


def _pip_streamed(progress: Progress, *args: str) -> subprocess.CompletedProcess[str]:
    """pip, its lines that say what it fetches passed to ``progress`` as they come."""
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", args[0], "--progress-bar", "off", *args[1:]]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.strip().startswith(("Downloading", "Saved", "Successfully")):
                progress("  " + line.strip())
        stderr = proc.stderr.read()
        code = proc.wait(timeout=900)
    return subprocess.CompletedProcess(cmd, code, "".join(lines), stderr)


def _torchvision_for_torch() -> str:
    """The torchvision release built against the running torch (torch 2.N pairs with 0.(N+15)).

    Only its presence matters: the transformers that 0.5.18 pins refuses to register the engine's
    image processors without it, while the one 0.5.23 pins then imports it for real and fails;
    so it sits in ``torchvision/`` beside ``deps/`` and a version's data entry says whether its
    worker sees it. Installed without dependencies, so it cannot pull in a torch.
    """
    import torch

    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return f"torchvision=={major - 2}.{minor + 15}.*"


def _pins(src: Path, names: tuple[str, ...]) -> list[str]:
    """``name==version`` for each of ``names`` the wheel's METADATA pins exactly (else ``name``)."""
    pins = {name: name for name in names}
    for metadata in src.glob("*.dist-info/METADATA"):
        for line in metadata.read_text(errors="replace").splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            requirement = line.split(":", 1)[1].split(";")[0].strip()
            name = requirement.split("=")[0].split("<")[0].split(">")[0].strip().lower()
            if name in pins and "==" in requirement:
                pins[name] = requirement.replace(" ", "")
    return list(pins.values())


def triton_dir() -> Path | None:
    """A ``--target`` folder holding triton, shared by every version; None when not fetched.

    Triton is large (hundreds of MB), so it is fetched only on request (``fetch_triton``).
    """
    folder = cache_root() / "triton"
    return folder / "site" if (folder / "ready").exists() else None


def fetch_triton() -> Path:
    folder = cache_root() / "triton"
    with exclusive(cache_root() / "locks" / "triton.lock"):
        if (folder / "ready").exists():
            return folder / "site"
        shutil.rmtree(folder, ignore_errors=True)
        got = _pip("install", "--no-deps", "--target", str(folder / "site"), "triton")
        if got.returncode != 0:
            raise FetchError(f"cannot fetch triton: {_last_line(got.stderr)}")
        (folder / "ready").write_text("triton\n")
        return folder / "site"


def fetch_triton_release(version: str) -> Path:
    """One triton release (``triton==version``) in a folder of its own, ``triton-<version>/site``:
    early engine releases import parts of triton that its current release no longer has."""
    folder = cache_root() / f"triton-{version}"
    if (folder / "ready").exists():
        return folder / "site"
    shutil.rmtree(folder, ignore_errors=True)
    got = _pip("install", "--no-deps", "--target", str(folder / "site"), f"triton=={version}")
    if got.returncode != 0:
        raise FetchError(f"cannot fetch triton=={version}: {_last_line(got.stderr)}")
    (folder / "ready").write_text(f"triton=={version}\n")
    return folder / "site"
