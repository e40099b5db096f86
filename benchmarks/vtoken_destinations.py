"""vToken destination choice: holes of the request's denser blocks vs reserved headroom.

Replays the same synthetic traces (B = 16, theta_F = 0.25, trigger "always", r = 0.5)
with `destination="holes"` (default) and `"headroom"` (pool reserve of one block per
request) and prints retained blocks per request, packing efficiency, tokens and bytes
moved per block freed (net of destination blocks taken).

    python3 -m benchmarks.vtoken_destinations [--requests 16] [--prompt 1024] [--decode 256]
"""

from __future__ import annotations

import argparse

from vtoken.arms import get_arm
from vtoken.replay import replay
from vtoken.trace import synthesize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--decode", type=int, default=256)
    args = ap.parse_args()
    print(f"{'process':<14}{'destination':<12}{'blocks/req':>11}{'packing':>9}{'plans':>7}"
          f"{'tok/freed':>11}{'MiB/freed':>11}")
    for process in ("heavy_hitter", "random", "streaming"):
        tr = synthesize(args.requests, args.prompt, args.decode, process=process,
                        arrival_every=8, seed=0)
        for dest in ("holes", "headroom"):
            arm = get_arm("vtoken", block_size=16, trigger="always", destination=dest)
            out = replay(tr, arm, num_reserved=args.requests if dest == "headroom" else 0,
                         num_blocks=None)
            print(f"{process:<14}{dest:<12}{out['retained_blocks_per_request']:>11.2f}"
                  f"{out['packing_efficiency']:>9.3f}{out['num_plans']:>7}"
                  f"{out['tokens_moved_per_block_freed']:>11.2f}"
                  f"{out['bytes_moved_per_block_freed'] / 2**20:>11.3f}")


if __name__ == "__main__":
    main()
