use super::*;
use Outcome::{Failed, NotRun, Passed};

fn outcomes(list: &[(&str, Outcome)]) -> Outcomes {
    list.iter().map(|(id, o)| ((*id).to_owned(), *o)).collect()
}

fn candidate(id: &str, kind: Kind, operator: &str, line: u32) -> Candidate {
    Candidate {
        id: id.into(),
        kind,
        operator: operator.into(),
        path: "pkg/mod.py".into(),
        line,
        col: 4,
        original: "a < b".into(),
        replacement: "a <= b".into(),
        source: String::new(),
        bytecode_equal: false,
    }
}

#[test]
fn selection_caps_each_operator_by_id_and_keeps_file_order() {
    let all = vec![
        candidate("c3", Kind::Mutant, "compare_boundary", 30),
        candidate("a1", Kind::Mutant, "compare_boundary", 10),
        candidate("b2", Kind::Mutant, "compare_boundary", 20),
        candidate("z9", Kind::Mutant, "statement_dropped", 5),
        candidate("v1", Kind::Variant, "local_renamed", 1),
        candidate("v0", Kind::Variant, "local_renamed", 2),
    ];
    let table: &[(usize, &[&str])] = &[
        (0, &[]),
        (1, &["z9", "a1", "v0"]),
        (2, &["z9", "a1", "b2", "v1", "v0"]),
        (9, &["z9", "a1", "b2", "c3", "v1", "v0"]),
    ];
    for (cap, want) in table {
        let got: Vec<&str> = select(&all, *cap).iter().map(|c| c.id.as_str()).collect();
        assert_eq!(&got, want, "cap {cap}");
    }
    let chosen = select(&all, 1);
    let counts = operator_counts(&all, &chosen);
    let row = |op: &str| counts.iter().find(|c| c.operator == op).unwrap();
    assert_eq!(
        (
            row("compare_boundary").generated,
            row("compare_boundary").graded
        ),
        (3, 1)
    );
    assert_eq!(
        (row("local_renamed").kind, row("local_renamed").graded),
        (Kind::Variant, 1)
    );
}

#[test]
fn mutants_are_judged_against_the_reference_on_every_seed() {
    let ref_official = outcomes(&[("t::a", Passed), ("t::b", Passed)]);
    let ref_probes = vec![
        (0, outcomes(&[("p::x", Passed), ("p::y", Passed)])),
        (1, outcomes(&[("p::x", Passed), ("p::y", Passed)])),
    ];
    let pass = outcomes(&[("p::x", Passed), ("p::y", Passed)]);
    let fail_y = outcomes(&[("p::x", Passed), ("p::y", Failed)]);
    let reviewed = Evidence::Reviewed("the order of two independent writes".into());
    type Row<'a> = (
        &'a str,
        Outcomes,
        Vec<(u32, Outcomes)>,
        Option<&'a Evidence>,
        Status,
        &'a [&'a str],
    );
    let table: Vec<Row> = vec![
        (
            "an official test fails: discarded, whatever the probes say",
            outcomes(&[("t::a", Passed), ("t::b", Failed)]),
            vec![],
            None,
            Status::Discarded,
            &[],
        ),
        (
            "an official test unreported: discarded",
            outcomes(&[("t::a", Passed)]),
            vec![],
            None,
            Status::Discarded,
            &[],
        ),
        (
            "a probe fails on seed 0: killed by it",
            ref_official.clone(),
            vec![(0, fail_y.clone())],
            None,
            Status::Killed,
            &["p::y"],
        ),
        (
            "a probe not run on seed 0 counts as a kill (unreported is never passed)",
            ref_official.clone(),
            vec![(0, outcomes(&[("p::x", Passed), ("p::y", NotRun)]))],
            None,
            Status::Killed,
            &["p::y"],
        ),
        (
            "killed only on seed 1: the real workload misses it, it survives",
            ref_official.clone(),
            vec![(0, pass.clone()), (1, fail_y.clone())],
            None,
            Status::Survived,
            &[],
        ),
        (
            "same outcome everywhere without evidence: a survivor",
            ref_official.clone(),
            vec![(0, pass.clone()), (1, pass.clone())],
            None,
            Status::Survived,
            &[],
        ),
        (
            "same outcome everywhere, same bytecode: possibly equivalent",
            ref_official.clone(),
            vec![(0, pass.clone()), (1, pass.clone())],
            Some(&Evidence::Bytecode),
            Status::PossiblyEquivalent,
            &[],
        ),
        (
            "same outcome everywhere, reviewed: possibly equivalent",
            ref_official.clone(),
            vec![(0, pass.clone()), (1, pass.clone())],
            Some(&reviewed),
            Status::PossiblyEquivalent,
            &[],
        ),
        (
            "evidence does not save a mutant a probe kills",
            ref_official.clone(),
            vec![(0, fail_y.clone())],
            Some(&Evidence::Bytecode),
            Status::Killed,
            &["p::y"],
        ),
        (
            "evidence without the second seed: not equivalent",
            ref_official.clone(),
            vec![(0, pass.clone())],
            Some(&Evidence::Bytecode),
            Status::Survived,
            &[],
        ),
    ];
    for (why, official, probes, evidence, status, killed_by) in table {
        let j = judge_mutant(&official, &probes, &ref_official, &ref_probes, evidence);
        assert_eq!(j.status, status, "{why}");
        assert_eq!(j.killed_by, *killed_by, "{why}");
    }
    let j = judge_mutant(
        &ref_official,
        &[(0, pass.clone()), (1, fail_y)],
        &ref_official,
        &ref_probes,
        None,
    );
    assert_eq!(j.other_seed_kills, vec!["p::y".to_owned()]);
    assert!(j.note.unwrap().contains("seed 1"));
}

