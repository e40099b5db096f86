"""``StepReport``: what the worker tells the scheduler after every step.

It rides on vLLM's ``ModelRunnerOutput`` as the attribute ``vtoken_report`` (in-process the
scheduler gets the same object; in multiprocess mode it is pickled with the output, plain
Python types only). The scheduler releases ``released`` blocks, sets each request's room
for the next allocation, and writes the numbers to the metrics sink.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ATTRIBUTE = "vtoken_report"


@dataclass
class StepReport:
    """One engine step seen from the worker.

    Args:
        released: request id -> block ids emptied this step (to null out and free).
        room: request id -> free cells it holds after the step (``KVArm.room``).
        live: request id -> live (attended) tokens after the step, both DiffKV tiers.
        low: request id -> DiffKV: live tokens in the low tier.
        tokens: request id -> logical tokens so far (live or evicted).
        fill: request id -> held blocks per utilisation bin (live/B in [0, .25], (.25, .5],
            (.5, .75], (.75, 1]), DESIGN §5 / Fig. 1; only when a metrics sink is set.
        evicted: tokens evicted this step (policy victims, baselines' own evictions, DiffKV
            prunes), all requests.
        demoted: DiffKV: tokens moved to the low tier this step.
        charge: request id -> blocks its side storage is charged (DiffKV's low tier).
        moves: tokens relocated this step.
        bytes_moved: KV bytes copied by relocation this step.
        policy_ms: time in the policy and ``KVArm.evict``.
        planner_ms: time in ``KVArm.plan`` + ``KVArm.apply``.
        copy_ms: time of the relocation gather/scatter.
        score_ms: time spent adding attention mass in the attention layers.
        table_ms: time appending slots and building the token view.
        paused: requests whose compaction was planned this step and runs in the next one
            (Zipage's asynchronous compression): the scheduler skips them for one step.
        pid: the worker's process id (to see where the report came from).
    """

    released: dict[str, list[int]] = field(default_factory=dict)
    room: dict[str, int] = field(default_factory=dict)
    live: dict[str, int] = field(default_factory=dict)
    low: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    fill: dict[str, list[int]] = field(default_factory=dict)
    evicted: int = 0
    demoted: int = 0
    charge: dict[str, int] = field(default_factory=dict)
    moves: int = 0
    bytes_moved: int = 0
    policy_ms: float = 0.0
    planner_ms: float = 0.0
    copy_ms: float = 0.0
    score_ms: float = 0.0
    table_ms: float = 0.0
    paused: list[str] = field(default_factory=list)
    pid: int = 0
