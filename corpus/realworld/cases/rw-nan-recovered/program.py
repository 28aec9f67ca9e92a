
for step in range(1, 200):
    if step == 7:
        print(f"step {step} loss = nan, skipping step (grad scaler)")
        continue
    print(f"step {step} loss = {1.0 / step:.4f}")
print("done")
