"""A pasted launch command: the engine it starts, the arguments its parser gets, the variables it sets.

What people paste is rarely the bare command. This reads the shell around it the way the shell
would, and keeps what reaches the engine:

* set-up lines before the launch (``cd``, ``pip install``, ``export A=B``), separated by newlines,
  ``&&``, ``;``: skipped, except ``export`` (and bare ``A=B``), whose variables the engine sees;
* leading ``A=B`` assignments, ``env [-u X] A=B ...``, ``sudo -E``, ``nohup``, ``exec``, ``time``,
  ``numactl``/``taskset`` with their options;
* ``bash -c '...'`` / ``bash -lc '...'`` / ``sh -c``: the quoted script, read the same way;
* ``docker run [options] IMAGE COMMAND``: ``-e``/``--env`` variables, then the command; an image
  whose entry point is the server (``vllm/vllm-openai``) takes its arguments directly;
* trailing redirections and pipes (``2>&1 | tee log``, ``> out.log``, ``&``).

The program is one of ``launch_adapters.PROGRAMS`` (``python -m sglang.launch_server``,
``sglang serve``, ``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``).

A text may hold several launches (node 0 and node 1, an encoder and a language model, a prefill
and a decode server): ``parse_commands`` gives each, in order, with the variables it sees (the
``export`` and bare ``A=B`` lines before it, its own leading assignments); ``parse_command``
gives the first.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from workbench.engines.commands.adapters import PROGRAMS, Program


class PreflightError(ValueError):
    """Input a check cannot run: one line naming what is wrong and what is allowed (exit status 2)."""


class Refused(PreflightError):
    """The engine itself refused the command: the release asked, what refused it (``"parser"`` or the
    engine function that raised, ``module.qualname``) and the engine's own message, kept apart from
    the one line (``str``) so that a JSON answer can give each."""

    def __init__(self, line: str, *, release: str, by: str, message: str, hint: str = "") -> None:
        super().__init__(line)
        self.release = release
        self.by = by
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class LaunchCommand:
    engine: str  # "sglang" or "vllm"
    program: str  # as shown: "python -m sglang.launch_server"
    argv: tuple[str, ...]  # what the engine's parser is given
    env: dict[str, str]  # variables the command sets for the engine
    text: str  # the launch itself, one line
    wrappers: tuple[str, ...] = ()  # what was read around it: "docker run IMAGE", "bash -lc", "export A"
    skipped: tuple[str, ...] = field(default=())  # set-up lines that do not reach the engine
    position: int = 1  # which launch of the text this is, from 1
    launches: int = 1  # how many launches the text holds


ALLOWED_PROGRAMS = ", ".join(dict.fromkeys(p.shown for p in PROGRAMS))
_SEPARATORS = {";", "&&", "||", "\n", "&", "|", "|&"}
_REDIRECTS = {">", ">>", "<", ">&", "&>", "&>>", ">|", "<<", "<<<", "<&"}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
_PYTHON = re.compile(r"(.*/)?python(\d+(\.\d+)?)?$")
_SHELLS = re.compile(r"(.*/)?(bash|sh|zsh|dash)$")
# File-descriptor redirections written without spaces (2>&1, 2>/dev/null, &>log): the shell's, not arguments.
_FD_REDIRECT = re.compile(r"(?<=\s)(\d+>>?&\d+|\d+>>?\s*\S+|&>>?\s*\S+)")
# docker run options that take a value (docker's own reference); the rest are switches.
_DOCKER_VALUED = {
    "-e", "--env", "--env-file", "-v", "--volume", "-p", "--publish", "--name", "--gpus", "--shm-size", "--ipc",
    "--network", "--net", "-w", "--workdir", "--entrypoint", "--ulimit", "--device", "--cap-add", "--cap-drop",
    "--security-opt", "--runtime", "-u", "--user", "-h", "--hostname", "--cpus", "-m", "--memory", "--mount", "-l",
    "--label", "--pull", "--platform", "--group-add", "--restart", "--log-opt", "--log-driver", "--add-host",
    "--cpuset-cpus", "--memory-swap", "--pid", "--uts", "--tmpfs", "--stop-signal", "--health-cmd", "--dns",
    "--cgroupns", "--userns", "--volumes-from", "--expose", "--link", "--oom-score-adj", "--device-cgroup-rule",
}
# Images whose entry point is the server itself: their arguments go to it (vLLM's OpenAI image).
_SERVER_IMAGES = {"vllm/vllm-openai": ("vllm", "serve"), "vllm-openai": ("vllm", "serve")}
_PREFIXES = {"sudo": {"-u", "-g", "-C"}, "nohup": set(), "exec": set(), "time": set(), "stdbuf": set(),
             "numactl": set(), "taskset": set(), "nice": {"-n"}, "ionice": {"-c", "-n"}, "uv": set()}
_PYTHON_VALUED = {"-W", "-X"}


_OPERATOR_CHARS = set(";&|<>()\n")


# A documentation placeholder such as <path_to_your_model> or <your_server_ip>, written unquoted.
_ANGLE_PLACEHOLDER = re.compile(r"<[A-Za-z][A-Za-z0-9_-]*>")


def _quote_placeholders(text: str) -> str:
    """``text`` with each unquoted ``<name>`` put in double quotes, so that it stays a word.

    A shell would read ``vllm serve <model> --port 8000`` as two redirections (from a file
    ``model``, into a file ``--port``) and fail before the engine starts; the page means "your model
    here". Kept as a word, the check can say that the command holds a placeholder to fill in."""
    out, quote, i = [], "", 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\" and quote == '"' and i + 1 < len(text):
                out.append(text[i:i + 2])
                i += 2
                continue
            quote = "" if char == quote else quote
        elif char == "\\" and i + 1 < len(text):
            out.append(text[i:i + 2])
            i += 2
            continue
        elif char in "'\"":
            quote = char
        elif char == "<":
            found = _ANGLE_PLACEHOLDER.match(text, i)
            if found and (i == 0 or text[i - 1] not in "<>&0123456789"):
                out.append(f'"{found.group(0)}"')
                i = found.end()
                continue
        out.append(char)
        i += 1
    return "".join(out)


