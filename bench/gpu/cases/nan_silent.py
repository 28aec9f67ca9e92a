"""A silent NaN: a GPU training loop whose loss turns NaN, which logs it and exits 0
(expected: nan_divergence). The CPU half runs the same loop on the CPU."""

from __future__ import annotations

import math
import sys

from _common import cpu_half_banner, parser, say


def train(device: str) -> int:
    import torch

    torch.manual_seed(0)
    x = torch.randn(512, 64, device=device)
    y = x @ torch.randn(64, 1, device=device) + 0.1 * torch.randn(512, 1, device=device)
    model = torch.nn.Linear(64, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=5.0)  # far too high: the loss diverges
    nan_steps = 0
    for step in range(200):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        value = loss.item()
        if step % 10 == 0 or not math.isfinite(value):
            say(f"epoch 0 step {step:4d} loss {value:.6g} lr 5.0")
        if math.isnan(value):
            nan_steps += 1
            if nan_steps >= 5:
                break
    say(f"training finished on {device}: {step + 1} steps, last loss {value}")
    return 0


def main() -> int:
    a = parser(__doc__).parse_args()
    if a.cpu_half:
        if cpu_half_banner("nan_silent", ("torch",))["torch"]:
            return train("cpu")
        return 0
    return train("cuda")


if __name__ == "__main__":
    sys.exit(main())
