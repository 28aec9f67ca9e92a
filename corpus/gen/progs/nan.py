import math
import sys

import torch
import trainlog

case = sys.argv[1]
log = trainlog.setup("train", hash(case) % 3)
torch.manual_seed(0)
x = torch.randn(256, 8)
y = x @ torch.randn(8, 1) * 50
m = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
if case == "stopping":
    opt = torch.optim.SGD(m.parameters(), lr=0.9)
    trainlog.config_dump({"optimizer": "sgd", "lr": 0.9, "grad_clip": None})
    for step in range(1000):
        loss = torch.nn.functional.mse_loss(m(x), y)
        if not math.isfinite(loss.item()):
            print(f"Loss is {loss.item()}, stopping training")
            sys.exit(1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.info("step %d loss %.4f", step, loss.item())
elif case == "anomaly":
    torch.autograd.set_detect_anomaly(True)
    w = torch.nn.Parameter(torch.tensor([0.5, 0.2, 0.1]))
    opt = torch.optim.SGD([w], lr=0.6)
    for step in range(100):
        loss = -(torch.log(w) * torch.tensor([1.0, 2.0, 3.0])).sum() + (w ** 2).sum() * 10
        log.info("step %d loss %.5f w=%s", step, loss.item(), [round(v, 4) for v in w.tolist()])
        opt.zero_grad()
        loss.backward()
        opt.step()
elif case == "clip":
    m = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(m.parameters(), lr=1.5, momentum=0.9)
    for step in range(1000):
        loss = torch.nn.functional.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(m.parameters(), 1e6, error_if_nonfinite=True)
        opt.step()
        log.info("step %d loss %.3e grad_norm %.3e", step, loss.item(), gn.item())
elif case == "numpy":
    import numpy as np
    np.seterr(all="raise")
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 20)) * 30
    w = np.zeros(20)
    t = X @ rng.normal(size=20)
    for it in range(500):
        g = X.T @ (X @ w - t) / len(X)
        w = w - 0.05 * g
        log.info("iter %d mse %.4e", it, float(((X @ w - t) ** 2).mean()))
elif case == "assert":
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for step in range(400):
        out = m(x)
        if step >= 60:
            out = out / (out - out)  # a normalisation that divides by a zero variance
        loss = torch.nn.functional.mse_loss(out, y)
        if step % 10 == 0 or step > 60:
            log.info("step %d loss %s", step, f"{loss.item():.4f}")
        if step > 64:
            assert torch.isfinite(loss), f"non-finite loss at step {step}"
        opt.zero_grad()
        loss.backward()
        opt.step()
