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

// The submission's tree is hostile data to the host: what it commits is judged from git's
// objects before anything of it is written, and the host never writes through what it put
// there. Each attack is built at test time on a clone of the example repository's reference.

/// A clone of the example repository at the reference with `attack` committed on top (the
/// work tree staged when it returns true, else only what it put in the index); returns the
/// temp dir holding the repository at `repo`.
fn attacked(attack: impl FnOnce(&Path) -> bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let repo = dir.path().join("repo");
    support::git(
        dir.path(),
        &["clone", "--quiet", example_repo().to_str().unwrap(), "repo"],
    );
    support::git(&repo, &["checkout", "--quiet", "--detach", "reference"]);
    if attack(&repo) {
        support::git(&repo, &["add", "-A"]);
    }
    support::git(
        &repo,
        &["commit", "--quiet", "--allow-empty", "-m", "attack"],
    );
    dir
}

/// The example task's grade of an [`attacked`] repository's head.
fn grade_attacked(repo: &tempfile::TempDir, executor: &str) -> Graded {
    grade(
        &support::task_dir(),
        &repo.path().join("repo"),
        "HEAD",
        executor,
        &[],
    )
}

/// Adds `count` entries of one blob to the index without writing them (fast for thousands).
fn index_many(repo: &Path, blob: &str, mode: &str, paths: impl Iterator<Item = String>) {
    use std::io::Write;
    let mut child = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["update-index", "--add", "--index-info"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for path in paths {
        writeln!(stdin, "{mode} {blob}\t{path}").unwrap();
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

fn assert_refused(g: &Graded, reason: &str) {
    assert_eq!(
        g.code, 1,
        "the submission's fault (exit 1)\n{}\n{}",
        g.stdout, g.stderr
    );
    let r = g.report();
    assert_eq!(r.grade.verdict, Verdict::Unresolved);
    let why = r.apply_error.as_deref().unwrap_or_default();
    assert!(
        why.contains(reason),
        "apply_error {why:?} should say {reason:?}"
    );
    assert!(
        failing_categories(g).iter().all(|c| *c == Category::Build),
        "{:?}",
        failing_categories(g)
    );
    assert!(r.phases.is_empty(), "no sandbox runs for a refused tree");
}

#[test]
fn the_canary_is_never_written_through_what_the_submission_put_at_its_name() {
    if !docker_ready() {
        return;
    }
    // A file of the host, outside every sandbox, that every possible canary name points at.
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "the host's own file\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let words = infradev::grade::canary::WORDS;
    let repo = attacked(|repo| {
        let tests = repo.join("tests");
        for (i, a) in words.iter().enumerate() {
            for (j, b) in words.iter().enumerate() {
                let name = tests.join(format!("test_{a}_{b}.py"));
                if (i + j) % 2 == 0 {
                    std::os::unix::fs::symlink(&victim, &name).unwrap();
                } else {
                    // A folder where the canary goes: writing a file there fails.
                    std::fs::create_dir(&name).unwrap();
                    std::fs::write(name.join("keep"), "").unwrap();
                }
            }
        }
        true
    });
    let g = grade_attacked(&repo, "docker");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the host's own file\n",
        "the host wrote through the submission's symlink"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o600,
            "the host chmod'ed through the submission's symlink"
        );
    }
    assert_ne!(
        g.code, 3,
        "never an infra error\n{}\n{}",
        g.stdout, g.stderr
    );
    assert_eq!(
        g.report().grade.verdict,
        Verdict::Resolved,
        "the reference plus inert files is still right\n{}",
        g.stdout
    );
}

#[test]
fn a_submodule_is_refused_as_the_submission_s_fault() {
    let repo = attacked(|repo| {
        let sha = support::git(repo, &["rev-parse", "base"]);
        // Where the guard restores files, and where the official tests are restored.
        index_many(
            repo,
            &sha,
            "160000",
            ["conftest.py".to_owned(), "minicache/vendored".to_owned()].into_iter(),
        );
        false
    });
    let g = grade_attacked(&repo, "local");
    assert_refused(&g, "submodule at");
}

#[test]
fn the_official_tests_folder_replaced_by_a_link_is_refused() {
    let repo = attacked(|repo| {
        std::fs::remove_dir_all(repo.join("tests")).unwrap();
        std::os::unix::fs::symlink("/tmp", repo.join("tests")).unwrap();
        true
    });
    let g = grade_attacked(&repo, "local");
    assert_refused(&g, "replaces the folder tests");
}

#[test]
fn thousands_of_files_are_refused_before_any_is_written() {
    let repo = attacked(|repo| {
        let blob = support::git(repo, &["hash-object", "-w", "/dev/null"]);
        index_many(
            repo,
            &blob,
            "100644",
            (0..24_000).map(|i| format!("junk/{}/{i}.py", i % 100)),
        );
        false
    });
    let g = grade_attacked(&repo, "local");
    assert_refused(&g, "files to the task's base");
}

#[test]
fn a_blob_that_inflates_to_gigabytes_is_refused_before_it_is_written() {
    let repo = attacked(|repo| {
        // 300 MiB of zeros: a few hundred KiB of git objects.
        let mut child = std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["hash-object", "-w", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            let zeros = vec![0u8; 1 << 20];
            for _ in 0..300 {
                stdin.write_all(&zeros).unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        let blob = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        index_many(
            repo,
            &blob,
            "100644",
            ["weights.bin".to_owned()].into_iter(),
        );
        false
    });
    let g = grade_attacked(&repo, "local");
    assert_refused(&g, "adds 300 MiB");
}
