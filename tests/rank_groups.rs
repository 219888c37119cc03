//! Rank groups through the real binary (docs/probe-protocol.md "Rank groups"): a probe
//! starts 2-3 subject sandboxes, one per rank, whose function exchanges bytes with rank 0
//! over TCP (tests/fixtures/rank_groups/repo/ringx.py). Each rank's bytes sent are measured
//! from outside it and held against a per-rank budget: the honest version passes, one that
//! duplicates the exchange fails on traffic; one rank's memory is measured from its own
//! cgroup; a rank that dies fails its test as crashed; a hang ends on the time budget; ranks
//! reach nothing outside their group's network.

mod support;

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use infradev::grade::report::Report;
use infradev::grading::{BudgetKind, Category, Kill, Outcome};
use support::{copy_dir, docker_ready, example_repo, local_python_ready, root, task_dir};

/// A copy of the example repository with two more branches: `ranks/honest` (one exchange)
/// and `ranks/duplicate` (the exchange done twice, the same results).
fn rank_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let repo = dir.path().join("repo");
    copy_dir(example_repo(), &repo);
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    let source = std::fs::read_to_string(root().join("tests/fixtures/rank_groups/repo/ringx.py"))
        .expect("ringx.py");
    for (branch, rounds) in [("ranks/honest", "1"), ("ranks/duplicate", "2")] {
        git(&["checkout", "-q", "-B", branch, "submission/reference"]);
        let text = source.replace("ROUNDS = 1\n", &format!("ROUNDS = {rounds}\n"));
        assert!(text.contains(&format!("ROUNDS = {rounds}\n")));
        std::fs::write(repo.join("ringx.py"), text).expect("write ringx.py");
        git(&["add", "ringx.py"]);
        git(&["commit", "-q", "-m", branch]);
    }
    dir
}

/// The host's IPv4 addresses other than loopback (a rank's 127.0.0.1 is its own).
fn host_addresses() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .filter_map(|cidr| cidr.split('/').next())
        .filter(|a| !a.starts_with("127."))
        .map(str::to_owned)
        .collect()
}

/// A listener on every host address, counting the connections it accepts.
fn host_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("0.0.0.0:0").expect("listen");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        loop {
            match listener.accept() {
                Ok(_) => {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(_) => return,
            }
        }
    });
    (port, accepted)
}

/// The probes, with `outside.json`: the addresses the isolation probe tries from each rank.
fn probes(port: u16) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_dir(
        &root().join("tests/fixtures/rank_groups/probes"),
        dir.path(),
    );
    let mut targets: Vec<(String, u16)> = host_addresses().into_iter().map(|a| (a, port)).collect();
    assert!(
        !targets.is_empty(),
        "the host has an address besides loopback"
    );
    targets.push(("1.1.1.1".into(), 80));
    std::fs::write(
        dir.path().join("outside.json"),
        serde_json::to_string(&targets).unwrap(),
    )
    .expect("write outside.json");
    dir
}

fn grade(executor: &str, repo: &Path, head: &str, probes: &Path) -> (Report, String) {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("r.json");
    let output = Command::new(env!("CARGO_BIN_EXE_infradev"))
        .arg("--root")
        .arg(root())
        .args(["grade", "--task"])
        .arg(task_dir())
        .arg("--repo")
        .arg(repo)
        .args(["--head", head, "--executor", executor, "--probes"])
        .arg(probes)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run infradev");
    let all = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    let report: Report = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {all}"));
    (report, all)
}

struct Graded {
    report: Report,
    output: String,
}

impl Graded {
    fn probe(&self, name: &str) -> &infradev::grading::GradedTest {
        self.report
            .grade
            .tests
            .iter()
            .find(|t| t.evidence.id.ends_with(name))
            .unwrap_or_else(|| panic!("no {name}: {}", self.output))
    }

    fn passed(&self, name: &str) -> bool {
        self.probe(name).passed()
    }
}

fn run_both(executor: &str) -> (Graded, Graded, Arc<AtomicUsize>) {
    let repo = rank_repo();
    let (port, accepted) = host_listener();
    let probes = probes(port);
    let repo_path: PathBuf = repo.path().join("repo");
    let grade_one = |head: &str| {
        let (report, output) = grade(executor, &repo_path, head, probes.path());
        Graded { report, output }
    };
    (
        grade_one("ranks/honest"),
        grade_one("ranks/duplicate"),
        accepted,
    )
}

fn common(honest: &Graded, accepted: &AtomicUsize) {
    let out = &honest.output;
    for phase in &honest.report.phases {
        assert_eq!(phase.evidence.infra_error, None, "{out}");
    }
    // A rank that dies mid-call: that test is crashed (the submission's, never infra).
    let died = honest.probe("::test_rank_dies");
    assert_eq!(died.evidence.outcome, Outcome::Failed, "{out}");
    assert_eq!(died.evidence.kill, Some(Kill::Crashed), "{out}");
    assert_ne!(died.category, Some(Category::Infra), "{out}");
    // Ranks that hang: cut at 2 x 0.3 + 1 s of subject time, reported on time.
    let hung = honest.probe("::test_rank_hangs");
    let budget = hung
        .evidence
        .budget
        .as_ref()
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        (budget.kind, hung.category),
        (BudgetKind::Time, Some(Category::Time)),
        "{out}"
    );
    assert!(budget.measured < 5.0, "{budget:?}");
    // One rank holds 64 MiB: its own cgroup (Docker) or process (local) shows it.
    let held = honest.probe("::test_rank_holds_memory");
    let budget = held
        .evidence
        .budget
        .as_ref()
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        (budget.kind, held.category),
        (BudgetKind::Memory, Some(Category::Memory)),
        "{out}"
    );
    assert!(budget.measured >= 32.0, "64 MiB held over 16: {budget:?}");
    // Isolation: nothing outside the group's network answered, nothing reached the host
    // (unless the executor says it cannot isolate the network: the local one without root).
    let isolated = !honest
        .report
        .executor_limits
        .iter()
        .any(|l| l.contains("the network is not isolated"));
    if isolated {
        assert!(honest.passed("::test_rank_isolation"), "{out}");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            0,
            "a rank reached the host"
        );
    }
    // No probe source in anything we rendered.
    assert!(!out.contains("PROBE-SECRET-ranks"), "{out}");
}

