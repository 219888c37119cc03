//! `infradev run` and `infradev stats` through the real binary, real git and real Docker: the
//! example task's submissions graded as one run, the report's figures checked, a run killed
//! and resumed, and bad submissions files rejected with file:line.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use infradev::analysis::run::record::Record;
use infradev::analysis::run::report::RunReport;
use support::{
    FLAKY_PROBE, TASK, add_flaky_probe, copy_dir, docker_ready, example_repo, infradev,
    output_text as text, root,
};

/// A scratch root: the example task, a copy of it whose base image does not exist (every grade
/// of it is an infra error, ours), their probes, and runners/python.
fn scratch_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    copy_dir(&support::task_dir(), &r.join("tasks/example").join(TASK));
    copy_dir(&support::probes_dir(), &r.join("probes").join(TASK));
    copy_dir(&root().join("runners/python"), &r.join("runners/python"));
    let broken = "example-no-image";
    let task = r.join("tasks/example").join(broken);
    copy_dir(&support::task_dir(), &task);
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    let toml = toml
        .replace(&format!("id = \"{TASK}\""), &format!("id = \"{broken}\""))
        .replace(
            "base_image = \"infradev-base:bookworm\"",
            "base_image = \"infradev-missing:never-built\"",
        );
    std::fs::write(task.join("task.toml"), toml).unwrap();
    let probes = r.join("probes").join(broken);
    copy_dir(&support::probes_dir(), &probes);
    let manifest = std::fs::read_to_string(probes.join("probes.toml")).unwrap();
    std::fs::write(
        probes.join("probes.toml"),
        manifest.replace(
            &format!("task = \"{TASK}\""),
            &format!("task = \"{broken}\""),
        ),
    )
    .unwrap();
    dir
}

fn line(task: &str, change: (&str, &str), agent: &str, model: Option<&str>) -> String {
    let mut v = serde_json::json!({
        "task": task,
        "repo": example_repo(),
        change.0: change.1,
        "agent": agent,
    });
    if let Some(m) = model {
        v["model"] = m.into();
    }
    v.to_string()
}

fn patch(name: &str) -> String {
    root()
        .join("examples/minicache/submissions")
        .join(format!("{name}.patch"))
        .display()
        .to_string()
}

