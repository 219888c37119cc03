"""Independent float64 GRPO reference used by the numerical probes (not a probe itself)."""
# INFRADEV-PROBE-CANARY-90e2a2fce621

import numpy as np


def grpo_reference(rewards, mask, labels, epsilon=1e-6, norm=True):
    """Outcome GRPO written from the definition, in float64 with plain Python grouping.

    score_i = sum_t rewards[i, t]; for a group with n >= 2 members: mean and Bessel (n - 1)
    sample std of its scores; a singleton group uses mean 0 and std 1. The advantage
    (score_i - mean) / (std + epsilon) (or score_i - mean without normalisation) is broadcast
    over the response tokens and multiplied by the mask."""
    r = np.asarray(rewards, dtype=np.float64)
    m = np.asarray(mask, dtype=np.float64)
    scores = r.sum(axis=-1)
    members = {}
    for i, lab in enumerate(labels):
        members.setdefault(lab, []).append(i)
    scalars = np.empty(len(scores), dtype=np.float64)
    for idx in members.values():
        s = scores[idx]
        if len(idx) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = float(np.mean(s))
            std = float(np.std(s, ddof=1))
        scalars[idx] = (s - mean) / (std + epsilon) if norm else (s - mean)
    return scalars[:, None] * m


def make_batch(rng, sizes, seq_len, label_fn):
    """Groups of the given sizes, shuffled; rewards only on the last valid token (outcome
    reward, as the reward manager writes it) plus small per-token noise on other valid tokens."""
    labels = []
    for g, n in enumerate(sizes):
        labels += [label_fn(g)] * n
    perm = rng.permutation(len(labels))
    labels = [labels[p] for p in perm]
    bs = len(labels)
    lengths = rng.integers(1, seq_len + 1, size=bs)
    mask = (np.arange(seq_len)[None, :] < lengths[:, None]).astype(np.float32)
    rewards = np.zeros((bs, seq_len), dtype=np.float32)
    rewards[np.arange(bs), lengths - 1] = rng.normal(size=bs).astype(np.float32)
    rewards += (rng.normal(scale=0.05, size=(bs, seq_len)).astype(np.float32)) * mask
    return rewards, mask, labels
