"""A stand-in Hugging Face hub on 127.0.0.1, serving the files of a hub cache folder.

``huggingface_hub.hf_hub_download`` asks ``{endpoint}/{repo_id}/resolve/{revision}/{filename}``:
first ``HEAD`` for the file's metadata (``ETag`` / ``X-Linked-Etag``, ``X-Repo-Commit``,
``Content-Length``; read in ``file_download.get_hf_file_metadata``), then ``GET`` for its bytes.
Errors are told by the ``X-Error-Code`` header (``utils/_http.py``, ``hf_raise_for_status``):
``EntryNotFound`` (404) for a file the repository lacks, ``RepoNotFound`` (401) for a repository
the hub does not show, ``GatedRepo`` (403) for one whose terms the caller has not accepted.

The files served are those of a cache folder in the hub's layout (``models--org--name/refs/main``,
``snapshots/<commit>/...``), such as ``tests/data/hf_cache/hub``. Every request is recorded
(``requests``), so that a test can say which files were asked for.

    with StandInHub(folder, gated={"org/private"}) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
"""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import unquote, urlsplit

GATED_MESSAGE = "Access to model {repo} is restricted. You must have access to it and be authenticated to access it. Please log in."


class StandInHub:
    def __init__(self, folder: Path, *, gated: set[str] | frozenset[str] = frozenset()) -> None:
        self.folder = folder
        self.gated = set(gated)
        self.requests: list[tuple[str, str]] = []  # (method, path)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
                hub.answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub.answer(self, body=True)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandInHub:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()

    def asked_files(self) -> list[str]:
        """The file names asked for (the last part of each resolve path)."""
        return [path.rsplit("/", 1)[-1] for _, path in self.requests if "/resolve/" in path]

    def answer(self, request: BaseHTTPRequestHandler, *, body: bool) -> None:
        path = unquote(urlsplit(request.path).path)
        self.requests.append((request.command, path))
        parts = path.strip("/").split("/")
        at = parts.index("resolve") if "resolve" in parts[1:3] else -1  # org/name, or a legacy id without org (gpt2)
        if at < 1 or len(parts) < at + 3:
            return self._error(request, 404, "RepoNotFound", "no such route on the stand-in hub")
        repo, revision, filename = "/".join(parts[:at]), parts[at + 1], "/".join(parts[at + 2:])
        folder = self.folder / f"models--{repo.replace('/', '--')}"
        if not folder.is_dir():
            return self._error(request, 401, "RepoNotFound", f"Repository Not Found for url: {path}")
        if repo in self.gated and not request.headers.get("authorization"):
            return self._error(request, 403, "GatedRepo", GATED_MESSAGE.format(repo=repo))
        ref = folder / "refs" / revision
        commit = ref.read_text().strip() if ref.is_file() else revision
        file = folder / "snapshots" / commit / filename
        if not file.is_file():
            return self._error(request, 404, "EntryNotFound", f"Entry not found: {filename}")
        data = file.read_bytes()
        request.send_response(200)
        request.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        request.send_header("X-Repo-Commit", commit)
        request.send_header("Content-Length", str(len(data)))
        request.send_header("Content-Type", "application/octet-stream")
        request.end_headers()
        if body:
            request.wfile.write(data)

    @staticmethod
    def _error(request: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        payload = ('{"error": "' + message.replace('"', "'") + '"}').encode()
        request.send_response(status)
        request.send_header("X-Error-Code", code)
        request.send_header("X-Error-Message", message)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(payload)
