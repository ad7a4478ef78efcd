"""The published numbers ``dflow bench simulate --reproduce`` checks the simulator against.

Seed 001: Bugliarello, Kim, Lim, Lin, Guzzi (CSCS/ETH, 2017), "Distributed TensorFlow
benchmarks on Piz Daint and Amazon EC2": Inception v3, batch 64 per GPU, NCHW, SGD,
TensorFlow 1.1, synthetic data, PS tasks on the worker nodes, the best of PS counts 1 to
the number of workers. Tables 1-3 (the synthetic-data rows: "Real Data FALSE"), and the
8-GPU scaling efficiencies of section 5.3.1-5.3.2 (Google's, measured with tf_cnn_benchmarks
on one DGX-1 and one p2.8xlarge, and the paper's own).

Seed 000: Wang, Tanimura, Ogawa, Nakada (AIST, 2017), "A Performance Evaluation of
Distributed TensorFlow": the CIFAR-10 tutorial CNN over 1 Gbit/s Ethernet saturates at about
3 workers with batch 100 and 4 with batch 200, and scales to 8 with batch 400; over
10 Gbit/s it scales to 8 whatever the batch (section 4.3, figures 10-11).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TableRow", "BUGLIARELLO2017", "BUGLIARELLO2017_EFFICIENCIES", "WANG2017_SATURATION",
           "BUGLIARELLO2017_SETUP"]


class TableRow(NamedTuple):
    system: str  # a dflow.bench.hardware preset
    gpus: int
    num_ps: int
    variable_update: str
    images_per_sec: float


#: what every row of seed 001's tables shares
BUGLIARELLO2017_SETUP = {"model": "inception3", "batch_size": 64, "sync": True}

_TABLES = {
    # Table 1: Piz Daint (one P100 per node)
    "piz_daint": [(1, 1, "parameter_server", 138.23), (2, 1, "parameter_server", 264.57),
                  (4, 3, "distributed_replicated", 523.38), (8, 2, "parameter_server", 1018.18),
                  (16, 4, "parameter_server", 2001.00), (32, 12, "parameter_server", 3840.35),
                  (64, 40, "parameter_server", 7118.31), (128, 116, "parameter_server", 9219.70)],
    # Table 2: AWS p2.xlarge (one K80 GPU per node)
    "p2.xlarge": [(1, 1, "parameter_server", 30.55), (2, 2, "distributed_replicated", 57.45),
                  (4, 4, "distributed_replicated", 114.57), (8, 8, "distributed_replicated", 228.41),
                  (16, 12, "distributed_replicated", 431.64), (32, 32, "parameter_server", 825.64),
                  (64, 64, "parameter_server", 996.32), (128, 128, "parameter_server", 1077.59)],
    # Table 3: AWS p2.8xlarge (eight K80 GPUs per node)
    "p2.8xlarge": [(1, 1, "parameter_server", 30.55), (2, 1, "distributed_replicated", 58.38),
                   (4, 1, "distributed_replicated", 116.34), (8, 1, "distributed_replicated", 230.75),
                   (16, 1, "distributed_replicated", 448.57), (32, 3, "distributed_replicated", 863.72),
                   (64, 8, "distributed_replicated", 1731.31), (128, 16, "distributed_replicated", 3333.20)],
}
BUGLIARELLO2017: list[TableRow] = [TableRow(system, *row) for system, rows in _TABLES.items() for row in rows]

#: section 5.3.1-5.3.2: speedup / GPUs at 8 GPUs. (system, who measured, efficiency)
BUGLIARELLO2017_EFFICIENCIES = [("dgx1", "Google (tf_cnn_benchmarks)", 0.9956),
                                ("piz_daint", "seed 001", 0.9207),
                                ("p2.8xlarge", "Google (tf_cnn_benchmarks)", 0.9458),
                                ("p2.8xlarge", "seed 001", 0.9444),
                                ("p2.xlarge", "seed 001", 0.9345)]

#: seed 000 section 4.3: (preset, batch size, workers where images/sec stops growing; None: scales to 8)
WANG2017_SATURATION = [("ethernet_1gbit", 100, 3), ("ethernet_1gbit", 200, 4), ("ethernet_1gbit", 400, None),
                       ("ethernet_10gbit", 100, None), ("ethernet_10gbit", 200, None),
                       ("ethernet_10gbit", 400, None)]
