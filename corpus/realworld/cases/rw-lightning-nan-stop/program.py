
import torch, lightning as L
from torch.utils.data import DataLoader, TensorDataset
class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(2, 1)
    def training_step(self, b, i):
        return self.l(b[0]).mean()
    def validation_step(self, b, i):
        self.log("val_loss", torch.tensor(float("nan")))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
ds = TensorDataset(torch.randn(16, 2))
t = L.Trainer(max_epochs=5, accelerator="cpu", logger=False, enable_checkpointing=False,
              enable_progress_bar=False,
              callbacks=[L.pytorch.callbacks.EarlyStopping("val_loss", check_finite=True,
                                                          verbose=True)])
t.fit(M(), DataLoader(ds, batch_size=4), DataLoader(ds, batch_size=4))
print("trainer finished")
