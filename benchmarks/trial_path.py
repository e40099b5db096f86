"""The path of one trial's settings, from the command line to the engine's constructor: which
of the project's files run, how often the path switches file and comes back to one it had
left, and how often each settings form is built.

    python benchmarks/trial_path.py [MANIFEST] [-v]   (-v: who builds each form)

Runs ``python -m vtoken.bench trial`` in this process with ``vllm.LLM`` replaced by a stub that
stops the run at the first engine: no engine starts. A "stop" is a call into a function of
another project file than the caller's; a "return" is such a stop into a file the path had
already left. Forms counted: ``PluginConfig`` built, each arm's vtoken dict built, core arm
configs built, core arms built.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGS = ["--arms=vtoken", "--pairs=1", "--budget=64", "--block-size=16", "-C", "4", "--num-requests=4",
        "--one-wave", "--num-gpu-blocks=65", "--engine={\"max_model_len\": 1024}", "--no-process",
        "--no-progress"]
COUNTED = {"__post_init__": "PluginConfig built", "vtoken_dict": "vtoken dict built",
           "from_kwargs": "core arm config built", "get_arm": "core arm built"}


class EngineReached(Exception):
    pass


def main(manifest: str) -> None:
    import vllm

    def stub(*args, **kwargs):
        raise EngineReached

    vllm.LLM = stub
    from vtoken.bench.__main__ import main as cli

    files, stops, returns, counts, left = [], 0, 0, Counter(), set()

    def profile(frame, event, arg):
        nonlocal stops, returns
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(str(REPO / "vtoken")) and not path.startswith(str(REPO / "baselines")):
            return
        name = frame.f_code.co_name
        if name == "<module>":  # an import runs the module's body: not a step of the path
            return
        owner = type(frame.f_locals.get("self")).__name__ if "self" in frame.f_locals else ""
        if name in COUNTED and (name != "__post_init__" or owner == "PluginConfig") \
                and (name != "from_kwargs" or path.endswith("arms/base.py")):
            counts[COUNTED[name]] += 1
            if "-v" in sys.argv:
                caller = frame.f_back
                print(f"  {COUNTED[name]} <- {Path(caller.f_code.co_filename).name}:{caller.f_code.co_name}"
                      f" <- {caller.f_back.f_code.co_name}")
        rel = str(Path(path).relative_to(REPO))
        if files and rel != files[-1]:
            stops += 1
            if rel in left:
                returns += 1
            left.add(files[-1])
        if not files or rel != files[-1]:
            files.append(rel)

    sys.setprofile(profile)
    try:
        cli(["trial", manifest, *ARGS])
    except EngineReached:
        pass
    finally:
        sys.setprofile(None)
    print(f"files: {len(set(files))}, stops: {stops}, returns to a file left: {returns}")
    for form in COUNTED.values():
        print(f"{form}: {counts[form]}")
    print("files in order of first visit:", ", ".join(dict.fromkeys(files)))


if __name__ == "__main__":
    paths = [a for a in sys.argv[1:] if a != "-v"]
    main(paths[0] if paths else "data/workloads/contract-128-s0.jsonl")
