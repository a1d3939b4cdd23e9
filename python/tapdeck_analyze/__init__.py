"""Analyses of tapdeck datasets: each a plain function of a dataset returning an Arrow table."""

from .burstiness import burstiness
from .dataset import Dataset
from .errors import DatasetError, IncompleteDatasetError
from .file_age import file_age
from .file_sizes import file_sizes
from .files import files
from .nfs_latency import nfs_latency
from .nfs_ops import nfs_ops
from .opening import open_dataset
from .rates import rates
from .recency import recency
from .rpc_matching import rpc_matching
from .sequentiality import sequentiality
from .sizes import sizes
from .top import top
from .wan_whatif import wan_whatif

__all__ = [
    "Dataset",
    "DatasetError",
    "IncompleteDatasetError",
    "open_dataset",
    "rates",
    "burstiness",
    "sizes",
    "nfs_latency",
    "nfs_ops",
    "rpc_matching",
    "files",
    "recency",
    "file_sizes",
    "file_age",
    "sequentiality",
    "top",
    "wan_whatif",
]
