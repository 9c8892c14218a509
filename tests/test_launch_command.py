"""Reading the shell around a launch command: wrappers, set-up lines, variables (no engine needed).

Expected values are what a POSIX shell does with each line (worked by hand), not the code's.
"""

from __future__ import annotations

import pytest

from workbench.preflight.command import PreflightError, parse_command

SGLANG = "python -m sglang.launch_server"


def test_a_bare_command_passes_its_arguments_untouched() -> None:
    cmd = parse_command("python3 -m sglang.launch_server --model-path Qwen/QwQ-32B --tp 4")
    assert (cmd.engine, cmd.program, cmd.argv, cmd.env) == ("sglang", SGLANG, ("--model-path", "Qwen/QwQ-32B", "--tp", "4"), {})


@pytest.mark.parametrize("text, program, argv", [
    ("sglang serve --model-path m", "sglang serve", ("--model-path", "m")),
    ("/opt/venv/bin/python3.11 -u -X dev -m sglang.launch_server --model m", SGLANG, ("--model", "m")),
    ("vllm serve org/m --max-model-len 4096", "vllm serve", ("org/m", "--max-model-len", "4096")),
    ("python -m vllm.entrypoints.openai.api_server --model m", "python -m vllm.entrypoints.openai.api_server", ("--model", "m")),
])
def test_each_program_is_found_with_its_own_arguments(text: str, program: str, argv: tuple[str, ...]) -> None:
    cmd = parse_command(text)
    assert (cmd.program, cmd.argv) == (program, argv)


def test_set_up_lines_exports_and_leading_assignments() -> None:
    text = ("export SGLANG_ENABLE_SPEC_V2=True\ncd /srv && pip install sglang\n"
            "CUDA_VISIBLE_DEVICES=0,1 python -m sglang.launch_server --model m --port 30000 2>&1 | tee log.txt &")
    cmd = parse_command(text)
    assert cmd.argv == ("--model", "m", "--port", "30000")  # the redirection and the pipe are the shell's
    assert cmd.env == {"SGLANG_ENABLE_SPEC_V2": "True", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert cmd.skipped == ("cd /srv", "pip install sglang")


def test_docker_run_takes_its_env_options_and_the_command_after_the_image() -> None:
    text = ("docker run --gpus all --shm-size 32g -p 30000:30000 -v ~/.cache/huggingface:/root/.cache/huggingface "
            "--env HF_HOME=/cache -e SGLANG_ENABLE_SPEC_V2=1 --ipc=host lmsysorg/sglang:latest "
            "python3 -m sglang.launch_server --model-path m --host 0.0.0.0")
    cmd = parse_command(text)
    assert cmd.argv == ("--model-path", "m", "--host", "0.0.0.0")
    assert cmd.env == {"HF_HOME": "/cache", "SGLANG_ENABLE_SPEC_V2": "1"}
    assert cmd.wrappers[0] == "docker run lmsysorg/sglang:latest"


def test_the_vllm_image_runs_the_server_with_the_arguments_after_it() -> None:
    cmd = parse_command("docker run --runtime nvidia --gpus all --ipc=host vllm/vllm-openai:latest --model m --tp 2")
    assert (cmd.program, cmd.argv) == ("vllm serve", ("--model", "m", "--tp", "2"))
    assert cmd.wrappers == ("docker run vllm/vllm-openai:latest (its entrypoint vllm serve takes the words after the image)",)


def test_a_script_after_the_vllm_image_is_its_entrypoints_arguments_as_in_docker() -> None:
    """The image's ENTRYPOINT is ``vllm serve``: docker appends ``bash -lc '...'`` to it, so the
    server's parser meets the script as arguments (and refuses it); the wrapper says so."""
    cmd = parse_command("docker run --gpus all vllm/vllm-openai:v0.18.0 bash -lc 'pip install x && vllm serve m --tp 8'")
    assert cmd.program == "vllm serve" and cmd.argv[:2] == ("bash", "-lc")
    assert "its entrypoint vllm serve" in cmd.wrappers[0]


@pytest.mark.parametrize("shell", ["bash -c", "bash -lc", "sh -c", "/bin/bash -l -c"])
def test_a_shell_script_argument_is_read_as_a_script(shell: str) -> None:
    cmd = parse_command(f"{shell} 'export A=1 && SGLANG_X=2 sglang serve --model-path m --speculative-algo EAGLE'")
    assert cmd.argv == ("--model-path", "m", "--speculative-algo", "EAGLE")
    assert cmd.env == {"A": "1", "SGLANG_X": "2"}


def test_env_sudo_nohup_and_numactl_are_unwrapped() -> None:
    cmd = parse_command("sudo -E env -u X A=1 nohup numactl --interleave=all python -m sglang.launch_server --model m")
    assert (cmd.argv, cmd.env) == (("--model", "m"), {"A": "1"})


def test_variables_the_command_sets_are_expanded_and_others_kept() -> None:
    cmd = parse_command("MODEL=/models/q\nexport TP=4\npython -m sglang.launch_server --model-path ${MODEL} --tp $TP --x $UNSET")
    assert cmd.argv == ("--model-path", "/models/q", "--tp", "4", "--x", "$UNSET")


def test_quoted_json_comments_and_continuations() -> None:
    text = ("vllm serve m \\\n  --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}' # MTP\n"
            "  --port 1 \\")
    cmd = parse_command(text)
    assert cmd.argv == ("m", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}')


def test_a_list_of_words_is_taken_as_already_split() -> None:
    cmd = parse_command(["python", "-m", "sglang.launch_server", "--model", "a b"])
    assert cmd.argv == ("--model", "a b")


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("python train.py --epochs 3", "no SGLang or vLLM launch"),
    ("python -m sglang.launch_server --model 'unclosed", "check the quotes"),
])
def test_what_is_not_a_launch_is_one_line(text: str, message: str) -> None:
    with pytest.raises(PreflightError, match=message) as info:
        parse_command(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text", [
    # the SGLang attention-backend docs: a comment ending in ')' before the launch
    "# Example: Prefill with FA4, Decode with TRTLLM MLA (Blackwell)\npython3 -m sglang.launch_server --model-path m --tp 8",
    # a vLLM ROCm recipe: export lines with trailing comments, then a blank line
    "export A=1  # Enable it (all of it)\nexport B=INT4  # faster\n\nvllm serve m -tp 8",
])
def test_a_comment_ending_in_an_operator_character_ends_at_its_line(text: str) -> None:
    cmd = parse_command(text)
    assert cmd.argv[-2:] == ("--tp", "8") or cmd.argv[-2:] == ("-tp", "8"), cmd
    assert cmd.env == ({"A": "1", "B": "INT4"} if text.startswith("export") else {})


