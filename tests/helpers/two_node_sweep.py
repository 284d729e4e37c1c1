"""Run a small noise_grid sweep on a two-node Ray cluster made by `ray.cluster_utils.Cluster`.

Used by tests/clusters/test_gpus.py in a subprocess (one Ray per process). Usage:
    python tests/helpers/two_node_sweep.py STORAGE_DIR
Each node has 1 CPU and 2 logical GPUs, so two 1-CPU trials can only run at once on both nodes.
First checks that local storage is refused on a multi-node cluster, then runs with
--storage-is-shared (both nodes live on this machine, so its disk is shared).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ray.cluster_utils import Cluster

from sweeps import noise_grid
from sweeps.engine.flags import UsageError

storage = sys.argv[1]
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 2, "include_dashboard": False})
cluster.add_node(num_cpus=1, num_gpus=2)
cluster.wait_for_nodes()
argv = [
    "--address",
    cluster.address,
    "--noise-types",
    "sym",
    "--noise-rates",
    "0.2,0.4",
    "--epochs",
    "4",
    "--gpus-per-trial",
    "1",
    "--cpus-per-trial",
    "1",
    "--storage-path",
    storage,
    "--name",
    "two_nodes",
]
try:
    try:
        noise_grid.main(argv)
        print("local storage was accepted")
    except UsageError as e:
        print(e)
    code = noise_grid.main([*argv, "--storage-is-shared"])
finally:
    import ray

    ray.shutdown()
    cluster.shutdown()
sys.exit(code)
