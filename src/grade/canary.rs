//! Canary tests planted in the official phase (pure).
//!
//! The official tests run in-process with the submission, so their results are evidence,
//! not proof: code under test can rewrite pytest's reports. Each grade plants a file of two
//! tests with per-run random names and numbers beside the first official test file: one
//! that must pass and one that must fail. A report hook that turns failures into passes
//! (or the reverse) contradicts a canary, and the grade is `tampered`; so do results without
//! the canaries (which run first) and a test reported twice with different outcomes (frames
//! forged beside the plugin's).
//!
//! The canary file imports what the first official test module imports (each import in its
//! own `try`, so an import the submission broke does not stop the canaries): code that flips
//! results only in modules that import something (a module shadowing a dependency, a hook on
//! an import) flips the canaries too.
//!
//! What canaries cannot catch: code that rewrites only the official tests' reports inside
//! the process and runs everything else honestly. The official phase is evidence; the probes,
//! which run where the submission cannot reach, decide.

use crate::grade::results::{PhaseResults, SandboxEnd};
use crate::grading::{Kill, Outcome};

/// Words upstream test names are made of, so a canary's name gives nothing away.
pub const WORDS: &[&str] = &[
    "cache", "block", "shape", "dtype", "config", "batch", "state", "merge", "rank", "step",
    "grad", "seq", "mask", "index", "window", "buffer", "layout", "offset", "group", "token",
    "shard", "bucket", "stride", "chunk", "queue", "limit", "reduce", "scatter", "prefix", "pool",
];

/// One run's canaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canaries {
    /// The file's path relative to the repository.
    pub file: String,
    pub source: String,
    pub must_pass: String,
    pub must_fail: String,
}

impl Canaries {
    /// Canaries for one run, from 128 random bits, beside `first_test_file`, importing what
    /// `first_module` (that file's text) imports at its top level.
    pub fn new(seed: u128, first_test_file: &str, first_module: &str) -> Canaries {
        let mut bits = seed;
        let mut next = |n: usize| {
            let v = (bits % n as u128) as usize;
            bits /= n as u128;
            bits ^= seed.rotate_left(17);
            v
        };
        let mut word = || WORDS[next(WORDS.len())];
        let file_name = format!("test_{}_{}.py", word(), word());
        let must_pass = format!("test_{}_{}_{}", word(), word(), word());
        let mut must_fail = format!("test_{}_{}_{}", word(), word(), word());
        if must_fail == must_pass {
            must_fail.push_str("_again");
        }
        let n = 1000 + next(100_000) as u64;
        let wrong = n * (n - 1) / 2 + 1 + next(997) as u64;
        let dir = first_test_file.rsplit_once('/').map_or("", |(d, _)| d);
        let file = if dir.is_empty() {
            file_name
        } else {
            format!("{dir}/{file_name}")
        };
        let source = format!(
            "{imports}def {must_pass}():\n    assert sum(range({n})) == {right}\n\n\ndef {must_fail}():\n    assert sum(range({n})) == {wrong}\n",
            imports = guarded_imports(first_module),
            right = n * (n - 1) / 2,
        );
        Canaries {
            file,
            source,
            must_pass,
            must_fail,
        }
    }

    /// Why the results contradict the canaries, if they do. Results that name neither (the
    /// phase died first, or never ran) say nothing either way.
    pub fn check(&self, results: &PhaseResults, end: &SandboxEnd) -> Option<String> {
        if results.conflict().is_some() {
            return Some("a test was reported twice, with different outcomes".to_owned());
        }
        let of = |name: &str| results.find_result(&format!("::{name}"));
        let (pass, fail) = (of(&self.must_pass), of(&self.must_fail));
        let killed = matches!(
            end.kill,
            Some(Kill::TimedOut | Kill::OutOfMemory | Kill::Crashed)
        );
        if pass.is_none() && fail.is_none() {
            // The planted tests run first: results without them were not written by the run.
            return (results.n_results() > 0 && !killed).then(|| {
                "tests were reported but the planted ones, which run first, were not".to_owned()
            });
        }
        use Outcome::{Failed, Passed, Skipped};
        match (pass, fail) {
            // The repository's own configuration skips everything there: no evidence.
            (Some(Skipped), Some(Skipped)) => None,
            (_, Some(Passed)) | (Some(Passed), Some(Skipped)) => {
                Some("a test that must fail was reported as not failing".to_owned())
            }
            (Some(Failed), _) | (Some(Skipped), Some(Failed)) => {
                Some("a test that must pass was reported as not passing".to_owned())
            }
            (None, _) | (_, None) if !killed => {
                Some("one of two planted tests was reported and the other was not".to_owned())
            }
            _ => None,
        }
    }
}