fn read_report(dir: &Path) -> RunReport {
    let text = std::fs::read_to_string(dir.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("report.json parses as a RunReport")
}

#[test]
fn a_run_grades_every_submission_and_reports_the_figures() {
    if !docker_ready() {
        return;
    }
    let scratch = scratch_root();
    let work = tempfile::tempdir().unwrap();
    let lines = [
        // alpha (m-1): the reference (resolved) and the wrong one (official tests pass, probes
        // reject it), both as revisions.
        line(TASK, ("rev", "submission/reference"), "alpha", Some("m-1")),
        line(TASK, ("rev", "submission/wrong"), "alpha", Some("m-1")),
        // beta: broken (structural) and the reference again, as diff files; a diff that does
        // not apply (build, the agent's fault); the wrong implementation with a hostile
        // conftest.py that forces passes (neutralised: official tests pass, probes reject it).
        line(TASK, ("patch", &patch("broken")), "beta", None),
        line(TASK, ("patch", &patch("reference")), "beta", None),
        line(
            TASK,
            (
                "diff",
                "--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1 +1 @@\n-x\n+y\n",
            ),
            "beta",
            None,
        ),
        line(
            TASK,
            ("rev", "submission/conftest_force_pass"),
            "beta",
            None,
        ),
        // gamma: a task whose image we never built: an infra error, never counted against it.
        line(
            "example-no-image",
            ("rev", "submission/reference"),
            "gamma",
            None,
        ),
    ];
    let subs = work.path().join("subs.jsonl");
    std::fs::write(&subs, lines.join("\n") + "\n").unwrap();
    let out_dir = work.path().join("runs");
    let started = Instant::now();
    // example-no-image is a copy of the example with other probes: allowed, so that its
    // missing image, our fault, is what its grade meets.
    let out = infradev(
        scratch.path(),
        &[
            "run",
            "--run-id",
            "r1",
            "--jobs",
            "2",
            "--json",
            "-",
            "--allow-unvalidated",
        ],
    )
    .arg("--submissions")
    .arg(&subs)
    .arg("--out")
    .arg(&out_dir)
    .output()
    .unwrap();
    eprintln!("run took {:.0?}", started.elapsed());
    // An infra error remains: exit 3, so a script knows to --resume.
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let dir = out_dir.join("r1");
    let r = read_report(&dir);
    let printed: RunReport =
        serde_json::from_slice(&out.stdout).expect("--json - prints the report");
    assert_eq!(printed, r);

    let outcomes: Vec<&str> = r.results.iter().map(|s| s.outcome.as_str()).collect();
    let all = text(&out);
    // The references (lines 1 and 4) resolve. Their time probe measures wall time, so on a
    // loaded machine it can go over budget once; the host reruns it, and then it is `flaky`
    // (never a pass, never silently unresolved): the figures below follow from it.
    let resolved = |i: usize| {
        let s = &r.results[i];
        if s.outcome != "resolved" {
            assert_eq!(s.outcome, "unresolved", "{all}");
            assert_eq!(s.categories, ["time"], "{all}");
            assert_eq!(
                s.flaky,
                ["test_time.py::test_allocate_free_is_constant_time"],
                "a reference fails only on a flake: {all}"
            );
        }
        usize::from(s.outcome == "resolved")
    };
    let (a, b) = (resolved(0), resolved(3));
    let n = a + b;
    for (i, want) in [
        (1, "unresolved"),
        (2, "unresolved"),
        (4, "unresolved"),
        (5, "unresolved"),
        (6, "error"),
    ] {
        assert_eq!(outcomes[i], want, "line {}: {all}", i + 1);
    }
    assert!(
        r.results[2].categories.contains(&"structural".to_owned()),
        "{all}"
    );
    assert_eq!(r.results[4].categories, ["build"], "{all}");
    for i in [1, 5] {
        for c in ["memory", "state", "time"] {
            assert!(
                r.results[i].categories.contains(&c.to_owned()),
                "{i} {c}: {all}"
            );
        }
    }
    let o = &r.stats.overall;
    assert_eq!((o.submissions, o.graded, o.infra_errors), (7, 6, 1));
    assert_eq!(o.resolved, n);
    assert_eq!(o.flaky, 2 - n, "only a reference can be flaky: {all}");
    assert_eq!(o.resolved_rate, Some(n as f64 / 6.0));
    // Official tests all passed: reference ×2, wrong and the hostile one; the probes rejected
    // wrong and the hostile one (and a reference over its time budget).
    assert_eq!((o.official_passed, o.rejected_by_probes), (4, 4 - n));
    assert!(r.results[1].rejected_by_probes);
    assert!(r.results[5].rejected_by_probes);

    let agent = |k: &str| &r.stats.by_agent.iter().find(|a| a.key == k).unwrap().tally;
    assert_eq!(
        (agent("alpha (m-1)").graded, agent("alpha (m-1)").resolved),
        (2, a)
    );
    assert_eq!((agent("beta").graded, agent("beta").resolved), (4, b));
    let gamma = agent("gamma");
    assert_eq!(
        (gamma.graded, gamma.infra_errors, gamma.resolved_rate),
        (0, 1, None)
    );
    assert_eq!(r.infra_errors.len(), 1);
    assert_eq!(r.infra_errors[0].line, 7);

    let per_task = |k: &str| &r.stats.by_task.iter().find(|t| t.key == k).unwrap().tally;
    assert_eq!(per_task(TASK).graded, 6);
    assert_eq!(per_task("example-no-image").infra_errors, 1);

    let cats = &r.stats.categories;
    assert_eq!(cats.len(), 1, "one repository: {cats:?}");
    assert_eq!(cats[0].repository, "infradev/minicache");
    assert_eq!((cats[0].graded, cats[0].unresolved), (6, 6 - n));
    for c in ["memory", "time", "state", "structural", "build"] {
        assert!(cats[0].categories.contains_key(c), "{c} missing: {cats:?}");
    }
    assert!(!cats[0].categories.contains_key("infra"));

    assert_eq!(r.infradev_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(r.environment.executor, "docker");
    assert_eq!(r.environment.jobs, 2);
    let rate = format!("{:.1} %", n as f64 * 100.0 / 6.0);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains(&format!("**Resolved: {n} of 6 graded ({rate})**")),
        "{md}"
    );
    assert!(md.contains("## Infra errors"), "{md}");
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains(&format!("resolved {n} of 6 graded ({rate})")),
        "{summary}"
    );
    assert!(
        summary.contains(&format!(
            "passed every official test but rejected by probes: {} of 4 ({:.1} %)",
            4 - n,
            (4 - n) as f64 * 25.0
        )),
        "{summary}"
    );

    // Every record is a whole JSON file named by its key.
    for s in &r.results {
        let rec = Record::read(&dir.join("submissions").join(format!("{}.json", s.key))).unwrap();
        assert_eq!(rec.line, s.line);
    }

    // `stats` over the run folder gives the same tables, as text, CSV and JSON.
    let stats = |args: &[&str]| {
        let o = infradev(scratch.path(), &["stats", "--reports"])
            .arg(&out_dir)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        // The run's own files (report.json, flakes.json) are its summaries, never "skipped".
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains("skipped"), "{stderr}");
        String::from_utf8(o.stdout).unwrap()
    };
    let json: infradev::analysis::stats::Stats =
        serde_json::from_str(&stats(&["--format", "json"])).unwrap();
    assert_eq!(json, r.stats);
    let csv = stats(&["--format", "csv", "--table", "agents"]);
    let beta_row = format!(
        "\nbeta,4,4,{b},{},0,0,{:.4},2,{},{:.4},{}\n",
        4 - b,
        b as f64 / 4.0,
        2 - b,
        (2 - b) as f64 / 2.0,
        1 - b
    );
    assert!(csv.contains(&beta_row), "{beta_row:?} in {csv}");
    let table = stats(&[]);
    assert!(
        table.contains(&format!("resolved {n} of 6 graded ({rate})")),
        "{table}"
    );

    // Running it again without --resume refuses to overwrite the run.
    let again = infradev(
        scratch.path(),
        &["run", "--run-id", "r1", "--allow-unvalidated"],
    )
    .arg("--submissions")
    .arg(&subs)
    .arg("--out")
    .arg(&out_dir)
    .output()
    .unwrap();
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("pass --resume"), "{}", text(&again));
}

