//! Probe power through the real binary: `infradev tasks power` on the example task end to end
//! (mutants and variants of the reference change graded in Docker), the hand-written wrong
//! patches of examples/minicache/wrong rejected by the probes, and `tasks check` on power
//! records (not measured, holding, stale, under the threshold).

mod support;

use std::path::{Path, PathBuf};

use support::{TASK, copy_dir, docker_ready, example_repo, grade, root, task_dir};

fn run(root: &Path, args: &[&str]) -> (i32, String) {
    support::infradev_run(root, args)
}

#[test]
fn tasks_power_grades_mutants_and_variants_of_the_example_end_to_end() {
    if !docker_ready() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let repo = example_repo().display().to_string();
    let out_dir = out.path().display().to_string();
    // One candidate per operator keeps this to a few minutes; the committed record used more.
    let (code, log) = run(
        &root(),
        &[
            "tasks",
            "power",
            TASK,
            "--git",
            &repo,
            "--cap",
            "1",
            "--jobs",
            "2",
            "--out-dir",
            &out_dir,
        ],
    );
    let text = std::fs::read_to_string(out.path().join(format!("{TASK}.validation.json")))
        .unwrap_or_else(|e| panic!("no record ({e}); exit {code}:\n{log}"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["task"], TASK, "the validation record is carried over");
    assert!(v["runs"].as_array().is_some_and(|r| !r.is_empty()));
    let p = &v["power"];

    let files = infradev::task::read_probe_files(&support::probes_dir()).unwrap();
    assert_eq!(
        p["probes_digest"],
        infradev::suite::power::probes_digest(&files)
    );
    assert_eq!(p["cap_per_operator"], 1);
    assert_eq!(p["seeds"], serde_json::json!([0, 1]));
    for op in p["operators"].as_array().unwrap() {
        assert!(op["graded"].as_u64().unwrap() <= 1, "{op}");
    }

    let mutants = p["mutants"].as_array().unwrap();
    assert!(mutants.len() >= 8, "{} mutants:\n{log}", mutants.len());
    let mut ids = std::collections::BTreeSet::new();
    let (mut killed, mut survived) = (0usize, 0usize);
    for m in mutants {
        assert!(
            ids.insert(m["id"].as_str().unwrap().to_owned()),
            "duplicate id {m}"
        );
        assert!(
            m["location"]
                .as_str()
                .unwrap()
                .starts_with("minicache/block_allocator.py:"),
            "{m}"
        );
        match m["status"].as_str().unwrap() {
            "killed" => {
                killed += 1;
                assert_eq!(m["official"], "passed");
                assert_eq!(m["probes"], "killed");
                assert!(!m["killed_by"].as_array().unwrap().is_empty(), "{m}");
            }
            "discarded" => {
                assert_eq!(m["official"], "failed");
                assert!(!m["official_failed"].as_array().unwrap().is_empty(), "{m}");
            }
            "survived" => {
                survived += 1;
                assert_eq!(m["probes"], "passed");
            }
            "possibly_equivalent" => assert!(m["note"].is_string(), "{m}"),
            other => panic!("mutant {m} is {other}:\n{log}"),
        }
    }
    assert!(killed > 0, "no mutant killed:\n{log}");
    let rate = p["kill_rate"].as_f64().unwrap();
    assert!((rate - killed as f64 / (killed + survived) as f64).abs() < 1e-9);

    let variants = p["variants"].as_array().unwrap();
    assert!(!variants.is_empty());
    for v in variants {
        assert_eq!(
            v["status"], "accepted",
            "the probes reject a variant: {v}\n{log}"
        );
    }
    assert!(log.contains("left)"), "progress with an estimate:\n{log}");
    let passes = rate >= p["threshold"].as_f64().unwrap() - 1e-9;
    assert_eq!(code, if passes { 0 } else { 2 }, "{log}");
}

#[test]
fn hand_written_wrong_patches_pass_the_official_tests_and_are_rejected_by_the_probes() {
    if !docker_ready() {
        return;
    }
    let dir = root().join("examples/minicache/wrong");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".patch").map(str::to_owned)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 3, "{names:?}");
    for name in names {
        let g = grade(
            &task_dir(),
            example_repo(),
            &format!("submission/{name}"),
            "docker",
            &[],
        );
        let r = g.report();
        assert_eq!(
            r.grade.verdict,
            infradev::grading::Verdict::Unresolved,
            "{name}: {}",
            g.stdout
        );
        assert!(
            r.grade.official_passed_but_probes_failed,
            "{name}: the official tests must pass and a probe fail:\n{}",
            g.stdout
        );
    }
}

