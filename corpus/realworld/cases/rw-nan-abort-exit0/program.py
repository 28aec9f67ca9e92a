
import math, sys
w, lr = 1.0, 3.5  # gradient descent on w**4 with a step far too large: it diverges
for step in range(1, 40):
    loss = w * w * w * w  # floats overflow to inf here, not to an exception
    print(f"step {step:4d} | loss = {loss:.4g} | lr {lr}")
    if not math.isfinite(loss):
        print("non-finite loss detected, stopping training early")
        sys.exit(0)
    w -= lr * 4 * w * w * w
