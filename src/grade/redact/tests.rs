use super::*;
use crate::grading::{Outcome, Phase};

const PROBE: &str = r#"import pytest
import torch

CANARY = "INFRADEV-PROBE-CANARY-91c2"  # PROBE-SECRET-checkpoint-4411

def test_resume_keeps_moments():
    opt = build(lr=3e-4)
    saved = opt.state_dict()
    try:
        restored = reload(saved)
    except Exception:
        pass
    assert torch.equal(restored["exp_avg"], saved["exp_avg"]), f"moment mismatch after {steps} resumed steps"
    return
"#;

const OTHER: &str = "def test_traffic():\n    assert count_allreduce(model) <= 2, 'too many all-reduce calls: %d' % n\n";

fn redactor() -> Redactor {
    Redactor::from_sources(&[
        ("test_resume.py".into(), PROBE.into()),
        ("test_traffic.py".into(), OTHER.into()),
    ])
}

#[test]
#[rustfmt::skip]
fn redaction_table() {
    let repr_of_probe = format!("AssertionError: source was {PROBE:?}");
    let joined = PROBE.split_whitespace().collect::<Vec<_>>().join(" ");
    let squashed: String = PROBE.chars().filter(|c| !c.is_whitespace()).collect();
    let json = serde_json::to_string(PROBE).unwrap();
    let double_repr = format!("{:?}", format!("{PROBE:?}"));
    let rows: Vec<(&str, String, &str)> = vec![
        ("innocent text passes", "assert 3 == 4\n +  where 3 = f()".into(), "assert 3 == 4\n +  where 3 = f()"),
        ("generic lines do not count", "import pytest\nexcept Exception:\nreturn".into(), "import pytest\nexcept Exception:\nreturn"),
        ("a source line, re-indented", "E       saved = opt.state_dict()\nE   next".into(),
         "[redacted: matches hidden probe source]\nE   next"),
        ("a def line is not generic", "in def test_resume_keeps_moments(): boom".into(), "[redacted: matches hidden probe source]"),
        ("only the matching line goes", "first\n    opt = build(lr=3e-4)  # here\nlast".into(),
         "first\n[redacted: matches hidden probe source]\nlast"),
        ("repr of the whole file", repr_of_probe, "[redacted: matches hidden probe source]"),
        ("joined with spaces", joined, "[redacted: matches hidden probe source]"),
        ("whitespace squashed", squashed, "[redacted: matches hidden probe source]"),
        ("json-escaped", format!("payload {json}"), "[redacted: matches hidden probe source]"),
        ("repr of a repr", double_repr, "[redacted: matches hidden probe source]"),
        ("canary token inside a line", "got value=INFRADEV-PROBE-CANARY-91c2-extra, ok".into(), "got [redacted], ok"),
        ("secret token, quoted", "key 'PROBE-SECRET-checkpoint-4411' missing".into(), "key '[redacted]' missing"),
        ("unknown canary still masked", "x PROBE-SECRET-zzz/y.z y".into(), "x [redacted] y"),
        ("f-string static piece", "AssertionError: moment mismatch after 3 resumed steps".into(),
         "AssertionError: [redacted] 3 [redacted]"),
        ("%-format static piece", "too many all-reduce calls: 5".into(), "[redacted] 5"),
        ("literal escaped in repr", r"'too many all-reduce calls: %d'".into(), "'[redacted]'"),
        ("short literals stay", "exp_avg differs".into(), "exp_avg differs"),
    ];
    let r = redactor();
    for (name, input, want) in rows {
        assert_eq!(r.redact(&input), want, "row {name:?}");
    }
}

#[test]
fn no_sources_only_canaries() {
    let r = Redactor::from_sources(&[]);
    assert_eq!(r.redact("a\nPROBE-SECRET-1 b\n"), "a\n[redacted] b\n");
}

#[test]
fn evidence_message_and_exception() {
    let mut e = TestEvidence {
        id: "test_resume.py::test_resume_keeps_moments".into(),
        phase: Phase::Probes,
        outcome: Outcome::Failed,
        exception: Some("AssertionError".into()),
        message: Some(format!("dump: {PROBE:?}\nassert False")),
        budget: None,
        kill: None,
        declared: None,
        during_collection: false,
        attempts: Vec::new(),
    };
    redactor().redact_evidence(&mut e);
    assert_eq!(
        e.message.as_deref(),
        Some("[redacted: matches hidden probe source]\nassert False")
    );
    assert_eq!(e.exception.as_deref(), Some("AssertionError"));
}

#[test]
fn literals_are_found_by_the_lexer() {
    let src = "x = 'a' # it's \"not\" one\ny = rb'\\d+' + f\"{a}b\" + '''multi\nline''' + \"es\\\"c\\n\"\n";
    let found = python::string_literals(src);
    assert_eq!(found, ["a", "\\d+", "{a}b", "multi\nline", "es\"c\n"]);
}

#[test]
fn what_the_prompt_says_stays_readable() {
    // The prompt states the interface and the failure it must report; the probe repeats it.
    let prompt = "Resuming must keep the Adam moments; on a mismatch raise \
                  `moment mismatch after N resumed steps`.\n";
    let public = redactor().with_public(prompt);
    let message = "AssertionError: moment mismatch after 3 resumed steps";
    assert!(
        redactor().redact(message).contains(MASK),
        "hidden without the prompt"
    );
    assert_eq!(
        public.redact(message),
        message,
        "the prompt already says it"
    );
    // What the prompt does not say is still hidden, and canaries always are.
    let other = "too many all-reduce calls: 7";
    assert_eq!(public.redact(other), redactor().redact(other));
    assert_ne!(public.redact(other), other);
    let canary = redactor().with_public("INFRADEV-PROBE-CANARY-91c2");
    assert!(!canary.redact("INFRADEV-PROBE-CANARY-91c2").contains("91c2"));
}
