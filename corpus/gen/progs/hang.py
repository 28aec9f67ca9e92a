import multiprocessing as mp
import queue
import sys
import threading
import time

import trainlog

case = sys.argv[1]
log = trainlog.setup("train", hash(case) % 3)
if case == "deadlock":
    a, b = threading.Lock(), threading.Lock()
    def saver():
        for i in range(5):
            with a:
                time.sleep(0.3)
                with b:
                    log.info("async checkpoint shard %d flushed", i)
    def logger():
        for i in range(5):
            with b:
                time.sleep(0.3)
                with a:
                    log.info("metrics flushed %d", i)
    t1 = threading.Thread(target=saver)
    t2 = threading.Thread(target=logger)
    trainlog.progress("epoch 0", 50, seed=9)
    t1.start()
    t2.start()
    t1.join()
    t2.join()
elif case == "queue":
    q = queue.Queue(maxsize=8)
    def producer():
        for i in range(40):
            q.put(i)
        raise SystemExit  # producer thread ends quietly, short of the 100 batches
    threading.Thread(target=producer, daemon=True).start()
    for step in range(100):
        item = q.get()
        if step % 10 == 0:
            log.info("consumed batch %d", item)
elif case == "event":
    ev = mp.Event()
    trainlog.config_dump({"eval_every": 100, "async_eval": True}, 0)
    trainlog.progress("train", 100, seed=1)
    log.info("waiting for async evaluator to report")
    ev.wait()