/// A root with a copy of the example task and its probes (and runners/ linked in).
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("tasks/example").join(TASK);
    copy_dir(&task_dir(), &task);
    copy_dir(
        &support::probes_dir(),
        &dir.path().join("probes").join(TASK),
    );
    std::os::unix::fs::symlink(root().join("runners"), dir.path().join("runners")).unwrap();
    (dir, task)
}

fn set_power(task: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = task.join("validation.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[test]
fn tasks_check_fails_on_stale_or_weak_power_records_and_lists_unmeasured_tasks() {
    let (dir, task) = scratch();
    // The committed record holds for the committed probes.
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("{TASK}: probe power holds (kill rate")),
        "{out}"
    );

    // No record: listed, not a failure.
    set_power(&task, |v| {
        v.as_object_mut().unwrap().remove("power");
    });
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("{TASK}: probe power not measured yet")),
        "{out}"
    );

    // Put the committed record back, then change a probe: the record is older than the probes.
    std::fs::copy(
        task_dir().join("validation.json"),
        task.join("validation.json"),
    )
    .unwrap();
    let probe = dir.path().join("probes").join(TASK).join("test_state.py");
    let text = std::fs::read_to_string(&probe).unwrap();
    std::fs::write(&probe, text + "\n# edited\n").unwrap();
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("probe power: the power record is older than the probes"),
        "{out}"
    );
    std::fs::write(
        &probe,
        std::fs::read_to_string(support::probes_dir().join("test_state.py")).unwrap(),
    )
    .unwrap();

    // A kill rate under the task's threshold fails; power.toml may set the threshold.
    set_power(&task, |v| {
        v["power"]["kill_rate"] = serde_json::json!(0.5);
    });
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("kill rate 50.0 % is under the threshold 90.0 %"),
        "{out}"
    );
    std::fs::write(task.join("power.toml"), "threshold = 0.5\n").unwrap();
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 0, "{out}");
    std::fs::write(task.join("power.toml"), "threshold = 1.5\n").unwrap();
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("power.toml:1:13: field `threshold`: must be in (0, 1]"),
        "{out}"
    );
    // Leaving a file of the change out needs a reason, and makes a record computed with the
    // whole change stale.
    std::fs::write(
        task.join("power.toml"),
        "threshold = 0.5\n[[out_of_scope]]\npath = \"minicache/extra.py\"\nreason = \"\"\n",
    )
    .unwrap();
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("field `out_of_scope.reason`: `minicache/extra.py`: say why"),
        "{out}"
    );
    std::fs::write(
        task.join("power.toml"),
        "threshold = 0.5\n[[out_of_scope]]\npath = \"minicache/extra.py\"\nreason = \"not asked for\"\n",
    )
    .unwrap();
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("power.toml leaves out minicache/extra.py now"),
        "{out}"
    );
    // `only` narrows the change to the files named (a release-sourced task's change is the
    // whole diff between releases): a file may not be both in it and out of scope, and a
    // record computed on the whole change is stale.
    std::fs::write(
        task.join("power.toml"),
        "only = [\"minicache/extra.py\"]\n[[out_of_scope]]\npath = \"minicache/extra.py\"\nreason = \"not asked for\"\n",
    )
    .unwrap();
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(
            "power.toml:1:8: field `only`: `minicache/extra.py` is both in `only` and out of scope"
        ),
        "{out}"
    );
    std::fs::write(
        task.join("power.toml"),
        "only = [\"minicache/allocator.py\"]\n",
    )
    .unwrap();
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("power.toml's `only` names minicache/allocator.py now"),
        "{out}"
    );
}

