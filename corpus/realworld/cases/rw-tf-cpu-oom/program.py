
import tensorflow as tf
x = tf.ones([1 << 20, 1 << 20])  # 4 TiB on the CPU device
print(tf.reduce_sum(x))
