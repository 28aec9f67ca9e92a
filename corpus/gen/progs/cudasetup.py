"""Asking a CPU-only build for a GPU, for real: `cudasetup.py CALL`.

Each CALL reaches CUDA through a different API (module.cuda, .to, a factory with device=,
set_device, a device query, autocast, DataParallel, a HF pipeline, Lightning, accelerate, JAX);
the CPU wheels answer with their own errors. Surrounding output varies per call.
"""

from __future__ import annotations

import logging
import sys
import time

call = sys.argv[1]
logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                    format="%(asctime)s | %(levelname)-8s | %(name)s | %(message)s")
log = logging.getLogger(call)
log.info("host ready, requested devices: cuda:0")
for i in range(len(call) % 4 + 1):
    log.info("loading shard %d/%d", i + 1, len(call) % 4 + 1)
    time.sleep(0.02)

if call in ("lightning", "lightning_devices", "accelerate", "hf_pipeline", "hf_bf16",
            "jax_gpu", "jax_cuda_put"):
    pass
else:
    import torch
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())

if call == "module_cuda":
    net.cuda()
elif call == "to_cuda":
    net.to("cuda:0")
elif call == "tensor_cuda":
    torch.randn(4, 4).cuda(non_blocking=True)
elif call == "factory":
    torch.zeros(8, device="cuda")
elif call == "set_device":
    torch.cuda.set_device(0)
elif call == "device_name":
    log.info("gpu: %s", torch.cuda.get_device_name(0))
elif call == "current_device":
    log.info("device %d", torch.cuda.current_device())
elif call == "mem_info":
    log.info("free/total %s", torch.cuda.mem_get_info())
elif call == "pin_memory":
    log.info("pinned %s", torch.randn(1024).pin_memory().is_pinned())
elif call == "synchronize":
    torch.cuda.synchronize()
elif call == "manual_seed_all":
    torch.cuda.manual_seed_all(0)
    torch.cuda.init()
elif call == "stream":
    s = torch.cuda.Stream()
    log.info("stream %s", s)
elif call == "dataparallel":
    torch.nn.DataParallel(net, device_ids=[0, 1]).cuda()
elif call == "load_map":
    import io
    buf = io.BytesIO()
    torch.save(net.state_dict(), buf)
    buf.seek(0)
    torch.load(buf, map_location="cuda:0")
elif call == "hf_pipeline":
    from transformers import BertConfig, BertForSequenceClassification
    m = BertForSequenceClassification(BertConfig(vocab_size=100, hidden_size=16,
                                                 num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=32))
    m.to("cuda")
elif call == "hf_bf16":
    from transformers import TrainingArguments
    TrainingArguments(output_dir="/tmp/hf-bf16-out", fp16=True, use_cpu=False)
elif call == "lightning":
    import lightning as L
    L.Trainer(accelerator="cuda", devices=1)
elif call == "lightning_devices":
    import lightning as L
    L.Trainer(accelerator="gpu", devices=4, strategy="ddp")
elif call == "accelerate":
    from accelerate import Accelerator
    Accelerator(mixed_precision="fp16", cpu=False)
elif call == "jax_gpu":
    import jax
    jax.devices("cuda")
elif call == "jax_cuda_put":
    import jax
    import jax.numpy as jnp
    jax.device_put(jnp.ones(3), jax.devices("gpu")[0])
else:
    sys.exit(f"unknown call {call}")
log.info("model placed, starting training")
