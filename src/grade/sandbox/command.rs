//! The command lines and environments of the sandboxes, given where things are inside them.
//! Pure, and shared by both executors so they run exactly the same programs.
//!
//! Three kinds of sandbox exist (docs/grading.md, docs/probe-protocol.md):
//! - the **official** phase: pytest over the task's official tests, in-process with the
//!   submission, started through `infradev_entry.py`, which reports `ready` on the events
//!   socket before anything of the repository can run;
//! - the **judge**: pytest over the probes with `infradev_probe.plugin`; no repository;
//! - the **subject**: `infradev_subject.py`, which imports the submission on request.

/// Where the sandbox sees each mount (container paths for Docker, host paths for local).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub repo: String,
    pub probes: Option<String>,
    /// `runners/python`.
    pub lib: String,
    /// `runners/python/subject`: the subject's server (the only code of ours it sees).
    pub subject_lib: String,
    pub spec: String,
    /// The directory holding this sandbox's one socket.
    pub socket_dir: String,
    pub scratch: String,
}

/// The socket file in a sandbox's socket directory.
pub const EVENTS_SOCKET: &str = "events.sock";

impl Layout {
    /// The fixed layout inside a Docker sandbox (docs/grading.md).
    pub fn container(with_probes: bool) -> Layout {
        Layout {
            repo: "/infradev/repo".into(),
            probes: with_probes.then(|| "/infradev/probes".into()),
            lib: "/infradev/lib".into(),
            subject_lib: "/infradev/subject".into(),
            spec: "/infradev/spec.json".into(),
            socket_dir: "/infradev/broker".into(),
            scratch: "/tmp".into(),
        }
    }
}

fn pytest_common(python: &str, lib: &str, root: &str, plugin: &str) -> Vec<String> {
    vec![
        python.into(),
        format!("{lib}/infradev_entry.py"),
        "-c".into(),
        format!("{lib}/pytest.ini"),
        format!("--rootdir={root}"),
        "-p".into(),
        plugin.into(),
        "-p".into(),
        "no:cacheprovider".into(),
        "--continue-on-collection-errors".into(),
        "-q".into(),
    ]
}

/// The official phase: `python3 -I infradev_entry.py <pytest args>`. pytest reads only our
/// own config (`-c`), never the repository's, and keeps going past collection errors so one
/// broken file cannot hide the results of the others. `files` are test *files*: which tests
/// count is decided on the host, from the results.
pub fn official_argv(
    python: &str,
    layout: &Layout,
    plugins: &[String],
    files: &[String],
) -> Vec<String> {
    let mut argv = pytest_common(python, &layout.lib, &layout.repo, "infradev_pytest");
    argv.insert(1, "-I".into());
    for plugin in plugins {
        argv.extend(["-p".into(), plugin.clone()]);
    }
    argv.extend(files.iter().cloned());
    argv
}

/// The judge: pytest over the probe files, rooted at the probe directory so no repository
/// conftest can reach it (there is no repository in the judge anyway).
pub fn judge_argv(
    python: &str,
    layout: &Layout,
    plugins: &[String],
    files: &[String],
) -> Vec<String> {
    let root = layout
        .probes
        .clone()
        .unwrap_or_else(|| layout.scratch.clone());
    let mut argv = pytest_common(python, &layout.lib, &root, "infradev_probe.plugin");
    argv.insert(1, "-I".into());
    for plugin in plugins {
        argv.extend(["-p".into(), plugin.clone()]);
    }
    argv.push(format!("--confcutdir={root}"));
    argv.extend(files.iter().map(|f| format!("{root}/{f}")));
    argv
}

/// The subject: our call server, isolated from `PYTHONPATH` and user site; it adds the
/// repository to its path only after the broker has seen its hello.
pub fn subject_argv(python: &str, layout: &Layout) -> Vec<String> {
    vec![
        python.into(),
        "-I".into(),
        format!("{}/infradev_subject.py", layout.subject_lib),
    ]
}

/// Which sandbox an environment is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Official,
    Judge,
    Subject,
}

