//! What an agent's own tests should check, per failure category: text we compose, general and
//! per repository. Nothing here comes from a task or a probe.

use crate::grading::Category;

/// The categories an agent can fail in, in the order the advice is given when no grade says
/// otherwise: the ones official tests leave unchecked first.
pub const ORDER: [Category; 7] = [
    Category::State,
    Category::Memory,
    Category::Time,
    Category::Traffic,
    Category::Numerical,
    Category::Structural,
    Category::Build,
];

/// A short title of the category for headings.
pub fn title(c: Category) -> &'static str {
    match c {
        Category::State => "State across calls, steps, failures and ranks",
        Category::Memory => "Memory",
        Category::Time => "Time",
        Category::Traffic => "Communication traffic",
        Category::Numerical => "Numerics",
        Category::Structural => "Interfaces",
        Category::Build => "Build and import",
        Category::Infra => "Infrastructure",
    }
}

/// What a failure of the category means in a grade.
pub fn meaning(c: Category) -> &'static str {
    match c {
        Category::State => "wrong state across calls, steps, aborts, failures or ranks",
        Category::Memory => "killed for memory, or over a peak-memory budget",
        Category::Time => "timed out, or over a wall-time budget",
        Category::Traffic => "over a collective-communication budget in calls or bytes",
        Category::Numerical => "numbers off an independent reference beyond tolerance",
        Category::Structural => "a missing or renamed interface, or a wrong signature",
        Category::Build => "the change does not apply, does not import, or does not parse",
        Category::Infra => "the grader's own fault, never the submission's",
    }
}

/// What to test, whatever the repository.
pub fn general(c: Category) -> &'static str {
    match c {
        Category::State => {
            "Drive long, seeded sequences of the real call pattern (allocate, step, free; \
             save, resume; many training or scheduler steps) and check the invariants after \
             every step: counters and reference counts balance, every resource taken is \
             returned exactly once, caches forget what they evicted, and freeing everything \
             restores the initial state. Make an operation fail halfway (out of capacity, an \
             exception, an abort) and assert that nothing changed. Check that returned \
             containers are the caller's own copies and that any sequence type the interface \
             allows (tuple as well as list) works. For distributed code, run two or more \
             ranks and compare every rank's state, not only rank 0's."
        }
        Category::Memory => {
            "Measure peak memory (`tracemalloc`, `torch.cuda.max_memory_allocated`, the \
             process's RSS) for a small and a ten times larger input, and check that it \
             grows as the stated bound allows. Serve many requests or steps, free them, and \
             check that memory returns to its baseline: no per-request leftovers, no cache \
             keyed by something that never repeats, no history kept for debugging. Avoid \
             temporaries the size of the whole pool, or quadratic in the batch. The grader \
             runs under the task's memory limit."
        }
        Category::Time => {
            "Time each operation against a baseline measured in the same test (the same call \
             on a ten times larger pool or batch, or a simple reference) rather than against \
             absolute numbers, and check that the cost follows the work asked for, not the \
             size of the pool or the length of the history. Look for linear scans of the \
             pool, sorting on every call, Python loops over tensor elements where one \
             vectorised operation exists, and host-device synchronisation (`.item()`, \
             `.tolist()`, `.cpu()`) in hot paths. Every test has a hard time limit."
        }
        Category::Traffic => {
            "Count collective calls and bytes in a test with two or more ranks (wrap \
             `torch.distributed` collectives and point-to-point calls in a counter; the gloo \
             backend works on CPU): no duplicated collective, one collective per bucket or \
             batch rather than per element, layer or step, no gather of a full tensor where \
             a shard suffices, and every rank issues the same collectives in the same order \
             (otherwise the group hangs)."
        }
        Category::Numerical => {
            "Compare with an independent reference written the simplest way (a plain loop, \
             in float64) on seeded random inputs, including the edge cases: masked or padded \
             positions, empty and single-element groups, ties, non-contiguous tensors, and \
             every dtype and device the contract names. Justify each tolerance; check shapes \
             and dtypes of the outputs as well as their values."
        }
        Category::Structural => {
            "Import every name from the module path the prompt gives, call every function \
             and constructor with keyword arguments using the stated parameter names, check \
             return types, and check that the stated exception types are raised for the \
             stated bad inputs. Keep existing public names, attributes and defaults working."
        }
        Category::Build => {
            "Check that the change applies to the task's base commit and that every changed \
             module imports in a fresh interpreter with only the task's pinned packages and \
             no network. Add no new third-party dependency. Changes to the official test \
             files, `conftest.py`, pytest configuration, `.pth` or `sitecustomize` files are \
             undone before grading: do not rely on them."
        }
        Category::Infra => "",
    }
}

