"""The collective model's free constants (`ModelParams`), as shipped and as the fit varies them.

Defaults are `link_constants`' tables (their `# fitted: begin/end` block is what
`python -m dpsim validate` fits). Every table is keyed by a link preset's name.

The fill term: a published nccl-tests curve reaches its large-size bandwidth only from a
few MiB (a network) or tens of MiB (an NVSwitch) on; below that it is slower than one
latency plus one bandwidth can draw (at the same time the curve's large-size slope is
steeper than the middle's). NCCL cuts a message into chunks for each channel and shrinks
the chunks of a medium message so the pipeline stays full; every chunk pays the
transport's fixed per-message work (proxy thread, network request, flag synchronisation).
dpsim models neither channels nor chunks (NCCL's own tuner does not either), so it adds an
empirical saturating term per bottleneck link, fitted on the training half:

    fill(S) = FILL_US x S / (S + FILL_BYTES)      (microseconds; S the message's bytes)

It grows with S for medium messages and tends to FILL_US for large ones, where it is small
beside the bandwidth time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dpsim.sim.collectives.link_constants import (
    ACHIEVED_FRACTION,
    FILL_BYTES,
    FILL_US,
    HOP_LATENCY_US,
    LAUNCH_US,
    LINK_FRACTION,
    LL_NETWORK_GBPS,
    NVLS_FRACTION,
    NVLS_FRACTIONS,
    Constant,
)
from dpsim.sim.hardware import Link


def _table(constants: dict[str, Constant]) -> dict[str, float]:
    return {k: c.value for k, c in constants.items()}


@dataclass(frozen=True)
class ModelParams:
    """The model's free constants (defaults: `link_constants`); the fitter varies them."""

    fractions: dict[str, float] = field(default_factory=lambda: _table(ACHIEVED_FRACTION))
    nvls_fraction: float = NVLS_FRACTION.value  # any NVSwitch not in `nvls_fractions`
    launch_us: float = LAUNCH_US.value
    nvls_fractions: dict[str, float] = field(default_factory=lambda: _table(NVLS_FRACTIONS))
    link_fractions: dict[str, float] = field(default_factory=lambda: _table(LINK_FRACTION))
    ll_network_GBps: dict[str, float] = field(default_factory=lambda: _table(LL_NETWORK_GBPS))
    hop_us: dict[str, float] = field(default_factory=lambda: _table(HOP_LATENCY_US))
    fill_us: dict[str, float] = field(default_factory=lambda: _table(FILL_US))
    fill_bytes: dict[str, float] = field(default_factory=lambda: _table(FILL_BYTES))

    def fraction(self, link: Link) -> float:
        """Achieved / spec bandwidth of `link`: its own fitted value, else its kind's."""
        return self.link_fractions.get(link.name, self.fractions[link.kind])

    def ll_cap(self, link: Link | None) -> float:
        """Bytes/s a node's LL traffic reaches over the network `link` (inf: no cap)."""
        if link is None:
            return math.inf
        return self.ll_network_GBps.get(link.name, math.inf) * 1e9

    def net_us(self, link: Link | None) -> float:
        """The network's own latency per step, us (the fitted table by link name, else the
        preset's `latency_us`; 0 without a network)."""
        return 0.0 if link is None else self.hop_us.get(link.name, link.latency_us)

    def nvls(self, link: Link) -> float:
        """The NVLS fraction of the NVSwitch behind `link` (by its name)."""
        return self.nvls_fractions.get(link.name, self.nvls_fraction)

    def fill_s(self, link: Link, nbytes: Any) -> Any:
        """The fill term of a collective of `nbytes` (a number or a numpy array of sizes)
        whose bottleneck is `link`, seconds (0 where `link` has no fitted fill, and at 0 B)."""
        k = self.fill_us.get(link.name, 0.0)
        return k * 1e-6 * nbytes / (nbytes + self.fill_bytes.get(link.name, 1.0))


DEFAULT_PARAMS = ModelParams()