/// A copy of the example task with a probe that fails on its first attempt only
/// ([`support::add_flaky_probe`]), and one rerun of its own.
const FLAKY_TASK: &str = "example-flaky-probe";

fn add_flaky_variant(root: &Path) {
    let task = root.join("tasks/example").join(FLAKY_TASK);
    copy_dir(&support::task_dir(), &task);
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    std::fs::write(
        task.join("task.toml"),
        toml.replace(
            &format!("id = \"{TASK}\""),
            &format!("id = \"{FLAKY_TASK}\""),
        ),
    )
    .unwrap();
    let probes = root.join("probes").join(FLAKY_TASK);
    copy_dir(&support::probes_dir(), &probes);
    let manifest = std::fs::read_to_string(probes.join("probes.toml")).unwrap();
    std::fs::write(
        probes.join("probes.toml"),
        manifest.replace(
            &format!("task = \"{TASK}\""),
            &format!("task = \"{FLAKY_TASK}\""),
        ),
    )
    .unwrap();
    add_flaky_probe(&probes, Some(1));
}

/// The flaky probe variant of the example task through the real binary and Docker: the
/// reference fails one probe on the first attempt and passes it on the host's rerun. The run
/// report counts it flaky (never resolved), flakes.json records it, and the example task's
/// own reference beside it resolves or is flaky too, never silently anything else.
#[test]
fn a_probe_that_passes_only_on_a_rerun_is_flaky_never_a_pass() {
    if !docker_ready() {
        return;
    }
    let scratch = scratch_root();
    add_flaky_variant(scratch.path());
    let work = tempfile::tempdir().unwrap();
    let lines = [
        line(FLAKY_TASK, ("rev", "submission/reference"), "alpha", None),
        line(TASK, ("rev", "submission/reference"), "beta", None),
    ];
    let subs = work.path().join("subs.jsonl");
    std::fs::write(&subs, lines.join("\n") + "\n").unwrap();
    let out_dir = work.path().join("runs");
    // The variant's probes are not those the example was validated with.
    let out = infradev(
        scratch.path(),
        &["run", "--run-id", "f", "--jobs", "2", "--allow-unvalidated"],
    )
    .arg("--submissions")
    .arg(&subs)
    .arg("--out")
    .arg(&out_dir)
    .output()
    .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let dir = out_dir.join("f");
    let r = read_report(&dir);
    let flaky = &r.results[0];
    assert_eq!(flaky.outcome, "unresolved", "{all}");
    assert!(flaky.flaky.contains(&FLAKY_PROBE.to_owned()), "{all}");
    assert!(flaky.categories.contains(&"state".to_owned()), "{all}");
    // The example's reference: resolved, or flaky on its time probe; never plain unresolved.
    let reference = &r.results[1];
    assert!(
        reference.outcome == "resolved" || !reference.flaky.is_empty(),
        "{all}"
    );
    let n = usize::from(reference.outcome == "resolved");
    let o = &r.stats.overall;
    assert_eq!((o.graded, o.resolved, o.flaky), (2, n, 2 - n), "{all}");
    let per_task = |k: &str| &r.stats.by_task.iter().find(|t| t.key == k).unwrap().tally;
    assert_eq!(
        (per_task(FLAKY_TASK).flaky, per_task(FLAKY_TASK).resolved),
        (1, 0)
    );

    // The grade itself: the probe's attempts, and the rerun phase that ran only what failed.
    let record =
        Record::read(&dir.join("submissions").join(format!("{}.json", flaky.key))).unwrap();
    let infradev::analysis::run::record::Outcome::Graded { report } = &record.outcome else {
        panic!("graded: {all}");
    };
    let probe = report
        .grade
        .tests
        .iter()
        .find(|t| t.evidence.id == FLAKY_PROBE)
        .unwrap();
    assert_eq!(probe.evidence.outcome, infradev::grading::Outcome::Flaky);
    assert_eq!(
        probe.evidence.attempts,
        [
            infradev::grading::Outcome::Failed,
            infradev::grading::Outcome::Passed
        ]
    );
    assert!(
        report.phases.iter().any(|p| p.attempt == 2),
        "a rerun phase: {:?}",
        report.phases
    );
    assert!(
        report.grade.reason.contains("1 flaky"),
        "{}",
        report.grade.reason
    );

    // flakes.json: the run's flake record.
    let flakes: infradev::analysis::run::flakes::Flakes =
        serde_json::from_str(&std::fs::read_to_string(dir.join("flakes.json")).unwrap()).unwrap();
    let task = flakes.tasks.iter().find(|t| t.task == FLAKY_TASK).unwrap();
    let entry = task.tests.iter().find(|t| t.id == FLAKY_PROBE).unwrap();
    assert_eq!(entry.submissions, std::slice::from_ref(&flaky.key));
    assert_eq!(entry.attempts, [["failed", "passed"]]);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("1 flaky"), "{md}");
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn records(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("submissions"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "json"));
    v.sort();
    v
}