#[test]
fn variants_are_accepted_only_when_every_probe_passes() {
    let official = outcomes(&[("t::a", Passed)]);
    let probes = outcomes(&[("p::x", Passed), ("p::y", Passed)]);
    let table = [
        (
            official.clone(),
            probes.clone(),
            VariantStatus::Accepted,
            vec![],
        ),
        (
            official.clone(),
            outcomes(&[("p::x", Failed), ("p::y", Passed)]),
            VariantStatus::Rejected,
            vec!["p::x"],
        ),
        (
            outcomes(&[("t::a", Failed)]),
            Outcomes::new(),
            VariantStatus::OfficialFailed,
            vec!["t::a"],
        ),
    ];
    for (o, p, status, failed) in table {
        let (got, ids) = judge_variant(&o, &p, &official, &probes);
        assert_eq!(
            (got, ids),
            (status, failed.iter().map(|s| s.to_string()).collect())
        );
    }
}

#[test]
fn kill_rate_counts_only_official_passing_non_equivalent_mutants() {
    use Status::*;
    let table: &[(&[Status], Option<f64>)] = &[
        (&[], None),
        (&[Discarded, Error, PossiblyEquivalent], None),
        (&[Killed], Some(1.0)),
        (&[Killed, Survived], Some(0.5)),
        (
            &[
                Killed,
                Killed,
                Killed,
                Survived,
                Discarded,
                PossiblyEquivalent,
                Error,
            ],
            Some(0.75),
        ),
    ];
    for (statuses, want) in table {
        assert_eq!(kill_rate(statuses), *want, "{statuses:?}");
    }
}

#[test]
fn the_digest_depends_on_every_path_and_byte_but_not_on_listing_order() {
    let files = vec![
        ("test_a.py".to_owned(), b"def test_a(): pass\n".to_vec()),
        ("probes.toml".to_owned(), b"task = 'x'\n".to_vec()),
    ];
    let d = probes_digest(&files);
    assert!(d.starts_with("sha256:") && d.len() == 7 + 64);
    let reversed: Vec<_> = files.iter().rev().cloned().collect();
    assert_eq!(probes_digest(&reversed), d);
    let mut edited = files.clone();
    edited[1].1 = b"task = 'y'\n".to_vec();
    assert_ne!(probes_digest(&edited), d);
    let mut renamed = files.clone();
    renamed[0].0 = "test_b.py".into();
    assert_ne!(probes_digest(&renamed), d);
    // Moving bytes between a name and its content is not the same set of files.
    let shifted = vec![
        ("test_a.py".to_owned(), b"def test_a(): pass\nx".to_vec()),
        ("probes.toml".to_owned(), b"task = 'x'\n".to_vec()),
    ];
    assert_ne!(probes_digest(&shifted), d);
}

