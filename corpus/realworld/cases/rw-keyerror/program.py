cfg = {'lr': 1e-3}
print(cfg['batch_size'])
