//! Hostile submissions: each is contained by the sandbox and classified, and nothing of the
//! probes leaks. Docker unless stated; they run against a copy of the example task with tight
//! timeouts so a hang costs seconds, not minutes.

mod support;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use infradev::grading::{Category, Verdict};
use support::{
    Graded, docker_ready, example_repo, grade, local_python_ready, probes_dir, task_variant,
};

/// Tight limits: a hang ends in seconds and a hog meets its limit quickly.
const FAST: &[(&str, &str)] = &[
    ("test_timeout_s", "4"),
    ("tests_s", "40"),
    ("probes_s", "40"),
    ("memory_mb", "256"),
];

fn grade_hostile(name: &str, executor: &str) -> Graded {
    let variant = task_variant(FAST);
    grade(
        &variant.path().join(support::TASK),
        example_repo(),
        &format!("submission/{name}"),
        executor,
        &[],
    )
}

fn failing_categories(g: &Graded) -> Vec<Category> {
    g.report()
        .grade
        .tests
        .iter()
        .filter_map(|t| t.category)
        .collect()
}

fn assert_unresolved_with(g: &Graded, wanted: Category) {
    let r = g.report();
    assert_eq!(
        r.grade.verdict,
        Verdict::Unresolved,
        "{}\n{}",
        g.stdout,
        g.stderr
    );
    let categories = failing_categories(g);
    assert!(
        categories.contains(&wanted),
        "no {wanted} among {categories:?}\n{}",
        g.stdout
    );
    assert!(
        !categories.contains(&Category::Infra),
        "a hostile submission is never our fault: {categories:?}"
    );
}

#[test]
fn busy_loop_is_time() {
    if !docker_ready() {
        return;
    }
    let started = Instant::now();
    let g = grade_hostile("busy_loop", "docker");
    assert_unresolved_with(&g, Category::Time);
    assert!(
        started.elapsed() < Duration::from_secs(100),
        "the wall clock bounds the grade"
    );
}

#[test]
fn busy_loop_is_time_on_the_local_executor_too() {
    if !local_python_ready() {
        return;
    }
    assert_unresolved_with(&grade_hostile("busy_loop", "local"), Category::Time);
}

#[test]
fn two_gigabytes_is_memory() {
    if !docker_ready() {
        return;
    }
    assert_unresolved_with(&grade_hostile("memory_hog", "docker"), Category::Memory);
}

#[test]
fn two_gigabytes_is_memory_on_the_local_executor_too() {
    if !local_python_ready() {
        return;
    }
    assert_unresolved_with(&grade_hostile("memory_hog", "local"), Category::Memory);
}

#[test]
fn a_fork_bomb_is_contained_by_the_pids_limit() {
    if !docker_ready() {
        return;
    }
    let started = Instant::now();
    let g = grade_hostile("fork_bomb", "docker");
    let r = g.report();
    assert_eq!(r.grade.verdict, Verdict::Unresolved, "{}", g.stdout);
    assert!(!failing_categories(&g).contains(&Category::Infra));
    assert!(
        started.elapsed() < Duration::from_secs(100),
        "the pids limit and the wall clock bound the grade"
    );
}

#[test]
fn a_socket_reaches_nothing() {
    if !docker_ready() {
        return;
    }
    // The hostile code connects to 127.0.0.1:47613. Inside the sandbox that is its own empty
    // loopback; if isolation failed it would be this listener on the host.
    let listener = TcpListener::bind("127.0.0.1:47613").expect("port 47613 free for the test");
    listener.set_nonblocking(true).unwrap();
    let g = grade_hostile("socket", "docker");
    assert!(
        listener.accept().is_err(),
        "the sandbox reached the host's loopback"
    );
    assert_unresolved_with(&g, Category::State);
}

#[test]
fn writing_into_the_probe_mount_is_denied() {
    if !docker_ready() {
        return;
    }
    let before = snapshot(&probes_dir());
    let g = grade_hostile("write_probes", "docker");
    assert_eq!(before, snapshot(&probes_dir()), "the probes were modified");
    let r = g.report();
    assert_eq!(
        r.grade.verdict,
        Verdict::Unresolved,
        "rewritten probes would have passed:\n{}",
        g.stdout
    );
}

#[test]
fn forcing_passes_through_conftest_and_pytest_config_is_flagged_and_changes_nothing() {
    if !docker_ready() {
        return;
    }
    let g = grade_hostile("conftest_force_pass", "docker");
    let r = g.report();
    let flagged: Vec<&str> = r.flags.iter().map(|f| f.path.as_str()).collect();
    assert!(flagged.contains(&"conftest.py"), "{flagged:?}");
    assert!(
        flagged.len() >= 2,
        "the pytest configuration change is flagged too: {flagged:?}"
    );
    assert!(r.flags.iter().all(|f| !f.reason.is_empty()));
    assert!(
        g.stdout.contains("conftest.py"),
        "the summary says which file:\n{}",
        g.stdout
    );
    assert_eq!(r.grade.verdict, Verdict::Unresolved);
    assert!(
        r.grade.official_passed_but_probes_failed,
        "same verdict as the plain wrong submission:\n{}",
        g.stdout
    );
}

#[test]
fn printing_the_probe_source_into_failures_leaks_nothing() {
    if !docker_ready() {
        return;
    }
    let g = grade_hostile("print_probes", "docker");
    assert_eq!(g.report().grade.verdict, Verdict::Unresolved);
    let all = g.all_output();
    // The subject has no probes to read, and no message from a sandbox reaches a report.
    assert!(
        g.report()
            .grade
            .tests
            .iter()
            .all(|t| t.evidence.message.is_none()),
        "a sandbox's message reached the report:\n{}",
        g.json
    );
    for canary in ["INFRADEV-PROBE-CANARY-9f2c4e7a1b", "PROBE-SECRET-"] {
        assert!(!all.contains(canary), "`{canary}` leaked:\n{all}");
    }
    let task = infradev::task::Registry::resolve(&support::root(), support::TASK, None).unwrap();
    // The requirement text is public by design (it explains a failure instead of the source);
    // a docstring line that repeats it is not a leak.
    let public: Vec<&str> = task
        .probes
        .probes
        .iter()
        .map(|p| p.requirement.as_str())
        .collect();
    for (path, text) in task.probes.sources().unwrap() {
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| l.len() >= 30 && !public.iter().any(|r| r.contains(l)))
        {
            assert!(!all.contains(line), "a line of {path} leaked: {line}");
        }
    }
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let mut bytes = Vec::new();
            std::fs::File::open(&path)
                .unwrap()
                .read_to_end(&mut bytes)
                .unwrap();
            out.push((path.display().to_string(), bytes));
        }
    }
    out.sort();
    out
}
