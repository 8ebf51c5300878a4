"""hintfs: Python helpers for the hintfs S3 filesystem (pure Python).

- `hintfs.torch.HintedSampler`: wraps a sampler and writes each epoch's
  order as a hint file into the mount before yielding it.
- `hintfs.stats(mount)`: the daemon's counters as a dict.
- `hintfs.gpu`: batches of sample bytes copied to GPU memory through the
  optional C helper library (ctypes).
"""

import json
import os

__version__ = "0.1.0"


def stats(mount):
    """The counters of the hintfs mounted at `mount` (its .hintfs/stats)."""
    with open(os.path.join(os.fspath(mount), ".hintfs", "stats")) as f:
        return json.load(f)
