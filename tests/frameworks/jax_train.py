"""JAX: a jitted training loop (linear regression by gradient descent) on the GPU against NumPy."""
from fwcheck import check, close, need, passed

jax, jnp, np = need("jax", "jax.numpy", "numpy")
devs = jax.devices()
check(any(d.platform == "gpu" for d in devs), "no GPU among JAX's devices: %r" % devs)

rng = np.random.default_rng(0)
X = rng.standard_normal((1024, 16)).astype(np.float32)
w_true = rng.standard_normal(16).astype(np.float32)
y = X @ w_true


@jax.jit
def step(w, X, y):
    g = jax.grad(lambda w: jnp.mean((X @ w - y) ** 2))(w)
    return w - 0.1 * g


w = jnp.zeros(16, dtype=jnp.float32)
Xd, yd = jax.device_put(X), jax.device_put(y)
for _ in range(200):
    w = step(w, Xd, yd)
w = np.asarray(w)
wn = np.zeros(16, dtype=np.float32)
for _ in range(200):
    wn = wn - 0.1 * (2.0 / len(X)) * (X.T @ (X @ wn - y))
close(w.tolist(), wn.tolist(), 1e-3, "weights after 200 steps, JAX against NumPy")
close(w.tolist(), w_true.tolist(), 1e-2, "weights against the truth")
passed("200 jitted steps on %s" % [d for d in devs if d.platform == "gpu"][0])
