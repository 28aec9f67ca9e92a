"""Fetch training shards from the local 'object store' (a TCP server the driver runs)."""
import http.client
import sys
import time
import urllib.request

import trainlog

case, port = sys.argv[1], int(sys.argv[2])
log = trainlog.setup("shardfetch", 2)
url = f"http://127.0.0.1:{port}/bucket/pretrain/shard-000123.tar"
trainlog.config_dump({"data_url": f"http://127.0.0.1:{port}/bucket/pretrain", "prefetch": 4})
if case in ("stall", "reset", "partial"):
    log.info("GET %s", url)
    with urllib.request.urlopen(url, timeout=4) as r:
        data = r.read()
    log.info("got %d bytes", len(data))
elif case == "retries":
    for attempt in range(1, 4):
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                data = r.read()
                break
        except (TimeoutError, OSError) as e:
            log.warning("attempt %d/3 for %s failed: %r; backing off %ds", attempt, url, e, attempt)
            time.sleep(attempt)
    else:
        raise RuntimeError(f"giving up on {url} after 3 attempts")
elif case == "rawsock":
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    c.request("GET", "/bucket/pretrain/index.json")
    resp = c.getresponse()
    log.info("status %s", resp.status)
    body = resp.read()
