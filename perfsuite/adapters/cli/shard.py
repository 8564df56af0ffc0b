"""``perfsuite shard``: which cells of the matrix one runner runs (GitHub Actions matrix: runner label x shard).

  K=$(perfsuite shard 2/3 --profile nightly --device cuda)      # -> "[cell-a] or [cell-d] or ..."
  pytest tests/perf --perf-profile nightly --perf-device cuda -k "$K"

Cells are those of the profile (and --backend/--model, like the pytest options), dealt round-robin over the
sorted ids (perfsuite/orchestrate/shard.py). --format ids prints one id a line, json a list. Exit 2 for an empty shard.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from perfsuite.adapters.cli._common import add_command, usage_errors
from perfsuite.facts import config


def register(sub: Any) -> None:
    p = add_command(sub, "shard", "the cells of shard I of N, as a pytest -k expression", __doc__, main)
    p.add_argument("shard", help="INDEX/COUNT, 1-based, e.g. 2/3")
    p.add_argument("--profile", default="smoke", help="smoke | pr | nightly (default smoke)")
    p.add_argument("--device", default="cpu", help="cpu | cuda (default cpu)")
    p.add_argument("--backend", default=None, help="comma-separated backends (default: the profile's)")
    p.add_argument("--model", default=None, help="comma-separated models (default: the profile's)")
    p.add_argument("--format", choices=("k", "ids", "json"), default="k")


def cell_ids(profile: str, device: str, backends: str | None, models: str | None) -> list[str]:
    root = Path.cwd()
    with usage_errors(config.ConfigError):
        cfg = config.load(config.find_pyproject(root), root)
        settings = config.resolve(cfg, profile=profile, device=device, backends=backends, models=models,
                                  runner_class="shard", update_baselines=False)
    return [c.id for c in settings.cells()]


def main(args: argparse.Namespace) -> int:
    from perfsuite.orchestrate import shard

    with usage_errors(shard.ShardError):
        index, count = shard.parse(args.shard)
        ids = cell_ids(args.profile, args.device, args.backend, args.model)
        mine = shard.select(ids, index, count)
        if not mine:
            raise shard.ShardError(f"shard {index}/{count} is empty: {len(ids)} cell(s) over {count} shards; "
                                   f"use at most {len(ids)} shards")
    if args.format == "ids":
        print("\n".join(mine))
    elif args.format == "json":
        print(json.dumps(mine))
    else:
        print(shard.k_expression(mine))
    return 0