#[test]
fn docker_ranks_are_measured_and_isolated_each_in_its_own_namespace() {
    if !docker_ready() {
        return;
    }
    // A rank network a killed grader left (deadline passed), and one still in use.
    let network = |name: &str, deadline: &str| {
        let out = Command::new("docker")
            .args(["network", "create", "--internal", "--label"])
            .arg("org.infradev.managed=true")
            .arg("--label")
            .arg(format!("org.infradev.deadline={deadline}"))
            .arg(name)
            .output()
            .expect("docker network create");
        assert!(out.status.success(), "{out:?}");
    };
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 1;
    let orphan = format!("infradev-orphan-rank-{}", std::process::id());
    let live = format!("infradev-live-net-{}", std::process::id());
    network(&orphan, "1");
    network(&live, "99999999999");
    let (honest, duplicate, accepted) = run_both("docker");
    common(&honest, &accepted);
    let out = &honest.output;
    assert!(honest.passed("::test_exchange"), "{out}");
    // Per rank, not in total: 3 ranks send about 4 N together, the largest 2 N (< 2.5 N).
    assert!(honest.passed("::test_fan_out"), "{out}");
    // The duplicated exchange: the same results, twice the bytes on every rank.
    let out = &duplicate.output;
    for name in ["::test_exchange", "::test_fan_out"] {
        let t = duplicate.probe(name);
        let budget = t
            .evidence
            .budget
            .as_ref()
            .unwrap_or_else(|| panic!("{out}"));
        assert_eq!(
            (budget.kind, t.category),
            (BudgetKind::Traffic, Some(Category::Traffic)),
            "{name}: {out}"
        );
        // Reported as a power-of-two multiple of the limit, never the exact count.
        let ratio = budget.measured / budget.limit;
        assert!(
            ratio >= 1.0 && ratio.log2().fract() == 0.0,
            "{name}: {budget:?}"
        );
    }
    assert!(duplicate.passed("::test_rank_isolation"), "{out}");
    // The groups' networks are gone: none labelled with either grade's run is left (another
    // grade on the same host may hold networks of its own meanwhile).
    for g in [&honest, &duplicate] {
        let run = g
            .report
            .run_id
            .as_deref()
            .expect("a grade that ran has a run id");
        // The id the report names is the one its sandboxes were labelled with.
        let created = Command::new("docker")
            .args(["events", "--since", &since.to_string(), "--until", "0s"])
            .args(["--filter", "type=container", "--filter", "event=create"])
            .arg("--filter")
            .arg(format!("label=org.infradev.run={run}"))
            .args(["--format", "{{.Actor.Attributes.name}}"])
            .output()
            .expect("docker events");
        assert!(created.status.success(), "{created:?}");
        let created = String::from_utf8_lossy(&created.stdout).into_owned();
        assert!(
            created.lines().any(|n| n.contains("-rank-")),
            "run {run}: no rank container labelled with it: {created}"
        );
        let nets = Command::new("docker")
            .args(["network", "ls", "--format", "{{.Name}}", "--filter"])
            .arg(format!("label=org.infradev.run={run}"))
            .output()
            .expect("docker network ls");
        assert!(nets.status.success(), "{nets:?}");
        let left = String::from_utf8_lossy(&nets.stdout).trim().to_owned();
        assert!(left.is_empty(), "run {run} left {left}");
    }
    let nets = Command::new("docker")
        .args(["network", "ls", "--format", "{{.Name}}"])
        .output()
        .expect("docker network ls");
    // The grades' reaper removed the orphan network and left the live one.
    let names = String::from_utf8_lossy(&nets.stdout).into_owned();
    let _ = Command::new("docker")
        .args(["network", "rm", &live])
        .output();
    assert!(!names.lines().any(|n| n == orphan), "{names}");
    assert!(names.lines().any(|n| n == live), "{names}");
}

#[test]
fn local_ranks_run_as_process_groups_and_say_what_they_cannot_measure() {
    if !local_python_ready() {
        return;
    }
    let (honest, duplicate, accepted) = run_both("local");
    common(&honest, &accepted);
    let out = &honest.output;
    assert!(
        honest
            .report
            .executor_limits
            .iter()
            .any(|l| l.contains("per-rank traffic is not measured")),
        "{:?}",
        honest.report.executor_limits
    );
    // Not measured means no figure: never a made-up one.
    for g in [&honest, &duplicate] {
        for name in ["::test_exchange", "::test_fan_out"] {
            assert!(g.passed(name), "{name}: {out}");
            assert_eq!(g.probe(name).evidence.budget, None, "{name}: {out}");
        }
    }
}