def tokens_of(text: str) -> list[str]:
    """Shell words and operators of ``text`` (quotes honoured, line continuations joined; an unquoted
    ``<name>`` placeholder kept as a word, not read as redirections)."""
    text = _quote_placeholders(text)
    text = re.sub(r"\\\r?\n", " ", text)
    text = re.sub(r"\\\s*$", "", text)  # a continuation with nothing after it: the shell waits for more, there is none
    text = _FD_REDIRECT.sub(" ", f" {text}")
    lexer = shlex.shlex(text, posix=True, punctuation_chars="".join(sorted(_OPERATOR_CHARS)))
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        words = list(lexer)
    except ValueError as err:  # an unclosed quote
        raise PreflightError(f"command: cannot be read as a shell line ({err}): check the quotes") from None
    out: list[str] = []
    in_comment = False
    for word in _split_newlines(words):
        if word == "\n":
            in_comment = False
        elif in_comment or word.startswith("#"):  # a word starting with # starts a comment (quoted ones are rare)
            in_comment = True
            continue
        out.append(word)
    return out


def _split_newlines(words: list[str]) -> list[str]:
    """Operator words with their newlines apart: shlex joins adjacent operator characters, so a
    comment ending in ``(Blackwell)`` gives ``)\n`` and the newline that ends it would be missed."""
    out = []
    for word in words:
        if "\n" in word and set(word) <= _OPERATOR_CHARS:
            out += [piece if "\n" not in piece else "\n" for piece in re.findall(r"\n+|[^\n]+", word)]
        else:
            out.append(word)
    return out


def statements(words: Sequence[str]) -> list[list[str]]:
    """``words`` cut at the shell's separators, redirections and their targets dropped."""
    found: list[list[str]] = [[]]
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
        elif word in _SEPARATORS or (word and set(word) <= set(";&|\n")):  # runs of them: "\n\n", ";\n"
            found.append([])
        elif word in _REDIRECTS:
            skip_next = True
        elif word not in ("(", ")", "{", "}"):
            found[-1].append(word)
    return [s for s in found if s]


@dataclass
class _Found:
    env: dict[str, str]  # the variables a launch sees: exported so far, and its own leading assignments
    wrappers: list[str]
    skipped: list[str]  # shared by every launch of the text

    def fork(self) -> _Found:
        """The state one statement starts from: its assignments stay its own."""
        return _Found(dict(self.env), list(self.wrappers), self.skipped)


@dataclass(frozen=True)
class _Launch:
    program: Program
    argv: list[str]
    words: list[str]  # the launch itself, as the shell gives it
    env: dict[str, str]
    wrappers: list[str]
    skipped: int  # how many set-up lines of the text come before it


def _match(words: list[str]) -> tuple[Program, list[str]] | None:
    """The program ``words`` start with, and the arguments after it."""
    for program in PROGRAMS:
        if program.python_module:
            if words and _PYTHON.match(words[0]):
                rest = words[1:]
                while rest and rest[0].startswith("-") and rest[0] != "-m":  # python's own options (-u, -X dev)
                    rest = rest[2:] if rest[0] in _PYTHON_VALUED else rest[1:]
                if len(rest) >= 2 and rest[0] == "-m" and rest[1] == program.words[-1]:
                    return program, rest[2:]
        elif len(words) >= len(program.words) and words[0].rsplit("/", 1)[-1] == program.words[0] \
                and tuple(words[1:len(program.words)]) == program.words[1:]:
            return program, words[len(program.words):]
    return None