@pytest.mark.parametrize("text, argv", [
    # a shell would open a file "model" for reading and write to a file "--chat-template"; the page means
    # "your model here", so the placeholder stays the word it stands for
    ("vllm serve <model> --chat-template ./t.jinja", ("<model>", "--chat-template", "./t.jinja")),
    ("vllm serve <path_to_your_model>/Qwen2.5-72B-Instruct/ --host <your_server_ip> --port 8002",
     ("<path_to_your_model>/Qwen2.5-72B-Instruct/", "--host", "<your_server_ip>", "--port", "8002")),
    # quoted, it was a word already; a real redirection (spaces, a file descriptor) stays the shell's
    ("vllm serve '<model>' --port 1", ("<model>", "--port", "1")),
    ("vllm serve m --port 1 < in.txt 2>&1 > out.log", ("m", "--port", "1")),
    ("vllm serve m --port 1 2>err.log", ("m", "--port", "1")),
    ('vllm serve m --speculative-config \'{"model": <eagle3_model_name>}\'', ("m", "--speculative-config",
                                                                             '{"model": <eagle3_model_name>}')),
])
def test_an_angle_bracket_placeholder_is_a_word_not_two_redirections(text: str, argv: tuple[str, ...]) -> None:
    assert parse_command(text).argv == argv


@pytest.mark.parametrize("text, outside", [
    ("vllm serve /w --port $2 --data-parallel-size ${3} --tensor-parallel-size $7", ["$2", "${3}", "$7"]),
    ("vllm serve <path_to_your_model>/Qwen2.5-72B-Instruct/ --host <your_server_ip>",
     ["<path_to_your_model>", "<your_server_ip>"]),
    ('vllm serve m --speculative-config \'{"model": <eagle3_model_name>, "num_speculative_tokens": 3}\'',
     ["<eagle3_model_name>"]),
    # a JSON string that holds angle brackets is a value the engine reads, not a placeholder
    ('vllm serve m --reasoning-config \'{"think_start": "<think>"}\'', []),
    ("vllm serve m --port 8000", []),
])
def test_positional_parameters_and_placeholders_are_values_set_outside_the_command(text: str,
                                                                                   outside: list[str]) -> None:
    from workbench.preflight import unset_variables

    assert unset_variables(parse_command(text)) == outside


def test_a_backslash_followed_by_spaces_ends_the_command_on_its_line() -> None:
    """``\\`` then spaces escapes one space (an argument ``' '``) and the line's end stays a separator,
    so the next line is a command of its own, as bash reads the vLLM EP deployment page's example."""
    text = "vllm serve org/m \\\n    --tensor-parallel-size 1 \\      # TP\n    --data-parallel-size 8"
    assert parse_command(text).argv == ("org/m", "--tensor-parallel-size", "1", " ")


