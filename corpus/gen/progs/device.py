import sys

import torch
import trainlog

case = sys.argv[1]
log = trainlog.setup("train", 0)
trainlog.config_dump({"init_on": "meta", "materialize": "lazy", "dtype": "float32"}, 2)
if case == "linear":
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                    torch.nn.Linear(64, 2))
    log.info("model built with %d params (deferred init)",
             sum(p.numel() for p in model.parameters()))
    print(model(torch.randn(4, 32)))
elif case == "layernorm":
    ln = torch.nn.LayerNorm(64)
    h = torch.empty(4, 64, device="meta")  # activations from an encoder never materialised
    trainlog.progress("forward", 10, seed=5)
    print(ln(h))
elif case == "mse":
    pred = torch.randn(16, 1)
    target = torch.nn.Linear(4, 1, device="meta")(torch.empty(16, 4, device="meta"))
    log.info("computing teacher targets")
    print(torch.nn.functional.mse_loss(pred, target))
elif case == "cat":
    cached = [torch.randn(8, 16) for _ in range(3)]
    fresh = torch.empty(8, 16, device="meta")
    log.info("concatenating %d cached + 1 fresh feature blocks", len(cached))
    print(torch.cat(cached + [fresh]).shape)
elif case == "lstm":
    rnn = torch.nn.LSTM(16, 32)
    seq = torch.empty(10, 2, 16, device="meta")
    for ep in range(2):
        log.info("epoch %d", ep)
    print(rnn(seq))