/// `tasks validate --power`: the task is validated, then its probes' power measured into the
/// same record, and the figures printed.
#[test]
fn tasks_validate_measures_power_too_when_asked() {
    if !docker_ready() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let repo = example_repo().display().to_string();
    let out_dir = out.path().display().to_string();
    let args = [
        "tasks",
        "validate",
        TASK,
        "--git",
        &repo,
        "--reference-runs",
        "1",
        "--out-dir",
        &out_dir,
    ];
    let (code, log) = run(&root(), &[&args[..], &["--cap", "1"]].concat());
    assert_eq!(code, 2, "--cap needs --power: {log}");
    assert!(log.contains("--power"), "{log}");

    let (code, log) = run(
        &root(),
        &[&args[..], &["--power", "--cap", "1", "--jobs", "2"]].concat(),
    );
    assert_eq!(code, 0, "{log}");
    assert!(log.contains(&format!("{TASK}: valid")), "{log}");
    assert!(log.contains(&format!("{TASK}: kill rate ")), "{log}");
    let text = std::fs::read_to_string(out.path().join(format!("{TASK}.validation.json"))).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v["ok"].as_bool().unwrap(), "{text}");
    assert_eq!(
        v["runs"].as_array().unwrap().len(),
        3,
        "base, one reference, null patch"
    );
    assert_eq!(v["power"]["cap_per_operator"], 1);
    assert!(v["power"]["kill_rate"].as_f64().is_some(), "{}", v["power"]);
}

#[test]
fn rejudging_applies_a_reviewed_equivalent_without_grading_again() {
    let (dir, task) = scratch();
    // Make one killed mutant of the committed record a survivor that behaved like the
    // reference on every seed, as a long power run would have left it.
    let mut id = String::new();
    set_power(&task, |v| {
        let m = v["power"]["mutants"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|m| m["status"] == "killed")
            .unwrap();
        id = m["id"].as_str().unwrap().to_owned();
        m["status"] = "survived".into();
        m["probes"] = "passed".into();
        m.as_object_mut().unwrap().remove("killed_by");
        m["note"] = infradev::suite::power::NO_EVIDENCE.into();
    });
    let (code, out) = run(dir.path(), &["tasks", "power", TASK, "--rejudge"]);
    assert_eq!(code, 2, "one survivor puts the kill rate under 90 %: {out}");
    assert!(out.contains(&format!("survived {id}")), "{out}");
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 2, "{out}");

    // Reviewed as equivalent in power.toml: the record takes it without grading.
    let config = std::fs::read_to_string(task.join("power.toml")).unwrap();
    std::fs::write(
        task.join("power.toml"),
        format!(
            "{config}\n[[equivalent]]\nmutant = \"{id}\"\nreason = \"reviewed in this test\"\n"
        ),
    )
    .unwrap();
    let (code, out) = run(dir.path(), &["tasks", "power", TASK, "--rejudge"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(task.join("validation.json")).unwrap())
            .unwrap();
    let m = v["power"]["mutants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id.as_str())
        .unwrap();
    assert_eq!(m["status"], "possibly_equivalent");
    assert_eq!(m["note"], "reviewed: reviewed in this test");
    assert_eq!(v["power"]["counts"]["survived"], 0);
    let (code, out) = run(dir.path(), &["tasks", "check"]);
    assert_eq!(code, 0, "{out}");

    // Against changed probes the record is not rejudged: it must be computed again.
    let probe = dir.path().join("probes").join(TASK).join("test_state.py");
    let text = std::fs::read_to_string(&probe).unwrap();
    std::fs::write(&probe, text + "\n# edited\n").unwrap();
    let (code, out) = run(dir.path(), &["tasks", "power", TASK, "--rejudge"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("computed against other probes"), "{out}");
}
