"""Clusters for ``dflow bench simulate``: the papers' systems and today's, each with its sources.

A preset is what one node of a cluster offers the simulator: its worker devices, its NIC
(full duplex, bytes/sec each way, and a per-message latency), the bus between its devices
and its host memory, and how fast a parameter server on its CPU applies (and
deserializes) gradients. Every number is fixed per preset: a table's rows are all
simulated with the same one. Only a device's step time comes from a measurement (the
first row of a table, or ``--step_time``): the simulator splits it over the model's layers.

Where a number is not published (what TensorFlow's gRPC gets out of a link, a PS's apply
rate), the comment says which published figure it comes from and by how much it is
derated, and why; ``docs/simulate.md`` has the sources in full.

>>> PRESETS["p2.8xlarge"].devices_per_node, round(PRESETS["p2.8xlarge"].nic_bytes_per_sec / 1e9, 3)
(8, 1.175)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Hardware", "PRESETS", "LOOPBACK", "get_hardware", "TCP_MIN_RTO_S"]

GBIT = 1e9 / 8
GB = 1e9


@dataclass(frozen=True)
class Hardware:
    """One node of a cluster, as the simulator sees it (bytes/sec, seconds)."""

    name: str
    description: str
    devices_per_node: int
    nic_bytes_per_sec: float  # each way: a NIC is full duplex
    latency_s: float  # per message, one way (not occupying the link)
    bus_bytes_per_sec: float  # device <-> device and device <-> host inside a node
    ps_apply_bytes_per_sec: float  # gradient bytes a PS task receives and applies per second
    stream_bytes_per_sec: float | None = None  # one connection's cap (TF's gRPC), None: the NIC's
    device: str = ""
    one_device_images_per_sec: float | None = None  # Inception v3, batch 64, where a paper measured it
    #: the switch buffer in front of one node's port, for a drop-tail (Ethernet) fabric; None: a
    #: lossless fabric (Aries, InfiniBand: credit-based flow control drops nothing), or no switch
    port_buffer_bytes: float | None = None

    @property
    def incast_senders(self) -> int | None:
        """How many flows into one port overflow it when each sends its first window at once
        (a synchronized burst: every worker's gradients into a PS at a step's end): their windows
        exceed the port's buffer plus what the link holds in flight. None: never (lossless)."""
        if self.port_buffer_bytes is None:
            return None
        in_flight = self.nic_bytes_per_sec * 2 * self.latency_s  # one round trip's bytes
        fitting = math.floor((self.port_buffer_bytes + in_flight) / TCP_INITIAL_WINDOW_BYTES)
        return max(2, fitting + 1)  # one flow is paced by its own ACKs: it never overflows a port alone


#: TCP's payload share of an Ethernet line (1500-byte frames: 1448 / 1538 bytes on the wire)
TCP_EFFICIENCY = 0.94
#: TCP's initial window, 10 segments of 1448 bytes (RFC 6928, Linux since 2.6.39, 2011): after
#: an idle gap (a step's compute) Linux restarts a connection's window from it (RFC 2861,
#: net.ipv4.tcp_slow_start_after_idle=1, the default), so every step's burst starts with it
TCP_INITIAL_WINDOW_BYTES = 10 * 1448
#: a commodity data-centre switch's buffer per port: Broadcom Triumph, 4 MB shared by 48 1 Gbit/s
#: ports, and Scorpion, 4 MB by 24 10 Gbit/s ports (Alizadeh et al., "Data Center TCP", SIGCOMM
#: 2010, table 1); we take an even share of the Triumph's, 4 MB / 48, for every Ethernet preset
#: (AWS does not publish its switches; the share is the same for every point and preset).
#: Recalled from that table, not re-checked against the paper's text: docs/simulate.md
ETHERNET_PORT_BUFFER = 4e6 / 48
#: the least retransmission timeout, Linux's TCP_RTO_MIN (HZ/5 = 200 ms): a flow whose whole
#: window was dropped at an overflowing port gets no duplicate ACKs and waits this long, while
#: the round trips of the link are ~100 us (Phanishayee et al., FAST 2008; Vasudevan et al.,
#: SIGCOMM 2009: these timeouts, not the link's rate, are what collapses incast goodput)
TCP_MIN_RTO_S = 0.2