def _docker(words: list[str], found: _Found) -> list[str]:
    """The command a ``docker run`` starts (its ``-e`` variables noted)."""
    i = 2
    entrypoint: list[str] = []
    while i < len(words) and words[i].startswith("-"):
        name, has_value, value = words[i].partition("=")
        if not has_value and name in _DOCKER_VALUED:
            value, i = (words[i + 1] if i + 1 < len(words) else ""), i + 1
        if name in ("-e", "--env") and "=" in value:
            key, _, text = value.partition("=")
            found.env[key] = text
        if name == "--entrypoint":
            entrypoint = shlex.split(value)
        i += 1
    image = words[i] if i < len(words) else ""
    command = entrypoint + words[i + 1:]
    server = next((words for key, words in _SERVER_IMAGES.items() if image.split(":")[0].endswith(key)), None)
    if server is not None and not entrypoint and _match(command) is None:
        # The image's ENTRYPOINT runs with every word after the image as its arguments, a shell
        # script included (``bash -lc '...'`` reaches the server's parser as arguments, as in docker).
        found.wrappers.append(f"docker run {image} (its entrypoint {' '.join(server)} takes the words after the image)")
        return [*server, *command]
    found.wrappers.append(f"docker run {image}")
    return command


def _strip_prefixes(words: list[str], found: _Found) -> list[str]:
    """Leading assignments, ``env``, ``sudo``, ``nohup`` ... and shell/docker wrappers, unwrapped."""
    while words:
        head = words[0].rsplit("/", 1)[-1]
        if _ASSIGNMENT.fullmatch(words[0]):
            key, _, value = words[0].partition("=")
            found.env[key] = expand(value, found.env)
            words = words[1:]
        elif head == "env":
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[2:] if words[0] in ("-u", "--unset", "-C", "--chdir") else words[1:]
        elif head in _PREFIXES:
            valued = _PREFIXES[head]
            words = words[1:]
            if head == "uv" and words[:1] == ["run"]:
                words = words[1:]
            while words and words[0].startswith("-"):
                words = words[2:] if words[0] in valued or (head in ("numactl", "taskset", "uv") and "=" not in words[0]
                                                             and len(words) > 1 and not words[1].startswith("-")
                                                             and _match(words[1:]) is None) else words[1:]
            if head == "taskset" and words and re.fullmatch(r"[0-9a-fx,-]+", words[0]):
                words = words[1:]
        else:
            return words
    return words


def _launch(words: list[str], found: _Found, depth: int = 0) -> list[_Launch]:
    """The launches within one statement (a ``bash -c`` script may hold several), unwrapping as needed."""
    words = _strip_prefixes(words, found)
    if not words or depth > 4:
        return []
    head = words[0].rsplit("/", 1)[-1]
    if head == "docker" and len(words) > 1 and words[1] == "run":
        return _launch(_docker(words, found), found, depth + 1)
    if _SHELLS.match(words[0]):
        script_at = next((i for i, w in enumerate(words[1:], 1) if re.fullmatch(r"-[a-z]*c[a-z]*", w)), None)
        if script_at is not None and script_at + 1 < len(words):
            found.wrappers.append(f"{head} {words[script_at]}")
            return _search(tokens_of(words[script_at + 1]), found, depth + 1)
    if head == "export":
        for assignment in words[1:]:
            if _ASSIGNMENT.fullmatch(assignment):
                key, _, value = assignment.partition("=")
                found.env[key] = expand(value, found.env)
        return []
    matched = _match(words)
    if matched is None:
        return []
    return [_Launch(matched[0], matched[1], words, found.env, found.wrappers, len(found.skipped))]


def _search(words: list[str], found: _Found, depth: int = 0) -> list[_Launch]:
    """Every launch of ``words``, in order. A statement's leading assignments are its own; an
    ``export`` line or a line of bare assignments sets what the statements after it see."""
    launches: list[_Launch] = []
    for statement in statements(words):
        local = found.fork()
        result = _launch(statement, local, depth)
        launches += result
        sets_variables = statement[0] == "export" or all(_ASSIGNMENT.fullmatch(w) for w in statement)
        if sets_variables:
            found.env.update(local.env)
        elif not result:
            found.skipped.append(" ".join(statement)[:80])
    return launches


def parse_commands(command: str | Sequence[str]) -> list[LaunchCommand]:
    """Every launch in ``command`` (a shell text, or its words), in order; PreflightError when there is none."""
    words = tokens_of(command) if isinstance(command, str) else list(command)
    if not words:
        raise PreflightError("command: empty (paste the engine's launch command)")
    found = _Found({}, [], [])
    launches = _search(words, found)
    if not launches:
        shown = " ".join(words[:4])
        raise PreflightError(f"command: no SGLang or vLLM launch in {shown!r}... (looked for: {ALLOWED_PROGRAMS})")
    out = []
    for position, launch in enumerate(launches, 1):
        wrappers = [*launch.wrappers, *(f"export {k}" for k in launch.env)]
        argv = [expand(word, launch.env) for word in launch.argv]
        out.append(LaunchCommand(launch.program.engine, launch.program.shown, tuple(argv), dict(launch.env),
                                 shlex.join(launch.words), tuple(wrappers), tuple(found.skipped[:launch.skipped]), position,
                                 len(launches)))
    return out


def parse_command(command: str | Sequence[str]) -> LaunchCommand:
    """The first launch in ``command``; PreflightError when there is none."""
    return parse_commands(command)[0]


_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand(word: str, env: dict[str, str]) -> str:
    """``word`` with the ``$VAR`` / ``${VAR}`` the command itself sets replaced, as the shell would
    (a variable it does not set stays as written: its value is on the user's machine only)."""
    return _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), word)
