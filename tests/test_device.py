"""Device selection: auto's order, forced devices, the torch_npu guard, and the device's facts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from devices import require

from workbench.devices import device as dev
from workbench.devices.autoload_guard import AUTOLOAD_ENV
from workbench.devices.device import Found, allocated_bytes, device_info, sanitize_name, select_device

ROOT = Path(__file__).resolve().parent.parent


def _pretend(monkeypatch: pytest.MonkeyPatch, npu: bool, cuda: bool) -> None:
    monkeypatch.setattr(dev, "find_npu", lambda: Found(npu, "npu note"))
    monkeypatch.setattr(dev, "find_cuda", lambda: Found(cuda, "cuda note"))


@pytest.mark.parametrize(("npu", "cuda", "kind"), [(True, True, "npu"), (True, False, "npu"), (False, True, "cuda"),
                                                   (False, False, "cpu")])
def test_auto_prefers_npu_then_cuda_then_cpu(npu: bool, cuda: bool, kind: str) -> None:
    assert dev.auto_kind(Found(npu, ""), Found(cuda, "")) == kind


@pytest.mark.parametrize(("cuda", "kind"), [(True, "cuda"), (False, "cpu")])
def test_auto_says_what_it_found(monkeypatch: pytest.MonkeyPatch, cuda: bool, kind: str) -> None:
    _pretend(monkeypatch, False, cuda)  # torch.device("npu") exists only once torch_npu is loaded
    choice = select_device("auto")
    assert choice.device == torch.device(kind)
    assert choice.summary == f"device auto -> {kind} (npu: npu note; cuda: cuda note)"


def test_a_forced_device_that_is_missing_names_why(monkeypatch: pytest.MonkeyPatch) -> None:
    _pretend(monkeypatch, False, False)
    with pytest.raises(ValueError, match="^device: 'cuda' requested but cuda note$"):
        select_device("cuda")
    with pytest.raises(ValueError, match="^device: 'npu' requested but npu note$"):
        select_device("npu")
    with pytest.raises(ValueError, match="'tpu' is not one of auto, cpu, cuda, npu"):
        select_device("tpu")
    assert select_device("cpu").summary == "device cpu (requested)"


def test_this_machine_without_torch_npu_says_so() -> None:
    if dev.torch_npu_installed():
        pytest.skip("torch_npu is installed here")
    assert dev.find_npu() == Found(False, "torch_npu not installed")


def _broken_torch_npu(folder: Path) -> dict[str, str]:
    """A torch_npu whose import fails as it does without the Ascend runtime, registered for auto-loading."""
    package = folder / "torch_npu"
    package.mkdir()
    (package / "__init__.py").write_text(
        'raise ImportError("libascendcl.so: cannot open shared object file: No such file or directory")\n'
        "def _autoload():\n    pass\n"
    )
    info = folder / "torch_npu-2.6.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.6.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    env = {k: v for k, v in os.environ.items() if k != AUTOLOAD_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT)])
    return env


def test_a_broken_torch_npu_breaks_plain_torch_but_not_workbench(tmp_path: Path) -> None:
    env = _broken_torch_npu(tmp_path)
    plain = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True, timeout=120)
    assert plain.returncode != 0 and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in plain.stderr  # the failure the guard prevents
    script = textwrap.dedent("""
        import os, workbench, torch
        from workbench.devices.device import select_device
        print(os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"])
        print(select_device("auto").summary)
    """)
    guarded = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert guarded.returncode == 0, guarded.stderr
    autoload, summary = guarded.stdout.splitlines()
    assert autoload == "0"
    assert summary.startswith(
        "device auto -> cpu (npu: torch_npu import failed (libascendcl.so: cannot open shared object file: No such file or directory)"
    )


def test_the_workbench_cli_reports_auto_in_one_stderr_line() -> None:
    done = subprocess.run([sys.executable, "-m", "workbench", "--device", "auto", "probe", "allocator", "--page-size", "4",
                           "--seq-lens", "5,10,7", "--last-loc", "11,20,29", "--free-pages", "11", "--gather", "npu-clamped"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("workbench: device auto -> ")
    kind = lines[0].split(" -> ")[1].split(" ")[0]
    assert f"device={kind}" in done.stdout


def test_names_are_sanitized_for_file_names() -> None:
    assert sanitize_name("NVIDIA H200") == "nvidia-h200"
    assert sanitize_name("Ascend910B3") == "ascend910b3"
    assert sanitize_name("Intel(R) Xeon(R) CPU @ 2.20GHz") == "intel-r-xeon-r-cpu-2-20ghz"
    assert sanitize_name("  ") == "unknown"


def test_cpu_facts() -> None:
    info = device_info("cpu")
    assert (info.kind, info.torch_version) == ("cpu", torch.__version__)
    assert info.file_stem == "cpu-" + sanitize_name(info.name)
    assert allocated_bytes("cpu") is None


@pytest.mark.cuda
def test_cuda_facts_and_allocator_statistics() -> None:
    require("cuda")
    info = device_info("cuda")
    assert info.kind == "cuda" and info.name == torch.cuda.get_device_name(0)
    assert info.file_stem == "cuda-" + sanitize_name(info.name)
    before = allocated_bytes("cuda")
    table = torch.zeros((16, 1 << 16), dtype=torch.int32, device="cuda")  # 4 MiB, a multiple of the 512 B rounding
    after = allocated_bytes("cuda")
    assert before is not None and after is not None and after - before == table.untyped_storage().nbytes()


@pytest.mark.npu
def test_npu_facts_and_allocator_statistics() -> None:
    require("npu")
    info = device_info("npu")
    assert info.kind == "npu" and info.name
    before = allocated_bytes("npu")
    table = torch.zeros((16, 1 << 16), dtype=torch.int32, device="npu")
    after = allocated_bytes("npu")
    assert before is not None and after is not None and after - before >= table.untyped_storage().nbytes()