#: one gRPC connection's rate in TensorFlow 1.0-1.2 (seed 001 ran 1.1): a 128 MB RecvTensor
#: between two workers moved at 569 MB/s, CPU-bound in gRPC's copies (tensorflow/tensorflow#6116,
#: Dec 2016; 800 MB/s only after the gRPC upgrade of Aug 2017, TF 1.3)
TF1_GRPC_STREAM = 0.57 * GB
#: what one PS process of a 2017 Xeon node copies per second into replies and out of requests
#: and applies (SGD: read variable, read gradient, write variable): not published. We take
#: ~3.5 of #6116's CPU-bound streams, 2 GB/s, the same for every 2017 preset (not fitted per row;
#: docs/simulate.md shows the tables at 1 and 4 GB/s too)
TF1_PS_CPU = 2 * GB

PRESETS: dict[str, Hardware] = {h.name: h for h in [
    # seed 001 section 3.2: one P100 per Cray XC50 node, Aries, Dragonfly. Aries: 10.2 GB/s
    # injection per node (Alverson et al., "Cray XC Series Network", Cray 2012); TF's gRPC runs
    # over TCP/IP on it, one connection at TF1_GRPC_STREAM. P100 PCIe 3.0 x16: ~12 GB/s achieved
    # of 15.75 (NVIDIA P100 datasheet). Aries latency ~1.3 us MPI; TCP/gRPC ~30 us.
    Hardware("piz_daint", "Cray XC50: 1x P100 per node, Aries (seed 001)", 1,
             nic_bytes_per_sec=10.2 * GB, latency_s=30e-6, bus_bytes_per_sec=12 * GB,
             ps_apply_bytes_per_sec=TF1_PS_CPU, stream_bytes_per_sec=TF1_GRPC_STREAM, device="P100",
             one_device_images_per_sec=138.23),
    # AWS p2.xlarge: 1 K80 GPU (one GK210 of a board), network "High" (AWS instance types page,
    # 2017): no rate is published; iperf3 baselines of instances of that class are 1.2-2.5 Gbit/s
    # (cloudonaut.io EC2 network cheat sheet, 2018): we take 2 Gbit/s. ~100 us in a placement group.
    Hardware("p2.xlarge", "AWS p2.xlarge: 1x K80 (GK210) per node, 'High' (~2 Gbit/s) Ethernet", 1,
             nic_bytes_per_sec=TCP_EFFICIENCY * 2 * GBIT, latency_s=100e-6, bus_bytes_per_sec=6 * GB,
             ps_apply_bytes_per_sec=TF1_PS_CPU, stream_bytes_per_sec=TF1_GRPC_STREAM, device="K80",
             port_buffer_bytes=ETHERNET_PORT_BUFFER,
             one_device_images_per_sec=30.55),
    # AWS p2.8xlarge: 8 K80 GPUs (4 boards; the two GK210 of a board share one PCIe 3.0 x16:
    # ~6 GB/s each), 10 Gbit/s (AWS instance types page, 2017)
    Hardware("p2.8xlarge", "AWS p2.8xlarge: 8x K80 (GK210) per node, 10 Gbit/s Ethernet", 8,
             nic_bytes_per_sec=TCP_EFFICIENCY * 10 * GBIT, latency_s=100e-6, bus_bytes_per_sec=6 * GB,
             ps_apply_bytes_per_sec=TF1_PS_CPU, stream_bytes_per_sec=TF1_GRPC_STREAM, device="K80",
             port_buffer_bytes=ETHERNET_PORT_BUFFER,
             one_device_images_per_sec=30.55),
    # NVIDIA DGX-1 (P100): 8 P100 in an NVLink hybrid cube mesh, 4 NVLinks x 20 GB/s per GPU
    # each way (DGX-1 whitepaper, 2017); 4x 100 Gbit/s EDR InfiniBand. Google ran one box.
    Hardware("dgx1", "NVIDIA DGX-1: 8x P100 with NVLink, 4x EDR InfiniBand", 8,
             nic_bytes_per_sec=4 * 100 * GBIT * TCP_EFFICIENCY, latency_s=5e-6, bus_bytes_per_sec=80 * GB,
             ps_apply_bytes_per_sec=TF1_PS_CPU, stream_bytes_per_sec=TF1_GRPC_STREAM, device="P100",
             one_device_images_per_sec=138.23),
    # seed 000 (Wang et al. 2017) table 1: one GTX 980 per node, 1 or 10 Gbit/s Ethernet. Its
    # one-GPU CIFAR-10 speed is only a figure (figure 8); 1,500 images/sec at batch 100 is the
    # TF tutorial CNN's order on a GTX 980 class GPU (an assumption: docs/simulate.md)
    Hardware("ethernet_1gbit", "seed 000's cluster: 1x GTX 980 per node, 1 Gbit/s Ethernet", 1,
             nic_bytes_per_sec=TCP_EFFICIENCY * 1 * GBIT, latency_s=100e-6, bus_bytes_per_sec=12 * GB,
             ps_apply_bytes_per_sec=TF1_PS_CPU, stream_bytes_per_sec=TF1_GRPC_STREAM, device="GTX 980",
             port_buffer_bytes=ETHERNET_PORT_BUFFER,
             one_device_images_per_sec=1500),
    Hardware("ethernet_10gbit", "seed 000's cluster: 1x GTX 980 per node, 10 Gbit/s Ethernet", 1,
             nic_bytes_per_sec=TCP_EFFICIENCY * 10 * GBIT, latency_s=50e-6, bus_bytes_per_sec=12 * GB,
             ps_apply_bytes_per_sec=TF1_PS_CPU, stream_bytes_per_sec=TF1_GRPC_STREAM, device="GTX 980",
             port_buffer_bytes=ETHERNET_PORT_BUFFER,
             one_device_images_per_sec=1500),
    # today's: NVIDIA DGX H100, 8 H100 SXM with NVLink 4 (900 GB/s per GPU, 450 each way) and
    # 8x ConnectX-7 400 Gbit/s InfiniBand (DGX H100 user guide); RDMA (NCCL, or a PS runtime
    # over UCX): no gRPC stream cap; a Sapphire Rapids PS copies ~10 GB/s.
    Hardware("h100_ib400", "8x H100 SXM per node, NVLink 4, 8x 400 Gbit/s InfiniBand", 8,
             nic_bytes_per_sec=8 * 400 * GBIT * 0.9, latency_s=3e-6, bus_bytes_per_sec=450 * GB,
             ps_apply_bytes_per_sec=10 * GB, device="H100"),
    # an H100 cloud node with a single 200 Gbit/s link
    Hardware("h100_ib200", "8x H100 SXM per node, NVLink 4, one 200 Gbit/s link", 8,
             nic_bytes_per_sec=200 * GBIT * 0.9, latency_s=3e-6, bus_bytes_per_sec=450 * GB,
             ps_apply_bytes_per_sec=10 * GB, device="H100"),
]}

#: this machine: every role a process on one host, links shaped by ``--network`` (or loopback:
#: docs/measured.md, 1.4-2.4 GB/s between Dask workers, ~1 ms per worker-to-worker message)
LOOPBACK = Hardware("loopback", "one machine, roles as processes over loopback", 1,
                    nic_bytes_per_sec=2 * GB, latency_s=1e-3, bus_bytes_per_sec=2 * GB,
                    ps_apply_bytes_per_sec=2 * GB, device="CPU")


def get_hardware(name: str) -> Hardware:
    """The preset ``name``; an unknown name lists the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown hardware preset {name!r}; choose one of: {', '.join(PRESETS)}") from None
