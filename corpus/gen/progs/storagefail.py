"""A training job reading its shards from a storage server that misbehaves (really: the
generator runs a local server that stalls, resets or cuts responses short).

usage: storagefail.py VARIANT SEED PORT
"""

from __future__ import annotations

import http.client
import socket
import sys
import time
import urllib.request

from noise import banner, progress, rng_for, say

VARIANT, SEED, PORT = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
R = rng_for(f"storage-{VARIANT}-{SEED}")
HOST = "127.0.0.1"
BUCKET = R.choice(["datasets", "laion-shards", "pretrain-v2", "ckpts"])
SHARD = f"/{BUCKET}/shard-{R.randint(0, 9999):06d}.tar"
TIMEOUT = R.choice([1.0, 1.5, 2.0, 3.0])


def via_urllib() -> bytes:
    return urllib.request.urlopen(f"http://{HOST}:{PORT}{SHARD}", timeout=TIMEOUT).read()


def via_http_client() -> bytes:
    conn = http.client.HTTPConnection(HOST, PORT, timeout=TIMEOUT)
    conn.request("GET", SHARD)
    return conn.getresponse().read()


def via_socket() -> bytes:
    s = socket.create_connection((HOST, PORT), timeout=TIMEOUT)
    s.sendall(f"READ {SHARD} 0 1048576\n".encode())
    got = b""
    while len(got) < 1 << 20:
        chunk = s.recv(1 << 16)
        if not chunk:
            raise ConnectionAbortedError(f"storage closed the stream after {len(got)} of "
                                         f"{1 << 20} bytes of {SHARD}")
        got += chunk
    return got


def with_retries(fetch) -> bytes:
    """What storage clients do: retry a few times, then give up with their own message."""
    attempts = R.choice([2, 3])
    last = None
    for a in range(1, attempts + 1):
        try:
            return fetch()
        except (OSError, http.client.HTTPException) as e:
            last = e
            say(f"WARNING: read of s3://{BUCKET}{SHARD[len(BUCKET) + 1:]} failed "
                f"(attempt {a}/{attempts}): {e!r}", err=True)
            time.sleep(0.2)
    raise OSError(f"giving up on s3://{BUCKET}{SHARD[len(BUCKET) + 1:]} after {attempts} "
                  f"attempts: {type(last).__name__}: {last}")


def in_loader(fetch) -> bytes:
    import torch

    class Remote(torch.utils.data.Dataset):
        def __len__(self):
            return 100

        def __getitem__(self, i):
            return torch.tensor(len(fetch()))
    for batch in torch.utils.data.DataLoader(Remote(), batch_size=4, num_workers=2):
        say(f"batch {batch.tolist()}")
    return b""


FETCH = [via_urllib, via_http_client, via_socket]


def main() -> None:
    banner(R)
    progress(R, R.randint(0, 20))
    say(f"opening shard http://{HOST}:{PORT}{SHARD} (timeout {TIMEOUT}s)")
    fetch = FETCH[VARIANT % len(FETCH)]
    wrap = (VARIANT // len(FETCH)) % 3
    if wrap == 0:
        data = fetch()
    elif wrap == 1:
        data = with_retries(fetch)
    else:
        data = in_loader(fetch)
    say(f"read {len(data)} bytes")
    sys.exit(0 if data else 5)


if __name__ == "__main__":
    main()
