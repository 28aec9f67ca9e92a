
import warnings
def load(path):
    warnings.warn("load() without weights_only is deprecated", DeprecationWarning)
print("loading model")
load("model.pt")