#[test]
fn a_killed_run_resumes_where_it_stopped() {
    if !docker_ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let lines = [
        line(TASK, ("rev", "submission/reference"), "alpha", None),
        line(TASK, ("rev", "submission/broken"), "alpha", None),
        line(TASK, ("patch", &patch("wrong")), "alpha", None),
    ];
    let subs = work.path().join("subs.jsonl");
    std::fs::write(&subs, lines.join("\n") + "\n").unwrap();
    let out_dir = work.path().join("runs");
    let dir = out_dir.join("k");
    let run = |resume: bool| {
        let mut c = infradev(&root(), &["run", "--run-id", "k", "--jobs", "1"]);
        c.arg("--submissions").arg(&subs).arg("--out").arg(&out_dir);
        if resume {
            c.arg("--resume");
        }
        c
    };
    let mut child = run(false)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the first record", Duration::from_secs(600), || {
        !records(&dir).is_empty()
    });
    child.kill().unwrap(); // SIGKILL: no chance to clean up.
    child.wait().unwrap();
    let before = records(&dir);
    assert!(
        (1..3).contains(&before.len()),
        "killed after the first grade: {before:?}"
    );
    // Nothing half-written: every file there is a whole record.
    let kept: Vec<(PathBuf, String)> = before
        .iter()
        .map(|p| (p.clone(), std::fs::read_to_string(p).unwrap()))
        .collect();
    for (p, t) in &kept {
        serde_json::from_str::<Record>(t).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    let out = run(true).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "3 submission(s), {} done already, {} to grade",
            kept.len(),
            3 - kept.len()
        )),
        "{stderr}"
    );
    // The records of the first invocation were not graded again.
    for (p, t) in &kept {
        assert_eq!(&std::fs::read_to_string(p).unwrap(), t, "{}", p.display());
    }
    let r = read_report(&dir);
    // Every submission has a verdict of its own (the reference's time probe depends on the
    // machine's load, which this test is not about); broken and wrong are never resolved.
    let outcomes: Vec<&str> = r.results.iter().map(|s| s.outcome.as_str()).collect();
    assert!(
        outcomes
            .iter()
            .all(|o| ["resolved", "unresolved"].contains(o)),
        "{outcomes:?}"
    );
    assert_eq!(&outcomes[1..], ["unresolved", "unresolved"]);
    assert_eq!(r.graded_now, 3 - kept.len());
    assert_eq!(r.stats.overall.graded, 3);
    assert!(r.results[2].rejected_by_probes);
}