/// The top-level `import` and `from … import` statements of a module, each wrapped in its own
/// `try` (`from __future__` ones left out: they must open a file).
fn guarded_imports(module: &str) -> String {
    let mut out = String::new();
    let mut lines = module.lines();
    while let Some(line) = lines.next() {
        if !(line.starts_with("import ") || line.starts_with("from "))
            || line.contains("__future__")
        {
            continue;
        }
        let mut statement = line.trim_end().to_owned();
        // A parenthesised or continued import goes on until its parenthesis closes.
        let open = |s: &str| s.matches('(').count() > s.matches(')').count() || s.ends_with('\\');
        while open(&statement) {
            let Some(next) = lines.next() else { break };
            statement.push('\n');
            statement.push_str(next.trim_end());
        }
        let indented = statement.replace('\n', "\n    ");
        out.push_str(&format!(
            "try:\n    {indented}\nexcept BaseException:\n    pass\n"
        ));
    }
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(lines: &[(&str, &str)]) -> PhaseResults {
        let text: String = lines
            .iter()
            .map(|(id, outcome)| {
                format!("{{\"event\":\"result\",\"nodeid\":\"{id}\",\"outcome\":\"{outcome}\"}}\n")
            })
            .collect();
        PhaseResults::parse(text.as_bytes())
    }

    #[test]
    fn canaries_differ_per_run_and_sit_beside_the_official_tests() {
        let a = Canaries::new(1, "tests/v1/test_x.py", "");
        let b = Canaries::new(u128::MAX / 3, "tests/v1/test_x.py", "");
        assert!(a.file.starts_with("tests/v1/test_") && a.file.ends_with(".py"));
        assert_ne!((&a.must_pass, &a.source), (&b.must_pass, &b.source));
        assert_ne!(a.must_pass, a.must_fail);
        assert!(a.source.contains(&format!("def {}():", a.must_fail)));
        assert!(!a.source.to_lowercase().contains("canary"));
        assert!(!Canaries::new(7, "test_top.py", "").file.contains('/'));
    }

    #[test]
    fn canaries_import_what_the_official_module_imports() {
        let module = "from __future__ import annotations\nimport os\nimport torch.nn as nn\n\
                      from pkg.mod import (\n    a,\n    b,\n)\n\ndef test_x():\n    import json\n";
        let c = Canaries::new(5, "tests/test_x.py", module);
        let expected = "try:\n    import os\nexcept BaseException:\n    pass\n\
                        try:\n    import torch.nn as nn\nexcept BaseException:\n    pass\n\
                        try:\n    from pkg.mod import (\n        a,\n        b,\n    )\nexcept BaseException:\n    pass\n\n\n";
        assert!(c.source.starts_with(expected), "{}", c.source);
        assert!(!c.source.contains("__future__") && !c.source.contains("json"));
    }

    #[test]
    fn a_contradicted_canary_is_tampering() {
        let c = Canaries::new(42, "tests/test_x.py", "");
        let id = |n: &str| format!("{}::{n}", c.file);
        let ok = SandboxEnd::default();
        let honest = results(&[(&id(&c.must_pass), "passed"), (&id(&c.must_fail), "failed")]);
        assert_eq!(c.check(&honest, &ok), None);
        let all_pass = results(&[(&id(&c.must_pass), "passed"), (&id(&c.must_fail), "passed")]);
        assert!(c.check(&all_pass, &ok).unwrap().contains("must fail"));
        let skipped = results(&[
            (&id(&c.must_pass), "passed"),
            (&id(&c.must_fail), "skipped"),
        ]);
        assert!(c.check(&skipped, &ok).is_some());
        let inverted = results(&[(&id(&c.must_pass), "failed"), (&id(&c.must_fail), "failed")]);
        assert!(c.check(&inverted, &ok).unwrap().contains("must pass"));
        let dropped = results(&[(&id(&c.must_pass), "passed")]);
        assert!(c.check(&dropped, &ok).is_some());
        let killed = SandboxEnd {
            kill: Some(Kill::TimedOut),
            ..Default::default()
        };
        assert_eq!(
            c.check(&dropped, &killed),
            None,
            "a kill can end a phase between the two"
        );
        assert_eq!(c.check(&results(&[]), &ok), None);
        let forged_then_exit = results(&[("tests/test_x.py::test_official", "passed")]);
        assert!(c.check(&forged_then_exit, &ok).unwrap().contains("planted"));
        assert_eq!(c.check(&forged_then_exit, &killed), None);
        let reported_twice = results(&[
            ("tests/test_x.py::test_official", "passed"),
            (&id(&c.must_pass), "passed"),
            (&id(&c.must_fail), "failed"),
            ("tests/test_x.py::test_official", "failed"),
        ]);
        assert!(c.check(&reported_twice, &ok).unwrap().contains("twice"));
        let all_skipped = results(&[
            (&id(&c.must_pass), "skipped"),
            (&id(&c.must_fail), "skipped"),
        ]);
        assert_eq!(c.check(&all_skipped, &ok), None);
    }
}
