"""Tuning-corpus programs for the GPU / distributed / device wording families held-out set 5
showed unknown (cases `f5g-*`): `f5_gpu_dist.py SCENARIO [ARG ...]`, run for real on a CPU.

Each scenario does a little ordinary work and then fails by itself: a c10d store or rendezvous
whose peers never come, a framework asked for a GPU this machine does not have, arguments on
two (logical CPU) devices, Open MPI losing a remote daemon that really died. Frameworks are
imported lazily, so a scenario pays only for its own.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import progkit
from progkit import ARG, say

steps = functools.partial(progkit.steps, loss=2.3, node=True, pause=0.03)


# ---------------------------------------------------------------- collective_timeout

def store_server_alone() -> None:
    """Rank 0 hosts the TCPStore for 3 ranks; the other two never start (their nodes were not
    allocated): the server gives up waiting for its clients."""
    import datetime

    import torch.distributed as dist
    steps("pretrain-setup", 2)
    say(f"rank 0/3: hosting the store on 127.0.0.1:{ARG}, waiting for 2 workers")
    store = dist.TCPStore("127.0.0.1", int(ARG), world_size=3, is_master=True,
                          timeout=datetime.timedelta(seconds=6), wait_for_workers=True)
    say(f"store up: {store}")


def _barrier_rank(rank: int, port: str) -> None:
    import datetime

    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    say(f"rank {rank}: process group up")
    if rank == 1:
        say("rank 1: building the eval cache before the barrier")
        time.sleep(12)  # far longer than rank 0 waits at the barrier
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=3))
    say(f"rank {rank}: past the barrier")


def monitored_barrier() -> None:
    """Two gloo ranks; rank 1 is still busy when rank 0's monitored_barrier times out."""
    import torch.multiprocessing as mp
    steps("eval-sync", 2)
    mp.start_processes(_barrier_rank, args=(ARG,), nprocs=2, start_method="fork")


def rdzv_worker() -> None:
    """The script torchrun would start: never reached when the rendezvous does not complete."""
    say(f"worker {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')} started")


# ---------------------------------------------------------------- cuda_setup

def tf_function_gpu() -> None:
    """A tf.function pinned to /GPU:0 with soft placement off, on a node without a GPU."""
    import tensorflow as tf
    tf.config.set_soft_device_placement(False)
    say(f"visible GPUs: {tf.config.list_physical_devices('GPU')}")

    @tf.function
    def train_step(x):
        with tf.device("/device:GPU:0"):
            return tf.reduce_mean(tf.matmul(x, x))

    say(float(train_step(tf.ones((64, 64)))))


def tf_session_gpu() -> None:
    """A TF1-style graph and session with its ops assigned to /GPU:0, soft placement off."""
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    with tf.device("/device:GPU:0"):
        a = tf.compat.v1.placeholder(tf.float32, (None, 32), name="features")
        w = tf.ones((32, 8), name="w")
        y = tf.matmul(a, w, name="logits")
    cfg = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    with tf.compat.v1.Session(config=cfg) as s:
        say(s.run(y, {a: [[1.0] * 32]}))


def jax_shard_gpu() -> None:
    """JAX_PLATFORMS names a GPU platform; the data-parallel split asks how many devices there
    are. (A first jax.numpy op instead fails in JAX's filtered frames: a bare AssertionError
    with nothing in the log to say why.)"""
    import jax
    say(f"jax {jax.__version__}: splitting the global batch of 512 over the local devices")
    n = jax.local_device_count()
    say(f"{n} devices, {512 // n} per device")


# ---------------------------------------------------------------- device_mismatch

def _two_logical_cpus():
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    return tf


def tf_explicit_policy() -> None:
    """Device policy 'explicit' (no silent copies); an input made on the second device."""
    tf = _two_logical_cpus()
    tf.config.experimental.set_device_policy("explicit")
    with tf.device("/CPU:1"):
        emb = tf.random.uniform((16, 8))
    say(f"embeddings on {emb.device}")
    with tf.device("/CPU:0"):
        w = tf.ones((8, 4))
        say(tf.matmul(emb, w))


def tf_resource_jit() -> None:
    """A jit-compiled step on one device reading a variable created on the other."""
    tf = _two_logical_cpus()
    with tf.device("/CPU:1"):
        scale = tf.Variable(tf.fill((8,), 0.5), name="scale")
    say(f"variable {scale.name} on {scale.device}")

    @tf.function(jit_compile=True)
    def normalize(x):
        return x * scale

    with tf.device("/CPU:0"):
        say(normalize(tf.ones((8,))))


def jax_op_two_devices() -> None:
    """Arrays committed to two (host) devices combined op by op, no user jit."""
    import jax
    import jax.numpy as jnp
    d0, d1 = jax.devices()[:2]
    q = jax.device_put(jnp.ones((4, 8)), d0)
    k = jax.device_put(jnp.ones((8, 4)), d1)
    say(f"q on {q.devices()}, k on {k.devices()}")
    say(jnp.dot(q, k))


# ---------------------------------------------------------------- node_failure

RSH_AGENT = """#!/bin/sh
# mpirun's "ssh": start the daemon for the named host here, and note its pid
shift
echo $$ >> {pids}
exec sh -c "$*"
"""


def mpi_daemon_killed() -> None:
    """mpirun over a hostfile whose second host is reached through an rsh agent that starts the
    daemon locally; that daemon (the remote node) is then killed while the job runs."""
    work = Path(ARG)
    work.mkdir(parents=True, exist_ok=True)
    pids = work / "orted.pids"
    pids.unlink(missing_ok=True)
    agent = work / "rsh-agent.sh"
    agent.write_text(RSH_AGENT.format(pids=pids))
    agent.chmod(0o755)
    (work / "hosts").write_text("localhost slots=1\n127.0.0.2 slots=1\n")
    prog = ("import os, time\nr = int(os.environ['OMPI_COMM_WORLD_RANK'])\n"
            "for i in range(60):\n"
            "    print(f'[r{r}] jacobi sweep {i:3d} residual {10 ** -(i / 9):.3e}', flush=True)\n"
            "    time.sleep(0.4)\n")
    say("launching 2 ranks on localhost and 127.0.0.2")
    p = subprocess.Popen(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                          "--hostfile", str(work / "hosts"), "--mca", "plm_rsh_agent",
                          str(agent), "--mca", "btl", "self,tcp", sys.executable, "-c", prog])
    deadline = time.time() + 30
    while not pids.exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(3)
    shell = int(pids.read_text().split()[0])
    # the agent's shell runs the daemon command; the orted is its child
    kids = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
    orted = [int(k) for k in kids if Path(f"/proc/{k}/comm").read_text().strip() == "orted"]
    os.kill(orted[0], signal.SIGKILL)  # the remote node's daemon dies
    sys.exit(p.wait(timeout=60))


if __name__ == "__main__":
    globals()[sys.argv[1]]()
