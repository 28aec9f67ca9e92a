
import tensorflow as tf
loss = tf.math.log(tf.constant([-1.0]))  # nan
tf.debugging.check_numerics(loss, "loss")