#[test]
fn changed_ranges_are_the_reference_side_of_each_hunk() {
    let diff = "\
diff --git a/pkg/a.py b/pkg/a.py
index 1..2 100644
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -1 +1 @@
-x
+y
@@ -6,0 +7,9 @@ def f():
+...
@@ -20,3 +29,0 @@ def g():
-gone
diff --git a/pkg/new.py b/pkg/new.py
new file mode 100644
--- /dev/null
+++ b/pkg/new.py
@@ -0,0 +1,4 @@
+a
diff --git a/old.py b/old.py
deleted file mode 100644
--- a/old.py
+++ /dev/null
@@ -1,2 +0,0 @@
-b
";
    let got = changed_ranges(diff);
    assert_eq!(got["pkg/a.py"], vec![(1, 1), (7, 15)]);
    assert_eq!(got["pkg/new.py"], vec![(1, 4)]);
    assert_eq!(got.len(), 2, "{got:?}");
}

fn record(digest: &str, rate: Option<f64>, survived: usize, rejected: usize) -> PowerRecord {
    PowerRecord {
        computed_at: "2026-12-02T00:00:00Z".into(),
        infradev_version: "0.1.0".into(),
        probes_digest: digest.into(),
        reference_commit: "abc".into(),
        threshold: 0.9,
        cap_per_operator: 6,
        out_of_scope: Vec::new(),
        only: Vec::new(),
        seeds: SEEDS.to_vec(),
        kill_rate: rate,
        counts: Counts {
            survived,
            variants_rejected: rejected,
            ..Counts::default()
        },
        operators: vec![],
        mutants: vec![],
        variants: vec![],
        duration_s: 1.0,
    }
}

#[test]
fn a_record_holds_only_for_the_probes_it_was_computed_against() {
    let now = "sha256:aaaaaaaaaaaaaaaa";
    let table: Vec<(Option<PowerRecord>, &[&str])> = vec![
        (Some(record(now, Some(0.95), 1, 0)), &[]),
        (Some(record(now, Some(0.9), 2, 0)), &[]),
        (
            Some(record("sha256:bbbbbbbbbbbbbbbb", Some(1.0), 0, 0)),
            &[
                "older than the probes (recorded against bbbbbbbbbbbb, the probes are now aaaaaaaaaaaa)",
            ],
        ),
        (
            Some(record(now, Some(0.8), 3, 0)),
            &["kill rate 80.0 % is under the threshold 90.0 % (3 survivor(s))"],
        ),
        (
            Some(record(now, Some(1.0), 0, 2)),
            &["2 behaviour-preserving variant(s) rejected"],
        ),
        (Some(record(now, None, 0, 0)), &["no kill rate"]),
        (
            Some(record("sha256:cc", Some(0.5), 5, 1)),
            &[
                "older than the probes",
                "under the threshold",
                "variant(s) rejected",
            ],
        ),
    ];
    for (r, want) in table {
        match assess(r.as_ref(), now, &config(0.9, &Scope::default())) {
            Assessment::Holds { .. } => assert!(want.is_empty(), "holds, expected {want:?}"),
            Assessment::Fails(found) => {
                assert_eq!(found.len(), want.len(), "{found:?}");
                for (f, w) in found.iter().zip(want) {
                    assert!(f.contains(w), "{f} does not say {w}");
                }
            }
            Assessment::NotMeasured => panic!("a record was given"),
        }
    }
    assert_eq!(
        assess(None, now, &config(0.9, &Scope::default())),
        Assessment::NotMeasured
    );
    // A task's own threshold applies.
    assert!(matches!(
        assess(
            Some(&record(now, Some(0.8), 1, 0)),
            now,
            &config(0.75, &Scope::default())
        ),
        Assessment::Holds { .. }
    ));
    // A record made with another scope than power.toml's now is stale.
    let scoped = Scope {
        out_of_scope: vec!["pkg/agent_loop.py".to_owned()],
        only: Vec::new(),
    };
    let only = Scope {
        out_of_scope: Vec::new(),
        only: vec!["pkg/lru.py".to_owned()],
    };
    for (scope, says) in [
        (
            &scoped,
            ["leaves out pkg/agent_loop.py now", "leaving out nothing"],
        ),
        (
            &only,
            ["`only` names pkg/lru.py now", "computed on nothing"],
        ),
    ] {
        match assess(
            Some(&record(now, Some(1.0), 0, 0)),
            now,
            &config(0.9, scope),
        ) {
            Assessment::Fails(found) => {
                assert_eq!(found.len(), 1, "{found:?}");
                assert!(says.iter().all(|s| found[0].contains(s)), "{found:?}");
            }
            other => panic!("{other:?}"),
        }
        let mut same = record(now, Some(1.0), 0, 0);
        same.out_of_scope = scope.out_of_scope.clone();
        same.only = scope.only.clone();
        assert!(matches!(
            assess(Some(&same), now, &config(0.9, scope)),
            Assessment::Holds { .. }
        ));
    }
}

