"""A small convolutional net for chapter 5's DDP lab: flat features read as 3 x s x s images."""

from __future__ import annotations

from torch import nn

from dpsim.sim import require_int


def image_side(n_features: int) -> int | None:
    """s such that n_features == 3 * s * s, else None."""
    side = round((n_features / 3) ** 0.5)
    return side if 3 * side * side == n_features else None


def conv_stack(in_features: int = 48, hidden: int = 64, depth: int = 2, n_classes: int = 10
               ) -> nn.Sequential:
    """Unflatten to 3 x s x s, `depth` Conv2d(3x3, `hidden` channels)-ReLU, Flatten, Linear.

    Not seeded: the layers draw from torch's RNG as it stands (`build_model("cnn", ...)`
    seeds it first).
    """
    require_int("in_features", in_features, 1, 1 << 20)
    require_int("hidden", hidden, 1, 1 << 16)
    require_int("depth", depth, 1, 64)
    require_int("n_classes", n_classes, 1, 1 << 16)
    side = image_side(in_features)
    if side is None:
        raise ValueError(f"in_features={in_features} is not 3 * s * s for a cnn; "
                         "allowed: 12, 27, 48, 75, 108, ...")
    layers: list[nn.Module] = [nn.Unflatten(1, (3, side, side))]
    channels = 3
    for _ in range(depth):
        layers += [nn.Conv2d(channels, hidden, 3, padding=1), nn.ReLU()]
        channels = hidden
    layers += [nn.Flatten(), nn.Linear(channels * side * side, n_classes)]
    return nn.Sequential(*layers)
