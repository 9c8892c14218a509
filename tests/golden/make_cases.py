"""Write ``cases.jsonl``: seeded random probe and boundary cases for the CLI regression test.

Run once against a known-good ``main`` and commit both files; ``test_cli_golden.py`` then checks that
``workbench probe --cases`` and ``workbench boundary --cases`` still print exactly what that
version printed (``expected.jsonl``, written by ``--expected``).

    .venv/bin/python tests/golden/make_cases.py            # cases.jsonl
    .venv/bin/python tests/golden/make_cases.py --expected # expected.jsonl from the installed workbench
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = ("context", "context-plus-draft", "req-to-token")
MODES = ("decode", "target-verify", "draft-decode", "draft-extend")
CONTEXTS = (4096, 7919, 8192, 32768, 90000, 131072, 202752)


def table_case(rng: random.Random, component: str, with_seq_lens: bool) -> dict[str, object]:
    ctx = rng.choice(CONTEXTS) if rng.random() < 0.7 else rng.randint(2, 300_000)
    ps = rng.choice((1, 16, 64, 128, 256)) if rng.random() < 0.8 else rng.randint(1, 300)
    d = rng.choice((0, 4, 6, 8, 16))
    case: dict[str, object] = {
        "component": component, "rule": rng.choice(RULES), "context_len": ctx, "page_size": ps,
        "draft_tokens": d, "mode": rng.choice(MODES) if d or rng.random() < 0.1 else "decode",
    }
    if rng.random() < 0.5:
        case["spec_steps"] = rng.randint(1, 6)
    if rng.random() < 0.3:
        case["spec_topk"] = rng.choice((1, 4, 10))
    if rng.random() < 0.2:
        case["draft_has_kv"] = False
    if rng.random() < 0.5:
        case["width_gen"] = rng.choice(("g1", "g2", "g3"))
    if case["mode"] == "draft-decode" and rng.random() < 0.7:
        case["step_id"] = rng.randint(0, int(case.get("spec_steps", 1)) - 1)
    if component == "dsa-page-table" and rng.random() < 0.5:
        case["replay"] = rng.choice(("dynamic", "static"))
    if component == "dsa-page-table" and case["mode"] == "draft-extend" and rng.random() < 0.5:
        case["accept_len"] = rng.randint(1, 4)
    if component == "npu-block-table" and rng.random() < 0.2:
        case["hybrid_swa"] = True
    if with_seq_lens:
        n = 1 if rng.random() < 0.7 else rng.randint(2, 4)
        top = ctx + 4 if d else ctx - 1  # W - D under g1: past it a case is invalid, which a few are
        case["seq_lens"] = [rng.randint(max(1, top - 2 * max(ps, d, 8)), top + (rng.random() < 0.05)) if rng.random() < 0.8
                            else rng.randint(1, top) for _ in range(n)]
        if n > 1 and rng.random() < 0.5:
            case["max_bs"] = rng.choice((n - 1, n, 16))
    elif rng.random() < 0.2:
        case["max_seq_len"] = rng.randint(1, ctx + 4)
    return case


def allocator_case(rng: random.Random) -> dict[str, object]:
    ps = rng.choice((1, 2, 4, 16, 128))
    n = rng.randint(1, 6)
    pages = list(range(1, 3 * n + 8))
    rng.shuffle(pages)
    held, rest = pages[:n], pages[n:]
    seq_lens, last_loc = [], []
    for page in held:
        s = rng.randint(1, 6) * ps + rng.randint(1, ps) if ps > 1 else rng.randint(2, 40)
        s = max(s, 2)
        seq_lens.append(s)
        last_loc.append(page * ps + (s - 2) % ps)
    opening = sum(1 for s in seq_lens if s % ps == 1 % ps)
    free = rest[: opening if rng.random() < 0.5 else rng.randint(0, n + 1)]  # exact fits, often
    case: dict[str, object] = {
        "component": "allocator", "gather": rng.choice(("npu-legacy", "npu-clamped", "cuda-masked")),
        "page_size": ps, "seq_lens": seq_lens, "last_loc": last_loc, "free_pages": free,
    }
    if rng.random() < 0.2:
        case["parked_pages"] = rest[len(free): len(free) + rng.randint(1, 3)]
    if rng.random() < 0.05:  # a bad field now and then: the reasons must stay the same too
        case["last_loc"] = [x + 1 for x in last_loc]
    return case


def cases() -> list[dict[str, object]]:
    rng = random.Random(20261201)
    out: list[dict[str, object]] = []
    for _ in range(1000):
        kind = rng.random()
        if kind < 0.4:
            out.append({"command": "probe", "case": table_case(rng, "npu-block-table", True)})
        elif kind < 0.8:
            out.append({"command": "probe", "case": table_case(rng, "dsa-page-table", True)})
        else:
            out.append({"command": "probe", "case": allocator_case(rng)})
    for _ in range(200):
        component = rng.choice(("npu-block-table", "dsa-page-table"))
        out.append({"command": "boundary", "case": table_case(rng, component, False)})
    return out


def expected() -> None:
    lines = [json.loads(line) for line in (HERE / "cases.jsonl").read_text().splitlines()]
    results = []
    for command in ("probe", "boundary"):
        batch = [c["case"] for c in lines if c["command"] == command]
        text = "".join(json.dumps(c) + "\n" for c in batch)
        run = subprocess.run([sys.executable, "-m", "workbench", command, "--cases", "-"], input=text,
                             capture_output=True, text=True, check=True)
        results += [{"command": command, "output": line} for line in run.stdout.splitlines()]
    (HERE / "expected.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))


if __name__ == "__main__":
    if "--expected" in sys.argv:
        expected()
    else:
        (HERE / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases()))
