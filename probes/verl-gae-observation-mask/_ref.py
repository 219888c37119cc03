"""Independent float64 GAE reference used by the numerical probes (not a probe itself)."""
# INFRADEV-PROBE-CANARY-c1b52a57e24d

import numpy as np


def gae_reference(rewards, values, mask, gamma, lam):
    """GAE written from the definition, in float64, on each row with its mask-0 tokens deleted.

    For one row, let k_0 < k_1 < ... < k_{n-1} be the positions with mask 1 (the tokens the
    policy generated). On the compressed sequence r_j = rewards[k_j], v_j = values[k_j]:
    delta_j = r_j + gamma * v_{j+1} - v_j (v_n = 0: no bootstrap past the last generated
    token), A_j = delta_j + gamma * lam * A_{j+1} (A_n = 0), R_j = A_j + v_j.
    Observation tokens and padding are simply not part of the chain.

    Returns (raw_advantages, returns, whitened_advantages), arrays of the input's shape; entries
    at mask-0 positions are NaN (unspecified). Whitening is over all mask-1 tokens of the batch:
    (A - mean) / sqrt(var + 1e-8) with the Bessel-corrected (n - 1) variance."""
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    m = np.asarray(mask, dtype=np.float64) > 0.5
    raw = np.full(r.shape, np.nan)
    ret = np.full(r.shape, np.nan)
    for i in range(r.shape[0]):
        idx = np.nonzero(m[i])[0]
        a_next, v_next = 0.0, 0.0
        for k in idx[::-1]:
            delta = r[i, k] + gamma * v_next - v[i, k]
            a_next = delta + gamma * lam * a_next
            v_next = v[i, k]
            raw[i, k] = a_next
            ret[i, k] = a_next + v[i, k]
    sel = raw[m]
    mean = sel.mean()
    var = sel.var(ddof=1)
    white = (raw - mean) / np.sqrt(var + 1e-8)
    return raw, ret, white


def make_multi_turn_batch(rng, bs, length, max_turns=4):
    """Masks shaped like a multi-turn tool-use rollout: alternating assistant turns (mask 1) and
    tool observations (mask 0) of random lengths, then right padding (mask 0). Every row starts
    with an assistant turn and has >= 2 generated tokens. Rewards: an outcome reward on the last
    generated token plus small per-token shaping (e.g. a KL penalty) on generated tokens, and
    garbage on mask-0 positions (nothing guarantees they are zero). Values: random everywhere,
    also on observation and padding positions (the critic outputs something for every token)."""
    mask = np.zeros((bs, length), dtype=np.float32)
    for i in range(bs):
        pos = 0
        turns = int(rng.integers(1, max_turns + 1))
        for t in range(turns):
            n_gen = int(rng.integers(2, 9))
            mask[i, pos : pos + n_gen] = 1.0
            pos += n_gen
            if t < turns - 1:
                pos += int(rng.integers(1, 9))  # tool observation
            if pos >= length - 10:
                break
        mask[i, min(pos, length) :] = 0.0
    rewards = (rng.standard_normal((bs, length)) * 0.05).astype(np.float32) * mask
    for i in range(bs):
        last = np.nonzero(mask[i])[0][-1]
        rewards[i, last] += float(rng.choice([0.0, 1.0]))
    rewards += (rng.standard_normal((bs, length)) * 3.0).astype(np.float32) * (1.0 - mask)
    values = (rng.standard_normal((bs, length)) * 2.0).astype(np.float32)
    return rewards, values, mask
