"""Every version of an engine the package index has, asked of it when a check names one the
workbench's list (``data/engines/releases.json``) lacks.

The list holds the releases the workbench answers for by default, from the first with the modelled
buffers; the index has more (a ``.postN`` before that, a release candidate such as
``sglang==0.5.2rc2``). A release the index has can be read by its own code like any listed one
(its wheel is fetched by name and version, ``wheels``); its buffer rows take the nearest measured
release's data, and the verdict says so (``release_choice.choose``).

The index is ``PIP_INDEX_URL`` (else PyPI), asked through its JSON API (PEP 691), as ``wheels``
asks it for upload days; yanked files are left out.
"""

from __future__ import annotations

import json
import os
import urllib.request

from workbench.engines.store.releases import version_key
from workbench.engines.store.sdists import INDEX_URL
from workbench.engines.store.wheels import version_of


class IndexUnavailable(RuntimeError):
    """The package index did not answer; the message is one line saying why."""


def index_versions(package: str, timeout: float = 30) -> tuple[str, ...]:
    """The versions of ``package`` the index has files for (pre-releases included), oldest first."""
    url = f"{os.environ.get('PIP_INDEX_URL', INDEX_URL).rstrip('/')}/{package}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            data = json.load(answer)
    except (OSError, ValueError) as err:
        raise IndexUnavailable(f"the package index ({url}) did not answer: {err}") from None
    found: set[str] = set()
    for item in data.get("files", []):
        version = version_of(package, str(item.get("filename", "")))
        if version is not None and not item.get("yanked"):
            found.add(version)
    usable = []
    for version in found:
        try:
            version_key(version)
        except ValueError:  # a dev release or a local version: not a release the workbench reads
            continue
        usable.append(version)
    return tuple(sorted(usable, key=version_key))
