"""What the manager probes share (not a probe itself): a fresh event loop and fresh class-level
limiters per test, batches in the DataProto layout the manager reads, and the broker's measure
of one call's subject time. The upstream module paths are string constants here, where
`infradev tasks lint` reads them."""
# INFRADEV-PROBE-CANARY-7f3b2c9e4d10

import json

import torch
from infradev_probe import subject

import _subject_code

LIMITED = "verl.experimental.reward.reward_loop.limited"
VERL = "verl"

limited = subject.module(LIMITED)
verl = subject.module(VERL)
_omegaconf = subject.module("omegaconf")
_builtins = subject.module("builtins")


def import_now():
    """Imports verl and the manager's module at collection, outside every test, so that no
    test's time includes the import (the tests meet any error again and report it)."""
    for probe in (lambda: subject.describe(limited.AsyncTokenBucket), lambda: subject.describe(verl.DataProto)):
        try:
            probe()
        except Exception:
            pass


class Session:
    """One test's subject-side setup: the instrumented scores module, a new event loop set as
    the current one, and the manager's class-level limiters re-armed."""

    def __init__(self, manager=True):
        self.scores = _subject_code.install()
        self.scores.reset()
        self.loop = self.scores.new_loop()
        self.uses_manager = manager
        if manager:
            limited.RateLimitedRewardLoopManager._class_initialized = False

    def close(self):
        try:
            self.scores.close_loop(self.loop)
        finally:
            if self.uses_manager:
                limited.RateLimitedRewardLoopManager._class_initialized = False

    def manager(self, reward_model, compute_score="score"):
        config = _omegaconf.OmegaConf.create({"reward_model": dict(reward_model)})
        return limited.RateLimitedRewardLoopManager(
            config=config,
            tokenizer=self.scores.Tokenizer(),
            compute_score=getattr(self.scores, compute_score),
        )

    def state(self):
        return self.scores.REC.state()


def batch(specs, rng, length=6, special=False, tensors=None, non_tensors=None, meta_info=None):
    """A DataProto of len(specs) responses: ids 1000.., a right-padded attention mask of
    1..length valid tokens, ground_truth = the JSON spec (what the instrumented score reads:
    its delay, its score, its mode) plus the decoded valid response it must receive. With
    `special`, about a third of the ids are special tokens (below 100), which the decoded text
    leaves out. `tensors`, `non_tensors` and `meta_info` add columns and meta info.
    Returns the DataProto handle and the valid lengths."""
    n = len(specs)
    lengths = [int(v) for v in rng.integers(1, length + 1, size=n)]
    responses = torch.from_numpy(rng.integers(1000, 5000, size=(n, length))).long()
    if special:
        marks = torch.from_numpy(rng.random((n, length)) < 0.35)
        responses = torch.where(marks, torch.from_numpy(rng.integers(1, 100, size=(n, length))), responses)
    mask = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()
    gts = []
    for i, spec in enumerate(specs):
        text = " ".join(str(int(t)) for t in responses[i, : lengths[i]] if int(t) >= 100)
        gts.append({"ground_truth": json.dumps(dict(spec, text=text))})
    data = verl.DataProto.from_dict(
        tensors={"responses": responses, "attention_mask": mask, **(tensors or {})},
        non_tensors={"data_source": ["probe"] * n, "reward_model": gts, **(non_tensors or {})},
        meta_info=meta_info,
    )
    return data, lengths


def score_all(manager, data):
    """manager(data, return_dict=True) as plain values: the reward tensor, the extra-info dict
    of lists, and the broker's subject time of the call in seconds."""
    out = subject.keep(manager, data, return_dict=True)
    ns = subject.last_subject_ns
    assert isinstance(ns, int) and ns >= 0, "the broker did not report the call's subject time"
    rewards = out["reward_tensor"]
    extra = _builtins.dict(out["reward_extra_info"])
    return rewards, {k: list(v) for k, v in extra.items()}, ns / 1e9


def expected_rewards(specs, lengths, length=6):
    r = torch.zeros(len(specs), length)
    for i, (spec, n) in enumerate(zip(specs, lengths)):
        r[i, n - 1] = spec.get("expect", spec.get("score", 0.0))
    return r