/// power.toml with this threshold and scope, no equivalents and no ports.
fn config(threshold: f64, scope: &Scope) -> crate::task::PowerConfig {
    crate::task::PowerConfig {
        threshold,
        equivalent: Vec::new(),
        out_of_scope: scope
            .out_of_scope
            .iter()
            .map(|p| crate::task::OutOfScope {
                path: p.clone(),
                reason: "not asked".into(),
            })
            .collect(),
        only: scope.only.clone(),
        port: Vec::new(),
    }
}

#[test]
fn a_reviewed_port_carries_a_record_to_the_ported_probes_only() {
    let (old, new, other) = ("sha256:aa", "sha256:bb", "sha256:cc");
    let mut ported = config(0.9, &Scope::default());
    ported.port.push(crate::task::ProbePort {
        from: old.into(),
        to: new.into(),
        reason: "len(h) became subject_op(h, \"__len__\"): the same request".into(),
    });
    let holds = |now: &str, cfg: &crate::task::PowerConfig| {
        matches!(
            assess(Some(&record(old, Some(1.0), 0, 0)), now, cfg),
            Assessment::Holds { .. }
        )
    };
    assert!(holds(new, &ported), "the reviewed port carries the record");
    assert!(!holds(other, &ported), "a further edit is not the port");
    assert!(
        !holds(new, &config(0.9, &Scope::default())),
        "no port, no carry"
    );
}