def test_every_launch_of_a_text_is_read_with_the_variables_it_sees() -> None:
    """Node 0 and node 1 of one page. What each launch sees is what bash gives it: an ``export``
    line and a line of bare assignments hold for the commands after them; ``A=B cmd`` holds for
    that command only; ``$MODEL`` expands to the value set before the launch."""
    from workbench.preflight.command import parse_commands

    text = ("export NCCL_IB_HCA=mlx5\nMODEL=org/m\nray start --head\n"
            "# node 0\nVLLM_HOST_IP=10.0.0.1 vllm serve $MODEL --data-parallel-size 4 --data-parallel-size-local 2\n"
            "# node 1\nsleep 30 && vllm serve $MODEL --headless --data-parallel-start-rank 2 2>&1 | tee n1.log")
    first, second = parse_commands(text)
    assert (first.position, first.launches, second.position, second.launches) == (1, 2, 2, 2)
    assert first.argv == ("org/m", "--data-parallel-size", "4", "--data-parallel-size-local", "2")
    assert second.argv == ("org/m", "--headless", "--data-parallel-start-rank", "2")
    assert first.env == {"NCCL_IB_HCA": "mlx5", "MODEL": "org/m", "VLLM_HOST_IP": "10.0.0.1"}
    assert second.env == {"NCCL_IB_HCA": "mlx5", "MODEL": "org/m"}  # node 0's VLLM_HOST_IP was its own
    assert first.skipped == ("ray start --head",) and second.skipped == ("ray start --head", "sleep 30")
    assert parse_command(text) == first


def test_a_shell_script_with_two_launches_gives_both() -> None:
    from workbench.preflight.command import parse_commands

    found = parse_commands("bash -c 'sglang serve --model-path a --port 1 & sglang serve --model-path b --port 2'")
    assert [c.argv[1] for c in found] == ["a", "b"] and all(c.wrappers == ("bash -c",) for c in found)


@pytest.mark.parametrize("statuses, status, line", [
    # a refused launch stops the deployment as written, whatever the others say
    ([0, 1, 2], 2, "REFUSED: 3 launches: launch 1 SAFE, launch 2 FAILS, launch 3 REFUSED"),
    ([0, 3, 1], 1, "FAILS: 3 launches: launch 1 SAFE, launch 2 UNDECIDED, launch 3 FAILS"),
    ([0, 3], 3, "UNDECIDED: 2 launches: launch 1 SAFE, launch 2 UNDECIDED"),
    ([0, 0], 0, "SAFE: 2 launches: launch 1 SAFE, launch 2 SAFE"),
])
def test_several_launches_take_the_worst_status(statuses: list[int], status: int, line: str) -> None:
    from workbench.preflight import launches_verdict

    assert launches_verdict(statuses) == (status, line)


def test_a_model_type_transformers_does_not_know_is_named_not_blamed_on_the_cpu() -> None:
    """vLLM 0.18.0 reading zai-org/GLM-5-FP8 with the transformers beside it raises transformers'
    own ValueError (text as it raised it in the engine process); that is a newer model than the
    library, so the check is undecided naming the type, not "cannot run on a CPU"."""
    from workbench.engines.commands.adapter_common import unknown_model_type

    raised = ValueError("The checkpoint you are trying to load has model type `glm_moe_dsa` but Transformers does not "
                        "recognize this architecture. This could be because of an issue with the checkpoint, or because "
                        "your version of Transformers is out of date.")
    line = unknown_model_type(raised)
    assert line is not None and "does not know the model type `glm_moe_dsa`" in line
    assert unknown_model_type(ValueError("max_model_len 10 is larger than the model's 8")) is None


def test_a_flag_read_through_a_setting_the_engine_derived_from_it_is_still_shown() -> None:
    """SGLang 0.5.9 with ``--speculative-algorithm NGRAM --speculative-ngram-max-bfs-breadth 10``:
    the engine copies the breadth into ``speculative_eagle_topk`` (server_args.py:2475 in 0.5.9), the
    deployment reads that, and the flag the command gave is shown too, as modelling a buffer."""
    from workbench.engines.commands.adapters import ENGINE, GIVEN, RESOLVED, FlagUse, Resolution
    from workbench.engines.commands.adapters import Setting as EngineSetting
    from workbench.preflight.deployment import Settings
    from workbench.preflight.resolve_sglang import READS

    breadth = FlagUse("--speculative-ngram-max-bfs-breadth", "--speculative-ngram-max-bfs-breadth",
                      "speculative_ngram_max_bfs_breadth", 10)
    resolution = Resolution("sglang==0.5.9", RESOLVED, flags=(breadth,), settings={
        "speculative_eagle_topk": EngineSetting(10, ENGINE, "ServerArgs._handle_speculative_decoding"),
        "speculative_ngram_max_bfs_breadth": EngineSetting(10, GIVEN, "--speculative-ngram-max-bfs-breadth")})
    s = Settings(resolution, READS)
    assert s.take("speculative_eagle_topk") == 10
    shown = s.rest(resolution.flags)
    assert list(shown) == ["speculative_eagle_topk", "speculative_ngram_max_bfs_breadth"]
    assert shown["speculative_ngram_max_bfs_breadth"].modelled and shown["speculative_ngram_max_bfs_breadth"].value == 10
