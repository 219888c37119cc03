"""Independent float64 RLOO reference and batch builder used by the probes (not a probe)."""
# INFRADEV-PROBE-CANARY-3c9e51d0a7b4

import numpy as np


def rloo_reference(rewards, mask, labels):
    """Outcome RLOO written from the definition, in float64 with plain Python grouping.

    score_i = sum_t rewards[i, t]; for a group of n >= 2 members the advantage is
    score_i - mean(score_j for the other n - 1 members j of the group); a response alone in its
    group gets 0. It is broadcast over the response tokens and multiplied by the mask."""
    r = np.asarray(rewards, dtype=np.float64)
    m = np.asarray(mask, dtype=np.float64)
    scores = r.sum(axis=-1)
    members = {}
    for i, lab in enumerate(labels):
        members.setdefault(lab, []).append(i)
    adv = np.zeros(len(scores), dtype=np.float64)
    for idx in members.values():
        n = len(idx)
        if n < 2:
            continue
        s = scores[idx]
        adv[idx] = s - (s.sum() - s) / (n - 1)
    return adv[:, None] * m


def make_batch(rng, sizes, seq_len, label_fn):
    """Groups of the given sizes, shuffled; an outcome reward on the last valid token plus small
    per-token noise on the other valid tokens; response lengths 1..seq_len (so masks have
    padding)."""
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


def group_sizes(rng, n_groups, singletons=0.2, low=2, high=9):
    """RLOO rollouts of n = low..high-1 per prompt, plus a share of singleton groups (prompts
    whose other rollouts were filtered out)."""
    sizes = rng.integers(low, high, size=n_groups)
    sizes[rng.random(n_groups) < singletons] = 1
    return [int(s) for s in sizes]
