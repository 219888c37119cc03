"""State probes: the actor config's `loss_scale_factor` reaches the loss. The engine's PPO
loss (`verl.workers.utils.losses.ppo_loss`) is called the way the training engine calls it, once
per micro-batch with one ActorConfig object, and the policy-loss functions registered in
core_algos read the factor from `config.global_batch_info`. Expected values are computed here."""
# INFRADEV-PROBE-CANARY-7d2a4f19c0e6

import numpy as np
import torch
from infradev_probe import subject, workload_seed

PROBE_SECRET = "PROBE-SECRET-loss-scale-plumbing-91c3"
SEED = workload_seed(PROBE_SECRET)

core_algos = subject.module("verl.trainer.ppo.core_algos")
losses = subject.module("verl.workers.utils.losses")
workers_config = subject.module("verl.workers.config")
# not upstream code: the container the engine hands to the loss
remote_tensordict = subject.module("tensordict")

MODE = "seq-mean-token-sum-norm"
REL = 2e-6  # float32 masked sums of <= a few thousand terms, relative to sum|terms| / divisor


def _actor_config(factor, entropy_coeff=0.0, **extra):
    return workers_config.ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1,
        loss_agg_mode=MODE, loss_scale_factor=factor, entropy_coeff=entropy_coeff, use_kl_loss=False, **extra
    )


def _micro_batch(rng, bs, prompt_len, resp_width):
    """A padded micro-batch as the engine's loss sees it: left-padded prompts, right-padded
    responses of 1..resp_width tokens, the unpadded (flattened) model outputs, advantages.
    log_probs == old_log_probs (ratio 1), so the vanilla PPO token loss is exactly -advantage."""
    p_lens = rng.integers(1, prompt_len + 1, size=bs)
    r_lens = rng.integers(1, resp_width + 1, size=bs)
    r_lens[rng.integers(0, bs)] = resp_width  # the batch is padded to its longest response
    attn = np.zeros((bs, prompt_len + resp_width), np.int64)
    for i in range(bs):
        attn[i, prompt_len - p_lens[i]:prompt_len] = 1
        attn[i, prompt_len:prompt_len + r_lens[i]] = 1
    resp_mask = attn[:, prompt_len:].astype(np.float32)
    seq_lens = p_lens + r_lens
    offsets = np.cumsum(seq_lens)
    total = int(offsets[-1])
    entropy_flat = rng.uniform(0.1, 3.0, size=total).astype(np.float32)
    entropy = np.zeros((bs, resp_width), np.float32)
    for i in range(bs):
        start = offsets[i] - r_lens[i] - 1  # the loss left-shifts model outputs by one token
        entropy[i, :r_lens[i]] = entropy_flat[start:start + r_lens[i]]
    adv = (rng.normal(size=(bs, resp_width)).astype(np.float32)) * resp_mask
    zeros = np.zeros((bs, resp_width), np.float32)
    tensors = {
        "prompts": torch.ones(bs, prompt_len, dtype=torch.int64),
        "responses": torch.ones(bs, resp_width, dtype=torch.int64),
        "attention_mask": torch.from_numpy(attn),
        "response_mask": torch.from_numpy(resp_mask),
        "old_log_probs": torch.from_numpy(zeros),
        "advantages": torch.from_numpy(adv),
    }
    model_output = {"log_probs": torch.zeros(total), "entropy": torch.from_numpy(entropy_flat)}
    return tensors, model_output, adv, entropy, resp_mask


def _tensordict(tensors, bs, n_tokens, n_seqs):
    td = remote_tensordict.TensorDict(tensors, batch_size=[bs])
    td.set_non_tensor("dp_size", 1)
    td.set_non_tensor("batch_num_tokens", n_tokens)
    td.set_non_tensor("global_batch_size", n_seqs)
    return td


def _loss_value(out):
    assert isinstance(out, (tuple, list)) and len(out) == 2, "ppo_loss returns (loss, metrics)"
    loss = out[0]
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0
    return float(loss.double())


