"""Hydra / OmegaConf jobs for the f6j- tuning cases (the JVM ones are native/F6Jobs.java).

Hydra catches the task's exception and prints its short report; these are other situations
than holdout6's (a missing config group option, an override that does not parse, a key
missing in struct mode inside the task, omegaconf interpolation and structured-config errors).
hydra-core / omegaconf: /opt/gpualert-ho6/site-packages (pip --target, corpus/holdout6/README.md).
Usage: f6_jvm.py MODE TMPDIR [hydra overrides...]
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

sys.path.append("/opt/gpualert-ho6/site-packages")


def say(msg: str) -> None:
    print(msg, flush=True)


def write_conf(tmp: str) -> str:
    """A config tree: config.yaml with an optimizer group that only has sgd."""
    conf = os.path.join(tmp, "conf")
    os.makedirs(os.path.join(conf, "optimizer"), exist_ok=True)
    with open(os.path.join(conf, "config.yaml"), "w") as f:
        f.write("defaults:\n  - optimizer: ${OPT}\n  - _self_\n\nmodel:\n  name: resnet18\n"
                "  width: 64\ntrainer:\n  epochs: 3\n"
                .replace("${OPT}", os.environ.get("F6_OPT", "sgd")))
    with open(os.path.join(conf, "optimizer", "sgd.yaml"), "w") as f:
        f.write("name: sgd\nlr: 0.1\nmomentum: 0.9\n")
    return conf


def hydra_app(tmp: str, task) -> None:  # type: ignore[no-untyped-def]
    import hydra
    from omegaconf import DictConfig

    conf = write_conf(tmp)
    os.chdir(tmp)

    @hydra.main(version_base=None, config_path=conf, config_name="config")
    def main(cfg: DictConfig) -> None:
        task(cfg)

    sys.argv = [sys.argv[0]] + sys.argv[3:] + ["hydra.run.dir=" + os.path.join(tmp, "out")]
    main()


def train(cfg) -> None:  # type: ignore[no-untyped-def]
    say(f"model {cfg.model.name} width {cfg.model.width}, "
        f"optimizer {cfg.optimizer.name} lr {cfg.optimizer.lr}")
    say(f"dropout {cfg.model.dropout}")  # not in the config: struct mode raises
    say("training would start here")


def interp() -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"data": {"name": "imagenet"}, "paths": {"train": "${data.root}/train"}})
    say(f"dataset {cfg.data.name}")
    say(f"train split at {cfg.paths.train}")


@dataclass
class TrainerConf:
    epochs: int = 10
    precision: str = "bf16"


def structured() -> None:
    from omegaconf import OmegaConf

    base = OmegaConf.structured(TrainerConf)
    say(f"defaults: {OmegaConf.to_yaml(base).strip()}")
    cli = OmegaConf.from_dotlist(["epochs=ten"])
    merged = OmegaConf.merge(base, cli)
    say(f"epochs {merged.epochs}")


def main() -> None:
    mode = sys.argv[1]
    tmp = sys.argv[2] if len(sys.argv) > 2 else "/tmp"
    if mode in ("hydra", "hydra_train"):
        hydra_app(tmp, train)
    elif mode == "interp":
        interp()
    elif mode == "structured":
        structured()
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