/// The whole environment of a sandbox: nothing is inherited from the host. `task_env` (the
/// task's own variables, never one of these names: the manifest refuses them) comes first,
/// so ours win.
pub fn sandbox_env(
    layout: &Layout,
    role: Role,
    test_timeout_s: u64,
    task_env: &[(String, String)],
) -> Vec<(String, String)> {
    let socket = |name: &str| format!("{}/{name}", layout.socket_dir);
    let mut env: Vec<(&str, String)> = vec![
        ("PYTHONDONTWRITEBYTECODE", "1".into()),
        ("PYTHONNOUSERSITE", "1".into()),
        ("HOME", layout.scratch.clone()),
        ("TMPDIR", layout.scratch.clone()),
        ("PATH", "/usr/local/bin:/usr/bin:/bin".into()),
        ("LANG", "C.UTF-8".into()),
    ];
    match role {
        Role::Official => env.extend([
            // For the interpreter started with -I: the entry script sets its own path; child
            // processes the tests start read this.
            ("PYTHONPATH", format!("{}:{}", layout.lib, layout.repo)),
            (
                "INFRADEV_SYSPATH",
                format!("{}:{}", layout.lib, layout.repo),
            ),
            ("INFRADEV_SPEC", layout.spec.clone()),
            ("INFRADEV_EVENTS_SOCKET", socket(EVENTS_SOCKET)),
            ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1".into()),
        ]),
        Role::Judge => env.extend([
            (
                "PYTHONPATH",
                format!(
                    "{}:{}:{}",
                    layout.lib,
                    layout.subject_lib,
                    layout.probes.clone().unwrap_or_default()
                ),
            ),
            (
                "INFRADEV_SYSPATH",
                format!(
                    "{}:{}:{}",
                    layout.lib,
                    layout.subject_lib,
                    layout.probes.clone().unwrap_or_default()
                ),
            ),
            ("INFRADEV_BROKER", socket(super::broker::JUDGE_SOCKET)),
            ("INFRADEV_TEST_TIMEOUT_S", test_timeout_s.to_string()),
            ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1".into()),
        ]),
        Role::Subject => env.extend([
            ("PYTHONPATH", layout.repo.clone()),
            ("INFRADEV_REPO", layout.repo.clone()),
            ("INFRADEV_BROKER", socket(super::broker::SUBJECT_SOCKET)),
        ]),
    }
    if role == Role::Judge
        && let Some(p) = &layout.probes
    {
        env.push(("INFRADEV_PROBES", p.clone()));
    }
    let ours: Vec<(String, String)> = env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    let mut all: Vec<(String, String)> = task_env
        .iter()
        .filter(|(k, _)| !ours.iter().any(|(o, _)| o == k))
        .cloned()
        .collect();
    all.extend(ours);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_judge_runs_the_probes_from_their_own_root() {
        let argv = judge_argv(
            "python3",
            &Layout::container(true),
            &[],
            &["test_state.py".into()],
        );
        assert_eq!(
            argv.join(" "),
            "python3 -I /infradev/lib/infradev_entry.py -c /infradev/lib/pytest.ini --rootdir=/infradev/probes \
             -p infradev_probe.plugin -p no:cacheprovider --continue-on-collection-errors -q \
             --confcutdir=/infradev/probes /infradev/probes/test_state.py"
        );
    }

    #[test]
    fn official_tests_run_from_the_repository_by_file() {
        let argv = official_argv(
            "python3",
            &Layout::container(false),
            &["pytest_asyncio".into()],
            &["tests/t.py".into()],
        );
        assert_eq!(
            &argv[..3],
            ["python3", "-I", "/infradev/lib/infradev_entry.py"]
        );
        assert!(argv.contains(&"--rootdir=/infradev/repo".to_owned()));
        assert_eq!(argv.last().unwrap(), "tests/t.py");
        assert!(!argv.iter().any(|a| a.starts_with("--confcutdir")));
        assert!(argv.windows(2).any(|w| w == ["-p", "pytest_asyncio"]));
    }

    #[test]
    fn each_sandbox_sees_only_its_own_socket_and_no_secrets() {
        let layout = Layout::container(true);
        let official = sandbox_env(&layout, Role::Official, 60, &[]);
        let subject = sandbox_env(
            &layout,
            Role::Subject,
            60,
            &[("HF_HUB_OFFLINE".into(), "1".into())],
        );
        let judge = sandbox_env(&layout, Role::Judge, 60, &[]);
        let get = |env: &[(String, String)], k: &str| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(
            get(&official, "INFRADEV_EVENTS_SOCKET").as_deref(),
            Some("/infradev/broker/events.sock")
        );
        assert_eq!(
            get(&subject, "INFRADEV_BROKER").as_deref(),
            Some("/infradev/broker/subject.sock")
        );
        assert_eq!(
            get(&judge, "INFRADEV_BROKER").as_deref(),
            Some("/infradev/broker/judge.sock")
        );
        assert_eq!(get(&subject, "HF_HUB_OFFLINE").as_deref(), Some("1"));
        // The subject learns nothing of the grade: no probes, no spec, no timeout.
        for k in [
            "INFRADEV_PROBES",
            "INFRADEV_SPEC",
            "INFRADEV_TEST_TIMEOUT_S",
        ] {
            assert_eq!(get(&subject, k), None, "{k}");
        }
        for env in [&official, &subject, &judge] {
            assert!(
                !env.iter()
                    .any(|(k, _)| k.contains("TOKEN") || k.contains("SECRET"))
            );
        }
    }
}
