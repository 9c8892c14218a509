"""``--engine`` takes any release the package index has, listed or not, with the nearest measured
release's buffer data, said in the verdict. The index here is a stand-in on 127.0.0.1 answering
the JSON API (PEP 691) that ``pip`` and ``wheels`` read: no test reaches the internet."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from workbench.engines.commands import release_choice
from workbench.engines.store import releases
from workbench.engines.store.versions import measured_releases

# file names as PyPI lists them for sglang (a wheel and an sdist per release; 0.5.2rc2 and
# 0.4.9.post2 are releases the issue names that data/engines/releases.json does not list)
FILES = {"sglang": ["sglang-0.4.9.post2-py3-none-any.whl", "sglang-0.4.9.post2.tar.gz", "sglang-0.5.2rc2-py3-none-any.whl",
                    "sglang-0.5.2rc2.tar.gz", "sglang-0.5.23-py3-none-any.whl", "sglang-0.5.3rc0-py3-none-any.whl"]}
YANKED = {"sglang-0.5.3rc0-py3-none-any.whl"}


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.path)
            name = self.path.strip("/").split("/")[-1]
            if name not in FILES:
                self.send_response(404)
                self.end_headers()
                return
            body = json.dumps({"name": name, "files": [{"filename": f, "yanked": f in YANKED} for f in FILES[name]]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
    try:
        yield asked
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("asked", ["sglang==0.5.2rc2", "sglang==0.4.9.post2"])
def test_a_release_the_index_has_is_taken_with_the_nearest_measured_buffers(asked: str, index: list[str]) -> None:
    assert not releases.is_listed(asked)  # the premise: the list lacks it
    choice = release_choice.choose("sglang", asked)
    measured = sorted(measured_releases("sglang"), key=lambda e: releases.version_key(releases.split(e)[1]))
    # the nearest measured release, worked out here: the newest not after it, else the oldest
    key = releases.version_key(asked.split("==")[1])
    before = [e for e in measured if releases.version_key(releases.split(e)[1]) <= key]
    expected = before[-1] if before else measured[0]
    assert (choice.release, choice.asked, choice.buffers) == (asked, asked, expected)
    assert "package index" in choice.reason and f"buffer rules of {expected}" in choice.line
    assert index == ["/simple/sglang/"]


def test_a_release_the_index_lacks_or_yanked_is_refused_naming_what_is_allowed(index: list[str]) -> None:
    for asked in ("sglang==0.5.99", "sglang==0.5.3rc0"):
        with pytest.raises(ValueError, match="the package index has no") as err:
            release_choice.choose("sglang", asked)
        assert "data/engines/releases.json" in str(err.value)


def test_a_listed_release_does_not_ask_the_index(index: list[str]) -> None:
    assert release_choice.choose("sglang", "sglang==0.5.19").release == "sglang==0.5.19" and index == []