#[test]
fn bad_submissions_files_are_rejected_with_file_line_and_what_is_wrong() {
    let work = tempfile::tempdir().unwrap();
    let not_git = work.path().join("plain");
    std::fs::create_dir_all(&not_git).unwrap();
    let lines = [
        line(TASK, ("rev", "submission/reference"), "a", None),
        "{\"task\": \"x\"".to_owned(),
        line("example-block-alocator", ("rev", "base"), "a", None),
        line(TASK, ("rev", "no-such-branch"), "a", None),
        serde_json::json!({"task": TASK, "repo": not_git, "rev": "HEAD", "agent": "a"}).to_string(),
        line(TASK, ("patch", "missing.diff"), "a", None),
    ];
    let subs = work.path().join("subs.jsonl");
    let run = |text: &str| {
        std::fs::write(&subs, text).unwrap();
        infradev(&root(), &["run", "--run-id", "bad"])
            .arg("--submissions")
            .arg(&subs)
            .arg("--out")
            .arg(work.path().join("runs"))
            .output()
            .unwrap()
    };
    let f = subs.display().to_string();
    // Syntax first: every unparsable line at once.
    let out = run(&lines.join("\n"));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{f}:2: not a submission")),
        "{}",
        text(&out)
    );
    // Then what the lines name.
    let mut rest = lines.to_vec();
    rest.remove(1);
    let out = run(&rest.join("\n"));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let all = text(&out);
    for want in [
        format!("{f}:2: no task `example-block-alocator`; did you mean `example-block-allocator`?"),
        format!("{f}:3: `rev`: `no-such-branch` is not a commit in"),
        format!("{f}:4: `rev`: {} is not a git checkout", not_git.display()),
        format!(
            "{f}:5: `patch`: no file {}",
            work.path().join("missing.diff").display()
        ),
    ] {
        assert!(all.contains(&want), "missing {want:?} in\n{all}");
    }
    assert!(!all.contains(&format!("{f}:1:")), "{all}");
    assert!(!work.path().join("runs/bad").exists(), "nothing ran");
}

#[test]
fn grade_names_close_tasks_missing_checkouts_and_revisions() {
    let work = tempfile::tempdir().unwrap();
    let grade = |task: &str, repo: &Path, head: &str| {
        let o = infradev(
            &root(),
            &["grade", "--task", task, "--head", head, "--repo"],
        )
        .arg(repo)
        .output()
        .unwrap();
        (o.status.code(), text(&o))
    };
    let (code, out) = grade("example-block-alocator", example_repo(), "base");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("no task `example-block-alocator`; did you mean `example-block-allocator`?"),
        "{out}"
    );
    let (code, out) = grade(TASK, work.path(), "HEAD");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(&format!("{} is not a git checkout", work.path().display())),
        "{out}"
    );
    let (code, out) = grade(TASK, &work.path().join("nowhere"), "HEAD");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("does not exist"), "{out}");
    let (code, out) = grade(TASK, example_repo(), "no-such-rev");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("`no-such-rev` is not a commit in"), "{out}");
}

/// A run grades only what was validated: a task whose probes were edited after validation
/// (here: one probe added) is refused before anything is graded, naming the task and why;
/// `--allow-unvalidated` grades it and each record's report says what differs.
#[test]
fn a_task_whose_probes_changed_since_validation_is_not_graded() {
    let scratch = scratch_root();
    add_flaky_variant(scratch.path());
    let work = tempfile::tempdir().unwrap();
    let subs = work.path().join("subs.jsonl");
    std::fs::write(
        &subs,
        line(FLAKY_TASK, ("rev", "submission/reference"), "alpha", None) + "\n",
    )
    .unwrap();
    let out = infradev(scratch.path(), &["run", "--run-id", "v"])
        .arg("--submissions")
        .arg(&subs)
        .arg("--out")
        .arg(work.path().join("runs"))
        .output()
        .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains(&format!(
            "task `{FLAKY_TASK}`: the probes are not those validated"
        )),
        "{all}"
    );
    assert!(all.contains("--allow-unvalidated"), "{all}");
    assert!(
        !work.path().join("runs/v/records").exists()
            || std::fs::read_dir(work.path().join("runs/v/records"))
                .unwrap()
                .next()
                .is_none(),
        "nothing was graded"
    );
    // A quarantined record is refused the same way, whatever the probes.
    let record = scratch
        .path()
        .join("tasks/example")
        .join(FLAKY_TASK)
        .join("validation.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    v["quarantined"] = "the reference is flaky".into();
    std::fs::write(&record, v.to_string()).unwrap();
    let out = infradev(scratch.path(), &["run", "--run-id", "q"])
        .arg("--submissions")
        .arg(&subs)
        .arg("--out")
        .arg(work.path().join("runs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("quarantined"), "{}", text(&out));
}
