"""Judge-side float64 model of verl's loss aggregation and batch builders (not a probe)."""
# INFRADEV-PROBE-CANARY-7d2a4f19c0e6

import numpy as np


def agg_model(loss_mat, mask, mode, dp_size=1, batch_num_tokens=None, global_batch_size=None, factor=None):
    """The aggregation modes of the prompt, in float64 on (bs, L) arrays."""
    x = np.asarray(loss_mat, dtype=np.float64)
    m = np.asarray(mask, dtype=np.float64)
    if mode == "token-mean":
        n = m.sum() if batch_num_tokens is None else batch_num_tokens
        return (x * m).sum() / n * dp_size
    if mode == "seq-mean-token-sum":
        seq = (x * m).sum(-1)
        keep = (m.sum(-1) > 0).astype(np.float64)
        g = keep.sum() if global_batch_size is None else global_batch_size
        return (seq * keep).sum() / g * dp_size
    if mode == "seq-mean-token-mean":
        cnt = m.sum(-1)
        seq = (x * m).sum(-1) / (cnt + 1e-8)
        keep = (cnt > 0).astype(np.float64)
        g = keep.sum() if global_batch_size is None else global_batch_size
        return (seq * keep).sum() / g * dp_size
    if mode == "seq-mean-token-sum-norm":
        div = m.shape[-1] if factor is None else factor
        return (x * m).sum() / div
    raise ValueError(mode)


def make_batch(rng, bs, length, positive=False, empty_rows=True):
    """A loss matrix and a right-padded 0/1 response mask (float32): response lengths 1..length,
    and, when empty_rows, some fully masked rows (padding sequences)."""
    if positive:
        x = rng.uniform(0.05, 1.0, size=(bs, length))
    else:
        x = rng.normal(size=(bs, length))
    lengths = rng.integers(1, length + 1, size=bs)
    if empty_rows and bs > 2:
        lengths[rng.random(bs) < 0.15] = 0
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.float32)
    return x.astype(np.float32), mask


def scale_of(x, mask):
    """sum |x * mask|: the size float rounding errors of a masked sum scale with."""
    return float(np.abs(np.asarray(x, np.float64) * np.asarray(mask, np.float64)).sum())
