"""One platform, one `source`: a run that would export a platform the output already holds under another
source name stops, instead of adding every row a second time.

The default source name is base_url's host, so `127.0.0.1` becoming `localhost` in a config (the same
server) makes a new source: the next run would fetch everything again and every query without a source
filter would count it twice. The check is cheap and runs only when this source is new to the output (it
has no checkpoints there yet) and its name was not given on purpose (`source.name`): the checkpoints of
each other source in the state folder are read, and if they cover half or more of the parameters this run
selected, the run stops (exit 2) naming both names. Checkpoints exist for every sink format (files and
lake tables alike), and name parameter ids, which the same platform keeps under any host name.
"""

from __future__ import annotations

import numpy as np

from etl.config import Config
from etl.errors import ConfigError
from etl.model import Shard
from etl.state import Coverage, StateStore
from etl.state.store import SNAPSHOT
from etl.storage.files import Storage


def _param_ids(folder: str, config: Config) -> np.ndarray:
    """Every parameter id a source's checkpoints cover (in `folder`), its shards' included."""
    options, lease = config.sink.storage_options, config.state.lease / 1000
    shards = [name for name in Storage(folder, options).listdir("") if Shard.from_folder(name)]
    ids = [
        StateStore(Storage(f"{folder}/{shard}" if shard else folder, options), lease).load().key // 4
        for shard in ["", *shards]
    ]
    return np.unique(np.concatenate(ids))


def check_source_identity(config: Config, coverage: Coverage, param_ids: np.ndarray) -> None:
    """Stop a run that would add the platform of another source of the output again under a new name."""
    source = config.source
    if source.name_given or len(coverage) or not len(param_ids):
        return
    options = config.sink.storage_options
    root = config.state_root
    if any(name not in ("lock", SNAPSHOT) for name in Storage(config.state_path, options).listdir("")):
        return  # checkpoints of this source after all (another shard's)
    for other in Storage(root, options).listdir(""):
        if other == source.name:
            continue
        shared = int(np.isin(param_ids, _param_ids(f"{root}/{other}", config)).sum())
        if shared and shared * 2 >= len(param_ids):
            raise ConfigError(
                f"config error: source.name: the output already holds source {other!r} with checkpoints of "
                f"{shared} of the {len(param_ids)} parameters this run selects; as source {source.name!r} "
                f"(the host of source.base_url) it would export them all again, and queries would count "
                f"them twice. The same platform: set source.name: {other}. Another one: set source.name "
                f"(e.g. {source.name}) to add it on purpose"
            )
