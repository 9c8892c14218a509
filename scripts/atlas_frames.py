"""The atlas's frames as ``workbench atlas --no-runs`` computes them (every setting's row and the
summary), pickled, and two such pickles compared: how a change to the atlas's computation is shown
to leave its output as it was. Run it from each revision's checkout, then compare:

    PYTHONPATH=<old checkout> WORKBENCH_RESULT_CACHE=0 python scripts/atlas_frames.py dump old.pkl [--engine A,B]
    PYTHONPATH=. python scripts/atlas_frames.py dump new.pkl [--engine A,B]
    PYTHONPATH=. python scripts/atlas_frames.py compare old.pkl new.pkl

``compare`` prints, per frame, whether the values and dtypes are equal (``assert_frame_equal`` with
``check_exact``), whether the CSV texts are the same bytes, and whether the pickles are; it exits 1
when values, dtypes or CSV differ.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
import time


def dump(path: str, engines: list[str] | None) -> None:
    import pandas as pd  # type: ignore[import-untyped]

    from workbench.atlas.rows import case_backend_rows, run_atlas, summarize

    started = time.perf_counter()
    frame = run_atlas(engines)
    if not engines:  # as atlas_results: vLLM's case backends are rows of the whole atlas
        frame = pd.concat([frame, case_backend_rows("cpu")], ignore_index=True)
    summary = summarize(frame)
    print(f"{time.perf_counter() - started:.1f} s: {len(frame)} rows, {len(summary)} summary rows")
    with open(path, "wb") as handle:
        pickle.dump({"frame": frame, "summary": summary}, handle, protocol=pickle.HIGHEST_PROTOCOL)


def compare(old_path: str, new_path: str) -> int:
    import pandas as pd

    with open(old_path, "rb") as handle:
        old = pickle.load(handle)
    with open(new_path, "rb") as handle:
        new = pickle.load(handle)
    status = 0
    for name in ("frame", "summary"):
        a, b = old[name], new[name]
        try:
            pd.testing.assert_frame_equal(a, b, check_exact=True)
            values = "equal"
        except AssertionError as error:
            values, status = f"DIFFER: {str(error).splitlines()[0]}", 1
        csv = a.to_csv() == b.to_csv()
        status = status or (0 if csv else 1)
        same_pickle = pickle.dumps(a, protocol=5) == pickle.dumps(b, protocol=5)
        digest = hashlib.sha256(b.to_csv().encode()).hexdigest()[:16]
        print(f"{name}: {a.shape} vs {b.shape}; values and dtypes {values}; CSV bytes "
              f"{'same' if csv else 'DIFFER'} (sha256 {digest}); pickle bytes {'same' if same_pickle else 'differ'}")
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dumping = sub.add_parser("dump")
    dumping.add_argument("path")
    dumping.add_argument("--engine", help="comma-separated releases (default: every release)")
    comparing = sub.add_parser("compare")
    comparing.add_argument("old")
    comparing.add_argument("new")
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.path, args.engine.split(",") if args.engine else None)
        return 0
    return compare(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
