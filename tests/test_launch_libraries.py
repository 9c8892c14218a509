"""What a check does when the engine's resolution stops for want of something a real deployment has:
a library (triton, torchvision: the engine process that has them is asked again) or the model's
tokenizer files (UNDECIDED, naming them). No engine runs here: the service's exchange with its
processes and the release's errors are stood in, so these run in the fast suite; the same paths
on vLLM 0.34.0 itself are in tests/test_launch_commands_real.py (``WORKBENCH_LAUNCH_COMMANDS=1``)."""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from workbench.engines.commands import launch_service
from workbench.engines.commands.adapters import RESOLVED, UNDECIDED, UNLOADABLE, LaunchRequest, Resolution, to_json
from workbench.engines.sandbox.model_lookup import Located
from workbench.engines.store import gpus, wheels
from workbench.engines.vllm import launch_adapter as vllm_adapter


def _request() -> LaunchRequest:
    return LaunchRequest(engine="vllm==0.34.0", program="vllm serve", argv=("Qwen/Qwen3.5-397B-A17B",), env={},
                         gpu=gpus.gpu("h100"))


class _Processes:
    """Stands in for the engine processes: what each one (by its optional libraries) answers."""

    def __init__(self, answers: dict[tuple[str, ...], Resolution]) -> None:
        self.answers, self.asked = answers, []

    def __call__(self, request: LaunchRequest, install: Any, owner: bool, progress: Any,
                 libraries: tuple[str, ...]) -> dict[str, Any]:
        self.asked.append(libraries)
        answer: dict[str, Any] = to_json(self.answers[libraries])  # type: ignore[assignment]
        return answer


def _stopped(needs: tuple[str, ...], said: str) -> Resolution:
    return Resolution("vllm==0.34.0", UNLOADABLE, f"model registry could not import the model class: {said}", needs=needs)


@pytest.fixture()
def install(tmp_path: Path) -> wheels.EngineInstall:
    return wheels.EngineInstall("vllm==0.34.0", tmp_path / "src", tmp_path / "deps")


def test_a_library_the_deployment_has_is_added_until_the_engine_stops_asking(
        monkeypatch: pytest.MonkeyPatch, install: wheels.EngineInstall, tmp_path: Path) -> None:
    resolved = Resolution("vllm==0.34.0", RESOLVED, notes=("a note of the engine's",))
    processes = _Processes({(): _stopped(("triton",), "num_stages"),
                            ("triton",): _stopped(("torchvision",), "No module named 'torchvision'"),
                            ("torchvision", "triton"): resolved})
    monkeypatch.setattr(launch_service, "_ask", processes)
    monkeypatch.setattr(launch_service, "library_paths", lambda install, names: [tmp_path / n for n in names])
    answer = launch_service.resolve(_request(), install, progress=None)
    assert processes.asked == [(), ("triton",), ("torchvision", "triton")]
    assert answer.status == RESOLVED and answer.notes[0] == "a note of the engine's"
    assert answer.notes[-1].startswith("read by an engine process with torchvision and triton")
    assert "without triton: model registry" in answer.notes[-1] and "without torchvision:" in answer.notes[-1]


def test_a_library_not_in_the_cache_leaves_the_answer_saying_how_to_fetch_it(
        monkeypatch: pytest.MonkeyPatch, install: wheels.EngineInstall) -> None:
    processes = _Processes({(): _stopped(("triton",), "num_stages")})
    monkeypatch.setattr(launch_service, "_ask", processes)
    monkeypatch.setattr(wheels, "triton_dir", lambda: None)
    answer = launch_service.resolve(_request(), install, progress=None)
    assert processes.asked == [()] and answer.status == UNLOADABLE
    assert answer.message.endswith("every GPU install of the engine has triton, which the workbench's cache has not: "
                                   "`workbench engines fetch --triton` fetches it (about 1 GB), then check again")


def test_an_answer_that_needs_nothing_is_asked_once(monkeypatch: pytest.MonkeyPatch,
                                                    install: wheels.EngineInstall) -> None:
    plain = Resolution("vllm==0.34.0", UNLOADABLE, "the resolution cannot run on a CPU: something else")
    processes = _Processes({(): plain})
    monkeypatch.setattr(launch_service, "_ask", processes)
    assert launch_service.resolve(_request(), install, progress=None) == dataclasses.replace(plain)
    assert processes.asked == [()]