def test_engine_ppo_loss_uses_the_configured_factor():
    """Requirement: with an ActorConfig of loss_agg_mode "seq-mean-token-sum-norm" and
    `loss_scale_factor=F`, `verl.workers.utils.losses.ppo_loss(config, model_output, data)`
    aggregates the policy loss and the entropy term with divisor F: for micro-batches padded to
    different response widths (called one after another with the same config object, as the
    engine does) each loss equals (-sum(adv * mask) - entropy_coeff * sum(entropy * mask)) / F
    (ratio 1, so the PPO token loss is -adv), and the micro-batch losses add up to the
    mini-batch's. With `loss_scale_factor=None` (the default) the divisor stays each
    micro-batch's padded response width. Tolerance 2e-6 of sum|terms| / divisor.

    The upstream change ships no test that runs the loss with the new option."""
    rng = np.random.default_rng(SEED)
    factor = int(rng.integers(300, 3000))
    coeff = 0.01
    cfg = _actor_config(factor, entropy_coeff=coeff)
    cfg_none = _actor_config(None, entropy_coeff=coeff)
    assert cfg.loss_scale_factor == factor and cfg_none.loss_scale_factor is None
    for step, width in enumerate([int(rng.integers(20, 60)), int(rng.integers(100, 200)), int(rng.integers(3, 10))]):
        bs = int(rng.integers(2, 7))
        tensors, model_output, adv, ent, mask = _micro_batch(rng, bs, prompt_len=12, resp_width=width)
        m = mask.astype(np.float64)
        num = -(adv.astype(np.float64) * m).sum() - coeff * (ent.astype(np.float64) * m).sum()
        size = (np.abs(adv.astype(np.float64) * m).sum() + coeff * (ent.astype(np.float64) * m).sum())
        data = _tensordict(tensors, bs, n_tokens=int(mask.sum()) * 2, n_seqs=bs * 2)
        got = _loss_value(losses.ppo_loss(cfg, model_output, data))
        assert abs(got - num / factor) <= REL * size / factor + 1e-12, ("factor ignored", step, width)
        data = _tensordict(tensors, bs, n_tokens=int(mask.sum()) * 2, n_seqs=bs * 2)
        got_none = _loss_value(losses.ppo_loss(cfg_none, model_output, data))
        assert abs(got_none - num / width) <= REL * size / width + 1e-12, ("None must keep the padded width", step)


def test_policy_loss_functions_read_the_factor_from_global_batch_info():
    """Requirement: the policy-loss functions registered in core_algos aggregate with the
    factor they find in `config.global_batch_info["loss_scale_factor"]` (where the engine's loss
    puts the actor config's value): for "vanilla" (random ratios, clipping active) and
    "gpg", the loss with factor F times F equals the loss with the key absent times the padded
    width L (1e-5 relative + 2e-6 of the terms), for several F and L.

    No upstream test passes the factor through a config."""
    rng = np.random.default_rng(SEED + 1)
    for loss_mode in ("vanilla", "gpg"):
        fn = core_algos.get_policy_loss_fn(loss_mode)
        for case in range(3):
            bs, width = int(rng.integers(2, 9)), int(rng.integers(5, 150))
            lengths = rng.integers(1, width + 1, size=bs)
            mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float32)
            old = rng.normal(-2.0, 0.3, size=(bs, width)).astype(np.float32)
            new = (old + rng.normal(0, 0.3, size=(bs, width))).astype(np.float32)
            adv = rng.normal(size=(bs, width)).astype(np.float32)
            kwargs = dict(old_log_prob=torch.from_numpy(old), log_prob=torch.from_numpy(new),
                          advantages=torch.from_numpy(adv), response_mask=torch.from_numpy(mask),
                          loss_agg_mode=MODE)
            factor = int(rng.integers(2, 4000))
            cfg_plain = _actor_config(None)
            plain = float(torch.as_tensor(fn(config=cfg_plain, **kwargs)[0]).double())
            # the key as the engine's loss leaves it (the dict crosses by value: set at construction)
            cfg = _actor_config(None, global_batch_info={"loss_scale_factor": factor})
            scaled = float(torch.as_tensor(fn(config=cfg, **kwargs)[0]).double())
            assert abs(scaled * factor - plain * width) <= 1e-5 * abs(plain * width) + 2e-6 * abs(plain) * width + 1e-9, (
                loss_mode, case, factor, width)


def test_actor_config_field():
    """Requirement: `ActorConfig` (verl.workers.config) has a field `loss_scale_factor`,
    default None, that keeps an integer given at construction, alongside loss_agg_mode
    "seq-mean-token-sum-norm"; `agg_loss` takes a keyword `loss_scale_factor` defaulting to None.

    The upstream tests check the YAML default only, not the dataclass or the function."""
    cfg = workers_config.ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    assert cfg.loss_scale_factor is None
    assert cfg.get("loss_scale_factor", "absent") is None
    cfg = _actor_config(4096)
    assert cfg.loss_scale_factor == 4096 and cfg.loss_agg_mode == MODE
    params = subject.signature(core_algos.agg_loss).parameters
    assert "loss_scale_factor" in params and params["loss_scale_factor"].default is None
    assert list(params)[:3] == ["loss_mat", "loss_mask", "loss_agg_mode"]
