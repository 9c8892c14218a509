"""The main job: reproduce the seed cases and their boundaries, print a table, save it as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from workbench.cli_support import atomic_write_text
from workbench.seeds import SEEDS, boundary_case


def seed_rows(device: str) -> list[dict[str, object]]:
    """One row per seed and side of its fix: outcome, message, and the table's boundary."""
    from workbench.cli import boundary_record, probe_record

    rows = []
    for seed in SEEDS:
        for side, case in (("before", seed.before), ("after", seed.after)):
            result = probe_record(case, device)
            row: dict[str, object] = {
                "seed": seed.name, "fix": side,
                "rule": case.get("rule", case.get("gather")),
                "outcome": result["outcome"], "error": result["error"],
            }
            if seed.name != "allocator":
                row["first_failing_seq_len"] = boundary_record(boundary_case(case), device)["first_failing_seq_len"]
            else:
                row["out_cache_loc"] = result.get("out_cache_loc")
            rows.append(row)
    return rows


def run_report(out_dir: str, device: str, out: IO[str]) -> None:
    rows = seed_rows(device)
    header = f"{'seed':<16} {'fix':<7} {'rule / gather':<19} {'outcome':<12} {'boundary':>9}  detail"
    out.write(header + "\n" + "-" * len(header) + "\n")
    for row in rows:
        boundary = row.get("first_failing_seq_len", "")
        detail = row["error"] or (f"out_cache_loc={row['out_cache_loc']}" if "out_cache_loc" in row else "")
        boundary_text = "none" if boundary is None else str(boundary)
        out.write(f"{row['seed']:<16} {row['fix']:<7} {row['rule']!s:<19} {row['outcome']!s:<12} {boundary_text:>9}  {detail}\n")
    path = Path(out_dir) / "seeds.json"
    atomic_write_text(path, json.dumps(rows, indent=2) + "\n")
    out.write(f"\nwrote {path}\n")
