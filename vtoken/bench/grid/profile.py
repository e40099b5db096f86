"""A pipeline profile's config as Snakemake builds it, for tools that read the grid outside a run
(``python -m vtoken.bench grid show``).

Snakemake loads the Snakefile's ``configfile`` (``workflows/config/config.yaml``, the embedded
default), merges every ``--configfile`` over it key by key (a profile folder's ``config.yaml``
names them under ``configfile``), and ``workflows/rules/common.smk`` validates the result against
the schema (filling the schema's defaults) and applies the grid's cross-key rules
(``vtoken.bench.grid.validate.check``). ``load`` does the same with Snakemake's own functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEFAULT = "workflows/config/config.yaml"
SCHEMA = "workflows/schemas/config.schema.yaml"
PROFILES = "workflows/profiles"


def profile_configfiles(profile: str, root: str = ".") -> list[str]:
    """The config files a Snakemake profile merges over the default: its folder's
    ``configfile`` key (none for ``default``). ``profile``: a folder name under
    ``workflows/profiles`` or a path to a profile folder."""
    folder = Path(root) / PROFILES / profile
    if not folder.is_dir():
        folder = Path(root) / profile
    path = folder / "config.yaml"
    if not path.is_file():
        known = sorted(p.name for p in (Path(root) / PROFILES).iterdir() if (p / "config.yaml").is_file())
        raise ValueError(f"--profile={profile!r}: no {PROFILES}/{profile}/config.yaml (profiles: {known})")
    files = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("configfile") or []
    return [files] if isinstance(files, str) else list(files)


def load(profile: str | None = None, configfiles=(), root: str = ".") -> dict[str, Any]:
    """The validated config of ``profile`` (None: the embedded default), with ``configfiles``
    merged over it after the profile's, as ``snakemake --profile P --configfile F`` builds it.

    Raises:
        ValueError: an unknown profile, or a config the schema or the cross-key rules refuse.
    """
    from snakemake.common.configfile import load_configfile
    from snakemake.utils import update_config, validate

    from vtoken.bench.grid import validate as grid_validate

    config = load_configfile(str(Path(root) / DEFAULT))
    for path in [*(profile_configfiles(profile, root) if profile else []), *configfiles]:
        update_config(config, load_configfile(str(Path(root) / path)))
    try:
        validate(config, str(Path(root) / SCHEMA))
    except Exception as err:  # snakemake's WorkflowError, naming the key
        raise ValueError(str(err)) from None
    grid_validate.check(config, root)
    return config
