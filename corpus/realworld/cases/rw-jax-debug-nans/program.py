
import jax, jax.numpy as jnp
jax.config.update("jax_debug_nans", True)
def loss(w):
    return jnp.log(w - 2.0)
print(jax.jit(loss)(jnp.float32(1.0)))
