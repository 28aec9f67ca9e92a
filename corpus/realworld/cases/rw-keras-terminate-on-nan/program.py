
import numpy as np, tensorflow as tf
x = np.random.rand(64, 4).astype("float32"); y = np.random.rand(64, 1).astype("float32")
m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
m.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=1e30), loss="mse")
m.fit(x * 1e20, y, epochs=3, batch_size=8, verbose=2,
      callbacks=[tf.keras.callbacks.TerminateOnNaN()])
print("fit returned")