def test_each_set_of_libraries_has_a_process_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch_service, "run_dir", lambda: Path("/run/wb"))  # short: the names in full
    plain = launch_service.socket_path("vllm==0.34.0", "h100")
    both = launch_service.socket_path("vllm==0.34.0", "h100", ("torchvision", "triton"))
    assert plain.name == "vllm-0.34.0-h100.sock" and both.name == "vllm-0.34.0-h100+torchvision+triton.sock"


def test_a_socket_whose_name_would_pass_the_limit_is_named_by_a_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Unix socket's path holds at most 107 bytes, and the engine process binds it with ".<pid>"
    added first: under a test session's deep run folder, vLLM on an NPU with its plugin and
    torchvision passed it (OSError: AF_UNIX path too long)."""
    deep = Path("/run") / ("d" * 52)  # 57 characters: a test worker's run folder is as deep
    monkeypatch.setattr(launch_service, "run_dir", lambda: deep)
    libraries = ("torchvision", "vllm-ascend")
    assert len(str(deep / "vllm-0.23.0-910b+torchvision+vllm-ascend.sock")) > 107 - len(".4194304")
    long_one = launch_service.socket_path("vllm==0.23.0", "910b", libraries)
    assert len(str(long_one)) + len(".4194304") <= 107 and long_one.name.startswith("vllm-0.23.0-910b+")
    assert long_one != launch_service.socket_path("vllm==0.23.0", "910b", ("torchvision",))  # each set its own
    assert long_one == launch_service.socket_path("vllm==0.23.0", "910b", libraries)


def test_what_the_model_class_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert vllm_adapter._libraries_missed("ModuleNotFoundError: No module named 'torchvision'") == ("torchvision",)
    # vLLM 0.18.0's Qwen3-VL classes (Qwen3.5 imports them) on its transformers without Pillow
    said = "ImportError: cannot import name 'PILImageResampling' from 'transformers.image_utils'"
    assert vllm_adapter._libraries_missed(said) == ("torchvision",)
    # vLLM's own placeholder stands where triton is missing (vllm.triton_utils.HAS_TRITON false)
    monkeypatch.setitem(sys.modules, "vllm.triton_utils", types.SimpleNamespace(HAS_TRITON=False))
    assert vllm_adapter._libraries_missed("AttributeError: 'function' object has no attribute 'num_stages'") == ("triton",)
    monkeypatch.setitem(sys.modules, "vllm.triton_utils", types.SimpleNamespace(HAS_TRITON=True))
    assert vllm_adapter._libraries_missed("AttributeError: 'function' object has no attribute 'num_stages'") == ()


class _Tokenizers:
    """transformers' tokenizer base class, as far as the hook sees it: every tokenizer loads through it."""

    loaded: list[str] = []

    @classmethod
    def from_pretrained(cls, name: str, *args: Any, **kwargs: Any) -> str:
        cls.loaded.append(name)
        return f"tokenizer of {name}"


def test_a_tokenizer_with_no_file_here_stops_the_resolution_as_a_missing_file(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from workbench.engines.vllm import loader as vllm_loader

    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "config.json").write_text("{}")
    model = Located("Qwen/Qwen3.5-397B-A17B", "Qwen/Qwen3.5-397B-A17B", "cache", folder=str(snapshot))
    assert not vllm_adapter._has_tokenizer_file(model)
    monkeypatch.setitem(sys.modules, "transformers.tokenization_utils_base",
                        types.SimpleNamespace(PreTrainedTokenizerBase=_Tokenizers))
    monkeypatch.setattr(_Tokenizers, "from_pretrained", _Tokenizers.__dict__["from_pretrained"])  # restored after
    monkeypatch.setattr(vllm_loader, "TOKENIZER_ABSENT", {model.name, str(snapshot.resolve())})
    vllm_loader.tokenizers_need_files()
    assert _Tokenizers.from_pretrained("another/model") == "tokenizer of another/model"
    for asked in (model.name, str(snapshot)):  # by its id, or by the snapshot path the engine resolved it to
        with pytest.raises(vllm_loader.TokenizerFilesMissing) as stopped:
            _Tokenizers.from_pretrained(asked)
        refused = RuntimeError("1 validation error for ModelConfig")
        refused.__cause__ = stopped.value
        assert vllm_adapter._tokenizer_missing(refused) is stopped.value  # found among the causes
    assert vllm_adapter._tokenizer_missing(RuntimeError("World size (16) is larger")) is None
    (snapshot / "tokenizer.json").write_text("{}")
    assert vllm_adapter._has_tokenizer_file(model)