/// A hint specific to a repository, for the repositories we have tasks of.
pub fn for_repository(repository: &str, c: Category) -> Option<&'static str> {
    let name = repository.rsplit('/').next().unwrap_or(repository);
    let name = name.to_ascii_lowercase();
    let hint = if name.contains("megatron") {
        match c {
            Category::State => {
                "replay the step sequence training and dynamic inference really use \
                 (microbatches, iterations, chunked prefill, requests that finish and return) \
                 and check bookkeeping such as block ref counts, parent links and batch-size \
                 schedules after every step, on every rank"
            }
            Category::Memory => {
                "keep bookkeeping tensors on the device the prompt names and sized once; \
                 nothing should grow per request or per iteration"
            }
            Category::Time => {
                "per-step host work must not scale with the pool or the number of cached \
                 blocks; avoid per-element Python loops over tensors"
            }
            Category::Traffic => {
                "count collectives per step in the tensor-, pipeline- and data-parallel groups \
                 on at least two ranks"
            }
            Category::Numerical => "compare with the unparallelised computation in float64",
            Category::Structural => {
                "keep constructor signatures, config fields and module paths of `megatron.core` \
                 exactly as stated; code meant for CPU must import without optional CUDA \
                 extensions"
            }
            Category::Build => {
                "`megatron.core` must import on CPU without Apex or Transformer Engine"
            }
            Category::Infra => return None,
        }
    } else if name == "vllm" {
        match c {
            Category::State => {
                "follow blocks and requests across scheduler steps, preemption and aborted \
                 requests: every block is freed exactly once, LRU order follows the last \
                 touch, and a failed call changes nothing"
            }
            Category::Memory => {
                "pools are sized once; no per-request state may outlive the request"
            }
            Category::Time => {
                "the cost of a step follows the blocks it touches, not the pool size: no full \
                 scans, no sorting per call"
            }
            Category::Traffic => {
                "KV transfers move exactly the blocks asked for, batched, and nothing twice"
            }
            Category::Numerical => "KV contents are copied bit for bit between media and dtypes",
            Category::Structural => {
                "abstract base classes, their method names and signatures, and factory or \
                 registry names are part of the interface"
            }
            Category::Build => {
                "Python-only modules must import without vLLM's compiled kernels (`vllm._C`)"
            }
            Category::Infra => return None,
        }
    } else if name == "verl" {
        match c {
            Category::State => {
                "check state across training steps and restarts: checkpoint rotation and \
                 resumption, what stays on disk when a save fails halfway, and what each rank \
                 writes"
            }
            Category::Memory => {
                "vectorised code must not materialise batch-by-batch or per-sample Python \
                 objects on large batches"
            }
            Category::Time => {
                "vectorised estimators must beat the loop reference at ten times the batch \
                 size"
            }
            Category::Traffic => {
                "ranks agree on what is saved and loaded; only the ranks that should write \
                 shared files do"
            }
            Category::Numerical => {
                "advantage and return estimators with response and observation masks, \
                 per-group normalisation and epsilons: compare with a float64 loop, masked \
                 tokens included"
            }
            Category::Structural => {
                "registered estimator names, config keys and function signatures exactly as \
                 stated"
            }
            Category::Build => "imports with the pinned torch and without optional dependencies",
            Category::Infra => return None,
        }
    } else {
        return None;
    };
    Some(hint)
}

/// Every text of this module, one after another: text we wrote, public by construction.
pub fn composed() -> String {
    let mut all = String::new();
    for c in ORDER {
        for text in [title(c), meaning(c), general(c)] {
            all.push_str(text);
            all.push('\n');
        }
        for repo in ["NVIDIA/Megatron-LM", "vllm-project/vllm", "volcengine/verl"] {
            all.push_str(for_repository(repo, c).unwrap_or_default());
            all.push('\n');
        }
    }
    all
}