#[test]
fn a_scope_covers_a_file_unless_left_out_or_outside_only() {
    let table = [
        (vec![], vec![], "pkg/a.py", true),
        (vec!["pkg/a.py"], vec![], "pkg/a.py", false),
        (vec!["pkg/b.py"], vec![], "pkg/a.py", true),
        (vec![], vec!["pkg/a.py"], "pkg/a.py", true),
        (vec![], vec!["pkg/b.py"], "pkg/a.py", false),
        (vec!["pkg/c.py"], vec!["pkg/a.py"], "pkg/c.py", false),
    ];
    for (out, only, path, want) in table {
        let scope = Scope {
            out_of_scope: out.iter().map(|s| s.to_string()).collect(),
            only: only.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(scope.covers(path), want, "{scope:?} {path}");
    }
}

#[test]
fn a_time_budget_failure_counts_only_when_a_second_grade_reproduces_it() {
    let reference = outcomes(&[("p::state", Passed), ("p::time", Passed)]);
    let budgeted = vec!["p::time".to_owned()];
    let table: &[(&[(&str, Outcome)], bool)] = &[
        (&[("p::state", Passed), ("p::time", Passed)], false),
        (&[("p::state", Passed), ("p::time", Failed)], true),
        (&[("p::state", Failed), ("p::time", Failed)], false),
        (&[("p::state", Failed), ("p::time", Passed)], false),
    ];
    for (run, want) in table {
        assert_eq!(
            needs_confirmation(&outcomes(run), &reference, &budgeted),
            *want,
            "{run:?}"
        );
    }
    let first = outcomes(&[("p::state", Passed), ("p::time", Failed)]);
    let again = outcomes(&[("p::state", Passed), ("p::time", Passed)]);
    let still = outcomes(&[("p::state", Passed), ("p::time", Failed)]);
    assert_eq!(reproduced(&first, &again), reference);
    assert_eq!(reproduced(&first, &still), first);
    assert_eq!(
        reproduced(&first, &Outcomes::new()),
        first,
        "unreported is never passed"
    );
}

#[test]
fn rejudging_applies_reviewed_reasons_only_to_survivors_alike_on_every_seed() {
    let mutant = |id: &str, status: Status, note: Option<&str>, other_seed: &[&str]| {
        let mut m = MutantRecord::new(
            Site::of(&candidate(id, Kind::Mutant, "off_by_one", 1)),
            Judgement {
                status,
                killed_by: if status == Status::Killed {
                    vec!["t.py::k".into()]
                } else {
                    vec![]
                },
                official_failed: vec![],
                other_seed_kills: other_seed.iter().map(|s| (*s).to_owned()).collect(),
                note: note.map(str::to_owned),
            },
        );
        m.note = note.map(str::to_owned);
        m
    };
    let mut r = record("sha256:x", None, 0, 0);
    r.mutants = vec![
        mutant("killed", Status::Killed, None, &[]),
        mutant("alike", Status::Survived, Some(NO_EVIDENCE), &[]),
        mutant("seed1", Status::Survived, None, &["t.py::s"]),
        mutant("unreviewed", Status::Survived, Some(NO_EVIDENCE), &[]),
        mutant(
            "dropped",
            Status::PossiblyEquivalent,
            Some("reviewed: old"),
            &[],
        ),
        mutant(
            "bytecode",
            Status::PossiblyEquivalent,
            Some("compiles to the reference's bytecode"),
            &[],
        ),
    ];
    let reviewed: BTreeMap<String, String> = [
        ("alike", "same value"),
        ("seed1", "not alike on seed 1: must stay a survivor"),
        ("killed", "a killed mutant stays killed"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();

    let changed = rejudge(&mut r, &reviewed);
    assert_eq!(changed, ["alike", "dropped"]);
    let status = |id: &str| r.mutants.iter().find(|m| m.site.id == id).unwrap().status;
    let table = [
        ("killed", Status::Killed),
        ("alike", Status::PossiblyEquivalent),
        ("seed1", Status::Survived),
        ("unreviewed", Status::Survived),
        ("dropped", Status::Survived),
        ("bytecode", Status::PossiblyEquivalent),
    ];
    for (id, want) in table {
        assert_eq!(status(id), want, "{id}");
    }
    assert_eq!(r.mutants[1].note.as_deref(), Some("reviewed: same value"));
    assert_eq!(r.counts.survived, 3);
    assert_eq!(r.counts.possibly_equivalent, 2);
    assert_eq!(r.kill_rate, Some(0.25));
    // Rejudging again with the same reasons changes nothing.
    assert!(rejudge(&mut r, &reviewed).is_empty());
}

#[test]
fn narrowing_the_scope_drops_only_the_files_newly_left_out() {
    let at = |id: &str, path: &str, status: Status| {
        let mut c = candidate(id, Kind::Mutant, "off_by_one", 7);
        c.path = path.into();
        MutantRecord::new(
            Site::of(&c),
            Judgement {
                status,
                killed_by: vec![],
                official_failed: vec![],
                other_seed_kills: vec![],
                note: None,
            },
        )
    };
    let mut r = record("sha256:x", None, 0, 0);
    r.out_of_scope = vec!["docs/old.py".into()];
    r.mutants = vec![
        at("k1", "pkg/core.py", Status::Killed),
        at("s1", "pkg/yaml_path.py", Status::Survived),
        at("s2", "pkg/core.py", Status::Survived),
    ];
    r.operators = vec![OperatorCount {
        kind: Kind::Mutant,
        operator: "off_by_one".into(),
        generated: 5,
        graded: 3,
    }];
    let scope = |out: &[&str]| Scope {
        out_of_scope: out.iter().map(|p| (*p).to_owned()).collect(),
        only: vec![],
    };

    let dropped = narrow_scope(&mut r, &scope(&["docs/old.py", "pkg/yaml_path.py"])).unwrap();
    assert_eq!(dropped, ["s1"]);
    let ids: Vec<&str> = r.mutants.iter().map(|m| m.site.id.as_str()).collect();
    assert_eq!(ids, ["k1", "s2"]);
    assert_eq!(r.operators[0].graded, 2);
    assert_eq!(r.counts.survived, 1);
    assert_eq!(r.kill_rate, Some(0.5));
    assert_eq!(r.out_of_scope, ["docs/old.py", "pkg/yaml_path.py"]);

    // A file back in scope was never graded; a changed `only` is a different change.
    let err = narrow_scope(&mut r, &scope(&["pkg/yaml_path.py"])).unwrap_err();
    assert!(err.contains("docs/old.py is back in scope"), "{err}");
    let mut only = scope(&["docs/old.py", "pkg/yaml_path.py"]);
    only.only = vec!["pkg/core.py".into()];
    assert!(narrow_scope(&mut r, &only).unwrap_err().contains("`only`"));
}