def test_a_missing_file_beside_the_config_is_named_not_refused(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    model = Located("MiniMaxAI/MiniMax-M2.7", "MiniMaxAI/MiniMax-M2.7", "cache", folder=str(snapshot))
    # transformers' words when remote code the config names is not in the folder
    error = OSError(f"{snapshot.resolve()} does not appear to have a file named configuration_minimax_m2.py.")
    answer = vllm_adapter.VLLMAdapter()._stopped(_request(), [], error, model, {})
    assert answer.status == UNDECIDED and "needs a file of the model that is not on this machine" in answer.message


def test_the_files_the_engine_asked_for_and_the_cache_lacks_are_named(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """transformers' ``cached_files`` raising for a file (remote code, a tokenizer) is noted, and
    the answer names that file and how to fetch it, for a hub id and for a local folder."""
    from workbench.engines.sandbox import model_lookup

    def cached_files(path_or_repo_id: str, filenames: list[str], **kwargs: object) -> list[str]:
        if "configuration_deepseek.py" in filenames:
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")
        return [f"{path_or_repo_id}/{name}" for name in filenames]

    monkeypatch.setitem(sys.modules, "transformers.utils.hub", types.SimpleNamespace(cached_files=cached_files))
    monkeypatch.setattr(model_lookup, "ASKED_ABSENT", [])
    model_lookup.note_absent_files()
    hub = sys.modules["transformers.utils.hub"]
    assert hub.cached_files("deepseek-ai/DeepSeek-R1", ["config.json"]) == ["deepseek-ai/DeepSeek-R1/config.json"]
    with pytest.raises(OSError):
        hub.cached_files("deepseek-ai/DeepSeek-R1", ["configuration_deepseek.py"])
    cached = Located("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1", "cache", folder=str(tmp_path))
    assert model_lookup.absent_files(cached) == (
        "the engine asked for configuration_deepseek.py, which the Hugging Face cache does not hold; fetch it into "
        "the cache (hf download deepseek-ai/DeepSeek-R1 configuration_deepseek.py)")
    other = Located("Qwen/Qwen3-8B", "Qwen/Qwen3-8B", "cache", folder=str(tmp_path / "other"))
    assert model_lookup.absent_files(other) is None  # asked of another model: not this one's
    with pytest.raises(OSError):
        hub.cached_files(str(tmp_path), ["configuration_deepseek.py"])  # the engine given the folder itself
    local = Located(str(tmp_path), str(tmp_path), "directory", folder=str(tmp_path))
    assert "not beside its config.json" in str(model_lookup.absent_files(local))
    given = Located("/ossfs/DeepSeek-R1", str(tmp_path), "--model-config r1.json", folder=str(tmp_path))
    assert "which --model-config does not give" in str(model_lookup.absent_files(given))


def test_an_entry_point_that_gives_up_before_its_parser_says_what_it_logged() -> None:
    import logging

    logged = vllm_adapter._ErrorsLogged()
    logging.getLogger("vllm").addHandler(logged)
    try:
        logging.getLogger("vllm.entrypoints.cli.main").error("--omni flag requires a valid instance of vllm-omni")
    finally:
        logging.getLogger("vllm").removeHandler(logged)
    assert len(logged.errors) == 1 and logged.errors[0].startswith("--omni flag requires a valid instance of vllm-omni (")


def test_a_command_line_that_did_not_load_for_want_of_triton_asks_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.13.0 and 0.14.1's command line imports torch's inductor, which imports triton."""
    for name in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        monkeypatch.delenv(name, raising=False)  # resolve() points the hub at the checker's cache, offline
    engine = vllm_adapter.VLLMAdapter()
    engine.parser_failure = "ModuleNotFoundError: No module named 'triton.compiler' (vllm/utils/deep_gemm.py:347)"
    answer = engine.resolve(_request())
    assert answer.status == UNLOADABLE and answer.needs == ("triton",)
    assert answer.message.endswith("command line does not load on a CPU: " + engine.parser_failure)
    engine.parser_failure = "ImportError: cannot import name 'x' (vllm/config.py:1)"
    assert engine.resolve(_request()).needs == ()
