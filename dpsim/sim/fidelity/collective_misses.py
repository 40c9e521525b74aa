"""Why the collective model misses where it does: a cause per published run, and the note on
the model shown with the validation table (text for `report`)."""

from __future__ import annotations

WHY_RUN: dict[str, str] = {
    "a3high-2x8-allgather": "GPUDirect-TCPX: the log is flat at ~1 ms from 1 to 16 MiB "
                            "(forced Ring/Simple, 8 channels): a fixed cost of the TCPX "
                            "plugin's data path that no per-step latency of NCCL's formula "
                            "reproduces without breaking the large sizes",
    "p5-2x8-allreduce": "at 64 KiB the log takes 135 us, more than 128 KiB's 109 us: the "
                        "time falls with the size, a sign that NCCL's tuner switches pair "
                        "there (the log does not say which); dpsim's fastest pair (tree/LL128, "
                        "92 us) cannot rise and fall; 4-64 MiB run 29-38 % slower than the "
                        "model, NCCL's middle-size throughput that its own tree correction "
                        "only partly covers",
    "h100-8x8-allreduce-ib": "8 MiB takes 1272 us in the log, between 204 us at 4 MiB and "
                             "378 us at 16 MiB: a one-row outlier no monotone model follows",
    "p5-2x8-allreduce-eks": "the same instance type as p5-2x8-allreduce but 1.5-2.3x slower "
                            "at 64-256 MiB (NCCL 2.18.5, aws-ofi-nccl 1.7.3): the two runs "
                            "disagree by more than 30 %, so no one model of p5 is within "
                            "30 % of both",
    "p5-1x8-allreduce": "small messages take 13 us; NCCL's own latency table (ring LL: 6.6 + "
                        "14 x 0.6 us) plus the fitted launch gives 18.5 us; the run also uses "
                        "the aws-ofi-nccl tuner plugin, which overrides NCCL's choice",
    "h100-2x8-allreduce-xe9680": "small messages: 25 us in the log with spikes (68 us at 8 B, "
                                 "94 us at 256 B); NCCL's tree LL latency plus the fitted "
                                 "InfiniBand step gives 35 us",
    "h100-4x8-allreduce-xe9680-vm": "virtual machines (NCCL_TOPO_FILE): 35 us small messages "
                                    "with spikes at 8 B and 256 B, and a slower middle than "
                                    "bare-metal InfiniBand runs",
    "h100-4x8-allreduce-ib-gj": "the middle (1-16 MiB) is up to 2x slower than the 2- and "
                                "8-node runs of the same cluster suggest (1 MiB takes 317 us, "
                                "more than 2 MiB's 227 us)",
    "a3mega-2x8-allreduce": "busbw falls between 8 and 32 MiB (978 us at 16 MiB, 1060 at "
                            "32 MiB) while the A3 Mega all-gather runs on the same network do "
                            "not; a different plugin or NCCL version than those runs (not "
                            "given)",
    "a3high-1x8-allreduce": "forced Ring/Simple on 8 channels (NCCL_MIN/MAX_NCHANNELS=8): "
                            "263 GB/s busbw at 1-8 GiB, where dpsim, which has no channel "
                            "count, runs the ring at NVLink's achieved rate (0.82 x 450 = "
                            "369 GB/s): 28 % too fast at every size",
    "gb200-8-allreduce": "8 GPUs on two GB200 trays in one NVLink domain: small messages take "
                         "21-28 us, against 18.5 us from NCCL's NVLink ring LL latency and "
                         "the launch cost fitted over every single-node run (p5's 8-GPU run "
                         "takes 13 us): the hop between trays is slower than inside one "
                         "NVSwitch, and dpsim has one NVLink latency per generation",
    "a3ultra-2x8-allgather-dws": "small messages take 54-60 us, twice the 28-35 us of the two "
                                 "other A3 Ultra all-gather logs of the same machine type "
                                 "(a3ultra-2x8-allgather-gib, -skypilot), which dpsim "
                                 "follows: the runs disagree, not the sizes",
    "dgx-a100-2x8-allreduce-k8s": "SR-IOV virtual functions on Kubernetes: the middle sizes "
                                  "(128 KiB-4 MiB) are slower than on the bare-metal DGX A100 "
                                  "run of the same HDR fabric",
    "dgx-a100-4x8-allreduce": "the fitted HDR fraction is shared with the slower SR-IOV run; "
                              "this bare-metal run reaches more at large sizes",
    "oci-a100-2x8-allreduce": "the fitted RoCE 100G fraction is shared with the NCCL 2.29 run "
                              "of the same shape, which is 25 % slower at 1-8 GiB",
    "oci-a100-2x8-allreduce-nccl229": "25 % slower at 1-8 GiB than the other OCI A100 run of "
                                      "the same shape (NCCL 2.29.3 vs an older NCCL)",
}
MODEL_NOTE = ("The model: each (algorithm, protocol) pair NCCL may run costs NCCL's latency "
              "formula (its base and per-hop latencies, src/graph/tuning.cc) plus a fitted "
              "latency per network step, plus bytes / bandwidth with NCCL's protocol factors "
              "(LL 1/2, LL128 0.92) and, for a tree, NCCL's per-size correction; link rates "
              "are fitted. A fitted fill term per bottleneck link, K x S / (S + S0), adds the "
              "medium sizes' shortfall (NCCL's chunking and per-message transport work, which "
              "neither NCCL's tuner nor dpsim models directly): it grows with S and levels "
              "off at K. The fit minimises the mean |error| of the training half. dpsim "
              "picks the pair with the smallest time (NCCL's rule, applied "
              "to dpsim's estimate). A run whose configuration sets NCCL_ALGO or NCCL_PROTO "
              "is modelled with that only. Runs of one machine type that disagree with each "
              "other share one fitted rate, so both miss.")
WHY_DEFAULT = ("no run-specific cause found: middle sizes, where NCCL switches protocol "
               "and channel count, and dpsim's fitted rate of this network is shared with "
               "other runs")
